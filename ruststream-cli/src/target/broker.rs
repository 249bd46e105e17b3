//! The calls that take more than one broker call, on a [`Broker`] the tool
//! opened itself (Redis, a file log). They answer as the admin endpoint's
//! routes do.

use ruststream::{Broker, EntryId, Message};

use super::{Outgoing, Pruning, published_part_way};
use crate::error::{CliError, CliResult};
use crate::model::{ConsumerSummary, GroupSummary, PruneResult, StreamSummary};

/// Most messages one publish call carries.
const PUBLISH_BATCH: usize = 1_000;

/// Every stream with its summary.
pub(super) async fn streams(broker: &dyn Broker) -> CliResult<Vec<StreamSummary>> {
    let mut out = Vec::new();
    for name in broker.streams().await? {
        // A stream deleted since the listing is left out.
        if let Some(info) = broker.stream_info(&name).await? {
            out.push(info.into());
        }
    }
    Ok(out)
}

/// One stream's summary.
pub(super) async fn stream(broker: &dyn Broker, stream: &str) -> CliResult<StreamSummary> {
    match broker.stream_info(stream).await? {
        Some(info) => Ok(info.into()),
        None => Err(CliError::NotFound(format!("no stream {stream:?}"))),
    }
}

/// A group's summary and its consumers.
pub(super) async fn group(
    broker: &dyn Broker,
    stream: &str,
    group: &str,
) -> CliResult<GroupSummary> {
    let info = broker.group_info(stream, group).await?;
    let consumers = broker.consumers(stream, group).await?;
    Ok(GroupSummary::new(info, consumers))
}

/// Publishes in batches, in order; a batch that fails after others were
/// published says what was ([`published_part_way`]).
pub(super) async fn publish(
    broker: &dyn Broker,
    stream: &str,
    messages: Vec<Outgoing>,
) -> CliResult<Vec<EntryId>> {
    let total = messages.len();
    let mut ids = Vec::with_capacity(total);
    let mut messages = messages.into_iter().peekable();
    while messages.peek().is_some() {
        let batch: Vec<Message> = messages
            .by_ref()
            .take(PUBLISH_BATCH)
            .map(|m| {
                m.headers
                    .into_iter()
                    .fold(Message::new(m.payload.into_bytes()), |msg, (k, v)| {
                        msg.with_header(k, v)
                    })
            })
            .collect();
        let failed = ids.len()..ids.len() + batch.len();
        match broker.publish_batch(stream, batch).await {
            Ok(published) => ids.extend(published),
            Err(error) => {
                return Err(published_part_way(error.into(), &ids, total, failed));
            }
        }
    }
    Ok(ids)
}

/// Deletes the consumers idle at least `how.idle` that hold nothing, each
/// checked again by the broker as it deletes it; keeps (and lists) those
/// that hold entries.
pub(super) async fn prune(
    broker: &dyn Broker,
    stream: &str,
    group: &str,
    how: Pruning,
) -> CliResult<PruneResult> {
    let Pruning { idle, dry_run } = how;
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    let mut deleted = Vec::new();
    let mut kept_holding = Vec::new();
    for c in broker.consumers(stream, group).await? {
        if c.idle_ms < idle_ms {
            continue;
        }
        if c.pending > 0 {
            kept_holding.push(ConsumerSummary::from(c));
            continue;
        }
        if dry_run || broker.delete_consumer(stream, group, &c.name, idle).await? {
            deleted.push(c.name);
        }
    }
    Ok(PruneResult {
        dry_run,
        deleted,
        kept_holding,
    })
}
