//! The inspection scripts: `pending.lua` and `dead_letters.lua`.

use std::sync::Arc;

use crate::broker::Conn;
use redis::Value;
use ruststream_core::{DeadLetter, Entry, EntryId, PendingEntry};

use super::{Call, ScriptError, Scripts};
use crate::codec::{BadReply, MAX_COUNT, array, bad, bytes, decode_fields, id, int, text};
use crate::keys::GroupKeys;

impl Scripts {
    /// `pending.lua`: a group's pending list from `from`, the entries held
    /// by consumers merged in id order with the owed ones (held by nobody).
    /// With `consumer`, only what that consumer holds.
    pub(crate) async fn pending(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        from: EntryId,
        count: usize,
        consumer: Option<&str>,
    ) -> Result<Vec<PendingEntry>, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let call = Call::new(&self.pending, &[stream, &keys.due, &keys.owed])
            .arg(group)
            .arg(from.to_string())
            .arg(count.min(MAX_COUNT))
            .arg(consumer.unwrap_or(""));
        let reply: Value = call.invoke(&mut conn).await?;
        Ok(pending(&reply)?)
    }

    /// `dead_letters.lua`: a group's dead letters from `from`, in id order.
    pub(crate) async fn dead_letters(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        from: EntryId,
        count: usize,
    ) -> Result<Vec<DeadLetter>, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let call = Call::new(&self.dead_letters, &[stream, &keys.dead, &keys.dead_index])
            .arg(group)
            .arg(from.to_string())
            .arg(count.min(MAX_COUNT));
        let reply: Value = call.invoke(&mut conn).await?;
        Ok(dead_letters(&reply)?)
    }
}

/// Parses the reply of the pending script: `{ now, { { id, consumer, idle,
/// times, owed in (-1: held) }, ... } }`.
fn pending(value: &Value) -> Result<Vec<PendingEntry>, BadReply> {
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
fn dead_letters(value: &Value) -> Result<Vec<DeadLetter>, BadReply> {
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
