//! Reading entries back from their segment files: the payloads the engine
//! does not hold in memory (it keeps those of each stream's newest
//! entries, `FileLogOptions::cache_bytes`).
//!
//! An entry is found by its segment (the last one whose first id is at or
//! below it), then by the segment's sparse index (an id and file offset
//! every [`INDEX_SPACING`] bytes), then by walking records from there.
//! Records are read through a window of the file (a megabyte at a time),
//! and the reader remembers where the entry after the last one it read
//! starts, so reading a run of entries in order (a backlog, a replay) walks
//! each segment once, sequentially. Every record read is checked again
//! (marker, length, CRC-32): damage is an error naming the file and offset.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use ruststream_core::{BrokerError, BrokerResult, EntryId, Message};

use crate::format::{self, Frame};
use crate::store::{Segment, StreamFiles, io_error};

/// Bytes between two points of a segment's sparse index: a lookup walks
/// at most about this much of the file.
pub(crate) const INDEX_SPACING: u64 = 64 << 10;

/// Bytes read from a segment at a time.
const WINDOW: usize = 1 << 20;

/// Reads entries from segment files; one per store.
#[derive(Default)]
pub(crate) struct Payloads {
    /// The segment file open for reading, by serial.
    file: Option<(u64, File)>,
    /// Bytes of that file from offset `window_at`.
    window: Vec<u8>,
    window_at: u64,
    /// Where the entry after the last one read starts.
    next: Option<Next>,
}

/// Where the entry after the last one read starts: its segment, offset,
/// and the id read last.
struct Next {
    serial: u64,
    /// Its position in its stream's segments (checked against `serial`).
    segment: usize,
    at: u64,
    last: EntryId,
    /// The sparse-index point at or before `at`.
    slot: usize,
}

fn corrupt(path: &Path, offset: u64, detail: impl Into<String>) -> BrokerError {
    BrokerError::Corrupt {
        path: path.to_owned(),
        offset,
        detail: detail.into(),
    }
}

/// Adds `id` at `offset` to a segment's sparse index if it is
/// [`INDEX_SPACING`] past the last point (or the first).
pub(crate) fn index_entry(index: &mut Vec<(EntryId, u64)>, id: EntryId, offset: u64) {
    let due = index
        .last()
        .is_none_or(|(_, last)| offset >= last + INDEX_SPACING);
    if due {
        index.push((id, offset));
    }
}

impl Payloads {
    /// Drops what was read (files were cut back or deleted).
    pub(crate) fn forget(&mut self) {
        *self = Payloads::default();
    }

    /// The message of entry `id` of the stream whose files are `files`.
    pub(crate) fn load(&mut self, files: &StreamFiles, id: EntryId) -> BrokerResult<Arc<Message>> {
        // The segment of the last entry read, if `id` is in it too.
        let holds = |s: &Segment| s.first <= id && s.last.is_some_and(|last| last >= id);
        let same = self.next.as_ref().and_then(|next| {
            files
                .segments
                .get(next.segment)
                .filter(|s| s.serial == next.serial && holds(s))
                .map(|_| next.segment)
        });
        let k = same.unwrap_or_else(|| {
            files
                .segments
                .partition_point(|s| s.first <= id)
                .saturating_sub(1)
        });
        let segment = files.segments.get(k).filter(|s| holds(s)).ok_or_else(|| {
            corrupt(
                &files.dir,
                0,
                format!("entry {id} is in no segment of this stream's directory"),
            )
        })?;
        // Reading on from the last entry read, unless the index has a
        // point past it and still at or before `id`.
        let hint = self.next.as_ref().filter(|next| {
            next.last < id
                && segment
                    .index
                    .get(next.slot + 1)
                    .is_none_or(|(first, _)| *first > id)
                && next.serial == segment.serial
        });
        let (mut at, slot) = match hint {
            Some(next) => (next.at, next.slot),
            None => {
                let p = segment.index.partition_point(|(first, _)| *first <= id);
                let slot = p.saturating_sub(1);
                let at = segment
                    .index
                    .get(slot)
                    .filter(|_| p > 0)
                    .map_or(format::FILE_HEADER_LEN as u64, |(_, offset)| *offset);
                (at, slot)
            }
        };
        loop {
            if at >= segment.bytes {
                return Err(corrupt(
                    &segment.path,
                    at,
                    format!("entry {id} not found in this segment"),
                ));
            }
            let (found, len) = self.entry_at(segment, at, id)?;
            at += len as u64;
            if let Some(message) = found {
                match &mut self.next {
                    Some(next) if next.serial == segment.serial => {
                        next.segment = k;
                        next.at = at;
                        next.last = id;
                        next.slot = slot;
                    }
                    _ => {
                        self.next = Some(Next {
                            serial: segment.serial,
                            segment: k,
                            at,
                            last: id,
                            slot,
                        });
                    }
                }
                return Ok(message);
            }
        }
    }

