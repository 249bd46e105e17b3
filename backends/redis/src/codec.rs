//! The entry field layout, the side keys, and parsing of server replies.
//!
//! Replies are parsed by hand from [`redis::Value`] rather than through the
//! client's typed helpers: those collect stream fields into a `HashMap`,
//! which would lose the order of headers.

use std::sync::Arc;

use redis::Value;
use ruststream_core::{ConsumerInfo, DeadLetter, Delivery, Entry, EntryId, Message, PendingEntry};

/// The field holding the payload bytes.
pub(crate) const PAYLOAD_FIELD: &str = "payload";
/// The prefix of header fields: header `tenant` is field `h:tenant`.
pub(crate) const HEADER_PREFIX: &str = "h:";
/// The prefix of ruststream's own fields (retry copies, dead letters).
pub(crate) const RESERVED_PREFIX: &str = "rs:";

/// The names of the keys ruststream keeps beside a stream for one group.
///
/// Every one is `rs:{<stream>}:<kind>:<group>`: the stream's name in braces
/// is a Redis Cluster hash tag, so a group's side keys live in the same slot
/// as the stream and one script can touch them all. Stream and group names
/// never contain braces (the broker checks every name it is given), so the
/// first `}` ends the stream's name, the kind runs to the next `:` and the
/// group is the rest: no two (stream, kind, group) share a key, and no side
/// key is a stream's name (those have no braces).
#[derive(Clone, Debug)]
pub(crate) struct GroupKeys {
    /// Sorted set: owed entry id -> due time (server milliseconds).
    pub(crate) due: String,
    /// Hash: owed entry id -> "<times delivered> <owed since ms>".
    pub(crate) owed: String,
    /// Stream: one entry per dead letter.
    pub(crate) dead: String,
    /// Sorted set (all scores 0): "<padded id>:<dead-letter entry id>".
    pub(crate) dead_index: String,
    /// Stream: a one-entry stream appended to when entries become owed, so
    /// that blocked readers wake.
    pub(crate) wake: String,
}

impl GroupKeys {
    pub(crate) fn new(stream: &str, group: &str) -> Self {
        let key = |kind: &str| format!("rs:{{{stream}}}:{kind}:{group}");
        GroupKeys {
            due: key("due"),
            owed: key("owed"),
            dead: key("dead"),
            dead_index: key("dead-index"),
            wake: key("wake"),
        }
    }
}

/// Appends the fields of `message` to an `XADD`: `payload` first (entries
/// without headers then share one field layout, which Redis stores
/// compactly), then one `h:<name>` field per header, in order.
pub(crate) fn push_fields(cmd: &mut redis::Cmd, message: &Message) {
    cmd.arg(PAYLOAD_FIELD).arg(&message.payload[..]);
    for (name, value) in message.headers.iter() {
        cmd.arg(format!("{HEADER_PREFIX}{name}")).arg(value);
    }
}

/// Appends `id` as `ms-seq` to a command without a heap allocation.
pub(crate) fn push_id(cmd: &mut redis::Cmd, id: EntryId) {
    use std::io::Write;
    let mut buf = [0u8; 41];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    // 41 bytes hold two u64s and a dash, so the write cannot fail.
    let _ = write!(cursor, "{}-{}", id.ms, id.seq);
    let len = usize::try_from(cursor.position()).unwrap_or(0);
    cmd.arg(&buf[..len]);
}

