//! The on-disk format: file headers, checksummed frames, and the encoding
//! of entries and engine changes. `FORMAT.md` beside this crate describes
//! it for people; this module is the one place that reads and writes it.

use std::sync::Arc;

use ruststream_core::{EntryId, Headers, Message};
use ruststream_engine::{Change, CopyOf, GroupChange};

/// The format version written in every file header.
pub(crate) const FORMAT_VERSION: u16 = 1;
/// Length of a file header: a 6-byte tag and the version.
pub(crate) const FILE_HEADER_LEN: usize = 8;
/// Tag of a stream segment file.
pub(crate) const SEGMENT_TAG: &[u8; 6] = b"RSSEG\0";
/// Tag of a journal file.
pub(crate) const JOURNAL_TAG: &[u8; 6] = b"RSJRN\0";
/// Tag of a snapshot file.
pub(crate) const SNAPSHOT_TAG: &[u8; 6] = b"RSSNP\0";

/// First byte of every frame.
pub(crate) const FRAME_MAGIC: u8 = 0xA5;
/// Frame header: magic, kind, body length (u32), CRC-32 of kind and body.
pub(crate) const FRAME_HEADER_LEN: usize = 10;
/// Frames larger than this are refused on write and treated as corrupt on
/// read (a flipped bit in a length must not make us allocate gigabytes).
pub(crate) const MAX_FRAME_BODY: usize = 64 << 20;

/// Frame kinds.
pub(crate) const KIND_ENTRY: u8 = 1;
pub(crate) const KIND_CHANGES: u8 = 2;
pub(crate) const KIND_SNAPSHOT_END: u8 = 3;

/// A file header for `tag`.
pub(crate) fn file_header(tag: &[u8; 6]) -> [u8; FILE_HEADER_LEN] {
    let mut header = [0u8; FILE_HEADER_LEN];
    header[..6].copy_from_slice(tag);
    header[6..].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header
}

/// Checks a file header; the error says what was found.
pub(crate) fn check_file_header(bytes: &[u8], tag: &[u8; 6]) -> Result<(), String> {
    if bytes.len() < FILE_HEADER_LEN {
        return Err(format!(
            "file header is {} bytes, expected {FILE_HEADER_LEN}",
            bytes.len()
        ));
    }
    if &bytes[..6] != tag {
        return Err(format!(
            "file tag is {:?}, expected {:?}",
            String::from_utf8_lossy(&bytes[..6]),
            String::from_utf8_lossy(tag)
        ));
    }
    let version = u16::from_le_bytes([bytes[6], bytes[7]]);
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, this build reads version {FORMAT_VERSION}"
        ));
    }
    Ok(())
}

fn checksum(kind: u8, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[kind]);
    hasher.update(body);
    hasher.finalize()
}

/// Appends a frame of `kind` whose body `write_body` appends to `out`.
pub(crate) fn write_frame(
    out: &mut Vec<u8>,
    kind: u8,
    write_body: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    let start = out.len();
    out.extend_from_slice(&[FRAME_MAGIC, kind, 0, 0, 0, 0, 0, 0, 0, 0]);
    if let Err(e) = write_body(out) {
        out.truncate(start);
        return Err(e);
    }
    let body_len = out.len() - start - FRAME_HEADER_LEN;
    if body_len > MAX_FRAME_BODY {
        out.truncate(start);
        return Err(format!(
            "a record of {body_len} bytes is larger than the limit of {MAX_FRAME_BODY}"
        ));
    }
    let crc = checksum(kind, &out[start + FRAME_HEADER_LEN..]);
    out[start + 2..start + 6].copy_from_slice(&(body_len as u32).to_le_bytes());
    out[start + 6..start + 10].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// What is at some offset of a file.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// A whole, checksummed frame.
    Ok {
        /// Its kind.
        kind: u8,
        /// Its body.
        body: &'a [u8],
        /// Its length with the header.
        len: usize,
    },
    /// Not a valid frame (torn, or corrupt): why.
    Bad(String),
    /// The end of the data.
    End,
}

/// Reads the frame at the start of `bytes`.
pub(crate) fn read_frame(bytes: &[u8]) -> Frame<'_> {
    if bytes.is_empty() {
        return Frame::End;
    }
    match frame_parts(bytes) {
        Err(unframed) => Frame::Bad(unframed.reason()),
        Ok((kind, body, crc)) if checksum(kind, body) == crc => Frame::Ok {
            kind,
            body,
            len: FRAME_HEADER_LEN + body.len(),
        },
        Ok(_) => Frame::Bad("checksum mismatch".to_owned()),
    }
}

