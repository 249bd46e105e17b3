//! Looking at streams and groups: group info, consumers, pending lists,
//! dead letters, ranges and stream info; and trimming.

use redis::{RedisError, Value};
use ruststream_core::{
    BrokerError, BrokerResult, ConsumerInfo, DeadLetter, Entry, EntryId, GroupInfo, PendingEntry,
    StreamInfo, Trim,
};

use super::connection::Scope;
use super::{RedisBroker, check_names};
use crate::codec::{self, MAX_COUNT};
use crate::keys::GroupKeys;

/// `XINFO GROUPS` for lag, pending, consumers and cursor, plus the owed
/// entries (pending too, held by nobody) and the dead letters.
pub(super) async fn group_info(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
) -> BrokerResult<GroupInfo> {
    check_names(stream, Some(group), None)?;
    let scope = broker.scope(stream, Some(group));
    let keys = GroupKeys::new(stream, group);
    let mut pipe = redis::pipe();
    pipe.cmd("XINFO").arg("GROUPS").arg(stream);
    pipe.cmd("ZCARD").arg(&keys.due);
    pipe.cmd("ZCARD").arg(&keys.dead_index);
    let (groups, owed, dead): (Value, u64, u64) = broker.query(&pipe, scope).await?;
    let row = group_row(&groups, stream, group, scope)?;
    let lag = match row.lag {
        Some(lag) => lag,
        None => count_after(broker, stream, row.last_delivered, scope).await?,
    };
    Ok(GroupInfo {
        stream: stream.to_owned(),
        name: group.to_owned(),
        last_delivered: row.last_delivered,
        lag,
        pending: row.pending + owed,
        dead_letters: dead,
        consumers: row.consumers,
    })
}

/// A group's cursor (its last-delivered id).
pub(super) async fn cursor_of(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
) -> BrokerResult<EntryId> {
    let scope = broker.scope(stream, Some(group));
    let reply: Value = broker
        .query(redis::cmd("XINFO").arg("GROUPS").arg(stream), scope)
        .await?;
    Ok(group_row(&reply, stream, group, scope)?.last_delivered)
}

/// `group`'s row of an `XINFO GROUPS` reply.
fn group_row(
    reply: &Value,
    stream: &str,
    group: &str,
    scope: Scope<'_>,
) -> BrokerResult<codec::GroupRow> {
    codec::groups(reply)
        .map_err(|e| scope.bad_reply(e))?
        .into_iter()
        .find(|g| g.name == group)
        .ok_or_else(|| BrokerError::no_group(stream, group))
}

/// Entries after `after`, counted by paging through them: the lag when the
/// server cannot tell it (a group started or moved to an arbitrary id).
async fn count_after(
    broker: &RedisBroker,
    stream: &str,
    after: EntryId,
    scope: Scope<'_>,
) -> BrokerResult<u64> {
    let mut total = 0u64;
    for_each_page(broker, stream, (after, None), scope, |items| {
        total += items.len() as u64;
    })
    .await?;
    Ok(total)
}

/// Reads `stream`'s entries after `after` up to `to` (`None`: to the end)
/// in pages of 1,000, handing each page's `XRANGE` items to `each`.
pub(super) async fn for_each_page(
    broker: &RedisBroker,
    stream: &str,
    (after, to): (EntryId, Option<EntryId>),
    scope: Scope<'_>,
    mut each: impl FnMut(&[Value]),
) -> BrokerResult<()> {
    const PAGE: usize = 1000;
    let mut conn = broker.conn().await?;
    let end = to.map_or_else(|| "+".to_owned(), |to| to.to_string());
    let mut from = after;
    loop {
        let page: Value = redis::cmd("XRANGE")
            .arg(stream)
            .arg(format!("({from}"))
            .arg(&end)
            .arg("COUNT")
            .arg(PAGE)
            .query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        let items = codec::array(&page);
        each(items);
        let last = items
            .last()
            .and_then(|e| codec::array(e).first())
            .and_then(codec::id);
        match last {
            Some(last) if items.len() == PAGE => from = last,
            _ => return Ok(()),
        }
    }
}

pub(super) async fn consumers(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
) -> BrokerResult<Vec<ConsumerInfo>> {
    check_names(stream, Some(group), None)?;
    let scope = broker.scope(stream, Some(group));
    let reply: Value = broker
        .query(
            redis::cmd("XINFO").arg("CONSUMERS").arg(stream).arg(group),
            scope,
        )
        .await?;
    codec::consumers(&reply).map_err(|e| scope.bad_reply(e))
}