/// Decodes an entry's fields into a message. `payload` is the payload (an
/// entry without one has an empty payload); `h:<name>` fields are headers;
/// `rs:` fields are ruststream's and skipped; any other field (written by
/// another client, say `XADD s * payload .. tenant acme`) becomes a header
/// under its own name.
pub(crate) fn decode_fields(fields: &[Value]) -> Message {
    let mut message = Message::default();
    let mut pairs = fields.chunks_exact(2);
    for pair in &mut pairs {
        let (Some(name), Some(value)) = (bytes(&pair[0]), bytes(&pair[1])) else {
            continue;
        };
        if name == PAYLOAD_FIELD.as_bytes() {
            message.payload = value.to_vec();
        } else if let Some(header) = name.strip_prefix(HEADER_PREFIX.as_bytes()) {
            message
                .headers
                .insert(lossy(header), String::from_utf8_lossy(value).into_owned());
        } else if !name.starts_with(RESERVED_PREFIX.as_bytes()) {
            message
                .headers
                .insert(lossy(name), String::from_utf8_lossy(value).into_owned());
        }
    }
    message
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The bytes of a string-like reply value.
pub(crate) fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

/// A reply value as text.
pub(crate) fn text(value: &Value) -> Option<&str> {
    bytes(value).and_then(|b| std::str::from_utf8(b).ok())
}

/// A reply value as an integer (Redis sends some numbers as strings).
pub(crate) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

/// A reply value as an entry id.
pub(crate) fn id(value: &Value) -> Option<EntryId> {
    text(value)?.parse().ok()
}

/// The elements of an array reply (`Nil` reads as empty).
pub(crate) fn array(value: &Value) -> &[Value] {
    match value {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

/// Why a reply could not be read: what was expected, and what came.
#[derive(Debug)]
pub(crate) struct BadReply(pub(crate) String);

pub(crate) fn bad(what: &str, value: &Value) -> BadReply {
    let mut shown = format!("{value:?}");
    if shown.len() > 200 {
        let mut cut = 200;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("...");
    }
    BadReply(format!("unexpected reply ({what}): {shown}"))
}

/// `[id, [field, value, ...]]` as an entry.
pub(crate) fn entry(value: &Value) -> Result<Entry, BadReply> {
    let parts = array(value);
    let id = parts
        .first()
        .and_then(id)
        .ok_or_else(|| bad("stream entry id", value))?;
    let fields = parts.get(1).map(array).unwrap_or(&[]);
    Ok(Entry {
        id,
        message: Arc::new(decode_fields(fields)),
    })
}

/// The server's clock in milliseconds, from a `TIME` reply.
pub(crate) fn server_time_ms(value: &Value) -> Option<u64> {
    let parts = array(value);
    let secs = u64::try_from(int(parts.first()?)?).ok()?;
    let micros = u64::try_from(int(parts.get(1)?)?).ok()?;
    Some(secs * 1000 + micros / 1000)
}

/// The entries of an `XREADGROUP` reply for one stream (`Nil`: none),
/// taken out of the reply so that payloads move rather than copy.
pub(crate) fn into_stream_entries(value: Value) -> Vec<Value> {
    let Value::Array(mut streams) = value else {
        return Vec::new();
    };
    if streams.is_empty() {
        return Vec::new();
    }
    let Value::Array(mut stream) = streams.swap_remove(0) else {
        return Vec::new();
    };
    if stream.len() < 2 {
        return Vec::new();
    }
    match stream.swap_remove(1) {
        Value::Array(entries) => entries,
        _ => Vec::new(),
    }
}

/// An entry read past a group's cursor, as a first delivery.
pub(crate) struct NewEntry {
    /// The delivery; a retry copy's carries the count of its original.
    pub(crate) delivery: Delivery,
    /// For a retry copy, the group it was made for.
    pub(crate) copy_for: Option<String>,
}

/// `[id, [field, value, ...]]` read as new: a retry copy (`rs:group` first)
/// carries its group and its original's delivery count (`rs:count`).
pub(crate) fn entry_of_read(value: Value) -> Result<NewEntry, BadReply> {
    let Value::Array(mut parts) = value else {
        return Err(bad("stream entry", &value));
    };
    let id = parts
        .first()
        .and_then(id)
        .ok_or_else(|| bad("stream entry id", &Value::Array(parts.clone())))?;
    let fields = match parts.get_mut(1) {
        Some(Value::Array(fields)) => std::mem::take(fields),
        _ => Vec::new(),
    };
    let mut copy_for = None;
    let mut carried = 0;
    if fields.first().and_then(bytes) == Some(b"rs:group") {
        copy_for = fields.get(1).and_then(text).map(str::to_owned);
        if fields.get(2).and_then(bytes) == Some(b"rs:count") {
            carried = fields
                .get(3)
                .and_then(int)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0);
        }
    }
    Ok(NewEntry {
        delivery: Delivery {
            entry: Entry {
                id,
                message: Arc::new(decode_owned_fields(fields)),
            },
            delivery_count: carried,
            idle_ms: 0,
        },
        copy_for,
    })
}

/// [`decode_fields`], moving the payload out of the reply.
pub(crate) fn decode_owned_fields(fields: Vec<Value>) -> Message {
    let mut message = Message::default();
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let Some(name) = bytes(&name) else { continue };
        if name == PAYLOAD_FIELD.as_bytes() {
            if let Value::BulkString(payload) = value {
                message.payload = payload;
            }
            continue;
        }
        let header = match name.strip_prefix(HEADER_PREFIX.as_bytes()) {
            Some(header) => header,
            None if name.starts_with(RESERVED_PREFIX.as_bytes()) => continue,
            None => name,
        };
        let value = match value {
            Value::BulkString(b) => String::from_utf8(b)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            other => bytes(&other)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
        };
        message.headers.insert(lossy(header), value);
    }
    message
}

/// The entries of an `XRANGE` reply.
pub(crate) fn entries(value: &Value) -> Result<Vec<Entry>, BadReply> {
    array(value).iter().map(entry).collect()
}

/// An entry a read script set aside rather than fail half-way (see
/// `lua/read.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Aside {
    pub(crate) id: EntryId,
    /// Its delivery count, as the script saw it.
    pub(crate) times: u32,
    /// The reason to dead-letter it with ("" when it is not at its bound).
    pub(crate) reason: String,
    /// The server's error, or "" when its dead letter was only too big for
    /// a script: the broker then dead-letters it itself.
    pub(crate) error: String,
}

