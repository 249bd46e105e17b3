//! Settling entries: ack, retry, dead letter, redrive and discard. Each is
//! one script call over all its ids, applied whole or not at all (see the
//! crate docs, *Settling is all or nothing*).

use std::future::Future;

use redis::aio::ConnectionManager;
use ruststream_core::{BrokerError, BrokerResult, EntryId, Retry};

use super::{RedisBroker, check_names};
use crate::scripts::{Redriven, ScriptError, Scripts};

/// Runs `call`, one settle script over `ids`, once the names are checked:
/// `None` when there are no ids, and so nothing to send.
async fn settle<'a, T, F>(
    broker: &'a RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
    call: impl FnOnce(&'a Scripts, ConnectionManager) -> F,
) -> BrokerResult<Option<T>>
where
    F: Future<Output = Result<T, ScriptError>>,
{
    check_names(stream, Some(group), None)?;
    if ids.is_empty() {
        return Ok(None);
    }
    let scope = broker.scope(stream, Some(group));
    broker.script(scope, call).await.map(Some)
}

pub(super) async fn ack(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
) -> BrokerResult<u64> {
    let acked = settle(broker, stream, group, ids, |s, conn| {
        s.ack(conn, stream, group, ids)
    });
    Ok(acked.await?.unwrap_or(0))
}

pub(super) async fn retry(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
    how: Retry,
) -> BrokerResult<u64> {
    let retried = settle(broker, stream, group, ids, |s, conn| {
        s.retry(conn, stream, group, how, ids)
    });
    let Some(retried) = retried.await? else {
        return Ok(0);
    };
    if !retried.dropped.is_empty() {
        tracing::warn!(
            stream,
            group,
            ids = ?retried.dropped,
            "retry with copy: entries no longer in the stream (trimmed while pending): acked away"
        );
    }
    Ok(retried.count)
}

/// Dead-letters `ids`; `times` is the delivery count to record in place of
/// the one the group has (a read passes the count it saw before its claim
/// bumped it).
pub(super) async fn dead_letter(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
    reason: &str,
    times: Option<u32>,
) -> BrokerResult<u64> {
    let buried = settle(broker, stream, group, ids, |s, conn| {
        s.dead_letter(conn, stream, group, reason, times, ids)
    });
    Ok(buried.await?.unwrap_or(0))
}

pub(super) async fn redrive(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
) -> BrokerResult<u64> {
    let redriven = settle(broker, stream, group, ids, |s, conn| {
        s.redrive(conn, stream, group, ids)
    });
    match redriven.await? {
        None => Ok(0),
        Some(Redriven::Count(n)) => Ok(n),
        Some(Redriven::Lost(lost)) => Err(BrokerError::InvalidArgument(format!(
            "cannot redrive dead letters {} of group {group:?} on stream {stream:?}: their entries were trimmed \
             from the stream before they were dead-lettered, so no copy of their fields was kept; \
             nothing was redriven (discard them instead)",
            lost.join(", ")
        ))),
    }
}

pub(super) async fn discard(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
) -> BrokerResult<u64> {
    let discarded = settle(broker, stream, group, ids, |s, conn| {
        s.discard(conn, stream, group, ids)
    });
    Ok(discarded.await?.unwrap_or(0))
}
