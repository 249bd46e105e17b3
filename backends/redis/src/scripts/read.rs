//! The read scripts: `read.lua` (a whole read, or the owed entries that are
//! due) and `post.lua` (what a plain `XREADGROUP ... >` leaves to do).

use std::sync::Arc;
use std::time::Duration;

use crate::broker::{Conn, ReadMark};
use redis::Value;
use ruststream_core::{Delivery, Entry, EntryId, ReadMode, ReadRequest};

use super::{Call, ScriptError, Scripts};
use crate::codec::{BadReply, array, bad, bytes, decode_fields, id, ids, int, lossy, ms, text};
use crate::keys::GroupKeys;

/// What a `New` read leaves for the post script (see `lua/post.lua`).
#[derive(Default)]
pub(crate) struct Post {
    /// Retry copies for other groups, which this group passes over.
    pub(crate) ack: Vec<EntryId>,
    /// This group's own retry copies, with the count they carry.
    pub(crate) fix: Vec<(EntryId, u32)>,
    /// Own copies at the attempt bound, with the count they carry.
    pub(crate) dead: Vec<(EntryId, u32)>,
    /// Entries read beyond the request's count (or by a read its caller
    /// gave up on), with the delivery count that read left them at: one
    /// delivered again since (handed back and read anew) is not the read's
    /// to hand back any more.
    pub(crate) back: Vec<(EntryId, u32)>,
}

impl Post {
    pub(crate) fn is_empty(&self) -> bool {
        self.ack.is_empty() && self.fix.is_empty() && self.dead.is_empty() && self.back.is_empty()
    }
}

impl Scripts {
    /// `read.lua`: the whole read of `req.mode` or, with `owed_only`, just
    /// the owed entries that are due. A reclaim read resumes `XAUTOCLAIM`
    /// at `cursor` (from the start without one).
    ///
    /// With a `mark` (see `broker/read_mark.rs`), a script that finds its
    /// own token changes nothing and answers [`ScriptRead::resent`].
    pub(crate) async fn read(
        &self,
        mut conn: Conn,
        req: &ReadRequest<'_>,
        owed_only: bool,
        cursor: Option<&str>,
        mark: Option<&ReadMark>,
    ) -> Result<ScriptRead, ScriptError> {
        let keys = GroupKeys::new(req.stream, req.group);
        let mut all = keys.all(req.stream).to_vec();
        if let Some(mark) = mark {
            all.push(&mark.key);
        }
        let (mode, min_idle) = match req.mode {
            _ if owed_only => ("owed", 0),
            ReadMode::New => ("new", 0),
            ReadMode::Claiming { min_idle } => ("claiming", ms(min_idle)),
            ReadMode::Reclaim { min_idle } => ("reclaim", ms(min_idle)),
            ReadMode::OwnPending { min_idle, .. } => ("own", ms(min_idle)),
        };
        let position = match req.mode {
            ReadMode::OwnPending { after, .. } => after.to_string(),
            ReadMode::Reclaim { .. } => cursor.unwrap_or("0-0").to_owned(),
            _ => "0-0".to_owned(),
        };
        let (token, ttl_ms) = mark.map_or(("", 0), |m| (m.token.as_str(), m.ttl_ms));
        let mut call = Call::new(&self.read, &all)
            .arg(req.group)
            .arg(req.consumer)
            .arg(mode)
            .arg(req.count)
            .arg(min_idle)
            .arg(req.max_deliveries.unwrap_or(0))
            .arg(position)
            .arg(token)
            .arg(ttl_ms);
        // Only a read that takes idle entries refreshes the held ones.
        let held = if req.takes_idle() && !owed_only {
            req.held
        } else {
            &[]
        };
        call = call.arg(held.len()).ids(held);
        if let (ReadMode::Claiming { min_idle }, false) = (req.mode, owed_only) {
            call = call.arg(claim_read_command(
                req.stream,
                req.group,
                req.consumer,
                req.count,
                min_idle,
            ));
        }
        let reply: Value = call.invoke(&mut conn).await?;
        Ok(script_read(&reply)?)
    }

