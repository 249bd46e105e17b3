//! `backoff(..)` on the memory broker, on a paused clock: the deliveries of
//! one failing entry land at the policy's times, within the jitter bound,
//! on `new` and `claiming` subscriptions; an explicit `retry_after(d)`
//! still wins; the delay follows the broker's delivery count across a
//! restart (`docs/semantics.md`, Outcomes).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Mutex;

use ruststream::prelude::*;
use ruststream::{BackoffPolicy, Subscriber};
use support::{
    Job, advance, next_delivery_at, publish_jobs, settle, start_fresh, start_one, until,
};
use tokio::time::Instant;

const MIN_IDLE: Duration = Duration::from_secs(30);
const MS: Duration = Duration::from_millis(1);

/// One delivery as a handler saw it: the entry, its delivery count, when.
type Log = Mutex<Vec<(EntryId, u32, Instant)>>;

fn record(log: &Log, ctx: &Context<'_>) -> u32 {
    let count = ctx.delivery_count();
    log.lock().unwrap().push((ctx.id(), count, Instant::now()));
    count
}

fn seen(log: &Log) -> Vec<(EntryId, u32, Instant)> {
    log.lock().unwrap().clone()
}

/// `exponential(100ms, 2.0, max = 1s), jitter`, as the subscribers below
/// write it.
fn exponential() -> BackoffPolicy {
    BackoffPolicy::exponential(100 * MS, 2.0, Duration::from_secs(1))
        .unwrap()
        .with_jitter()
}

/// Follows one failing entry through `retries` retries: each next delivery
/// comes exactly `policy.delay(id, count)` after the one before (not a
/// millisecond sooner), within `[ceiling/2, ceiling]` of the curve.
async fn deliveries_follow(log: &Log, policy: BackoffPolicy, retries: u32) {
    until("first delivery", async || seen(log).len() == 1).await;
    for count in 0..retries {
        // The retry reaches the broker before the clock moves.
        settle().await;
        let (id, seen_count, at) = seen(log)[count as usize];
        assert_eq!(seen_count, count, "delivery counts go up by one");
        let delay = policy.delay(id, count);
        let ceiling = policy.ceiling(count);
        assert!(
            delay >= ceiling / 2 && delay <= ceiling,
            "delivery {count}: {delay:?} outside [{:?}, {ceiling:?}]",
            ceiling / 2
        );
        next_delivery_at(
            delay,
            count as usize + 1,
            || seen(log).len(),
            &format!("delivery {count}: not before {delay:?}"),
        )
        .await;
        let (next_id, _, next_at) = seen(log)[count as usize + 1];
        assert_eq!(next_id, id, "a delayed retry keeps the entry's id");
        assert_eq!(next_at - at, delay, "delivery {count}: after {delay:?}");
    }
}

/// Starts `subscriber`, declared with the `exponential()` backoff, on a
/// fresh broker, publishes one job to `stream`, and follows the entry
/// through six retries (`deliveries_follow`); the broker and the app.
async fn backs_off_exponentially(
    subscriber: impl Subscriber,
    stream: &str,
    log: &Log,
) -> (MemoryBroker, ruststream::Running) {
    assert_eq!(subscriber.subscription().backoff, Some(exponential()));
    let (broker, app) = start_fresh(subscriber).await;
    publish_jobs(&broker, stream, [1]).await;
    deliveries_follow(log, exponential(), 6).await;
    (broker, app)
}

// ---- a new subscription: errors and panics back off ---------------------

static NEW: Log = Mutex::new(Vec::new());

#[subscriber(
    RedisStream::new("backoff-new").group("g"),
    backoff(exponential(100ms, 2.0, max = 1s), jitter)
)]
async fn failing_new(_job: &Job, ctx: &mut Context<'_>) -> Result<(), String> {
    if record(&NEW, ctx).is_multiple_of(2) {
        return Err("the ledger is down".to_owned());
    }
    panic!("the ledger fell over");
}

