//! A take-back this subscription did not run twice still counted a
//! delivery at the broker: its retries and hand-backs must still be made
//! (not dropped as if another consumer held the entry), so a delay is not
//! cut short, nothing is left waiting out `min_idle` at shutdown, and key
//! order holds for the next consumer. Also: hung claim refreshes do not
//! hold up shutdown, and skipped take-backs leave no in-flight drift
//! (`docs/guarantees.md`, "Under faults").

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::{HandlerOutcome, PARTITION_KEY_HEADER, Running, Stream, Subscription};
use ruststream_core::{Broker, EntryId, Message, PendingEntry};
use ruststream_memory::MemoryBroker;
use ruststream_testkit::faults::{CallKind, FaultyBroker};
use support::recorder::{Record, Recorder, ack, fresh};

const MIN_IDLE: Duration = Duration::from_millis(300);

/// Group `g`'s pending list of `s` (up to 100 entries).
async fn pending(inner: &MemoryBroker, s: &str) -> Vec<PendingEntry> {
    inner
        .pending(s, "g", EntryId::ZERO, 100, None)
        .await
        .unwrap()
}

async fn start(
    inner: &MemoryBroker,
    who: &'static str,
    subscription: Subscription,
    takes: fn(&str) -> Duration,
    outcome: fn(&str, u32) -> HandlerOutcome,
    record: &Record,
    t0: tokio::time::Instant,
) -> (Arc<FaultyBroker>, Running) {
    let faults = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 7));
    let record = record.clone();
    let recorder = Recorder {
        who,
        t0,
        takes,
        outcome,
        record,
    };
    let app = recorder.start_on(faults.clone(), subscription).await;
    (faults, app)
}

/// How long the calls each test makes fail stay failing.
const OUTAGE: Duration = Duration::from_secs(2);

/// The calls that fail for [`OUTAGE`]: claim refreshes, so the
/// subscription's own claiming read takes its entries back (skipped, each
/// counted at the broker); with `ack_fails`, acks too, which makes the
/// settler check every retry against the broker's counts before its first
/// attempt.
fn refreshes_fail(ack_fails: bool) -> &'static [CallKind] {
    if ack_fails {
        &[CallKind::Ack, CallKind::ExtendClaim]
    } else {
        &[CallKind::ExtendClaim]
    }
}

/// `retry_after(delay)` on the first run (count 0) of payload `target`;
/// every other run is acked.
fn first_run_retries_after(
    target: &str,
    delay: Duration,
    text: &str,
    count: u32,
) -> HandlerOutcome {
    if text == target && count == 0 {
        HandlerOutcome::retry_after(delay)
    } else {
        HandlerOutcome::ack()
    }
}

/// x: `retry_after(10 s)` on its first run (count 0), acked after.
fn x_retries_after_10s(text: &str, count: u32) -> HandlerOutcome {
    first_run_retries_after("x", Duration::from_secs(10), text, count)
}

