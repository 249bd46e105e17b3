//! Publishing, and making and moving groups.

use redis::{RedisError, Value};
use ruststream_core::{BrokerError, BrokerResult, EntryId, Message, StreamStart};

use super::connection::{BROKER, Scope};
use super::{RedisBroker, check_names};
use crate::codec;

/// One pipelined `XADD` per message: one round trip per batch.
pub(super) async fn publish_batch(
    broker: &RedisBroker,
    stream: &str,
    messages: Vec<Message>,
) -> BrokerResult<Vec<EntryId>> {
    check_names(stream, None, None)?;
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let scope = broker.scope(stream, None);
    let mut pipe = redis::pipe();
    for message in &messages {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream).arg("*");
        codec::push_fields(&mut cmd, message);
        pipe.add_command(cmd);
    }
    let wait = broker.inner.connections.config().publish_replicas;
    if let Some(ack) = wait {
        pipe.cmd("WAIT")
            .arg(ack.replicas)
            .arg(codec::ms(ack.timeout));
    }
    let mut replies: Vec<Value> = broker.query(&pipe, scope).await?;
    let replicated = match wait {
        Some(_) => replies.pop(),
        None => None,
    };
    let ids = replies
        .iter()
        .map(|r| codec::id(r).ok_or_else(|| scope.bad_reply(codec::bad("XADD id", r))))
        .collect::<BrokerResult<Vec<EntryId>>>()?;
    if let (Some(ack), Some(reply)) = (wait, replicated) {
        let held =
            codec::int(&reply).ok_or_else(|| scope.bad_reply(codec::bad("WAIT count", &reply)))?;
        if held < i64::from(ack.replicas) {
            return Err(BrokerError::Connection {
                broker: BROKER,
                detail: format!(
                    "{} (stream {stream:?}): {} entries written, but {held} of {} replicas held them within {:?}; a failover now could lose them, so publish again",
                    broker.url(),
                    ids.len(),
                    ack.replicas,
                    ack.timeout
                ),
            });
        }
    }
    super::retention::after_publish(broker, stream).await;
    Ok(ids)
}

/// `XGROUP CREATE ... MKSTREAM`; `BUSYGROUP` means the group exists.
pub(super) async fn ensure_group(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    start: StreamStart,
) -> BrokerResult<bool> {
    check_names(stream, Some(group), None)?;
    let scope = broker.scope(stream, Some(group));
    check_start(broker, stream, start, scope).await?;
    let mut conn = broker.conn().await?;
    let created: Result<Value, RedisError> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg(start_arg(start))
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await;
    match created {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(false),
        Err(e) => Err(scope.error(&e)),
    }
}

/// Moves the group's cursor (`XGROUP SETID`, in `move_cursor.lua`). A
/// forward move makes owed, first, the group's retry copies it would pass
/// over: each is the only record of a retry still to run. `New` is the
/// stream's last id when the move is made.
pub(super) async fn set_group_position(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    start: StreamStart,
) -> BrokerResult<()> {
    check_names(stream, Some(group), None)?;
    let scope = broker.scope(stream, Some(group));
    check_start(broker, stream, start, scope).await?;
    let cursor = super::inspect::cursor_of(broker, stream, group).await?;
    let target = match start {
        StreamStart::New => last_id(broker, stream, scope).await?,
        StreamStart::Beginning => EntryId::ZERO,
        StreamStart::Id(id) => id,
    };
    let copies = if target > cursor {
        copies_between(broker, stream, group, (cursor, target), scope).await?
    } else {
        Vec::new()
    };
    broker
        .script(scope, |s, conn| {
            s.move_cursor(conn, stream, group, target, &copies)
        })
        .await?;
    Ok(())
}

/// The ids of `group`'s retry copies after `from` up to `to`, read in
/// pages.
async fn copies_between(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    (from, to): (EntryId, EntryId),
    scope: Scope<'_>,
) -> BrokerResult<Vec<EntryId>> {
    let mut copies = Vec::new();
    super::inspect::for_each_page(broker, stream, (from, Some(to)), scope, |items| {
        for item in items {
            let parts = codec::array(item);
            let fields = parts.get(1).map(codec::array).unwrap_or_default();
            let is_copy = codec::copy_group(fields) == Some(group.as_bytes());
            if let (true, Some(id)) = (is_copy, parts.first().and_then(codec::id)) {
                copies.push(id);
            }
        }
    })
    .await?;
    Ok(copies)
}

/// Refuses a start id past the last id `stream` ever had: the group would
/// pass over everything appended until the clock reached it.
async fn check_start(
    broker: &RedisBroker,
    stream: &str,
    start: StreamStart,
    scope: Scope<'_>,
) -> BrokerResult<()> {
    if let StreamStart::Id(_) = start {
        start.check_within(stream, last_id(broker, stream, scope).await?)?;
    }
    Ok(())
}

/// The last id `stream` ever had ([`EntryId::ZERO`] if it does not exist).
async fn last_id(broker: &RedisBroker, stream: &str, scope: Scope<'_>) -> BrokerResult<EntryId> {
    let mut conn = broker.conn().await?;
    let info: Result<Value, RedisError> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(stream)
        .query_async(&mut conn)
        .await;
    match info {
        Ok(info) => Ok(codec::stream(&info).last_id),
        Err(e) if e.to_string().contains("no such key") => Ok(EntryId::ZERO),
        Err(e) => Err(scope.error(&e)),
    }
}

fn start_arg(start: StreamStart) -> String {
    match start {
        StreamStart::New => "$".to_owned(),
        StreamStart::Beginning => "0".to_owned(),
        StreamStart::Id(id) => id.to_string(),
    }
}
