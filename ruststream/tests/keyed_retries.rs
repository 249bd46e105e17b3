//! `workers(n, by_key)` through retries, on the memory broker and the
//! paused clock: a retried keyed entry is held on its lane and run again
//! there after its delay, before its key's later entries; each re-run
//! counts as a delivery; `max_deliveries` ends the holding; shutdown hands
//! a held entry back before its key's later entries.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Mutex;
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{ReadMode, ReadRequest, Subscriber};
use support::{
    Job, advance, dead_letters, group_info, publish_jobs, publish_keyed as publish, settle,
    start_fresh, start_two, stream_len,
};

const MIN_IDLE: Duration = Duration::from_secs(30);

/// A fresh memory broker and an app on it running `subscriber` alone,
/// with `jobs` published to `stream` (as `publish_keyed` does) and the app
/// settled.
async fn start_with(
    subscriber: impl Subscriber,
    stream: &str,
    jobs: &[(u64, &str)],
) -> (MemoryBroker, ruststream::Running) {
    let (broker, app) = start_fresh(subscriber).await;
    publish(&broker, stream, jobs).await;
    settle().await;
    (broker, app)
}

/// `(n, delivery count, milliseconds since the test's start)` per run.
type Runs = Mutex<Vec<(u64, u32, u64)>>;

fn runs(log: &Runs) -> Vec<(u64, u32, u64)> {
    log.lock().unwrap().clone()
}

fn record(log: &Runs, n: u64, ctx: &Context<'_>, epoch: &Mutex<Option<tokio::time::Instant>>) {
    let start = *epoch
        .lock()
        .unwrap()
        .get_or_insert_with(tokio::time::Instant::now);
    let ms = start.elapsed().as_millis() as u64;
    log.lock().unwrap().push((n, ctx.delivery_count(), ms));
}

// ---- a retry holds the lane ---------------------------------------------------------

static NEW_RUNS: Runs = Mutex::new(Vec::new());
static NEW_EPOCH: Mutex<Option<tokio::time::Instant>> = Mutex::new(None);

#[subscriber(RedisStream::new("held-new").group("g"), workers(2, by_key))]
async fn held_new(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    record(&NEW_RUNS, job.n, ctx, &NEW_EPOCH);
    match (job.n, ctx.delivery_count()) {
        (1, 0) => HandlerOutcome::retry(),
        (1, 1) => HandlerOutcome::retry_after(Duration::from_secs(5)),
        _ => HandlerOutcome::ack(),
    }
}

/// On a `new` subscription a retried keyed entry runs again at once and a
/// `retry_after(5s)` after 5 s, on its lane, before the key's later
/// entries, counted as deliveries 1 and 2; no copy is appended. Keyless
/// entries keep flowing meanwhile.
#[tokio::test(start_paused = true)]
async fn a_retried_keyed_entry_runs_again_on_its_lane_before_its_keys_later_entries() {
    let (broker, app) = start_with(
        held_new,
        "held-new",
        &[(1, "a"), (2, "a"), (3, "a"), (4, "")],
    )
    .await;
    advance(Duration::from_secs(1), 10).await;
    let runs = runs(&NEW_RUNS);
    let order: Vec<(u64, u32)> = runs
        .iter()
        .filter(|(n, ..)| *n != 4)
        .map(|(n, c, _)| (*n, *c))
        .collect();
    assert_eq!(order, [(1, 0), (1, 1), (1, 2), (2, 0), (3, 0)]);
    let third = runs.iter().find(|(n, c, _)| (*n, *c) == (1, 2)).unwrap();
    assert!(third.2 >= 5_000, "retry_after(5s) ran after 5 s: {runs:?}");
    let keyless = runs.iter().find(|(n, ..)| *n == 4).unwrap();
    assert!(
        keyless.2 < 5_000,
        "keyless entries are not held up: {runs:?}"
    );
    assert_eq!(stream_len(&broker, "held-new").await, 4, "no retry copy");
    assert_eq!(group_info(&broker, "held-new", "g").await.pending, 0);
    app.shutdown().await;
}

// ---- claiming: after min_idle ------------------------------------------------------

static CLAIM_RUNS: Runs = Mutex::new(Vec::new());
static CLAIM_EPOCH: Mutex<Option<tokio::time::Instant>> = Mutex::new(None);