/// Why the bytes at some offset hold no whole frame (before the checksum
/// is looked at).
enum Unframed {
    /// Fewer bytes than a header.
    Short(usize),
    /// The marker byte is not [`FRAME_MAGIC`].
    Marker(u8),
    /// The length is over [`MAX_FRAME_BODY`].
    TooLong(usize),
    /// The body runs past the end: its length, and the bytes there are.
    CutShort(usize, usize),
}

impl Unframed {
    fn reason(&self) -> String {
        match self {
            Unframed::Short(n) => format!("{n} bytes, shorter than a record header"),
            Unframed::Marker(m) => {
                format!("record marker is {m:#04x}, expected {FRAME_MAGIC:#04x}")
            }
            Unframed::TooLong(len) => format!("record length {len} is over the limit"),
            Unframed::CutShort(len, have) => {
                format!("record of {len} bytes cut short at {have} bytes")
            }
        }
    }
}

/// The kind, body and claimed checksum of the frame at the start of
/// `bytes`, checksum unchecked.
fn frame_parts(bytes: &[u8]) -> Result<(u8, &[u8], u32), Unframed> {
    if bytes.len() < FRAME_HEADER_LEN {
        return Err(Unframed::Short(bytes.len()));
    }
    if bytes[0] != FRAME_MAGIC {
        return Err(Unframed::Marker(bytes[0]));
    }
    let kind = bytes[1];
    let len = u32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]) as usize;
    if len > MAX_FRAME_BODY {
        return Err(Unframed::TooLong(len));
    }
    let crc = u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
    match bytes.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) {
        Some(body) => Ok((kind, body, crc)),
        None => Err(Unframed::CutShort(len, bytes.len() - FRAME_HEADER_LEN)),
    }
}

/// Where in `bytes` (after its first byte) a valid frame starts that
/// `follows` accepts as one the file could hold next: after a bad frame,
/// that means damage in the middle of the file rather than a torn tail. A
/// frame that does not follow is taken for bytes of the torn record's own
/// payload (a payload may hold anything, records included). `follows` is
/// asked before the checksum is computed: most candidates fail it cheaply.
pub(crate) fn valid_frame_after(
    bytes: &[u8],
    follows: impl Fn(u8, &[u8]) -> bool,
) -> Option<usize> {
    (1..bytes.len()).find(|&at| {
        bytes[at] == FRAME_MAGIC
            && frame_parts(&bytes[at..])
                .is_ok_and(|(kind, body, crc)| follows(kind, body) && checksum(kind, body) == crc)
    })
}

// ---- primitive encoding -----------------------------------------------------

fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_id(out: &mut Vec<u8>, id: EntryId) {
    put_u64(out, id.ms);
    put_u64(out, id.seq);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8], what: &str) -> Result<(), String> {
    let len = u32::try_from(bytes.len()).map_err(|_| format!("{what} is longer than 4 GiB"))?;
    put_u32(out, len);
    out.extend_from_slice(bytes);
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str, what: &str) -> Result<(), String> {
    put_bytes(out, s.as_bytes(), what)
}

/// A cursor over a frame body.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("record ends inside {what}"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn id(&mut self, what: &str) -> Result<EntryId, String> {
        Ok(EntryId::new(self.u64(what)?, self.u64(what)?))
    }

    fn bytes(&mut self, what: &str) -> Result<&'a [u8], String> {
        let len = self.u32(what)? as usize;
        self.take(len, what)
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        Ok(self.str(what)?.to_owned())
    }

    fn str(&mut self, what: &str) -> Result<&'a str, String> {
        let bytes = self.bytes(what)?;
        std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))
    }

    fn ids(&mut self, what: &str) -> Result<Vec<EntryId>, String> {
        let n = self.u32(what)? as usize;
        if n > self.bytes.len() / 16 + 1 {
            return Err(format!("{what}: count {n} does not fit the record"));
        }
        (0..n).map(|_| self.id(what)).collect()
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub(crate) fn finish(&self, what: &str) -> Result<(), String> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(format!(
                "{} stray bytes after {what}",
                self.bytes.len() - self.at
            ))
        }
    }
}

// ---- entries ------------------------------------------------------------------