    /// `post.lua`: settles what a `New` read found in its plain
    /// `XREADGROUP` reply. Returns the copies it dead-lettered and the
    /// entries it set aside.
    pub(crate) async fn post(
        &self,
        mut conn: Conn,
        req: &ReadRequest<'_>,
        post: &Post,
    ) -> Result<Posted, ScriptError> {
        let keys = GroupKeys::new(req.stream, req.group);
        let mut call = Call::new(&self.post, &keys.all(req.stream))
            .arg(req.group)
            .arg(req.consumer)
            .arg(req.max_deliveries.unwrap_or(0));
        call = call.arg("ack").arg(post.ack.len()).ids(&post.ack);
        for (name, items) in [
            ("fix", &post.fix),
            ("dead", &post.dead),
            ("back", &post.back),
        ] {
            call = call.arg(name).arg(items.len() * 2);
            for (id, count) in items {
                call = call.arg(id.to_string()).arg(*count);
            }
        }
        let reply: Value = call.invoke(&mut conn).await?;
        Ok(post_reply(&reply)?)
    }
}

/// The `XREADGROUP ... CLAIM` command of a claiming read (Redis 8.4): idle
/// pending entries first (longest idle first), then new ones, `count` in
/// all. The read script runs it with `COUNT` lowered to the room left after
/// owed entries.
fn claim_read_command(
    stream: &str,
    group: &str,
    consumer: &str,
    count: usize,
    min_idle: Duration,
) -> Vec<String> {
    vec![
        "XREADGROUP".to_owned(),
        "GROUP".to_owned(),
        group.to_owned(),
        consumer.to_owned(),
        "COUNT".to_owned(),
        count.to_string(),
        "CLAIM".to_owned(),
        ms(min_idle).to_string(),
        "STREAMS".to_owned(),
        stream.to_owned(),
        ">".to_owned(),
    ]
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
    /// Retry copies of other groups the read met and passed over (acked
    /// for this group): nothing to warn about, but a re-read of the own
    /// pending list pages on past them.
    pub(crate) passed: Vec<EntryId>,
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
    /// The script found its read mark: an earlier attempt of this call ran
    /// and its reply was lost. Nothing else is filled in.
    pub(crate) resent: bool,
}