#[tokio::test(start_paused = true)]
async fn backoff_on_a_new_subscription_delays_each_retry_by_the_delivery_count() {
    // 100, 200, 400, 800 ms ceilings, then capped at 1 s.
    let (broker, app) = backs_off_exponentially(failing_new, "backoff-new", &NEW).await;
    let info = broker.stream_info("backoff-new").await.unwrap().unwrap();
    assert_eq!(info.length, 1, "a delayed retry appends no copy");
    app.shutdown().await;
}

// ---- a claiming subscription: retry() backs off, well before min_idle ---------------------------

static CLAIMING: Log = Mutex::new(Vec::new());

#[subscriber(
    RedisStream::claiming("backoff-claiming", MIN_IDLE).group("g"),
    backoff(exponential(100ms, 2.0, max = 1s), jitter)
)]
async fn failing_claiming(_job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    record(&CLAIMING, ctx);
    HandlerOutcome::retry()
}

#[tokio::test(start_paused = true)]
async fn backoff_on_a_claiming_subscription_replaces_the_min_idle_wait() {
    let (_broker, app) =
        backs_off_exponentially(failing_claiming, "backoff-claiming", &CLAIMING).await;
    app.shutdown().await;
}

// ---- an explicit retry_after wins; fixed without jitter ---------------------------

static EXPLICIT: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("backoff-explicit").group("g"), backoff(fixed(1s)))]
async fn explicit(_job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    match record(&EXPLICIT, ctx) {
        0 => HandlerOutcome::retry_after(Duration::from_secs(5)),
        1 => HandlerOutcome::retry(),
        _ => HandlerOutcome::ack(),
    }
}

#[tokio::test(start_paused = true)]
async fn an_explicit_retry_after_wins_over_the_backoff() {
    let (broker, app) = start_fresh(explicit).await;
    publish_jobs(&broker, "backoff-explicit", [1]).await;
    until("first delivery", async || seen(&EXPLICIT).len() == 1).await;
    settle().await;
    advance(Duration::from_secs(1), 1).await;
    assert_eq!(
        seen(&EXPLICIT).len(),
        1,
        "retry_after(5s), not the 1 s backoff"
    );
    tokio::time::advance(Duration::from_secs(4)).await;
    until("second delivery", async || seen(&EXPLICIT).len() == 2).await;
    settle().await;
    // retry() now: the fixed 1 s, no jitter.
    next_delivery_at(
        Duration::from_secs(1),
        2,
        || seen(&EXPLICIT).len(),
        "the fixed 1 s",
    )
    .await;
    let log = seen(&EXPLICIT);
    assert_eq!(log[1].2 - log[0].2, Duration::from_secs(5));
    assert_eq!(log[2].2 - log[1].2, Duration::from_secs(1));
    app.shutdown().await;
}

// ---- the delay follows the broker's count across a restart ----------------------

static RESTART: Log = Mutex::new(Vec::new());

#[subscriber(
    RedisStream::new("backoff-restart").group("g"),
    backoff(exponential(100ms, 2.0, max = 1s), jitter)
)]
async fn restarted(_job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    record(&RESTART, ctx);
    HandlerOutcome::retry()
}

#[tokio::test(start_paused = true)]
async fn the_delay_follows_the_delivery_count_across_a_restart() {
    let policy = exponential();
    let (broker, first) = start_fresh(restarted).await;
    publish_jobs(&broker, "backoff-restart", [1]).await;
    until("first delivery", async || seen(&RESTART).len() == 1).await;
    first.shutdown().await;

    // Another process (another consumer name) takes over: its delays go
    // on from the entry's count, not from a fresh start.
    let second = start_one(&broker, restarted).await;
    let (id, _, at) = seen(&RESTART)[0];
    let elapsed = Instant::now() - at;
    tokio::time::advance(policy.delay(id, 0).saturating_sub(elapsed)).await;
    until("second delivery", async || seen(&RESTART).len() == 2).await;
    settle().await;
    let (_, count, at) = seen(&RESTART)[1];
    assert_eq!(count, 1);
    let delay = policy.delay(id, 1);
    assert!(delay >= 100 * MS && delay <= 200 * MS, "{delay:?}");
    next_delivery_at(
        delay,
        2,
        || seen(&RESTART).len(),
        "not before the count-1 delay",
    )
    .await;
    assert_eq!(seen(&RESTART)[2].2 - at, delay);
    second.shutdown().await;
}