/// Encodes one entry as a frame.
pub(crate) fn write_entry(
    out: &mut Vec<u8>,
    id: EntryId,
    message: &Message,
    copy: Option<&CopyOf>,
) -> Result<(), String> {
    write_frame(out, KIND_ENTRY, |out| {
        put_id(out, id);
        match copy {
            None => put_u8(out, 0),
            Some(c) => {
                put_u8(out, 1);
                put_u32(out, c.times_delivered);
                put_str(out, &c.group, "a group name")?;
            }
        }
        put_u32(
            out,
            u32::try_from(message.headers.len()).unwrap_or(u32::MAX),
        );
        for (k, v) in message.headers.iter() {
            put_str(out, k, "a header name")?;
            put_str(out, v, "a header value")?;
        }
        put_bytes(out, &message.payload, "the payload")
    })
}

/// What an entry's body holds besides its message at most: the id, the
/// copy flag, and a retry copy's delivery count and group (a group name is
/// at most `MAX_NAME_LEN` bytes).
pub(crate) const ENTRY_OVERHEAD: usize = 16 + 1 + 4 + 4 + ruststream_core::MAX_NAME_LEN;

/// The bytes `message` takes in an entry's body: the header count, each
/// header's name and value with their lengths, and the payload with its
/// length.
pub(crate) fn message_len(message: &Message) -> usize {
    let headers: usize = message
        .headers
        .iter()
        .map(|(k, v)| 8usize.saturating_add(k.len()).saturating_add(v.len()))
        .fold(0, usize::saturating_add);
    8usize
        .saturating_add(headers)
        .saturating_add(message.payload.len())
}

/// Decodes an entry frame's body: its message (headers and payload).
pub(crate) fn read_entry(body: &[u8]) -> Result<Message, String> {
    if let Some(payload) = plain_payload(body) {
        return Ok(Message::new(payload.to_vec()));
    }
    let (_, _, message) = parse_entry(body, true)?;
    message.ok_or_else(|| "no message decoded".to_owned())
}

/// The payload of an entry that is no retry copy and has no headers (the
/// common case, decoded without the general walk), or `None`.
fn plain_payload(body: &[u8]) -> Option<&[u8]> {
    const PAYLOAD_AT: usize = 16 + 1 + 4 + 4;
    let rest = body.get(16..PAYLOAD_AT)?;
    if rest[..5] != [0; 5] {
        return None;
    }
    let len = u32::from_le_bytes([rest[5], rest[6], rest[7], rest[8]]) as usize;
    body.get(PAYLOAD_AT..)
        .filter(|payload| payload.len() == len)
}

/// Checks an entry frame's body whole and returns its id and retry-copy
/// marker, copying nothing of its message (what opening needs: payloads
/// stay on disk).
pub(crate) fn read_entry_key(body: &[u8]) -> Result<(EntryId, Option<Arc<CopyOf>>), String> {
    if plain_payload(body).is_some() {
        return Ok((entry_id(body)?, None));
    }
    let (id, copy, _) = parse_entry(body, false)?;
    Ok((id, copy))
}

/// The id of an entry frame's body, without decoding the rest.
pub(crate) fn entry_id(body: &[u8]) -> Result<EntryId, String> {
    match body.get(..16) {
        Some(b) => {
            let mut ms = [0u8; 8];
            let mut seq = [0u8; 8];
            ms.copy_from_slice(&b[..8]);
            seq.copy_from_slice(&b[8..]);
            Ok(EntryId::new(
                u64::from_le_bytes(ms),
                u64::from_le_bytes(seq),
            ))
        }
        None => Err("record ends inside the entry id".to_owned()),
    }
}

/// An entry decoded: its id, retry-copy marker and, when asked for, its
/// message.
type Parsed = (EntryId, Option<Arc<CopyOf>>, Option<Message>);

/// Decodes an entry frame's body; the message only with `message` (else
/// its headers and payload are checked and skipped).
fn parse_entry(body: &[u8], message: bool) -> Result<Parsed, String> {
    let mut r = Reader::new(body);
    let id = r.id("the entry id")?;
    let copy = match r.u8("the copy flag")? {
        0 => None,
        1 => {
            let times_delivered = r.u32("the copy's delivery count")?;
            let group = r.string("the copy's group")?;
            Some(Arc::new(CopyOf {
                group,
                times_delivered,
            }))
        }
        other => return Err(format!("copy flag is {other}, expected 0 or 1")),
    };
    let count = r.u32("the header count")?;
    let mut headers = Headers::new();
    for _ in 0..count {
        if message {
            let k = r.string("a header name")?;
            let v = r.string("a header value")?;
            headers.insert(k, v);
        } else {
            r.str("a header name")?;
            r.str("a header value")?;
        }
    }
    let payload = r.bytes("the payload")?;
    r.finish("the entry")?;
    let message = message.then(|| Message {
        headers,
        payload: payload.to_vec(),
    });
    Ok((id, copy, message))
}

