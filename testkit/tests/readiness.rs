//! Readiness conditions on the paused clock: each one makes the app not
//! ready with its reason, and readiness returns once it clears. Reads fail
//! through an injected outage; a handler runs past its deadline; a poison
//! entry keeps coming back.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{ReadinessOptions, Running};
use ruststream_testkit::{CallKind, FaultyBroker};

#[derive(Debug, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "ready-jobs")]
struct Job {
    slow: bool,
    poison: bool,
}

#[subscriber(
    RedisStream::new("ready-jobs").group("g"),
    max_deliveries(6),
    backoff(fixed(10s))
)]
async fn work(job: &Job) -> Result<(), String> {
    if job.slow {
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
    if job.poison {
        return Err("poison".to_owned());
    }
    Ok(())
}

const OPTIONS: ReadinessOptions = ReadinessOptions {
    read_failure_window: Duration::from_secs(30),
    handler_deadline: Duration::from_secs(60),
    poison_deliveries: 3,
    poison_window: Duration::from_secs(300),
};

async fn start(broker: Arc<dyn Broker>) -> Running {
    let app = RustStream::new(AppInfo::new("ready", "0")).readiness(OPTIONS);
    support::start_alone(app, broker, work).await
}

/// The app on a fresh memory broker, with `job` published.
async fn start_with(job: Job) -> Running {
    let app = start(Arc::new(MemoryBroker::new())).await;
    app.publisher().unwrap().publish(&job).await.unwrap();
    app
}

/// Lets the paused clock run for `d`.
async fn pass(d: Duration) {
    tokio::time::sleep(d).await;
}

fn reasons(app: &Running) -> String {
    app.readiness().to_string()
}

/// Asserts that the app is ready, showing its reasons if not.
#[track_caller]
fn assert_ready(app: &Running) {
    assert!(app.readiness().is_ready(), "{}", reasons(app));
}

/// Asserts that the app's readiness report contains `reason`.
#[track_caller]
fn assert_reason(app: &Running, reason: &str) {
    let why = reasons(app);
    assert!(why.contains(reason), "{why}");
}

#[tokio::test(start_paused = true)]
async fn failing_reads_make_the_app_not_ready_past_the_window() {
    let faulty = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 1));
    let app = start(Arc::clone(&faulty) as Arc<dyn Broker>).await;
    pass(Duration::from_secs(1)).await;
    assert_ready(&app);

    faulty.outage(&[CallKind::Read], Duration::from_secs(90));
    pass(Duration::from_secs(20)).await;
    assert!(
        app.readiness().is_ready(),
        "within the window: {}",
        reasons(&app)
    );
    pass(Duration::from_secs(20)).await;
    assert!(!app.readiness().is_ready());
    assert_reason(&app, "`work`: reads have failed for");

    // The outage ends; the next read (after the backoff) succeeds.
    pass(Duration::from_secs(60)).await;
    assert_ready(&app);
    app.shutdown().await;
}

/// A job whose handler runs for ten minutes.
const SLOW: Job = Job {
    slow: true,
    poison: false,
};

/// A job whose handler always fails.
const POISON: Job = Job {
    slow: false,
    poison: true,
};

/// Publishes `job` to the app on a fresh memory broker, then lets the
/// clock pass: the app is ready after `ready` s, not ready with `reason`
/// after `gone` s more, and ready again after `back` s more.
async fn ready_then_not_then_ready(job: Job, ready: u64, (gone, reason): (u64, &str), back: u64) {
    let app = start_with(job).await;
    pass(Duration::from_secs(ready)).await;
    assert_ready(&app);
    pass(Duration::from_secs(gone)).await;
    assert_reason(&app, reason);
    pass(Duration::from_secs(back)).await;
    assert_ready(&app);
    app.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_past_its_deadline_makes_the_app_not_ready_until_it_ends() {
    let reason = "a handler has run for 61 s (deadline 60 s)";
    ready_then_not_then_ready(SLOW, 59, (2, reason), 600).await;
}

#[tokio::test(start_paused = true)]
async fn a_poison_loop_makes_the_app_not_ready_until_the_entry_is_settled() {
    // Deliveries at 0, 10, 20 and 30 s: the fourth is the first past 3.
    // The sixth delivery fails at 50 s; the read at 60 s dead-letters it.
    let reason = "poison loop: 1 entry delivered more than 3 times";
    ready_then_not_then_ready(POISON, 25, (10, reason), 30).await;
}

/// Fails its first five deliveries, then acks: no backoff, so a `new`
/// subscription retries each failure by copying the entry (a new id).
#[subscriber(RedisStream::new("ready-copies").group("g"))]
async fn copied(_job: &Job, ctx: &mut Context<'_>) -> Result<(), String> {
    if ctx.delivery_count() < 5 {
        return Err("not yet".to_owned());
    }
    Ok(())
}

/// A poison loop on a `new` subscription, retried by copy (a new id per
/// retry), clears once the last copy is acked: the earlier copies' ids do
/// not keep the app not ready.
#[tokio::test(start_paused = true)]
async fn a_poison_loop_retried_by_copy_clears_when_the_entry_is_acked() {
    let broker = MemoryBroker::new();
    let app = RustStream::new(AppInfo::new("ready-copies", "0"))
        .readiness(OPTIONS)
        .with_broker(broker.clone(), |b| {
            b.include(copied);
        })
        .start()
        .await
        .unwrap();
    let job = serde_json::to_vec(&serde_json::json!({ "slow": false, "poison": false })).unwrap();
    broker
        .publish("ready-copies", ruststream::Message::new(job))
        .await
        .unwrap();
    pass(Duration::from_secs(5)).await;
    let stats = app.stats().await;
    // Acked after five failed deliveries: nothing is looping any more.
    assert_eq!((stats[0].acked, stats[0].retried), (1, 5), "{stats:?}");
    assert_ready(&app);
    app.shutdown().await;
}

/// Ready needs every subscription to have read successfully once: one
/// whose reads have failed from the start is not ready even while its
/// failures are shorter than the failure window.
#[tokio::test(start_paused = true)]
async fn a_subscription_that_never_read_is_not_ready_while_its_reads_fail() {
    let faulty = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 1));
    faulty.outage(&[CallKind::Read], Duration::from_secs(90));
    let app = start(Arc::clone(&faulty) as Arc<dyn Broker>).await;
    pass(Duration::from_secs(10)).await;
    assert!(app.stats().await[0].delivered == 0);
    assert_reason(&app, "has not read yet");
    app.shutdown().await;
}