    /// The record at `at` of `segment`: its message if it is entry `id`,
    /// and its length. An entry past `id` means `id` is missing.
    fn entry_at(
        &mut self,
        segment: &Segment,
        at: u64,
        id: EntryId,
    ) -> BrokerResult<(Option<Arc<Message>>, usize)> {
        let path = &segment.path;
        let header = self.bytes(segment, at, format::FRAME_HEADER_LEN)?;
        let whole = match header.get(2..6) {
            Some(&[a, b, c, d]) => {
                let body = u32::from_le_bytes([a, b, c, d]) as usize;
                format::FRAME_HEADER_LEN + body.min(format::MAX_FRAME_BODY)
            }
            // Too short for a record header: `read_frame` says so.
            _ => header.len(),
        };
        let bytes = self.bytes(segment, at, whole)?;
        let (kind, body, len) = match format::read_frame(bytes) {
            Frame::Ok { kind, body, len } => (kind, body, len),
            Frame::Bad(reason) => return Err(corrupt(path, at, reason)),
            Frame::End => return Err(corrupt(path, at, "the segment ends here")),
        };
        if kind != format::KIND_ENTRY {
            return Err(corrupt(
                path,
                at,
                format!("record kind {kind} in a segment, expected entries"),
            ));
        }
        let here = format::entry_id(body).map_err(|detail| corrupt(path, at, detail))?;
        if here < id {
            return Ok((None, len));
        }
        if here > id {
            return Err(corrupt(
                path,
                at,
                format!("entry {id} not found: the segment goes from before it to {here}"),
            ));
        }
        let message = format::read_entry(body).map_err(|detail| corrupt(path, at, detail))?;
        Ok((Some(Arc::new(message)), len))
    }

    /// `len` bytes of `segment` from `at` (fewer if it ends first), read
    /// through the window.
    fn bytes(&mut self, segment: &Segment, at: u64, len: usize) -> BrokerResult<&[u8]> {
        let end = at.saturating_add(len as u64).min(segment.bytes);
        let cached = at >= self.window_at
            && end <= self.window_at + self.window.len() as u64
            && self
                .file
                .as_ref()
                .is_some_and(|(serial, _)| *serial == segment.serial);
        if !cached {
            self.fill(segment, at, len)?;
        }
        let from = (at - self.window_at) as usize;
        let to = (end - self.window_at) as usize;
        Ok(&self.window[from..to])
    }

    /// Reads the window from `at`: at least `len` bytes, up to [`WINDOW`],
    /// not past the end of `segment`.
    fn fill(&mut self, segment: &Segment, at: u64, len: usize) -> BrokerResult<()> {
        let path = &segment.path;
        if self
            .file
            .as_ref()
            .is_none_or(|(serial, _)| *serial != segment.serial)
        {
            let file = File::open(path).map_err(|e| io_error(path, e))?;
            self.file = Some((segment.serial, file));
        }
        let Some((_, file)) = &self.file else {
            return Ok(());
        };
        let want = len.max(WINDOW) as u64;
        let n = want.min(segment.bytes.saturating_sub(at)) as usize;
        self.window.resize(n, 0);
        self.window_at = at;
        let mut reader = file;
        reader
            .seek(SeekFrom::Start(at))
            .and_then(|_| reader.read_exact(&mut self.window))
            .map_err(|e| {
                self.window.clear();
                io_error(path, e)
            })
    }
}