// ---- changes ------------------------------------------------------------------

const C_GROUP_CREATED: u8 = 1;
const C_GROUP: u8 = 2;
const C_TRIMMED: u8 = 3;
const C_RELEASED: u8 = 4;
const C_LAST_ID: u8 = 5;

const G_CONSUMER: u8 = 1;
const G_HELD: u8 = 2;
const G_OWED: u8 = 3;
const G_SETTLED: u8 = 4;
const G_DEAD: u8 = 5;
const G_UNDEAD: u8 = 6;
const G_CURSOR: u8 = 7;
const G_CONSUMER_GONE: u8 = 8;
const G_COPIED: u8 = 9;
/// Added within format version 1: a log written before has none, and
/// opens with its consumers taken as seen at the open
/// (`Engine::finish_restore`).
const G_SEEN: u8 = 10;

/// Encodes changes (not appends: those go to segments) as one frame, so a
/// call's changes are applied all or not at all.
pub(crate) fn write_changes<'c>(
    out: &mut Vec<u8>,
    changes: impl Iterator<Item = &'c Change> + Clone,
) -> Result<(), String> {
    write_frame(out, KIND_CHANGES, |out| {
        let count = changes.clone().count();
        put_u32(out, u32::try_from(count).unwrap_or(u32::MAX));
        for change in changes {
            put_change(out, change)?;
        }
        Ok(())
    })
}

fn put_change(out: &mut Vec<u8>, change: &Change) -> Result<(), String> {
    match change {
        Change::Appended { .. } => Err("appended entries belong in segments".to_owned()),
        Change::GroupCreated {
            stream,
            group,
            cursor,
        } => {
            put_u8(out, C_GROUP_CREATED);
            put_str(out, stream, "a stream name")?;
            put_str(out, group, "a group name")?;
            put_id(out, *cursor);
            Ok(())
        }
        Change::Group {
            stream,
            group,
            changes,
        } => {
            put_u8(out, C_GROUP);
            put_str(out, stream, "a stream name")?;
            put_str(out, group, "a group name")?;
            put_u32(out, u32::try_from(changes.len()).unwrap_or(u32::MAX));
            for change in changes {
                put_group_change(out, change)?;
            }
            Ok(())
        }
        Change::Trimmed {
            stream,
            below,
            keep,
        } => {
            put_u8(out, C_TRIMMED);
            put_str(out, stream, "a stream name")?;
            put_id(out, *below);
            put_ids(out, keep);
            Ok(())
        }
        Change::Released { stream, ids } => {
            put_u8(out, C_RELEASED);
            put_str(out, stream, "a stream name")?;
            put_ids(out, ids);
            Ok(())
        }
        Change::LastId { stream, id } => {
            put_u8(out, C_LAST_ID);
            put_str(out, stream, "a stream name")?;
            put_id(out, *id);
            Ok(())
        }
    }
}

fn put_ids(out: &mut Vec<u8>, ids: &[EntryId]) {
    put_u32(out, u32::try_from(ids.len()).unwrap_or(u32::MAX));
    for id in ids {
        put_id(out, *id);
    }
}

fn put_group_change(out: &mut Vec<u8>, change: &GroupChange) -> Result<(), String> {
    match change {
        GroupChange::Consumer { name } => {
            put_u8(out, G_CONSUMER);
            put_str(out, name, "a consumer name")?;
        }
        GroupChange::ConsumerGone { consumer } => {
            put_u8(out, G_CONSUMER_GONE);
            put_u32(out, *consumer);
        }
        GroupChange::Seen { consumer, at_ms } => {
            put_u8(out, G_SEEN);
            put_u32(out, *consumer);
            put_u64(out, *at_ms);
        }
        GroupChange::Held {
            id,
            consumer,
            times_delivered,
            since_ms,
        } => {
            put_u8(out, G_HELD);
            put_id(out, *id);
            put_u32(out, *consumer);
            put_u32(out, *times_delivered);
            put_u64(out, *since_ms);
        }
        GroupChange::Owed {
            id,
            due_ms,
            times_delivered,
            since_ms,
        } => {
            put_u8(out, G_OWED);
            put_id(out, *id);
            put_u64(out, *due_ms);
            put_u32(out, *times_delivered);
            put_u64(out, *since_ms);
        }
        GroupChange::Settled { id } => {
            put_u8(out, G_SETTLED);
            put_id(out, *id);
        }
        GroupChange::Copied { id, copy } => {
            put_u8(out, G_COPIED);
            put_id(out, *id);
            put_id(out, *copy);
        }
        GroupChange::Dead {
            id,
            reason,
            times_delivered,
            dead_at_ms,
        } => {
            put_u8(out, G_DEAD);
            put_id(out, *id);
            put_str(out, reason, "a dead-letter reason")?;
            put_u32(out, *times_delivered);
            put_u64(out, *dead_at_ms);
        }
        GroupChange::Undead { id } => {
            put_u8(out, G_UNDEAD);
            put_id(out, *id);
        }
        GroupChange::Cursor { cursor } => {
            put_u8(out, G_CURSOR);
            put_id(out, *cursor);
        }
    }
    Ok(())
}