fn asides(value: &Value) -> Result<Vec<Aside>, BadReply> {
    array(value)
        .iter()
        .map(|row| {
            let parts = array(row);
            let [id_value, times, reason, error] = parts else {
                return Err(bad("set-aside entry", row));
            };
            let text_of = |v: &Value| bytes(v).map(lossy).unwrap_or_default();
            Ok(Aside {
                id: id(id_value).ok_or_else(|| bad("set-aside id", row))?,
                times: u32::try_from(int(times).unwrap_or(0).max(0)).unwrap_or(u32::MAX),
                reason: text_of(reason),
                error: text_of(error),
            })
        })
        .collect()
}

/// What the read script returned.
#[derive(Debug, Default)]
pub(crate) struct ScriptRead {
    pub(crate) deliveries: Vec<Delivery>,
    pub(crate) dead_lettered: Vec<EntryId>,
    pub(crate) dropped: Vec<EntryId>,
    /// The server's clock at the read.
    pub(crate) now_ms: u64,
    /// When the next owed entry falls due (server clock), if any.
    pub(crate) next_due_ms: Option<u64>,
    /// The stream's and the wake stream's last ids (only when nothing was
    /// delivered): where a blocking wait starts.
    pub(crate) stream_last: Option<String>,
    pub(crate) wake_last: Option<String>,
    /// The XAUTOCLAIM cursor after a reclaim read.
    pub(crate) cursor: Option<String>,
    /// Entries the script set aside.
    pub(crate) aside: Vec<Aside>,
}

/// Parses the reply of the read script: `{ deliveries, dead ids, dropped
/// ids, { now, next due, stream last, wake last, cursor }, set aside }`.
pub(crate) fn script_read(value: &Value) -> Result<ScriptRead, BadReply> {
    let parts = array(value);
    let [deliveries, dead, dropped, meta, aside] = parts else {
        return Err(bad("read script reply", value));
    };
    let mut out = ScriptRead::default();
    for d in array(deliveries) {
        let item = array(d);
        let [id_value, fields, count, idle] = item else {
            return Err(bad("delivery", d));
        };
        let id = id(id_value).ok_or_else(|| bad("delivery id", d))?;
        out.deliveries.push(Delivery {
            entry: Entry {
                id,
                message: Arc::new(decode_fields(array(fields))),
            },
            delivery_count: u32::try_from(int(count).unwrap_or(0).max(0)).unwrap_or(u32::MAX),
            idle_ms: u64::try_from(int(idle).unwrap_or(0)).unwrap_or(0),
        });
    }
    out.dead_lettered = ids(dead)?;
    out.dropped = ids(dropped)?;
    let meta = array(meta);
    let field = |i: usize| meta.get(i);
    out.now_ms = field(0)
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad("read script clock", value))?;
    out.next_due_ms = field(1).and_then(int).and_then(|n| u64::try_from(n).ok());
    let nonempty = |v: Option<&Value>| {
        v.and_then(text)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    out.stream_last = nonempty(field(2));
    out.wake_last = nonempty(field(3));
    out.cursor = nonempty(field(4));
    out.aside = asides(aside)?;
    Ok(out)
}

