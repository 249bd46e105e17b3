//! Settling entries: ack, retry, dead letter, redrive and discard; and
//! extending a claim, which keeps entries pending. Each is one script call
//! over all its ids, applied whole or not at all (see the crate docs,
//! *Settling is all or nothing*).

use std::future::Future;

use crate::broker::Conn;
use crate::codec;
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
    call: impl FnOnce(&'a Scripts, Conn) -> F,
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

/// Acks `ids`. The common case, every id pending, is one plain `XACK`:
/// the ack script costs the server about a quarter more per entry read and
/// acked (1.23 against 0.97 microseconds of its CPU, `BENCHMARKS.md`).
/// Only when some id was not pending does the ack script look for the rest
/// among the entries owed again, which nobody holds. Each entry's ack is
/// atomic either way; see the crate docs, *Settling is all or nothing*.
pub(super) async fn ack(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
) -> BrokerResult<u64> {
    check_names(stream, Some(group), None)?;
    if ids.is_empty() {
        return Ok(0);
    }
    let mut xack = redis::cmd("XACK");
    xack.arg(stream).arg(group);
    codec::push_ids(&mut xack, ids);
    let pending: u64 = broker
        .query(&xack, broker.scope(stream, Some(group)))
        .await?;
    if usize::try_from(pending).is_ok_and(|n| n >= ids.len()) {
        return Ok(pending);
    }
    // XACK finds each id at most once, so the ones it acked count 0 in
    // the script's own XACK and are not counted twice.
    let owed = settle(broker, stream, group, ids, |s, conn| {
        s.ack(conn, stream, group, ids)
    });
    Ok(pending + owed.await?.unwrap_or(0))
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

/// Dead-letters `ids` with the delivery counts the group has.
pub(super) async fn dead_letter(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    ids: &[EntryId],
    reason: &str,
) -> BrokerResult<u64> {
    dead_letter_counted(broker, (stream, group), ids, reason, None).await
}

/// Dead-letters `ids`; `times` is the delivery count to record in place of
/// the one the group has (a read passes the count it saw before its claim
/// bumped it).
pub(super) async fn dead_letter_counted(
    broker: &RedisBroker,
    (stream, group): (&str, &str),
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

/// Refreshes `consumer`'s claim on those of `ids` it holds (see
/// `lua/extend_claim.lua`).
pub(super) async fn extend_claim(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    consumer: &str,
    ids: &[EntryId],
) -> BrokerResult<u64> {
    check_names(stream, Some(group), Some(consumer))?;
    let extended = settle(broker, stream, group, ids, |s, conn| {
        s.extend_claim(conn, stream, group, consumer, ids)
    });
    Ok(extended.await?.unwrap_or(0))
}

/// Raises the delivery counts of those of `counts` that `consumer` holds
/// (see `lua/count_deliveries.lua`).
pub(super) async fn count_deliveries(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    consumer: &str,
    counts: &[(EntryId, u32)],
) -> BrokerResult<u64> {
    check_names(stream, Some(group), Some(consumer))?;
    if counts.is_empty() {
        return Ok(0);
    }
    let scope = broker.scope(stream, Some(group));
    broker
        .script(scope, |s, conn| {
            s.count_deliveries(conn, stream, group, consumer, counts)
        })
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use ruststream_core::{Broker, Message, ReadMode, ReadRequest, Trim};

    use super::*;

    /// `XPENDING stream group - + 10000` as (id, consumer, idle ms, count).
    async fn xpending(stream: &str, group: &str) -> Vec<(String, String, i64, i64)> {
        let mut conn = crate::testing::connection().await;
        let rows: Vec<(String, String, i64, i64)> = redis::cmd("XPENDING")
            .arg(stream)
            .arg(group)
            .arg("-")
            .arg("+")
            .arg(10_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        rows
    }

    /// The server's own view of an extended claim: `JUSTID` left the
    /// delivery count as it was and the idle time started again; entries of
    /// another consumer, owed ones and trimmed ones were not touched.
    #[tokio::test]
    async fn extending_a_claim_resets_idle_on_the_server_and_keeps_the_count() {
        let (broker, s) = crate::testing::stream_with_group("extend").await;
        let sent = broker
            .publish_batch(&s, (0..4).map(|i| Message::new(vec![i])).collect())
            .await
            .unwrap();
        let read = |consumer, count| ReadRequest::new(&s, "g", consumer, ReadMode::New, count);
        broker.read(read("a", 3)).await.unwrap();
        broker.read(read("b", 1)).await.unwrap();
        broker
            .retry(&s, "g", &[sent[2]], Retry::After(Duration::from_secs(60)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;

        let refreshed = broker
            .extend_claim(&s, "g", "a", &[sent[0], sent[0], sent[2], sent[3]])
            .await
            .unwrap();
        assert_eq!(refreshed, 1, "only a's own held entry, once");
        let rows = xpending(&s, "g").await;
        let row = |id: EntryId| rows.iter().find(|r| r.0 == id.to_string()).unwrap();
        let (_, owner, idle, count) = row(sent[0]);
        assert_eq!(
            (owner.as_str(), *count),
            ("a", 1),
            "JUSTID counts no delivery"
        );
        assert!(*idle < 50, "idle restarted: {idle} ms");
        assert!(row(sent[1]).2 >= 60, "a's entry not named stays idle");
        assert!(row(sent[3]).2 >= 60, "b's entry is not taken or refreshed");
        assert_eq!(row(sent[3]).1, "b");
        assert_eq!(
            rows.len(),
            3,
            "the owed entry is still out of the pending list"
        );

        // An entry trimmed while pending is passed over, not dropped from
        // the pending list (XCLAIM would drop it).
        broker.trim(&s, Trim::MaxLen(0)).await.unwrap();
        assert_eq!(broker.extend_claim(&s, "g", "a", &sent).await.unwrap(), 0);
        assert_eq!(xpending(&s, "g").await.len(), 3);

        let err = broker
            .extend_claim(&s, "ghost", "a", &sent)
            .await
            .unwrap_err();
        assert!(matches!(err, BrokerError::NoGroup { .. }), "{err:?}");
        let err = broker
            .extend_claim(&s, "g", "a\nb", &sent)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("consumer name"), "{err}");
        crate::testing::delete(&s).await;
    }

    /// More ids than one `XCLAIM` takes (the script claims in chunks).
    #[tokio::test]
    async fn many_ids_are_extended_in_chunks() {
        let (broker, s) = crate::testing::stream_with_group("extend-many").await;
        let n = 2_500;
        let sent = broker
            .publish_batch(&s, (0..n).map(|_| Message::new(b"x".to_vec())).collect())
            .await
            .unwrap();
        let read = ReadRequest::new(&s, "g", "a", ReadMode::New, n);
        assert_eq!(broker.read(read).await.unwrap().deliveries.len(), n);
        // Idle for the whole sleep before the extension; after it, for no
        // longer than the extension and the listing took (which a loaded
        // machine can stretch, so the sleep leaves a wide margin).
        let slept = Duration::from_millis(250);
        tokio::time::sleep(slept).await;
        let extended_at = std::time::Instant::now();
        assert_eq!(
            broker.extend_claim(&s, "g", "a", &sent).await.unwrap(),
            n as u64
        );
        let rows = xpending(&s, "g").await;
        let since = i64::try_from(extended_at.elapsed().as_millis()).unwrap_or(i64::MAX);
        assert_eq!(rows.len(), n);
        assert!(
            rows.iter()
                .all(|r| r.2 <= since.saturating_add(1) && r.2 < 250 && r.3 == 1),
            "idle at most {since} ms expected: {:?}",
            &rows[..3]
        );
        crate::testing::delete(&s).await;
    }
}
