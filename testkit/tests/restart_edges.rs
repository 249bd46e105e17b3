//! Restarts and shutdowns: an app stops (gracefully, past its deadline,
//! with settles failing) and a new instance starts under the same consumer
//! name on the same broker. Nothing is lost or stranded, each key's
//! entries run in order, a delay is kept, and a hand-back made again after
//! a lost reply leaves an entry to whoever holds it now
//! (`docs/guarantees.md`).

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::{HandlerOutcome, PARTITION_KEY_HEADER, Running, Stream, Subscription};
use ruststream_core::{Broker, Message, ReadMode, ReadRequest, StreamStart};
use ruststream_memory::MemoryBroker;
use support::recorder::{self, Record, Recorder, Run, ack};

/// Starts an app whose subscriber (consumer `c0`) records into `record`.
async fn start_app(
    broker: Arc<dyn Broker>,
    subscription: Subscription,
    takes: fn(&str) -> Duration,
    outcome: fn(&str, u32) -> HandlerOutcome,
    record: &Record,
    t0: tokio::time::Instant,
) -> Running {
    let record = record.clone();
    let recorder = Recorder {
        who: "c0",
        t0,
        takes,
        outcome,
        record,
    };
    recorder.start_on(broker, subscription).await
}

/// Starts an app on `inner` itself (no faults) whose runs take no time.
async fn start_instant(
    inner: &MemoryBroker,
    subscription: Subscription,
    outcome: fn(&str, u32) -> HandlerOutcome,
    record: &Record,
    t0: tokio::time::Instant,
) -> Running {
    let broker = Arc::new(inner.clone());
    start_app(
        broker,
        subscription,
        |_| Duration::ZERO,
        outcome,
        record,
        t0,
    )
    .await
}

/// The next instance (same consumer name): it acks every entry, each run
/// taking 10 ms.
async fn successor(
    inner: &MemoryBroker,
    subscription: Subscription,
    record: &Record,
    t0: tokio::time::Instant,
) -> Running {
    let takes = |_: &str| Duration::from_millis(10);
    let broker = Arc::new(inner.clone());
    start_app(broker, subscription, takes, ack, record, t0).await
}

/// How long a run of `text` takes where a run of `slow` takes `long` and
/// every other run 10 ms.
fn slow_one(text: &str, slow: &str, long: Duration) -> Duration {
    if text == slow {
        long
    } else {
        Duration::from_millis(10)
    }
}

/// A memory broker with group `g` on `s` from the beginning, an empty run
/// record, and the instant runs are timed from.
async fn fresh_group(s: &str) -> (MemoryBroker, Record, tokio::time::Instant) {
    let (inner, record, t0) = recorder::fresh();
    inner
        .ensure_group(s, "g", StreamStart::Beginning)
        .await
        .unwrap();
    (inner, record, t0)
}

/// Consumer `c0` of group `g` on `s`, `workers(n, by_key)`.
fn keyed_c0(s: &str, n: usize) -> Subscription {
    Subscription::new(Stream::new(s).group("g").consumer("c0"))
        .workers(n)
        .by_key()
}

/// Consumer `c0` of group `g` on `s`, a claiming read (`min_idle`).
fn claiming_c0(s: &str, min_idle: Duration) -> Subscription {
    Subscription::new(Stream::claiming(s, min_idle).group("g").consumer("c0"))
}

/// Fails unless group `g` of `s` has nothing pending.
async fn nothing_pending(inner: &MemoryBroker, s: &str) {
    let info = inner.group_info(s, "g").await.unwrap();
    assert_eq!(info.pending, 0, "{info:?}");
}

fn msg(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec())
}

fn keyed(text: &str, key: &str) -> Message {
    Message::new(text.as_bytes().to_vec()).with_header(PARTITION_KEY_HEADER, key)
}

/// Entry `n` of four keys taken in turn: `k{n % 4}-{n}`, key `k{n % 4}`.
fn round_robin(n: u32) -> Message {
    let key = format!("k{}", n % 4);
    keyed(&format!("{key}-{n}"), &key)
}