/// Decodes a changes frame's body.
pub(crate) fn read_changes(body: &[u8]) -> Result<Vec<Change>, String> {
    let mut r = Reader::new(body);
    let count = r.u32("the change count")? as usize;
    if count > body.len() {
        return Err(format!("change count {count} does not fit the record"));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(read_change(&mut r)?);
    }
    r.finish("the changes")?;
    Ok(out)
}

fn read_change(r: &mut Reader<'_>) -> Result<Change, String> {
    Ok(match r.u8("a change tag")? {
        C_GROUP_CREATED => Change::GroupCreated {
            stream: r.string("a stream name")?,
            group: r.string("a group name")?,
            cursor: r.id("a cursor")?,
        },
        C_GROUP => {
            let stream = r.string("a stream name")?;
            let group = r.string("a group name")?;
            let count = r.u32("the group change count")? as usize;
            if count > r.remaining() {
                return Err(format!(
                    "group change count {count} does not fit the record"
                ));
            }
            let changes = (0..count)
                .map(|_| read_group_change(r))
                .collect::<Result<_, _>>()?;
            Change::Group {
                stream,
                group,
                changes,
            }
        }
        C_TRIMMED => Change::Trimmed {
            stream: r.string("a stream name")?,
            below: r.id("a trim point")?,
            keep: r.ids("the entries kept")?,
        },
        C_RELEASED => Change::Released {
            stream: r.string("a stream name")?,
            ids: r.ids("the entries released")?,
        },
        C_LAST_ID => Change::LastId {
            stream: r.string("a stream name")?,
            id: r.id("a last id")?,
        },
        other => return Err(format!("unknown change tag {other}")),
    })
}

fn read_group_change(r: &mut Reader<'_>) -> Result<GroupChange, String> {
    Ok(match r.u8("a group change tag")? {
        G_CONSUMER => GroupChange::Consumer {
            name: r.string("a consumer name")?,
        },
        G_CONSUMER_GONE => GroupChange::ConsumerGone {
            consumer: r.u32("a consumer number")?,
        },
        G_SEEN => GroupChange::Seen {
            consumer: r.u32("a consumer number")?,
            at_ms: r.u64("a seen time")?,
        },
        G_HELD => GroupChange::Held {
            id: r.id("an entry id")?,
            consumer: r.u32("a consumer number")?,
            times_delivered: r.u32("a delivery count")?,
            since_ms: r.u64("a delivery time")?,
        },
        G_OWED => GroupChange::Owed {
            id: r.id("an entry id")?,
            due_ms: r.u64("a due time")?,
            times_delivered: r.u32("a delivery count")?,
            since_ms: r.u64("a time")?,
        },
        G_SETTLED => GroupChange::Settled {
            id: r.id("an entry id")?,
        },
        G_COPIED => GroupChange::Copied {
            id: r.id("an entry id")?,
            copy: r.id("a retry copy's id")?,
        },
        G_DEAD => GroupChange::Dead {
            id: r.id("an entry id")?,
            reason: r.string("a dead-letter reason")?,
            times_delivered: r.u32("a delivery count")?,
            dead_at_ms: r.u64("a time")?,
        },
        G_UNDEAD => GroupChange::Undead {
            id: r.id("an entry id")?,
        },
        G_CURSOR => GroupChange::Cursor {
            cursor: r.id("a cursor")?,
        },
        other => return Err(format!("unknown group change tag {other}")),
    })
}