#[subscriber(RedisStream::claiming("held-claim", MIN_IDLE).group("g"), workers(2, by_key))]
async fn held_claim(job: &Job, ctx: &mut Context<'_>) -> Result<(), String> {
    record(&CLAIM_RUNS, job.n, ctx, &CLAIM_EPOCH);
    if job.n == 1 && ctx.delivery_count() == 0 {
        return Err("not yet".into());
    }
    Ok(())
}

/// On a claiming subscription an error (a `retry()`) runs the entry again
/// on its lane once `min_idle` has passed, then its key's later entries.
#[tokio::test(start_paused = true)]
async fn on_a_claiming_subscription_a_retry_runs_again_after_min_idle() {
    let (broker, app) = start_with(held_claim, "held-claim", &[(1, "a"), (2, "a")]).await;
    advance(Duration::from_secs(5), 4).await;
    assert_eq!(runs(&CLAIM_RUNS).len(), 1, "entry 2 waits behind entry 1");
    advance(Duration::from_secs(5), 4).await;
    let runs = runs(&CLAIM_RUNS);
    let order: Vec<(u64, u32)> = runs.iter().map(|(n, c, _)| (*n, *c)).collect();
    assert_eq!(order, [(1, 0), (1, 1), (2, 0)]);
    assert!(runs[1].2 >= MIN_IDLE.as_millis() as u64, "{runs:?}");
    assert_eq!(group_info(&broker, "held-claim", "g").await.pending, 0);
    app.shutdown().await;
}

// ---- max_deliveries ------------------------------------------------------------------

static BOUND_RUNS: Runs = Mutex::new(Vec::new());
static BOUND_EPOCH: Mutex<Option<tokio::time::Instant>> = Mutex::new(None);

#[subscriber(RedisStream::new("held-bound").group("g"), workers(1, by_key), max_deliveries(3))]
async fn held_bound(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    record(&BOUND_RUNS, job.n, ctx, &BOUND_EPOCH);
    if job.n == 1 {
        HandlerOutcome::retry()
    } else {
        HandlerOutcome::ack()
    }
}

/// An entry that keeps failing is run `max_deliveries` times on its lane,
/// then dead-lettered, and its key moves on.
#[tokio::test(start_paused = true)]
async fn at_max_deliveries_a_held_entry_is_dead_lettered_and_its_key_moves_on() {
    let (broker, app) = start_with(held_bound, "held-bound", &[(1, "a"), (2, "a")]).await;
    advance(Duration::from_millis(100), 5).await;
    let order: Vec<(u64, u32)> = runs(&BOUND_RUNS).iter().map(|(n, c, _)| (*n, *c)).collect();
    assert_eq!(order, [(1, 0), (1, 1), (1, 2), (2, 0)]);
    let dead = dead_letters(&broker, "held-bound", "g", 10).await;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].reason.contains("max_deliveries(3)"),
        "{}",
        dead[0].reason
    );
    assert_eq!(group_info(&broker, "held-bound", "g").await.pending, 0);
    app.shutdown().await;
}

// ---- shutdown ---------------------------------------------------------------------------

#[subscriber(RedisStream::new("held-stop").group("g"), workers(1, by_key))]
async fn held_stop(job: &Job) -> HandlerOutcome {
    if job.n == 1 {
        HandlerOutcome::retry_after(Duration::from_secs(60))
    } else {
        HandlerOutcome::ack()
    }
}

/// At shutdown a held entry and the later entries of its key are handed
/// back, owed at once, and another consumer gets them in stream order.
#[tokio::test(start_paused = true)]
async fn shutdown_hands_back_a_held_entry_before_its_keys_later_entries() {
    let (broker, app) = start_with(held_stop, "held-stop", &[(1, "a"), (2, "a"), (3, "a")]).await;
    advance(Duration::from_secs(1), 3).await;
    app.shutdown().await;
    let batch = broker
        .read(ReadRequest::new(
            "held-stop",
            "g",
            "other",
            ReadMode::New,
            10,
        ))
        .await
        .unwrap();
    let jobs: Vec<u64> = batch
        .deliveries
        .iter()
        .map(|d| serde_json::from_slice::<Job>(d.entry.payload()).unwrap().n)
        .collect();
    assert_eq!(jobs, [1, 2, 3], "handed back in stream order");
}

// ---- claims kept fresh -------------------------------------------------------------