/// Parses the reply of the post script: `{ handed back, dead-lettered ids,
/// set aside }`.
pub(crate) fn post_reply(value: &Value) -> Result<(Vec<EntryId>, Vec<Aside>), BadReply> {
    let parts = array(value);
    let [_, buried, aside] = parts else {
        return Err(bad("post script reply", value));
    };
    Ok((ids(buried)?, asides(aside)?))
}

/// Appends a settle script could not make itself (see `plan_appends` in
/// `lua/common.lua`): the key to append to, and per entry the id it is for
/// and the fields to append.
pub(crate) struct BigPlan {
    pub(crate) target: String,
    pub(crate) items: Vec<(String, Vec<Value>)>,
}

/// A settle script's reply: its result, or the appends it needs made first.
pub(crate) enum Settled {
    Done(Value),
    Big(BigPlan),
}

/// Reads a settle script's reply: `{ 'big', target, { { id, fields }, ...
/// } }` is a plan, anything else its result.
pub(crate) fn settled(value: Value) -> Result<Settled, BadReply> {
    let is_big = array(&value).first().and_then(bytes) == Some(b"big".as_slice());
    if !is_big {
        return Ok(Settled::Done(value));
    }
    let malformed = bad("settle script plan", &value);
    let Value::Array(parts) = value else {
        return Err(malformed);
    };
    let mut parts = parts.into_iter().skip(1);
    let (Some(target), Some(Value::Array(rows))) = (parts.next(), parts.next()) else {
        return Err(malformed);
    };
    let Some(target) = text(&target).map(str::to_owned) else {
        return Err(malformed);
    };
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let Value::Array(pair) = row else {
            return Err(malformed);
        };
        let mut pair = pair.into_iter();
        let (Some(id), Some(Value::Array(fields))) = (pair.next(), pair.next()) else {
            return Err(malformed);
        };
        let Some(id) = text(&id).map(str::to_owned) else {
            return Err(malformed);
        };
        items.push((id, fields));
    }
    Ok(Settled::Big(BigPlan { target, items }))
}

/// The count a settle script replied with: `{ n, ... }`.
pub(crate) fn settled_count(value: &Value) -> u64 {
    let n = int(value).or_else(|| array(value).first().and_then(int));
    u64::try_from(n.unwrap_or(0)).unwrap_or(0)
}

fn ids(value: &Value) -> Result<Vec<EntryId>, BadReply> {
    array(value)
        .iter()
        .map(|v| id(v).ok_or_else(|| bad("entry id", v)))
        .collect()
}

/// Parses the reply of the pending script: `{ now, { { id, consumer, idle,
/// times, owed in (-1: held) }, ... } }`.
pub(crate) fn pending(value: &Value) -> Result<Vec<PendingEntry>, BadReply> {
    let rows = array(value).get(1).map(array).unwrap_or(&[]);
    rows.iter()
        .map(|row| {
            let parts = array(row);
            let [id_value, consumer, idle, times, owed_in] = parts else {
                return Err(bad("pending entry", row));
            };
            let owed_in = int(owed_in).unwrap_or(-1);
            Ok(PendingEntry {
                id: id(id_value).ok_or_else(|| bad("pending id", row))?,
                consumer: text(consumer)
                    .filter(|c| !c.is_empty() && owed_in < 0)
                    .map(str::to_owned),
                idle_ms: u64::try_from(int(idle).unwrap_or(0)).unwrap_or(0),
                times_delivered: u32::try_from(int(times).unwrap_or(0)).unwrap_or(u32::MAX),
                owed_in_ms: u64::try_from(owed_in).ok(),
            })
        })
        .collect()
}