/// Starts A on a claiming subscription of `s` (2 workers, prefetch 8)
/// whose runs of x take 5 s and end as [`x_retries_after_10s`]; 100 ms
/// later `failing` fail for [`OUTAGE`] and a and x are published.
async fn x_retried_through_an_outage(
    s: &'static str,
    failing: &[CallKind],
) -> (MemoryBroker, Record, Running) {
    let (inner, record, t0) = fresh();
    let sub = Subscription::new(Stream::claiming(s, MIN_IDLE).group("g"))
        .workers(2)
        .prefetch(8);
    let takes = |text: &str| {
        if text == "x" {
            Duration::from_secs(5)
        } else {
            Duration::ZERO
        }
    };
    let (faults, app) = start(&inner, "A", sub, takes, x_retries_after_10s, &record, t0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    faults.outage(failing, OUTAGE);
    inner
        .publish_batch(
            s,
            vec![Message::new(b"a".to_vec()), Message::new(b"x".to_vec())],
        )
        .await
        .unwrap();
    (inner, record, app)
}

/// A claiming subscription's own read takes back x while it runs (its
/// claim lapsed while extend_claim failed): skipped, but the broker counted
/// a delivery. An ack failed meanwhile, so x's `retry_after(10 s)` is
/// checked against the broker's count before it is made: the take-back's
/// count is this subscription's own, so the retry is made, and x waits its
/// 10 s (had the retry been dropped, x would have been claimed again after
/// `min_idle`).
#[tokio::test(start_paused = true)]
async fn a_retry_after_decided_before_an_own_take_back_waits_its_delay() {
    early_retry(true).await;
}

/// Control: the same without the failing ack (`troubled` stays false): the
/// retry is made at its first attempt and x waits its 10 s.
#[tokio::test(start_paused = true)]
async fn control_without_a_failed_ack_the_retry_waits_its_delay() {
    early_retry(false).await;
}

async fn early_retry(ack_fails: bool) {
    let s = "counts-early-retry";
    let (_inner, record, app) = x_retried_through_an_outage(s, refreshes_fail(ack_fails)).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    app.shutdown().await;
    let runs: Vec<_> = record.runs().into_iter().filter(|r| r.0 == "x").collect();
    assert!(runs.len() >= 2, "x ran {runs:?}");
    let first_ends = runs[0].3 + Duration::from_secs(5);
    let second = runs[1].3;
    assert!(
        second >= first_ends + Duration::from_secs(10),
        "x asked for retry_after(10s) at {first_ends:?} but ran again at {second:?}: runs {runs:?}"
    );
}

fn keyed(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec()).with_header(PARTITION_KEY_HEADER, "K")
}

/// x1: `retry_after(60 s)` on its first run (held on its by_key lane).
fn x1_held(text: &str, count: u32) -> HandlerOutcome {
    first_run_retries_after("x1", Duration::from_secs(60), text, count)
}

/// A `by_key` lane holds x1 (retry_after 60 s) and queues x2 behind it.
/// An ack fails, and extend_claim fails long enough that the
/// subscription's own claiming read takes x1 and x2 back (skipped; the
/// broker counts a delivery each). At shutdown both are handed back, owed
/// at once: nothing is left waiting out `min_idle` under the stopped
/// consumer, though the take-backs raised their counts.
#[tokio::test(start_paused = true)]
async fn a_hand_back_at_shutdown_is_made_after_an_own_take_back() {
    held_hand_back(true).await;
}

/// Control: the same without the failing ack: both are handed back.
#[tokio::test(start_paused = true)]
async fn control_without_a_failed_ack_the_hand_back_is_made() {
    held_hand_back(false).await;
}