/// Encodes a snapshot's changes, in order, as change records (kind 2) whose
/// bodies are at most `limit` bytes (at most [`MAX_FRAME_BODY`]): a record
/// is closed before the next change would take it past the limit, and a
/// change too large for a record of its own is written as several that
/// replay to the same state ([`split_group`], [`split_trimmed`]). Returns
/// how many changes were written, for [`write_snapshot_end`]. Fails only
/// for a single group change (one dead letter's reason, say) larger than a
/// record, which no journal record could have held either.
pub(crate) fn write_snapshot_changes(
    out: &mut Vec<u8>,
    changes: &[Change],
    limit: usize,
) -> Result<u64, String> {
    let mut records = Records {
        out,
        body: Vec::new(),
        count: 0,
        room: limit.min(MAX_FRAME_BODY).saturating_sub(4),
        written: 0,
    };
    let mut change_buf = Vec::new();
    for change in changes {
        match change {
            Change::Group {
                stream,
                group,
                changes,
            } => split_group(&mut records, stream, group, changes)?,
            Change::Trimmed {
                stream,
                below,
                keep,
            } => split_trimmed(&mut records, stream, *below, keep)?,
            other => {
                change_buf.clear();
                put_change(&mut change_buf, other)?;
                records.push(&change_buf)?;
            }
        }
    }
    records.flush()?;
    Ok(records.written)
}

/// Change records being filled by [`write_snapshot_changes`].
struct Records<'o> {
    out: &'o mut Vec<u8>,
    /// The encoded changes of the record being filled (its count aside).
    body: Vec<u8>,
    count: u32,
    /// Bytes of changes a record holds: its limit less the count.
    room: usize,
    /// Changes written so far.
    written: u64,
}

impl Records<'_> {
    /// Adds one encoded change, closing the record first if it would not
    /// fit.
    fn push(&mut self, change: &[u8]) -> Result<(), String> {
        if change.len() > self.room {
            return Err(format!(
                "a snapshot change of {} bytes is larger than a record's limit of {} bytes",
                change.len(),
                self.room
            ));
        }
        if self.body.len() + change.len() > self.room {
            self.flush()?;
        }
        self.body.extend_from_slice(change);
        self.count += 1;
        self.written += 1;
        Ok(())
    }

    /// Writes the record being filled, if it holds any change.
    fn flush(&mut self) -> Result<(), String> {
        if self.count == 0 {
            return Ok(());
        }
        let (body, count) = (&self.body, self.count);
        write_frame(self.out, KIND_CHANGES, |out| {
            put_u32(out, count);
            out.extend_from_slice(body);
            Ok(())
        })?;
        self.body.clear();
        self.count = 0;
        Ok(())
    }
}

/// Writes a group's changes as as many [`Change::Group`] changes (of the
/// same group, in order) as it takes for each to fit a record. Replaying
/// them one after the other applies the same group changes in the same
/// order as the one change would.
fn split_group(
    records: &mut Records<'_>,
    stream: &str,
    group: &str,
    changes: &[GroupChange],
) -> Result<(), String> {
    let mut piece = Vec::new();
    put_u8(&mut piece, C_GROUP);
    put_str(&mut piece, stream, "a stream name")?;
    put_str(&mut piece, group, "a group name")?;
    let count_at = piece.len();
    put_u32(&mut piece, 0);
    let head = piece.len();
    let mut count = 0u32;
    let mut item = Vec::new();
    for change in changes {
        item.clear();
        put_group_change(&mut item, change)?;
        if count > 0 && piece.len() + item.len() > records.room {
            piece[count_at..head].copy_from_slice(&count.to_le_bytes());
            records.push(&piece)?;
            piece.truncate(head);
            count = 0;
        }
        piece.extend_from_slice(&item);
        count += 1;
    }
    piece[count_at..head].copy_from_slice(&count.to_le_bytes());
    records.push(&piece)
}

/// Writes a trim as as many [`Change::Trimmed`] changes as it takes for
/// each to fit a record, each with a run of the kept ids (sorted) and
/// trimming below the first kept id of the next run (the last one below
/// `below`). Replayed in order, each trims the entries up to the next run
/// and keeps those of its own run: the same entries go, and the same are
/// kept, as with the one change.
fn split_trimmed(
    records: &mut Records<'_>,
    stream: &str,
    below: EntryId,
    keep: &[EntryId],
) -> Result<(), String> {
    let mut piece = Vec::new();
    put_u8(&mut piece, C_TRIMMED);
    put_str(&mut piece, stream, "a stream name")?;
    let head = piece.len();
    // The trim point, the count, then 16 bytes an id.
    let per_piece = records.room.saturating_sub(head + 16 + 4) / 16;
    if keep.is_empty() || per_piece == 0 {
        put_id(&mut piece, below);
        put_ids(&mut piece, keep);
        return records.push(&piece);
    }
    for (i, run) in keep.chunks(per_piece).enumerate() {
        let next = keep
            .get((i + 1) * per_piece)
            .map_or(below, |id| (*id).min(below));
        piece.truncate(head);
        put_id(&mut piece, next);
        put_ids(&mut piece, run);
        records.push(&piece)?;
    }
    Ok(())
}

