//! The settle scripts: `ack.lua`, `retry.lua`, `dead_letter.lua`,
//! `redrive.lua` and `discard.lua`; and `extend_claim.lua`, which keeps
//! entries pending rather than settling them.

use crate::broker::Conn;
use redis::Value;
use ruststream_core::{EntryId, Retry};

use super::{Call, ScriptError, Scripts};
use crate::codec::{BadReply, array, bad, bytes, int, ms, text};
use crate::keys::GroupKeys;

/// What a retry did.
pub(crate) struct Retried {
    pub(crate) count: u64,
    /// Ids acked away because the stream no longer held them (trimmed
    /// while pending): a retry with copy had nothing to copy.
    pub(crate) dropped: Vec<String>,
}

/// What a redrive did.
pub(crate) enum Redriven {
    Count(u64),
    /// Nothing: these dead letters have no copy of their fields and their
    /// entries are gone from the stream.
    Lost(Vec<String>),
}

impl Scripts {
    /// `ack.lua`: one `XACK` of the whole batch, which also clears from the
    /// owed set the ids `XACK` did not find (an owed entry is held by
    /// nobody).
    pub(crate) async fn ack(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        ids: &[EntryId],
    ) -> Result<u64, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let call = Call::new(&self.ack, &[stream, &keys.due, &keys.owed])
            .arg(group)
            .ids(ids);
        Ok(call.invoke(&mut conn).await?)
    }

    /// `retry.lua`.
    pub(crate) async fn retry(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        how: Retry,
        ids: &[EntryId],
    ) -> Result<Retried, ScriptError> {
        let reply = self
            .retry_call(stream, group, how, ids)
            .run(&mut conn)
            .await?;
        Ok(Retried {
            count: settled_count(&reply),
            dropped: listed(&reply),
        })
    }

    fn retry_call<'a>(
        &'a self,
        stream: &str,
        group: &str,
        how: Retry,
        ids: &'a [EntryId],
    ) -> Settle<'a> {
        let keys = GroupKeys::new(stream, group);
        let (kind, delay) = match how {
            Retry::Copy => ("copy", 0),
            Retry::After(delay) => ("after", ms(delay)),
        };
        let head = Call::new(&self.retry, &[stream, &keys.due, &keys.owed, &keys.wake])
            .arg(group)
            .arg(kind)
            .arg(delay);
        Settle { head, ids }
    }

    /// `dead_letter.lua`. `times` is the delivery count to record in place
    /// of the one the group has (a read passes the count it saw before its
    /// claim bumped it).
    pub(crate) async fn dead_letter(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        reason: &str,
        times: Option<u32>,
        ids: &[EntryId],
    ) -> Result<u64, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let keys = [stream, &keys.due, &keys.owed, &keys.dead, &keys.dead_index];
        let times = times.map(|t| t.to_string()).unwrap_or_default();
        let head = Call::new(&self.dead_letter, &keys)
            .arg(group)
            .arg(reason)
            .arg(times);
        let reply = Settle { head, ids }.run(&mut conn).await?;
        Ok(settled_count(&reply))
    }

    /// `redrive.lua`: all of `ids` or, when some cannot be restored,
    /// nothing.
    pub(crate) async fn redrive(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        ids: &[EntryId],
    ) -> Result<Redriven, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let head = Call::new(&self.redrive, &keys.all(stream)).arg(group);
        let reply = Settle { head, ids }.run(&mut conn).await?;
        if array(&reply).first().and_then(bytes) == Some(b"lost".as_slice()) {
            return Ok(Redriven::Lost(listed(&reply)));
        }
        Ok(Redriven::Count(settled_count(&reply)))
    }

    /// `discard.lua`.
    pub(crate) async fn discard(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        ids: &[EntryId],
    ) -> Result<u64, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let call = Call::new(&self.discard, &[stream, &keys.dead, &keys.dead_index])
            .arg(group)
            .ids(ids);
        let reply: Value = call.invoke(&mut conn).await?;
        Ok(settled_count(&reply))
    }
}

impl Scripts {
    /// `extend_claim.lua`: refreshes `consumer`'s claim on those of `ids`
    /// it holds; returns how many.
    pub(crate) async fn extend_claim(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        consumer: &str,
        ids: &[EntryId],
    ) -> Result<u64, ScriptError> {
        let call = Call::new(&self.extend_claim, &[stream])
            .arg(group)
            .arg(consumer)
            .ids(ids);
        Ok(call.invoke(&mut conn).await?)
    }

    /// `count_deliveries.lua`: raises the delivery counts of those of
    /// `counts` that `consumer` holds; returns how many.
    pub(crate) async fn count_deliveries(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        consumer: &str,
        counts: &[(EntryId, u32)],
    ) -> Result<u64, ScriptError> {
        let mut call = Call::new(&self.count_deliveries, &[stream])
            .arg(group)
            .arg(consumer);
        for (id, times) in counts {
            call = call.arg(id.to_text().as_bytes()).arg(*times);
        }
        Ok(call.invoke(&mut conn).await?)
    }
}