/// Per key, the order of the first runs of each entry (by its number).
fn check_key_order(runs: &[Run]) -> Result<(), String> {
    let mut last: std::collections::HashMap<String, u32> = Default::default();
    for (text, _, _, _) in runs {
        let (key, n) = text.split_once('-').unwrap();
        let n: u32 = n.parse().unwrap();
        if let Some(prev) = last.get(key)
            && *prev > n
        {
            return Err(format!("key {key}: {n} ran after {prev}"));
        }
        last.insert(key.to_owned(), n);
    }
    Ok(())
}

/// A predecessor (consumer c0) read 40 keyed entries 20 s ago and died;
/// more entries of the same keys are published while the new instance
/// pages through its own pending list (prefetch 8 < 40).
#[tokio::test(start_paused = true)]
async fn recovery_paging_keeps_key_order_with_a_small_prefetch() {
    let s = "restart-paging";
    let (inner, record, _) = fresh_group(s).await;
    for n in 0..40u32 {
        inner.publish(s, round_robin(n)).await.unwrap();
    }
    inner
        .read(ReadRequest::new(s, "g", "c0", ReadMode::New, 40))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let t0 = tokio::time::Instant::now();
    let subscription = keyed_c0(s, 2).prefetch(8);
    let app = successor(&inner, subscription, &record, t0).await;
    for n in 40..80u32 {
        inner.publish(s, round_robin(n)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    app.shutdown().await;
    let runs = record.runs();
    assert_eq!(runs.len(), 80, "{runs:?}");
    check_key_order(&runs).unwrap();
    nothing_pending(&inner, s).await;
}

/// Graceful shutdown with a `by_key` lane running past the deadline, its
/// key's later entries queued behind it and another key held after a
/// retry_after: the next instance (same name) runs every key in id order,
/// each entry once more than it ran.
#[tokio::test(start_paused = true)]
async fn by_key_order_holds_across_a_shutdown_past_the_deadline() {
    let s = "restart-deadline";
    let (inner, record, t0) = fresh_group(s).await;
    let subscription = || keyed_c0(s, 2);
    let takes = |text: &str| slow_one(text, "a-0", Duration::from_secs(100));
    let outcome = |text: &str, count: u32| match (text, count) {
        ("b-1", 0) => HandlerOutcome::retry_after(Duration::from_secs(5)),
        _ => HandlerOutcome::ack(),
    };
    let first = start_app(
        Arc::new(inner.clone()),
        subscription(),
        takes,
        outcome,
        &record,
        t0,
    )
    .await;
    let mut n = 0;
    for round in 0..4 {
        for key in ["a", "b", "c"] {
            let _ = round;
            inner
                .publish(s, keyed(&format!("{key}-{n}"), key))
                .await
                .unwrap();
            n += 1;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.shutdown_within(Duration::from_secs(1)).await;
    let second = successor(&inner, subscription(), &record, t0).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    second.shutdown().await;
    let runs = record.runs();
    eprintln!("runs {runs:?}");
    check_key_order(
        &runs
            .iter()
            .filter(|r| !(r.0 == "a-0" || r.0 == "b-1"))
            .cloned()
            .collect::<Vec<_>>(),
    )
    .unwrap();
    nothing_pending(&inner, s).await;
}

/// An entry asks for `retry_after(60 s)`; the app is shut down gracefully
/// 1 s later and restarted under the same name: the delay is kept at the
/// broker, and the entry runs again only once it has passed. (A keyed
/// entry held on its `by_key` lane is handed back at once instead, for its
/// key's order: `docs/semantics.md`, Outcomes.)
#[tokio::test(start_paused = true)]
async fn a_retry_after_is_not_run_early_after_a_graceful_restart() {
    let s = "restart-delay";
    let (inner, record, t0) = fresh_group(s).await;
    let subscription = || Subscription::new(Stream::new(s).group("g").consumer("c0")).workers(1);
    let outcome = |_: &str, count: u32| {
        if count == 0 {
            HandlerOutcome::retry_after(Duration::from_secs(60))
        } else {
            HandlerOutcome::ack()
        }
    };
    let first = start_instant(&inner, subscription(), outcome, &record, t0).await;
    inner.publish(s, keyed("k-0", "k")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.shutdown().await;
    let second = start_instant(&inner, subscription(), outcome, &record, t0).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    second.shutdown().await;
    let runs = record.runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        runs[1].3 >= Duration::from_secs(60),
        "retry_after(60 s) ran again {:?} after its first run: {runs:?}",
        runs[1].3 - runs[0].3
    );
}

/// Every settle fails from just before a graceful shutdown (listings
/// work): the entries stay pending under c0. A new instance (same name)
/// starts at once on the healthy broker: nothing is lost or stranded.
#[tokio::test(start_paused = true)]
async fn settles_failing_at_shutdown_strand_nothing_after_a_restart() {
    use ruststream_testkit::faults::{CallKind, FaultyBroker};
    let s = "restart-settles-fail";
    let (inner, record, t0) = fresh_group(s).await;
    let faults = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 3));
    let subscription = || keyed_c0(s, 2);
    let takes = |text: &str| slow_one(text, "k-0", Duration::from_secs(3));
    let first = start_app(faults.clone(), subscription(), takes, ack, &record, t0).await;
    for n in 0..4 {
        inner
            .publish(s, keyed(&format!("k-{n}"), "k"))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    faults.outage(&CallKind::SETTLES, Duration::from_secs(600));
    first.shutdown().await;
    eprintln!(
        "pending after the first: {:?}",
        inner
            .pending(s, "g", ruststream_core::EntryId::ZERO, 100, None)
            .await
            .unwrap()
    );
    let second = successor(&inner, subscription(), &record, t0).await;
    inner.publish(s, keyed("k-4", "k")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let stats = second.stats().await;
    second.shutdown().await;
    let runs = record.runs();
    eprintln!("runs {runs:?}\nstats {stats:?}");
    for n in 0..5 {
        assert!(
            runs.iter().any(|r| r.0 == format!("k-{n}")),
            "k-{n} never ran: {runs:?}"
        );
    }
    let info = inner.group_info(s, "g").await.unwrap();
    assert_eq!(info.pending, 0, "stranded");
}

/// A keyed entry held on its lane after `retry_after` is handed back at a
/// graceful shutdown; the hand-back is applied but its reply is lost. Before
/// the settler makes it again, another live process under the same name
/// (a restarted instance) reads the entry, now owed, and runs it. The
/// hand-back must be made again only "for the entries the consumer's
/// pending list still shows under it at the delivery count it decided at"
/// (`docs/guarantees.md`, "Under faults"): this one was delivered again
/// since, so it is left to its new holder.
#[tokio::test(start_paused = true)]
async fn a_held_entrys_hand_back_made_again_leaves_it_to_its_new_holder() {
    use ruststream_testkit::faults::{CallKind, Fault, FaultyBroker};
    let s = "restart-held-handback";
    let (inner, record, t0) = fresh_group(s).await;
    let faults = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 5));
    // Claiming, so that the last look at shutdown (a `new` subscription's,
    // which hands back everything under the name) plays no part.
    let subscription = claiming_c0(s, Duration::from_secs(600)).workers(1).by_key();
    let outcome = |_: &str, _: u32| HandlerOutcome::retry_after(Duration::from_secs(60));
    let first = start_app(
        faults.clone(),
        subscription,
        |_| Duration::ZERO,
        outcome,
        &record,
        t0,
    )
    .await;
    inner.publish(s, keyed("k-0", "k")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(record.runs().len(), 1);
    // The first hand-back is applied, its reply lost.
    faults.script(CallKind::RetryAfter, 1, Fault::After);
    // The other process under the same name reads all the time.
    let taken = Arc::new(Mutex::new(Vec::new()));
    let twin = {
        let inner = inner.clone();
        let taken = Arc::clone(&taken);
        tokio::spawn(async move {
            loop {
                let batch = inner
                    .read(ReadRequest::new(
                        s,
                        "g",
                        "c0",
                        ReadMode::Claiming {
                            min_idle: Duration::from_secs(600),
                        },
                        10,
                    ))
                    .await
                    .unwrap();
                for d in batch.deliveries {
                    taken.lock().unwrap().push((d.id(), d.delivery_count));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    first.shutdown().await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    twin.abort();
    let taken = taken.lock().unwrap().clone();
    let pending = inner
        .pending(s, "g", ruststream_core::EntryId::ZERO, 10, None)
        .await
        .unwrap();
    eprintln!(
        "injected {:?}\ntaken by the twin {taken:?}\npending {pending:?}",
        faults.injected()
    );
    assert_eq!(taken.len(), 1, "the twin took it once: {taken:?}");
    assert_eq!(
        pending[0].consumer.as_deref(),
        Some("c0"),
        "the entry the twin runs was handed back again (taken from it): {pending:?}"
    );
}

/// A claiming subscription (min_idle 60 s) restarted under the name of a
/// process that crashed a moment ago: its start-up look sees the crashed
/// process's entry fresh, and looks again after the live window (15 s).
/// Meanwhile its own first read, in the very millisecond it started, hands
/// out `x`, whose handler asks for `retry()`: left pending in place, for a
/// claiming read once idle `min_idle`. The second look hands back the
/// crashed process's entry and leaves `x` alone (it is the subscription's
/// own retry), so `x` runs again only after `min_idle`, as `y` (1 ms later)
/// does.
#[tokio::test(start_paused = true)]
async fn a_claiming_retry_made_right_at_start_is_not_handed_back_by_the_twin_look() {
    let s = "restart-claiming-retry";
    let (inner, record, t0) = fresh_group(s).await;
    inner.publish(s, msg("crashed")).await.unwrap();
    let predecessor = ReadRequest::new(s, "g", "c0", ReadMode::New, 1);
    inner.read(predecessor).await.unwrap();
    inner.publish(s, msg("x")).await.unwrap();
    let subscription = claiming_c0(s, Duration::from_secs(60)).workers(1);
    let outcome = |text: &str, count: u32| match (text, count) {
        ("x" | "y", 0) => HandlerOutcome::retry(),
        _ => HandlerOutcome::ack(),
    };
    let app = start_instant(&inner, subscription, outcome, &record, t0).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    inner.publish(s, msg("y")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(100)).await;
    app.shutdown().await;
    let runs = record.runs();
    for text in ["x", "y"] {
        let of: Vec<_> = runs.iter().filter(|r| r.0 == text).collect();
        assert_eq!(of.len(), 2, "{text}: {runs:?}");
        assert!(
            of[1].3 >= Duration::from_secs(60),
            "{text}'s retry() ran again after {:?}, before min_idle (60 s): {runs:?}",
            of[1].3
        );
    }
    assert!(runs.iter().any(|r| r.0 == "crashed"), "{runs:?}");
}

/// A live twin (consumer c0 in another process) keeps three entries fresh;
/// a claiming subscription starts under the same name. It sets
/// `consumer_name_shared` and keeps it while the twin lives (`docs/
/// guarantees.md`, "Shared consumer names"), taking nothing from it.
#[tokio::test(start_paused = true)]
async fn a_claiming_subscription_keeps_seeing_a_live_twin() {
    let s = "restart-claiming-twin";
    let (inner, record, t0) = fresh_group(s).await;
    for n in 0..3 {
        inner.publish(s, msg(&format!("t-{n}"))).await.unwrap();
    }
    let twin = ReadRequest::new(s, "g", "c0", ReadMode::New, 3);
    let twins: Vec<_> = inner
        .read(twin)
        .await
        .unwrap()
        .deliveries
        .iter()
        .map(|d| d.id())
        .collect();
    let refresher = {
        let inner = inner.clone();
        tokio::spawn(async move {
            loop {
                inner.extend_claim(s, "g", "c0", &twins).await.unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };
    let subscription = claiming_c0(s, Duration::from_secs(60));
    let app = start_instant(&inner, subscription, ack, &record, t0).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let early = app.stats().await[0].consumer_name_shared;
    tokio::time::sleep(Duration::from_secs(50)).await;
    let later = app.stats().await[0].consumer_name_shared;
    refresher.abort();
    app.shutdown().await;
    assert!(
        record.runs().is_empty(),
        "the twin's entries were taken: {:?}",
        record.runs()
    );
    assert!(early, "not seen at start");
    assert!(
        later,
        "the live twin is no longer reported after a live window"
    );
}