/// Encodes the end-of-snapshot marker: how many changes it holds.
pub(crate) fn write_snapshot_end(out: &mut Vec<u8>, changes: u64) -> Result<(), String> {
    write_frame(out, KIND_SNAPSHOT_END, |out| {
        put_u64(out, changes);
        Ok(())
    })
}

/// Decodes the end-of-snapshot marker.
pub(crate) fn read_snapshot_end(body: &[u8]) -> Result<u64, String> {
    let mut r = Reader::new(body);
    let n = r.u64("the snapshot's change count")?;
    r.finish("the snapshot end")?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let message = Message::new(vec![0, 1, 2, 255]).with_header("k", "v é");
        let copy = CopyOf {
            group: "ledger".into(),
            times_delivered: 3,
        };
        let mut out = Vec::new();
        write_entry(&mut out, EntryId::new(5, 6), &message, Some(&copy)).unwrap();
        let Frame::Ok { kind, body, len } = read_frame(&out) else {
            panic!("frame")
        };
        assert_eq!((kind, len), (KIND_ENTRY, out.len()));
        assert_eq!(read_entry(body).unwrap(), message);
        let (id, copied) = read_entry_key(body).unwrap();
        assert_eq!(id, EntryId::new(5, 6));
        assert_eq!(copied.as_deref(), Some(&copy));
    }

    #[test]
    fn message_len_is_what_an_entry_stores_of_its_message() {
        let message = Message::new(vec![1; 300])
            .with_header("k", "v é")
            .with_header("trace", "abc");
        let mut out = Vec::new();
        write_entry(&mut out, EntryId::new(5, 6), &message, None).unwrap();
        // Frame header, id, copy flag, then the message.
        assert_eq!(out.len(), FRAME_HEADER_LEN + 16 + 1 + message_len(&message));
        let copy = CopyOf {
            group: "g".repeat(ruststream_core::MAX_NAME_LEN),
            times_delivered: 3,
        };
        out.clear();
        write_entry(&mut out, EntryId::new(5, 6), &message, Some(&copy)).unwrap();
        assert_eq!(
            out.len(),
            FRAME_HEADER_LEN + ENTRY_OVERHEAD + message_len(&message)
        );
    }

    #[test]
    fn changes_round_trip() {
        let id = EntryId::new(9, 1);
        let g = |change| Change::Group {
            stream: "s".into(),
            group: "g".into(),
            changes: vec![change],
        };
        let changes = vec![
            Change::GroupCreated {
                stream: "s".into(),
                group: "g".into(),
                cursor: EntryId::ZERO,
            },
            g(GroupChange::Consumer { name: "c".into() }),
            g(GroupChange::ConsumerGone { consumer: 0 }),
            g(GroupChange::Seen {
                consumer: 0,
                at_ms: 1_700_000_000_123,
            }),
            g(GroupChange::Held {
                id,
                consumer: 0,
                times_delivered: 2,
                since_ms: 77,
            }),
            g(GroupChange::Owed {
                id,
                due_ms: 80,
                times_delivered: 2,
                since_ms: 78,
            }),
            g(GroupChange::Settled { id }),
            g(GroupChange::Copied {
                id,
                copy: EntryId::new(9, 1),
            }),
            g(GroupChange::Dead {
                id,
                reason: "why".into(),
                times_delivered: 4,
                dead_at_ms: 90,
            }),
            g(GroupChange::Undead { id }),
            g(GroupChange::Cursor { cursor: id }),
            Change::Trimmed {
                stream: "s".into(),
                below: id,
                keep: vec![EntryId::new(1, 0)],
            },
            Change::Released {
                stream: "s".into(),
                ids: vec![EntryId::new(1, 0)],
            },
            Change::LastId {
                stream: "s".into(),
                id,
            },
        ];
        let mut out = Vec::new();
        write_changes(&mut out, changes.iter()).unwrap();
        let Frame::Ok { body, .. } = read_frame(&out) else {
            panic!("frame")
        };
        assert_eq!(read_changes(body).unwrap(), changes);
    }

    #[test]
    fn damaged_frames_are_recognised() {
        let mut out = Vec::new();
        write_entry(
            &mut out,
            EntryId::new(1, 1),
            &Message::new(b"x".to_vec()),
            None,
        )
        .unwrap();
        for cut in 1..out.len() {
            assert!(
                matches!(read_frame(&out[..cut]), Frame::Bad(_)),
                "cut at {cut}"
            );
        }
        for bit in 0..out.len() * 8 {
            let mut flipped = out.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(read_frame(&flipped), Frame::Ok { .. }),
                "bit {bit} flipped went unnoticed"
            );
        }
    }

    /// The changes of a snapshot written with `limit`, one `Vec` a record,
    /// each record's body checked against the limit, and the count
    /// returned checked against what the records hold.
    fn snapshot_records(changes: &[Change], limit: usize) -> Vec<Vec<Change>> {
        let mut out = Vec::new();
        let written = write_snapshot_changes(&mut out, changes, limit).unwrap();
        let mut records = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let Frame::Ok { kind, body, len } = read_frame(&out[at..]) else {
                panic!("bad frame at {at}")
            };
            assert_eq!(kind, KIND_CHANGES);
            assert!(body.len() <= limit, "record of {} bytes", body.len());
            records.push(read_changes(body).unwrap());
            at += len;
        }
        let read: usize = records.iter().map(Vec::len).sum();
        assert_eq!(read as u64, written);
        records
    }

    fn id(n: u64) -> EntryId {
        EntryId::new(n, 0)
    }

    /// Compaction never writes a record over the limit (which would fail
    /// every compaction from then on): records are closed by size, and a
    /// group's changes too large for one record are split, in order.
    #[test]
    fn snapshot_records_stay_within_the_limit_and_keep_group_changes_in_order() {
        let reason = "r".repeat(150);
        let mut group_changes = vec![GroupChange::Consumer { name: "c1".into() }];
        for n in 1..=200 {
            group_changes.push(GroupChange::Held {
                id: id(n),
                consumer: 0,
                times_delivered: 1,
                since_ms: n,
            });
        }
        for n in 201..=300 {
            group_changes.push(GroupChange::Dead {
                id: id(n),
                reason: reason.clone(),
                times_delivered: 2,
                dead_at_ms: n,
            });
        }
        let changes = vec![
            Change::LastId {
                stream: "s".into(),
                id: id(300),
            },
            Change::GroupCreated {
                stream: "s".into(),
                group: "g".into(),
                cursor: id(300),
            },
            Change::Group {
                stream: "s".into(),
                group: "g".into(),
                changes: group_changes.clone(),
            },
            Change::Trimmed {
                stream: "s".into(),
                below: id(301),
                keep: (1..=300).map(id).collect(),
            },
        ];
        let limit = 2_000;
        let records = snapshot_records(&changes, limit);
        assert!(records.len() > 10, "{} records", records.len());
        let all: Vec<Change> = records.into_iter().flatten().collect();
        // The group's changes, in order, over several `Group` changes.
        let replayed: Vec<GroupChange> = all
            .iter()
            .filter_map(|c| match c {
                Change::Group { changes, .. } => Some(changes.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(replayed, group_changes);
        assert_eq!(all[..2], changes[..2]);
        // Small enough changes are written as they are.
        assert_eq!(snapshot_records(&changes, MAX_FRAME_BODY), [changes]);
    }

    /// A trim keeping more ids than a record holds is split into trims
    /// that, replayed in order, keep and drop the same entries.
    #[test]
    fn a_split_trim_replays_to_the_same_state() {
        let trim = Change::Trimmed {
            stream: "s".into(),
            below: id(900),
            keep: (1..900).filter(|n| n % 3 == 0).map(id).collect(),
        };
        let records = snapshot_records(std::slice::from_ref(&trim), 1_000);
        let pieces: Vec<Change> = records.into_iter().flatten().collect();
        assert!(pieces.len() > 4, "{pieces:?}");
        let rebuilt = |changes: Vec<Change>| {
            let mut engine = ruststream_engine::Engine::new();
            engine.restore_entries("s", (1..=1_000).map(|n| (id(n), None)));
            let mut trims = crate::trims::Trims::default();
            for change in changes {
                trims.apply(&change);
                engine.restore(change).unwrap();
            }
            engine.finish_restore(0);
            (engine.snapshot(), trims.below, trims.kept)
        };
        assert_eq!(rebuilt(pieces), rebuilt(vec![trim]));
    }

    /// A single group change too large for any record is refused, with
    /// its size, rather than written as a record no open would read.
    #[test]
    fn a_group_change_larger_than_a_record_is_refused() {
        let changes = vec![Change::Group {
            stream: "s".into(),
            group: "g".into(),
            changes: vec![GroupChange::Dead {
                id: id(1),
                reason: "r".repeat(5_000),
                times_delivered: 1,
                dead_at_ms: 1,
            }],
        }];
        let error = write_snapshot_changes(&mut Vec::new(), &changes, 1_000).unwrap_err();
        assert!(error.contains("larger than a record's limit"), "{error}");
    }
}