/// Parses the reply of the dead-letters script: `{ { id, fields }, ... }`,
/// the fields being those of the dead-letter entry (`rs:id`, `rs:reason`,
/// `rs:times_delivered`, `rs:dead_at`, `rs:orig`, then the entry's own
/// fields). A dead retry copy gets the header
/// [`ORIGINAL_ID_HEADER`](crate::ORIGINAL_ID_HEADER) naming its original.
pub(crate) fn dead_letters(value: &Value) -> Result<Vec<DeadLetter>, BadReply> {
    array(value)
        .iter()
        .map(|row| {
            let parts = array(row);
            let [id_value, fields] = parts else {
                return Err(bad("dead letter", row));
            };
            let fields = array(fields);
            let meta = |name: &str| {
                fields
                    .chunks_exact(2)
                    .find(|p| bytes(&p[0]) == Some(name.as_bytes()))
                    .map(|p| &p[1])
            };
            let dead_id = id(id_value).ok_or_else(|| bad("dead letter id", row))?;
            let mut message = decode_fields(fields);
            if let Some(orig) = meta("rs:orig").and_then(id).filter(|o| *o != dead_id) {
                message
                    .headers
                    .insert(crate::ORIGINAL_ID_HEADER, orig.to_string());
            }
            Ok(DeadLetter {
                entry: Entry {
                    id: dead_id,
                    message: Arc::new(message),
                },
                reason: meta("rs:reason")
                    .and_then(bytes)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default(),
                times_delivered: meta("rs:times_delivered")
                    .and_then(int)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
                dead_at_ms: meta("rs:dead_at")
                    .and_then(int)
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
            })
        })
        .collect()
}

/// A flat `[name, value, name, value, ...]` reply (XINFO in RESP2) or a
/// map, as pairs.
pub(crate) fn pairs(value: &Value) -> Vec<(&str, &Value)> {
    match value {
        Value::Map(map) => map
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        other => array(other)
            .chunks_exact(2)
            .filter_map(|p| Some((text(&p[0])?, &p[1])))
            .collect(),
    }
}

fn lookup<'a>(pairs: &[(&str, &'a Value)], name: &str) -> Option<&'a Value> {
    pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

/// One group as `XINFO GROUPS` reports it.
#[derive(Debug)]
pub(crate) struct GroupRow {
    pub(crate) name: String,
    pub(crate) consumers: u64,
    pub(crate) pending: u64,
    pub(crate) last_delivered: EntryId,
    /// `None` when the server cannot tell (an arbitrary start id, a
    /// deleted entry in range, a server before 7.0).
    pub(crate) lag: Option<u64>,
}

pub(crate) fn groups(value: &Value) -> Result<Vec<GroupRow>, BadReply> {
    array(value)
        .iter()
        .map(|g| {
            let p = pairs(g);
            let num = |name| {
                lookup(&p, name)
                    .and_then(int)
                    .and_then(|n| u64::try_from(n).ok())
            };
            Ok(GroupRow {
                name: lookup(&p, "name")
                    .and_then(text)
                    .ok_or_else(|| bad("group name", g))?
                    .to_owned(),
                consumers: num("consumers").unwrap_or(0),
                pending: num("pending").unwrap_or(0),
                last_delivered: lookup(&p, "last-delivered-id")
                    .and_then(id)
                    .unwrap_or(EntryId::ZERO),
                lag: num("lag"),
            })
        })
        .collect()
}