async fn held_hand_back(ack_fails: bool) {
    let s = "counts-held-hand-back";
    let (inner, record, t0) = fresh();
    let sub = Subscription::new(Stream::claiming(s, MIN_IDLE).group("g"))
        .workers(1)
        .prefetch(8)
        .by_key();
    let (faults, app) = start(&inner, "A", sub, |_| Duration::ZERO, x1_held, &record, t0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    faults.outage(refreshes_fail(ack_fails), OUTAGE);
    inner.publish(s, keyed("x1")).await.unwrap();
    inner.publish(s, Message::new(b"a".to_vec())).await.unwrap();
    inner.publish(s, keyed("x2")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before = pending(&inner, s).await;
    app.shutdown().await;
    let after = pending(&inner, s).await;
    let still_claimed: Vec<_> = after
        .iter()
        .filter(|p| p.consumer.is_some())
        .map(|p| (p.id, p.consumer.clone(), p.times_delivered))
        .collect();
    assert!(
        still_claimed.is_empty(),
        "left pending under the stopped consumer (waiting out min_idle) instead of handed back: \
         {still_claimed:?}; pending before shutdown {:?}; runs {:?}",
        before
            .iter()
            .map(|p| (p.id, p.consumer.clone(), p.times_delivered))
            .collect::<Vec<_>>(),
        record.runs()
    );
}

/// The same, with x2 read only after the take-back (its count is the one
/// decided at): at A's shutdown both x1 (taken back, its count raised) and
/// x2 are handed back, owed at once, so B, the next consumer of the group,
/// runs key K in order: x1, then x2. (Had x1's hand-back been dropped, it
/// would have waited out `min_idle` under A, and B run x2 first.)
#[tokio::test(start_paused = true)]
async fn key_order_holds_for_the_next_consumer_after_an_own_take_back() {
    let s = "counts-held-order";
    let (inner, record, t0) = fresh();
    let sub = || {
        Subscription::new(Stream::claiming(s, MIN_IDLE).group("g"))
            .workers(1)
            .prefetch(8)
            .by_key()
    };
    let (faults, app) = start(&inner, "A", sub(), |_| Duration::ZERO, x1_held, &record, t0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    faults.outage(refreshes_fail(true), OUTAGE);
    inner.publish(s, keyed("x1")).await.unwrap();
    inner.publish(s, Message::new(b"a".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    inner.publish(s, keyed("x2")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    app.shutdown().await;
    let (_faults_b, app_b) = start(&inner, "B", sub(), |_| Duration::ZERO, ack, &record, t0).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    app_b.shutdown().await;
    let by_b: Vec<(String, u32, Duration)> = record
        .runs()
        .into_iter()
        .filter(|r| r.2 == "B")
        .map(|r| (r.0, r.1, r.3))
        .collect();
    let texts: Vec<&str> = by_b.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        texts,
        ["x1", "x2"],
        "key K run out of order by the next consumer: {by_b:?}; all runs {:?}",
        record.runs()
    );
}

/// Every claim refresh hangs (an hour): up to 8 stay in flight; shutdown
/// must not wait for them.
#[tokio::test(start_paused = true)]
async fn hung_claim_refreshes_do_not_hold_up_shutdown() {
    use ruststream_testkit::faults::Fault;
    let s = "counts-hung-refresh";
    let (inner, record, t0) = fresh();
    let sub = Subscription::new(Stream::claiming(s, MIN_IDLE).group("g")).workers(2);
    let (faults, app) = start(
        &inner,
        "A",
        sub,
        |_| Duration::from_secs(3),
        ack,
        &record,
        t0,
    )
    .await;
    for nth in 0..200 {
        faults.script(
            CallKind::ExtendClaim,
            nth,
            Fault::Delay(Duration::from_secs(3600)),
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    inner.publish(s, Message::new(b"x".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = tokio::time::Instant::now();
    app.shutdown().await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(60), "shutdown took {took:?}");
    let after = pending(&inner, s).await;
    assert!(
        after.is_empty(),
        "left pending: {after:?}; runs {:?}",
        record.runs()
    );
}

/// After own take-backs (skipped, counted as settled at once) and all
/// entries settled, nothing is left in flight.
#[tokio::test(start_paused = true)]
async fn own_take_backs_leave_no_in_flight_drift() {
    for (i, kinds) in [
        vec![CallKind::ExtendClaim],
        vec![CallKind::Ack, CallKind::ExtendClaim],
        vec![
            CallKind::Read,
            CallKind::Pending,
            CallKind::Ack,
            CallKind::ExtendClaim,
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let s: &'static str = Box::leak(format!("counts-drift-{i}").into_boxed_str());
        let (inner, record, app) = x_retried_through_an_outage(s, &kinds).await;
        tokio::time::sleep(Duration::from_secs(40)).await;
        let pending = pending(&inner, s).await;
        let in_flight = app.in_flight();
        app.shutdown().await;
        assert!(pending.is_empty(), "case {i}: pending {pending:?}");
        assert_eq!(
            in_flight,
            0,
            "case {i}: in flight with nothing pending; runs {:?}",
            record.runs()
        );
    }
}