pub(super) async fn pending(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    from: EntryId,
    count: usize,
    consumer: Option<&str>,
) -> BrokerResult<Vec<PendingEntry>> {
    check_names(stream, Some(group), consumer)?;
    let scope = broker.scope(stream, Some(group));
    if count == 0 {
        return Ok(Vec::new());
    }
    if let Some(consumer) = consumer {
        // What the consumer's abandoned waits claimed is being handed
        // back: list after that, not while those entries are on their way
        // (a hand-back takes two round trips; one that takes longer is
        // not waited for past a reply's time).
        let at_most = broker.inner.connections.config().response_timeout;
        let settled = broker
            .inner
            .abandoned
            .settled(stream, group, consumer, at_most)
            .await;
        if !settled {
            tracing::warn!(
                stream,
                group,
                consumer,
                "listing the pending list while entries an abandoned read took are still being \
                 handed back"
            );
        }
    }
    broker
        .script(scope, |s, conn| {
            s.pending(conn, stream, group, from, count, consumer)
        })
        .await
}

pub(super) async fn dead_letters(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    from: EntryId,
    count: usize,
) -> BrokerResult<Vec<DeadLetter>> {
    check_names(stream, Some(group), None)?;
    let scope = broker.scope(stream, Some(group));
    if count == 0 {
        return Ok(Vec::new());
    }
    broker
        .script(scope, |s, conn| {
            s.dead_letters(conn, stream, group, from, count)
        })
        .await
}

pub(super) async fn range(
    broker: &RedisBroker,
    stream: &str,
    from: EntryId,
    to: EntryId,
    count: usize,
) -> BrokerResult<Vec<Entry>> {
    check_names(stream, None, None)?;
    if from > to || count == 0 {
        return Ok(Vec::new());
    }
    let scope = broker.scope(stream, None);
    let reply: Value = broker
        .query(
            redis::cmd("XRANGE")
                .arg(stream)
                .arg(from.to_string())
                .arg(to.to_string())
                .arg("COUNT")
                .arg(count.min(MAX_COUNT)),
            scope,
        )
        .await?;
    codec::entries(&reply).map_err(|e| scope.bad_reply(e))
}

/// Every key of type stream, by `SCAN ... TYPE stream` (on a cluster, on
/// every master), but ruststream's own side keys (their names hold braces,
/// which stream names never do) and keys whose names are not UTF-8 (another
/// application's: a stream name is text), each logged at debug level.
pub(super) async fn streams(broker: &RedisBroker) -> BrokerResult<Vec<String>> {
    let scope = broker.scope("*", None);
    let mut conn = broker.conn().await?;
    let holders = conn.key_holders().await.map_err(|e| scope.error(&e))?;
    let mut names = Vec::new();
    for holder in &holders {
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("TYPE")
                .arg("stream")
                .arg("COUNT")
                .arg(1000);
            let (next, keys): (u64, Vec<Vec<u8>>) = conn
                .query_on(holder, &scan)
                .await
                .map_err(|e| scope.error(&e))?;
            for key in keys {
                match String::from_utf8(key) {
                    Ok(name) if !name.contains('{') => names.push(name),
                    Ok(_) => {}
                    Err(e) => tracing::debug!(
                        key = %String::from_utf8_lossy(e.as_bytes()),
                        "skipping a stream key whose name is not UTF-8: not a ruststream stream"
                    ),
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

pub(super) async fn stream_info(
    broker: &RedisBroker,
    stream: &str,
) -> BrokerResult<Option<StreamInfo>> {
    check_names(stream, None, None)?;
    let scope = broker.scope(stream, None);
    let mut pipe = redis::pipe();
    pipe.cmd("XINFO").arg("STREAM").arg(stream);
    pipe.cmd("XINFO").arg("GROUPS").arg(stream);
    let mut conn = broker.conn().await?;
    let reply: Result<(Value, Value), RedisError> = pipe.query_async(&mut conn).await;
    let (info, groups) = match reply {
        Ok(reply) => reply,
        // Alone or inside a pipeline failure, "no such key" means no stream.
        Err(e) if e.to_string().contains("no such key") => return Ok(None),
        Err(e) => return Err(scope.error(&e)),
    };
    let row = codec::stream(&info);
    let groups = codec::groups(&groups).map_err(|e| scope.bad_reply(e))?;
    Ok(Some(StreamInfo {
        name: stream.to_owned(),
        length: row.length,
        first_id: row.first_id,
        last_id: row.last_id,
        groups: groups.into_iter().map(|g| g.name).collect(),
    }))
}

pub(super) async fn trim(broker: &RedisBroker, stream: &str, trim: Trim) -> BrokerResult<u64> {
    check_names(stream, None, None)?;
    let scope = broker.scope(stream, None);
    let mut cmd = redis::cmd("XTRIM");
    cmd.arg(stream);
    match trim {
        Trim::MaxLen(n) => cmd.arg("MAXLEN").arg(n),
        Trim::MinId(id) => cmd.arg("MINID").arg(id.to_string()),
    };
    broker.query(&cmd, scope).await
}