pub(crate) fn consumers(value: &Value) -> Result<Vec<ConsumerInfo>, BadReply> {
    let mut out = array(value)
        .iter()
        .map(|c| {
            let p = pairs(c);
            let num = |name| {
                lookup(&p, name)
                    .and_then(int)
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0)
            };
            Ok(ConsumerInfo {
                name: lookup(&p, "name")
                    .and_then(text)
                    .ok_or_else(|| bad("consumer name", c))?
                    .to_owned(),
                pending: num("pending"),
                idle_ms: num("idle"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The parts of `XINFO STREAM` the broker reports.
pub(crate) struct StreamRow {
    pub(crate) length: u64,
    pub(crate) first_id: Option<EntryId>,
    pub(crate) last_id: EntryId,
}

pub(crate) fn stream(value: &Value) -> StreamRow {
    let p = pairs(value);
    StreamRow {
        length: lookup(&p, "length")
            .and_then(int)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        first_id: lookup(&p, "first-entry")
            .map(array)
            .and_then(|e| e.first())
            .and_then(id),
        last_id: lookup(&p, "last-generated-id")
            .and_then(id)
            .unwrap_or(EntryId::ZERO),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use ruststream_core::Headers;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn fields_round_trip_in_order() {
        let message = Message {
            headers: headers(&[("tenant", "acme"), ("h:odd", "x"), ("rs:not-ours", "y")]),
            payload: vec![0, 255, b'{'],
        };
        let mut cmd = redis::cmd("XADD");
        push_fields(&mut cmd, &message);
        let args: Vec<Value> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => Value::BulkString(b.to_vec()),
                _ => Value::Nil,
            })
            .skip(1)
            .collect();
        assert_eq!(args[0], bulk("payload"));
        assert_eq!(args[2], bulk("h:tenant"));
        assert_eq!(args[4], bulk("h:h:odd"));
        assert_eq!(args[6], bulk("h:rs:not-ours"));
        assert_eq!(decode_fields(&args), message);
    }

    #[test]
    fn a_plain_entry_from_another_client_is_readable() {
        let fields = [bulk("payload"), bulk(r#"{"id":1}"#)];
        let m = decode_fields(&fields);
        assert_eq!(m.payload, br#"{"id":1}"#);
        assert!(m.headers.is_empty());
        let fields = [
            bulk("rs:group"),
            bulk("ledger"),
            bulk("rs:count"),
            bulk("2"),
            bulk("tenant"),
            bulk("acme"),
        ];
        let m = decode_fields(&fields);
        assert!(m.payload.is_empty());
        assert_eq!(m.headers, headers(&[("tenant", "acme")]));
    }

    #[test]
    fn side_keys_share_the_stream_hash_tag() {
        let keys = GroupKeys::new("payments", "ledger");
        assert_eq!(keys.due, "rs:{payments}:due:ledger");
        assert_eq!(keys.dead_index, "rs:{payments}:dead-index:ledger");
        assert_eq!(keys.wake, "rs:{payments}:wake:ledger");
    }

    #[test]
    fn parses_a_read_script_reply() {
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Array(vec![
                bulk("5-1"),
                Value::Array(vec![bulk("payload"), bulk("x")]),
                Value::Int(2),
                Value::Int(350),
            ])]),
            Value::Array(vec![bulk("4-0")]),
            Value::Array(vec![]),
            Value::Array(vec![
                Value::Int(1_000),
                Value::Int(-1),
                bulk(""),
                bulk(""),
                bulk("0-0"),
            ]),
            Value::Array(vec![Value::Array(vec![
                bulk("3-0"),
                Value::Int(4),
                bulk("delivered 4 times"),
                bulk(""),
            ])]),
        ]);
        let read = script_read(&reply).unwrap();
        assert_eq!(read.deliveries[0].id(), EntryId::new(5, 1));
        assert_eq!(read.deliveries[0].delivery_count, 2);
        assert_eq!(read.deliveries[0].idle_ms, 350);
        assert_eq!(read.dead_lettered, [EntryId::new(4, 0)]);
        assert_eq!((read.now_ms, read.next_due_ms), (1_000, None));
        assert_eq!(read.stream_last, None);
        assert_eq!(read.cursor.as_deref(), Some("0-0"));
        assert_eq!(
            read.aside,
            [Aside {
                id: EntryId::new(3, 0),
                times: 4,
                reason: "delivered 4 times".to_owned(),
                error: String::new(),
            }]
        );
        assert!(script_read(&Value::Nil).is_err());
    }
}