static SLOW_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[subscriber(RedisStream::claiming("slow", MIN_IDLE).group("g"), workers(2))]
async fn slow(job: &Job) {
    SLOW_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if job.n == 1 {
        tokio::time::sleep(MIN_IDLE * 3).await;
    }
}

/// A handler that runs for three times `min_idle` beside another claiming
/// consumer is never run twice: the subscription refreshes the claims of
/// the entries it holds well before `min_idle` lapses, and the refresh
/// counts no delivery.
#[tokio::test(start_paused = true)]
async fn a_slow_handler_keeps_its_claim_and_runs_once() {
    let (broker, app) = start_with(slow, "slow", &[(1, ""), (2, "")]).await;
    let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
    for _ in 0..(3 * 30 / 5 + 2) {
        advance(Duration::from_secs(5), 1).await;
        let stolen = broker
            .read(ReadRequest::new("slow", "g", "thief", mode, 10))
            .await
            .unwrap();
        assert!(
            stolen.is_empty(),
            "another consumer claimed {:?}",
            stolen.deliveries
        );
    }
    assert_eq!(SLOW_RUNS.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(group_info(&broker, "slow", "g").await.pending, 0);
    app.shutdown().await;
}

static MIXED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[subscriber(RedisStream::new("mixed").group("g"))]
async fn mixed_new(_job: &Job) {
    MIXED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(12)).await;
}

#[subscriber(RedisStream::reclaim("mixed", Duration::from_secs(3)).group("g"))]
async fn mixed_reclaim(_job: &Job) {
    MIXED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(12)).await;
}

/// A `new` subscription beside a `reclaim` one of the same group, whose
/// `min_idle` (3 s) is shorter than the keep-alive (5 s): the `new` one
/// refreshes its claims often enough that its slow entry is not reclaimed
/// while it runs.
#[tokio::test(start_paused = true)]
async fn a_slow_entry_of_a_new_subscription_is_not_reclaimed_by_its_sibling() {
    let broker = MemoryBroker::new();
    let app = start_two(&broker, mixed_new, mixed_reclaim).await;
    advance(Duration::from_secs(1), 1).await;
    publish_jobs(&broker, "mixed", [1]).await;
    advance(Duration::from_secs(1), 30).await;
    assert_eq!(
        MIXED_RUNS.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "run twice while it ran"
    );
    app.shutdown().await;
}

#[subscriber(RedisStream::new("by-hand").group("g"))]
async fn by_hand(_job: &Job, ctx: &mut Context<'_>) {
    tokio::time::sleep(MIN_IDLE * 2).await;
    assert!(ctx.extend_claim().await.unwrap(), "the entry is held here");
    tokio::time::sleep(MIN_IDLE * 2 / 3).await;
}

/// `ctx.extend_claim()` refreshes the claim by hand: right after it, a
/// claiming reader finds nothing idle, and the delivery count is unchanged.
#[tokio::test(start_paused = true)]
async fn a_handler_can_extend_its_claim_by_hand() {
    let (broker, app) = start_with(by_hand, "by-hand", &[(1, "")]).await;
    advance(MIN_IDLE * 2 + Duration::from_secs(1), 1).await;
    let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
    let stolen = broker
        .read(ReadRequest::new("by-hand", "g", "thief", mode, 10))
        .await
        .unwrap();
    assert!(stolen.is_empty(), "refreshed: not idle");
    let pending = broker
        .pending("by-hand", "g", ruststream::EntryId::ZERO, 10, None)
        .await
        .unwrap();
    assert_eq!(pending[0].times_delivered, 1, "no delivery counted");
    advance(MIN_IDLE, 1).await;
    app.shutdown().await;
}

// ---- a due held entry is not starved by keyless traffic -----------------------------

static STARVE_RUNS: Runs = Mutex::new(Vec::new());
static STARVE_EPOCH: Mutex<Option<tokio::time::Instant>> = Mutex::new(None);