/// Parses the reply of the read script: `{ deliveries, dead ids, dropped
/// ids, { now, next due, stream last, wake last, cursor }, set aside,
/// passed-over ids }`.
pub(crate) fn script_read(value: &Value) -> Result<ScriptRead, BadReply> {
    let parts = array(value);
    if let [only] = parts
        && bytes(only) == Some(b"resent".as_slice())
    {
        return Ok(ScriptRead {
            resent: true,
            ..ScriptRead::default()
        });
    }
    let [deliveries, dead, dropped, meta, aside, passed] = parts else {
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
    out.passed = ids(passed)?;
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

/// What the post script did.
#[derive(Debug, Default)]
pub(crate) struct Posted {
    /// How many entries it handed back (those still pending).
    pub(crate) handed_back: u64,
    /// The copies it dead-lettered.
    pub(crate) buried: Vec<EntryId>,
    /// The dead letters it set aside for the broker.
    pub(crate) aside: Vec<Aside>,
}

/// Parses the reply of the post script: `{ handed back, dead-lettered ids,
/// set aside }`.
pub(crate) fn post_reply(value: &Value) -> Result<Posted, BadReply> {
    let parts = array(value);
    let [handed_back, buried, aside] = parts else {
        return Err(bad("post script reply", value));
    };
    let handed_back = int(handed_back)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad("post script's count", handed_back))?;
    Ok(Posted {
        handed_back,
        buried: ids(buried)?,
        aside: asides(aside)?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::scripts::with_helpers;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_claiming_read_is_one_xreadgroup_with_claim() {
        let cmd = claim_read_command(
            "payments",
            "ledger",
            "ruststream-0",
            32,
            Duration::from_secs(30),
        );
        assert_eq!(
            cmd,
            [
                "XREADGROUP",
                "GROUP",
                "ledger",
                "ruststream-0",
                "COUNT",
                "32",
                "CLAIM",
                "30000",
                "STREAMS",
                "payments",
                ">"
            ]
        );
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
            Value::Array(vec![bulk("4-5")]),
        ]);
        let read = script_read(&reply).unwrap();
        assert_eq!(read.deliveries[0].id(), EntryId::new(5, 1));
        assert_eq!(read.deliveries[0].delivery_count, 2);
        assert_eq!(read.deliveries[0].idle_ms, 350);
        assert_eq!(read.dead_lettered, [EntryId::new(4, 0)]);
        assert_eq!(read.passed, [EntryId::new(4, 5)]);
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

    /// Runs `claim_reply_entries` (the read script's parser of an
    /// `XREADGROUP ... CLAIM` reply) on a recorded reply, on the test
    /// server (any version: the reply is given, not asked for).
    async fn parse_recorded(reply_literal: &str) -> Vec<(String, Vec<String>, i64, i64)> {
        let mut conn = crate::testing::connection().await;
        let body = format!(
            "local out = {{}}\n\
             for _, e in ipairs(claim_reply_entries({reply_literal})) do\n\
               out[#out + 1] = {{ e[1], e[2] or {{}}, e[3], e[4] }}\n\
             end\n\
             return out"
        );
        let value: Value = with_helpers(&body).invoke_async(&mut conn).await.unwrap();
        let Value::Array(rows) = value else {
            panic!("{value:?}")
        };
        rows.into_iter()
            .map(|row| {
                let Value::Array(parts) = row else { panic!() };
                let text = |v: &Value| match v {
                    Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                    other => panic!("{other:?}"),
                };
                let Value::Array(fields) = &parts[1] else {
                    panic!()
                };
                let Value::Int(idle) = parts[2] else { panic!() };
                let Value::Int(count) = parts[3] else {
                    panic!()
                };
                (
                    text(&parts[0]),
                    fields.iter().map(text).collect(),
                    idle,
                    count,
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn parses_a_claim_reply_with_string_metadata_as_redis_8_4_0_sends() {
        // The shape Redis 8.4.0 replies in: one claimed entry (idle 287341
        // ms, 22 deliveries) then one new entry, the metadata as strings.
        let reply = "{ { 'payments', { \
            { '1764497928656-0', { 'payload', '{}' }, '287341', '22' }, \
            { '1764497928700-0', { 'payload', '[]' }, '0', '0' } } } }";
        let rows = parse_recorded(reply).await;
        assert_eq!(
            rows,
            [
                (
                    "1764497928656-0".to_owned(),
                    vec!["payload".to_owned(), "{}".to_owned()],
                    287_341,
                    22
                ),
                (
                    "1764497928700-0".to_owned(),
                    vec!["payload".to_owned(), "[]".to_owned()],
                    0,
                    0
                ),
            ]
        );
    }

    #[tokio::test]
    async fn parses_a_claim_reply_with_integer_metadata_and_a_trimmed_entry() {
        // Redis 8.4.2 and later send integers; a claimed entry trimmed from
        // the stream comes with no fields (nil, false in Lua).
        let reply = "{ { 's', { \
            { '5-0', false, 1200, 3 }, \
            { '6-0', { 'payload', 'x', 'h:k', 'v' }, 0, 0 } } } }";
        let rows = parse_recorded(reply).await;
        assert_eq!(rows[0], ("5-0".to_owned(), vec![], 1200, 3));
        assert_eq!(rows[1].1, ["payload", "x", "h:k", "v"]);
        assert_eq!((rows[1].2, rows[1].3), (0, 0));
        // No entries at all (BLOCK timed out, or nothing to read): nil.
        assert!(parse_recorded("false").await.is_empty());
    }
}
