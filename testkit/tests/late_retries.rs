//! Decisions that reach the broker late: a delayed retry decided before
//! the subscription lost the broker for longer than `min_idle` must not,
//! once made, take its entry from the consumer that legitimately claimed
//! it meanwhile (`docs/semantics.md`, Claims).

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::{AppInfo, HandlerOutcome, RustStream, Stream, Subscription};
use ruststream_core::{Broker, Message};
use ruststream_memory::MemoryBroker;
use ruststream_testkit::HandWritten;
use ruststream_testkit::faults::{CallKind, FaultyBroker};
use support::recorder::{Record, Recorder, fresh, start_one};

const MIN_IDLE: Duration = Duration::from_millis(300);

/// `x` asks for `retry_after(0)` on its first run; every other run acks.
fn retry_x_once(text: &str, count: u32) -> HandlerOutcome {
    if text == "x" && count == 0 {
        HandlerOutcome::retry_after(Duration::ZERO)
    } else {
        HandlerOutcome::ack()
    }
}

/// `who`'s claiming subscription of `s` (workers 2, prefetch 2): A's runs
/// take no time, B's 5 s.
fn subscriber(
    s: &'static str,
    who: &'static str,
    t0: tokio::time::Instant,
    record: &Record,
) -> HandWritten<Recorder> {
    let takes: fn(&str) -> Duration = if who == "A" {
        |_| Duration::ZERO
    } else {
        |_| Duration::from_secs(5)
    };
    HandWritten::new(
        who,
        Subscription::new(Stream::claiming(s, MIN_IDLE).group("g"))
            .workers(2)
            .prefetch(2),
        Recorder {
            who,
            t0,
            takes,
            outcome: retry_x_once,
            record: record.clone(),
        },
    )
}

/// After 100 ms, A's acks (through `faults`) are refused for 2 s; a and x
/// are published to `s` in one batch, and once A has read them (1 ms) A is
/// cut off from the broker altogether for 1 s.
async fn a_reads_a_and_x_then_is_cut_off(inner: &MemoryBroker, faults: &FaultyBroker, s: &str) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    faults.outage(&[CallKind::Ack], Duration::from_secs(2));
    let batch = vec![Message::new(b"a".to_vec()), Message::new(b"x".to_vec())];
    inner.publish_batch(s, batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    faults.outage(&CallKind::ALL, Duration::from_secs(1));
}

/// A delayed retry whose first call is made after its entry was handed
/// out again leaves it to its new holder. Process A (claiming, workers 2,
/// prefetch 2) runs a (acked) and x (`retry_after(0)` on its first run) in
/// one wake: its settle batch is [ack a, retry x]. Acks from A are refused
/// for 2 s, and A is cut off from the broker altogether for the first 1 s,
/// so its keep-alive cannot refresh a and x: process B (claiming, same
/// group) takes both once idle and runs them (5 s each). When A's ack
/// lands, the retry of x would take x from under B (and A's next read run
/// it while B still does): a call of the batch failed, so the retry is made
/// only for entries still pending under A at the count it decided at.
#[tokio::test(start_paused = true)]
async fn a_first_retry_attempt_makes_owed_an_entry_another_consumer_runs() {
    let s = "late-first-retry";
    let (inner, record, t0) = fresh();
    let mut apps = Vec::new();
    for who in ["A", "B"] {
        let faults = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 7));
        let broker: Arc<dyn Broker> = faults.clone();
        let app = start_one(who, broker, subscriber(s, who, t0, &record)).await;
        if who == "A" {
            // A alone reads a and x.
            a_reads_a_and_x_then_is_cut_off(&inner, &faults, s).await;
        }
        apps.push(app);
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    for app in apps {
        app.shutdown().await;
    }
    record.assert_no_overlaps("run twice at once");
}

/// The same in one process: the same two subscriptions in one app (one
/// `with_shared_broker` per subscription, so each has a broker handle of
/// its own, A's cut off as above). "An entry is not run twice at once by
/// one process."
#[tokio::test(start_paused = true)]
async fn a_first_retry_attempt_runs_an_entry_twice_at_once_in_one_process() {
    let s = "late-first-retry-one";
    let (inner, record, t0) = fresh();
    let faults_a = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 7));
    let faults_b = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 8));
    let (a, b) = (
        subscriber(s, "A", t0, &record),
        subscriber(s, "B", t0, &record),
    );
    let (broker_a, broker_b): (Arc<dyn Broker>, Arc<dyn Broker>) =
        (faults_a.clone(), faults_b.clone());
    // B cannot read until A has read a and x.
    faults_b.outage(&[CallKind::Read], Duration::from_millis(150));
    let app = RustStream::new(AppInfo::new("late", "0"))
        .with_shared_broker(broker_a, |s| {
            s.include(a);
        })
        .with_shared_broker(broker_b, |s| {
            s.include(b);
        })
        .start()
        .await
        .unwrap();
    a_reads_a_and_x_then_is_cut_off(&inner, &faults_a, s).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    app.shutdown().await;
    record.assert_no_overlaps("run twice at once in one process");
}