/// Key `k` asks for a retry in 10 ms once; keyless entries take 1 ms each.
#[subscriber(RedisStream::new("held-starve").group("g"), workers(1, by_key))]
async fn held_starve(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    if ctx.partition_key() == Some("k") {
        record(&STARVE_RUNS, job.n, ctx, &STARVE_EPOCH);
        if ctx.delivery_count() == 0 {
            return HandlerOutcome::retry_after(Duration::from_millis(10));
        }
        return HandlerOutcome::ack();
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    HandlerOutcome::ack()
}

/// A held entry that falls due while its lane keeps finding keyless work
/// runs then, not once the keyless backlog is gone.
#[tokio::test(start_paused = true)]
async fn a_held_entry_runs_when_due_though_keyless_entries_keep_its_lane_busy() {
    let mut jobs: Vec<(u64, &str)> = vec![(0, "k")];
    jobs.extend((1..3_000).map(|n| (n, "")));
    let (_broker, app) = start_with(held_starve, "held-starve", &jobs).await;
    advance(Duration::from_millis(1), 1_000).await;
    let runs = runs(&STARVE_RUNS);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        runs[1].2 < 20,
        "retry_after(10ms) ran again after {} ms: {runs:?}",
        runs[1].2
    );
    app.shutdown().await;
}

// ---- other keys are read while one key waits ----------------------------------------

static WAIT_OTHERS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Key `k`'s first entry asks for a retry in an hour; every other entry
/// is acked.
#[subscriber(RedisStream::new("held-window").group("g"), workers(2, by_key))]
async fn held_window(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    if ctx.partition_key() == Some("k") {
        if job.n == 0 && ctx.delivery_count() == 0 {
            return HandlerOutcome::retry_after(Duration::from_secs(3_600));
        }
        return HandlerOutcome::ack();
    }
    WAIT_OTHERS.lock().unwrap().push(job.n);
    HandlerOutcome::ack()
}

/// Entries queued behind a held one wait with it: they do not fill the
/// adaptive read window, so entries of other keys keep being read and run
/// (`docs/semantics.md`, Lanes).
#[tokio::test(start_paused = true)]
async fn entries_queued_behind_a_held_one_do_not_stop_other_keys_being_read() {
    let (broker, app) = start_fresh(held_window).await;
    publish(&broker, "held-window", &[(0, "k")]).await;
    settle().await;
    let queued: Vec<(u64, &str)> = (1..=30).map(|n| (n, "k")).collect();
    publish(&broker, "held-window", &queued).await;
    settle().await;
    let others: Vec<(u64, String)> = (100..110).map(|n| (n, format!("o{n}"))).collect();
    let others: Vec<(u64, &str)> = others.iter().map(|(n, k)| (*n, k.as_str())).collect();
    publish(&broker, "held-window", &others).await;
    advance(Duration::from_secs(1), 60).await;
    // Every entry was read; those of other keys on `k`'s lane wait with it
    // (for the hour), the rest ran.
    assert_eq!(group_info(&broker, "held-window", "g").await.lag, 0);
    let handled = WAIT_OTHERS.lock().unwrap().clone();
    assert!(!handled.is_empty(), "no entry of another key ran");
    app.shutdown().await;
}

// ---- re-runs are counted at the broker ----------------------------------------------

static COUNTED_RUNS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Always asks for another attempt in 10 s.
#[subscriber(RedisStream::new("held-counted").group("g"), workers(1, by_key), max_deliveries(3))]
async fn held_counted(_job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    COUNTED_RUNS.lock().unwrap().push(ctx.delivery_count());
    HandlerOutcome::retry_after(Duration::from_secs(10))
}

/// A re-run on a lane counts as a delivery at the broker, so an entry
/// handed back at shutdown keeps its count: the next process runs it with
/// the count it had, and `max_deliveries` bounds the runs across both.
#[tokio::test(start_paused = true)]
async fn a_held_entry_handed_back_at_shutdown_keeps_its_delivery_count() {
    let broker = MemoryBroker::new();
    let first = support::start_one(&broker, held_counted).await;
    publish(&broker, "held-counted", &[(1, "k")]).await;
    advance(Duration::from_secs(1), 15).await;
    assert_eq!(*COUNTED_RUNS.lock().unwrap(), [0, 1]);
    first.shutdown().await;
    let pending = support::pending(&broker, "held-counted", "g").await;
    assert_eq!(pending[0].times_delivered, 2, "{pending:?}");

    let second = support::start_one(&broker, held_counted).await;
    advance(Duration::from_secs(1), 60).await;
    second.shutdown().await;
    assert_eq!(*COUNTED_RUNS.lock().unwrap(), [0, 1, 2]);
    let dead = dead_letters(&broker, "held-counted", "g", 10).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].times_delivered, 3);
}