/// A call of a script that may plan appends too big for it instead of
/// making them (see `plan_appends` in `lua/common.lua`): its ARGV is its
/// own arguments (`head`), then K and the ids of the K entries appended for
/// it, then the ids to settle.
struct Settle<'a> {
    head: Call<'a>,
    ids: &'a [EntryId],
}

impl Settle<'_> {
    /// The whole call, with `precopied` the ids entries were appended for.
    fn with(&self, precopied: &[&str]) -> Call<'_> {
        let mut call = self.head.clone().arg(precopied.len());
        for id in precopied {
            call = call.arg(*id);
        }
        call.ids(self.ids)
    }

    /// Runs the script on all the ids in one call. When it plans appends
    /// instead (and so changed nothing), they are made here followed by the
    /// script, in one MULTI/EXEC, so that the call is still applied whole
    /// or not at all.
    async fn run(&self, conn: &mut Conn) -> Result<Value, ScriptError> {
        let reply: Value = self.with(&[]).invoke(conn).await?;
        let plan = match settled(reply)? {
            Settled::Done(reply) => return Ok(reply),
            Settled::Big(plan) => plan,
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (_, fields) in &plan.items {
            let xadd = pipe.cmd("XADD").arg(&plan.target).arg("*");
            for field in fields {
                xadd.arg(bytes(field).unwrap_or_default());
            }
            xadd.ignore();
        }
        let precopied: Vec<&str> = plan.items.iter().map(|(id, _)| id.as_str()).collect();
        // EVAL, not EVALSHA: inside MULTI a NOSCRIPT could not fall back to
        // the code, and the appends before it would stay.
        pipe.add_command(self.with(&precopied).eval());
        let (reply,): (Value,) = pipe.query_async(conn).await?;
        match settled(reply)? {
            Settled::Done(reply) => Ok(reply),
            Settled::Big(_) => Err(BadReply(
                "a settle script asked for appends it had been given".to_owned(),
            )
            .into()),
        }
    }
}

/// Appends a settle script could not make itself (see `plan_appends` in
/// `lua/common.lua`): the key to append to, and per entry the id it is for
/// and the fields to append.
struct BigPlan {
    target: String,
    items: Vec<(String, Vec<Value>)>,
}

/// A settle script's reply: its result, or the appends it needs made first.
enum Settled {
    Done(Value),
    Big(BigPlan),
}

/// Reads a settle script's reply: `{ 'big', target, { { id, fields }, ...
/// } }` is a plan, anything else its result.
fn settled(value: Value) -> Result<Settled, BadReply> {
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

/// The ids a settle script listed in its reply `{ _, { id, ... } }`.
fn listed(reply: &Value) -> Vec<String> {
    array(reply)
        .get(1)
        .map(array)
        .unwrap_or(&[])
        .iter()
        .filter_map(|v| text(v).map(str::to_owned))
        .collect()
}

/// The count a settle script replied with: `{ n, ... }`.
fn settled_count(value: &Value) -> u64 {
    let n = int(value).or_else(|| array(value).first().and_then(int));
    u64::try_from(n.unwrap_or(0)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn an_append_made_for_an_entry_settled_meanwhile_is_deleted_again() {
        // The broker's second pass of a retry with copy (see `plan_appends`)
        // for an entry that another worker settled after the first pass: the
        // copy appended in the same MULTI must not stay.
        let mut conn = crate::testing::connection().await;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let s = format!("rs-test:{}-{nanos:x}:precopy", std::process::id());
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&s)
            .arg("g")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .unwrap();
        // Never read, so not pending: settled, as far as the group goes.
        let id: String = redis::cmd("XADD")
            .arg(&s)
            .arg("*")
            .arg("payload")
            .arg("x")
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("XADD")
            .arg(&s)
            .arg("*")
            .arg("rs:group")
            .arg("g")
            .arg("rs:count")
            .arg(1)
            .arg("rs:orig")
            .arg(&id)
            .arg("payload")
            .arg("x")
            .ignore();
        let retried = [id.parse::<EntryId>().unwrap()];
        let scripts = Scripts::new();
        let retry = scripts.retry_call(&s, "g", Retry::Copy, &retried);
        pipe.add_command(retry.with(&[&id]).eval());
        let (reply,): (Value,) = pipe.query_async(&mut conn).await.unwrap();
        assert_eq!(
            reply,
            Value::Array(vec![Value::Int(0), Value::Array(vec![])]),
            "nothing retried"
        );
        let len: i64 = crate::testing::ask("XLEN", &s).await;
        assert_eq!(len, 1, "the copy was deleted again");
    }
}
