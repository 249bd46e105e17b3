//! The entry field layout, the arguments the server takes, and reading its
//! replies.
//!
//! Replies are parsed by hand from [`redis::Value`] rather than through the
//! client's typed helpers: those collect stream fields into a `HashMap`,
//! which would lose the order of headers.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use ruststream_core::{ConsumerInfo, Delivery, Entry, EntryId, Message};

/// The field holding the payload bytes.
pub(crate) const PAYLOAD_FIELD: &str = "payload";
/// The prefix of header fields: header `tenant` is field `h:tenant`.
pub(crate) const HEADER_PREFIX: &str = "h:";
/// The prefix of ruststream's own fields (retry copies, dead letters).
pub(crate) const RESERVED_PREFIX: &str = "rs:";

/// The largest COUNT sent to the server: callers may ask for `usize::MAX`
/// ("all"), which Redis (a signed 64-bit COUNT, and Lua's doubles) would
/// refuse or mangle.
pub(crate) const MAX_COUNT: usize = 1 << 30;

/// A duration as the whole milliseconds Redis takes.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

/// Appends `ids` to `cmd` as `ms-seq` arguments, each written on the
/// stack (an ack of 500 entries makes no allocation per id).
pub(crate) fn push_ids(cmd: &mut redis::Cmd, ids: &[EntryId]) {
    for id in ids {
        cmd.arg(id.to_text().as_bytes());
    }
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

pub(crate) fn lossy(bytes: &[u8]) -> String {
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
    EntryId::parse_ascii(bytes(value)?)
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

/// The group a retry copy with these fields is for (`rs:group` is its
/// first field); `None` for an ordinary entry.
pub(crate) fn copy_group(fields: &[Value]) -> Option<&[u8]> {
    if fields.first().and_then(bytes) == Some(b"rs:group") {
        fields.get(1).and_then(bytes)
    } else {
        None
    }
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
    if let Some(group) = copy_group(&fields) {
        copy_for = std::str::from_utf8(group).ok().map(str::to_owned);
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

/// An array reply of entry ids.
pub(crate) fn ids(value: &Value) -> Result<Vec<EntryId>, BadReply> {
    array(value)
        .iter()
        .map(|v| id(v).ok_or_else(|| bad("entry id", v)))
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

/// The count under `name`: `None` when it is missing, nil or negative.
fn lookup_count(pairs: &[(&str, &Value)], name: &str) -> Option<u64> {
    lookup(pairs, name)
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
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
            let num = |name| lookup_count(&p, name);
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
            let num = |name| lookup_count(&p, name).unwrap_or(0);
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
        length: lookup_count(&p, "length").unwrap_or(0),
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
}
