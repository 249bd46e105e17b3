//! The runtime on the memory broker, on a paused clock: outcomes on both
//! subscription kinds, lanes, read-ahead, shutdown, start-up validation.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Message, PARTITION_KEY_HEADER, ReadMode, ReadRequest, StartError};
use support::{
    Spy, advance, dead_letters, group_info, next_delivery_at, pending, settle, start, start_fresh,
    start_fresh_named, start_one, start_two, stream_len, until, until_acked, until_dead,
    until_pending,
};

const MIN_IDLE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "jobs")]
struct Job {
    n: u64,
    #[serde(default)]
    key: String,
}

fn job(n: u64) -> Job {
    Job {
        n,
        key: String::new(),
    }
}

async fn publish(broker: &MemoryBroker, stream: &str, jobs: impl IntoIterator<Item = Job>) {
    let publisher = Publisher::new(Arc::new(broker.clone()));
    for j in jobs {
        publisher.publish(&j).to(stream).await.unwrap();
    }
}

/// A memory broker running an app with the one subscriber `subscriber`,
/// and `jobs` published to `stream` once the app runs.
async fn running(
    subscriber: impl ruststream::Subscriber,
    stream: &str,
    jobs: impl IntoIterator<Item = Job>,
) -> (MemoryBroker, ruststream::Running) {
    let (broker, app) = start_fresh(subscriber).await;
    publish(&broker, stream, jobs).await;
    (broker, app)
}

type Log = Mutex<Vec<(u64, u32)>>;

fn seen(log: &Log) -> Vec<(u64, u32)> {
    log.lock().unwrap().clone()
}

/// Logs `job` with the delivery count `ctx` reports.
fn note(log: &Log, job: &Job, ctx: &Context<'_>) {
    log.lock().unwrap().push((job.n, ctx.delivery_count()));
}

// ---- outcomes on a claiming subscription ---------------------------------------

static CLAIM_RETRY: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::claiming("claim-retry", MIN_IDLE).group("g"))]
async fn claim_retry(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    let count: u32 = ctx
        .headers()
        .get_str(DELIVERY_COUNT_HEADER)
        .unwrap()
        .parse()
        .unwrap();
    CLAIM_RETRY.lock().unwrap().push((job.n, count));
    if count == 0 {
        HandlerOutcome::retry()
    } else {
        HandlerOutcome::ack()
    }
}

#[tokio::test(start_paused = true)]
async fn retry_on_a_claiming_subscription_leaves_the_entry_pending_without_a_copy() {
    let (broker, app) = running(claim_retry, "claim-retry", [job(1)]).await;
    until("first delivery", async || !seen(&CLAIM_RETRY).is_empty()).await;
    settle().await;
    assert_eq!(seen(&CLAIM_RETRY), [(1, 0)]);
    assert_eq!(
        pending(&broker, "claim-retry", "g").await.len(),
        1,
        "still pending"
    );
    assert_eq!(
        stream_len(&broker, "claim-retry").await,
        1,
        "no copy appended"
    );

    next_delivery_at(
        MIN_IDLE,
        1,
        || seen(&CLAIM_RETRY).len(),
        "not before min_idle",
    )
    .await;
    assert_eq!(
        seen(&CLAIM_RETRY)[1],
        (1, 1),
        "second delivery reports one earlier"
    );
    until_acked("acked", &broker, "claim-retry", "g").await;
    assert_eq!(stream_len(&broker, "claim-retry").await, 1);
    app.shutdown().await;
}

static CLAIM_LATER: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::claiming("claim-later", MIN_IDLE).group("g"))]
async fn claim_later(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    note(&CLAIM_LATER, job, ctx);
    match ctx.delivery_count() {
        0 => HandlerOutcome::retry_after(Duration::from_secs(5)),
        1 => HandlerOutcome::dead_letter("gave up on purpose"),
        _ => HandlerOutcome::ack(),
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_and_dead_letter_on_a_claiming_subscription() {
    let (broker, app) = running(claim_later, "claim-later", [job(7)]).await;
    until("first delivery", async || seen(&CLAIM_LATER).len() == 1).await;
    next_delivery_at(
        Duration::from_secs(5),
        1,
        || seen(&CLAIM_LATER).len(),
        "owed after the delay, not before",
    )
    .await;
    until("dead letter", async || {
        dead_letters(&broker, "claim-later", "g", 10).await.len() == 1
    })
    .await;
    let dead = dead_letters(&broker, "claim-later", "g", 10).await;
    assert_eq!(dead[0].reason, "gave up on purpose");
    assert_eq!(dead[0].times_delivered, 2);
    assert!(pending(&broker, "claim-later", "g").await.is_empty());
    app.shutdown().await;
}

// ---- outcomes on a new subscription -----------------------------------------------

static NEW_RETRY: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("new-retry").group("g"))]
async fn new_retry(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    note(&NEW_RETRY, job, ctx);
    if job.n == 1 && ctx.delivery_count() < 2 {
        HandlerOutcome::retry()
    } else {
        HandlerOutcome::ack()
    }
}

#[tokio::test(start_paused = true)]
async fn retry_on_a_new_subscription_appends_a_copy_behind_newer_entries() {
    let (broker, app) = running(new_retry, "new-retry", [job(1), job(2)]).await;
    until("all settled", async || seen(&NEW_RETRY).len() == 4).await;
    until_acked("acked", &broker, "new-retry", "g").await;
    assert_eq!(
        seen(&NEW_RETRY),
        [(1, 0), (2, 0), (1, 1), (1, 2)],
        "copies come behind, counting on"
    );
    assert_eq!(
        stream_len(&broker, "new-retry").await,
        4,
        "two copies were appended"
    );
    app.shutdown().await;
}

static NEW_LATER: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("new-later").group("g"))]
async fn new_later(job: &Job, ctx: &mut Context<'_>) -> Result<(), String> {
    note(&NEW_LATER, job, ctx);
    match (job.n, ctx.delivery_count()) {
        (1, 0) => Err("downstream unavailable".into()),
        _ => Ok(()),
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_result_retries_and_ok_acks() {
    let (broker, app) = running(new_later, "new-later", [job(1)]).await;
    until("retried", async || seen(&NEW_LATER).len() == 2).await;
    assert_eq!(seen(&NEW_LATER), [(1, 0), (1, 1)]);
    until_acked("acked", &broker, "new-later", "g").await;
    let stats = app.stats().await;
    assert_eq!(
        (stats[0].failed, stats[0].retried, stats[0].acked),
        (1, 1, 1)
    );
    app.shutdown().await;
}

static NEW_DELAY: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("new-delay").group("g"))]
async fn new_delay(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    note(&NEW_DELAY, job, ctx);
    if ctx.delivery_count() == 0 {
        HandlerOutcome::retry_after(Duration::from_secs(60))
    } else {
        HandlerOutcome::dead_letter("still failing")
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_and_dead_letter_on_a_new_subscription() {
    let (broker, app) = running(new_delay, "new-delay", [job(3)]).await;
    until("first", async || seen(&NEW_DELAY).len() == 1).await;
    advance(Duration::from_secs(59), 1).await;
    assert_eq!(seen(&NEW_DELAY).len(), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    until("second", async || seen(&NEW_DELAY).len() == 2).await;
    until_dead("dead", &broker, "new-delay", "g", 1).await;
    assert_eq!(
        stream_len(&broker, "new-delay").await,
        1,
        "a delayed retry appends no copy"
    );
    app.shutdown().await;
}

// ---- max_deliveries, poison payloads, panics ----------------------------------------

static BOUNDED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::claiming("bounded", MIN_IDLE).group("g"), max_deliveries(3))]
async fn bounded(_job: &Job) -> HandlerOutcome {
    BOUNDED.fetch_add(1, Ordering::SeqCst);
    HandlerOutcome::retry()
}

#[tokio::test(start_paused = true)]
async fn max_deliveries_dead_letters_instead_of_handing_out_again() {
    let (broker, app) = running(bounded, "bounded", [job(1)]).await;
    for round in 1..=3 {
        until("delivery", async || BOUNDED.load(Ordering::SeqCst) == round).await;
        tokio::time::advance(MIN_IDLE).await;
    }
    until_dead("dead", &broker, "bounded", "g", 1).await;
    assert_eq!(
        BOUNDED.load(Ordering::SeqCst),
        3,
        "handled exactly max_deliveries times"
    );
    let dead = dead_letters(&broker, "bounded", "g", 1).await;
    assert!(
        dead[0].reason.contains("max_deliveries(3)"),
        "{}",
        dead[0].reason
    );
    app.shutdown().await;
}

static POISON: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("poison").group("g"))]
async fn poison(job: Job) {
    POISON.lock().unwrap().push((job.n, 0));
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_payload_is_dead_lettered_at_once_and_blocks_nothing() {
    let (broker, app) = start_fresh(poison).await;
    broker
        .publish("poison", Message::new(b"{not json".to_vec()))
        .await
        .unwrap();
    publish(&broker, "poison", [job(2)]).await;
    until("the good one", async || seen(&POISON) == [(2, 0)]).await;
    until_dead("dead", &broker, "poison", "g", 1).await;
    let dead = dead_letters(&broker, "poison", "g", 1).await;
    assert!(
        dead[0].reason.contains("cannot decode the payload as"),
        "{}",
        dead[0].reason
    );
    assert!(dead[0].reason.contains("Job"), "{}", dead[0].reason);
    assert_eq!(dead[0].times_delivered, 1);
    app.shutdown().await;
}

static PANICKY: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("panicky").group("g"))]
async fn panicky(job: &Job, ctx: &mut Context<'_>) {
    PANICKY.lock().unwrap().push((job.n, ctx.delivery_count()));
    if job.n == 1 && ctx.delivery_count() == 0 {
        panic!("handler bug");
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_retried_and_its_lane_lives_on() {
    let (broker, app) = running(panicky, "panicky", [job(1), job(2)]).await;
    until("all", async || seen(&PANICKY).len() == 3).await;
    assert_eq!(seen(&PANICKY), [(1, 0), (2, 0), (1, 1)]);
    until_acked("acked", &broker, "panicky", "g").await;
    let stats = app.stats().await;
    assert_eq!(stats[0].panicked, 1);
    app.shutdown().await;
}

// ---- replies ---------------------------------------------------------------------------

#[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "doubled")]
struct Doubled {
    n: u64,
}

#[subscriber(RedisStream::new("to-double").group("g").start_id(StreamStart::Beginning), reply)]
async fn double(job: &Job) -> Doubled {
    Doubled { n: job.n * 2 }
}

#[tokio::test(start_paused = true)]
async fn a_reply_is_published_then_the_entry_acked() {
    let broker = MemoryBroker::new();
    publish(&broker, "to-double", [job(4)]).await;
    let app = start(&broker, |b| {
        b.include(double).out_reply(Publish);
    })
    .await;
    until("reply", async || stream_len(&broker, "doubled").await == 1).await;
    let replies = broker
        .range("doubled", EntryId::ZERO, EntryId::MAX, 10)
        .await
        .unwrap();
    let reply: Doubled = serde_json::from_slice(replies[0].payload()).unwrap();
    assert_eq!(reply, Doubled { n: 8 });
    until_acked("acked", &broker, "to-double", "g").await;
    app.shutdown().await;
}

// ---- context ------------------------------------------------------------------------------

static CONTEXT: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("ctx").group("g").consumer("stable-name"))]
async fn context_probe(raw: &[u8], ctx: &mut Context<'_>) {
    let line = format!(
        "{} {} {} {} {} key={:?} idle={:?} id-ok={}",
        String::from_utf8_lossy(raw),
        ctx.stream(),
        ctx.group(),
        ctx.consumer(),
        ctx.headers().get_str(DELIVERY_COUNT_HEADER).unwrap(),
        ctx.headers().get_str(PARTITION_KEY_HEADER),
        ctx.headers().get_str(IDLE_MS_HEADER),
        ctx.id() > EntryId::ZERO,
    );
    CONTEXT.lock().unwrap().push(line);
}

#[tokio::test(start_paused = true)]
async fn the_context_exposes_the_delivery() {
    let (broker, app) = start_fresh(context_probe).await;
    let publisher = Publisher::new(Arc::new(broker.clone()));
    publisher
        .publish(&job(1))
        .to("ctx")
        .partition_key("acct-9")
        .await
        .unwrap();
    until("seen", async || CONTEXT.lock().unwrap().len() == 1).await;
    assert_eq!(
        CONTEXT.lock().unwrap()[0],
        r#"{"n":1,"key":""} ctx g stable-name 0 key=Some("acct-9") idle=Some("0") id-ok=true"#
    );
    assert_eq!(
        app.consumers().collect::<Vec<_>>(),
        [("context_probe", "stable-name")]
    );
    app.shutdown().await;
}

#[subscriber(RedisStream::new("names").group("g"))]
async fn unnamed_a(_job: &Job) {}

#[subscriber(RedisStream::new("names").group("h"))]
async fn unnamed_b(_job: &Job) {}

#[tokio::test(start_paused = true)]
async fn consumers_are_named_ruststream_n_per_process() {
    let broker = MemoryBroker::new();
    let app = start_two(&broker, unnamed_a, unnamed_b).await;
    let names: Vec<String> = app.consumers().map(|(_, c)| c.to_owned()).collect();
    assert_eq!(names.len(), 2);
    for name in &names {
        let n = name.strip_prefix("ruststream-").expect("ruststream-N");
        assert!(n.parse::<usize>().is_ok(), "{name}");
    }
    assert_ne!(names[0], names[1]);
    app.shutdown().await;
}

// ---- lanes ------------------------------------------------------------------------------------

static KEYED: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());
static KEYED_RUNNING: AtomicUsize = AtomicUsize::new(0);
static KEYED_MAX: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("keyed").group("g"), workers(4, by_key))]
async fn keyed(job: &Job) {
    let now = KEYED_RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    KEYED_MAX.fetch_max(now, Ordering::SeqCst);
    // Uneven handler times, so order would break if keys shared no lane.
    tokio::time::sleep(Duration::from_millis(1 + (job.n * 7) % 13)).await;
    KEYED.lock().unwrap().push((job.key.clone(), job.n));
    KEYED_RUNNING.fetch_sub(1, Ordering::SeqCst);
}

#[tokio::test(start_paused = true)]
async fn by_key_lanes_keep_each_keys_order_and_run_at_most_n_at_once() {
    let (broker, app) = start_fresh(keyed).await;
    let publisher = Publisher::new(Arc::new(broker.clone()));
    let keys = ["a", "b", "c", "d", "e", "f"];
    for n in 0..120u64 {
        let key = keys[(n as usize * 5 + n as usize / 7) % keys.len()];
        let j = Job { n, key: key.into() };
        publisher
            .publish(&j)
            .to("keyed")
            .partition_key(key)
            .await
            .unwrap();
    }
    for _ in 0..200 {
        if KEYED.lock().unwrap().len() == 120 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let log = KEYED.lock().unwrap().clone();
    assert_eq!(log.len(), 120);
    for key in keys {
        let ns: Vec<u64> = log
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, n)| *n)
            .collect();
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order: {ns:?}"
        );
    }
    let max = KEYED_MAX.load(Ordering::SeqCst);
    assert!(max <= 4, "more than 4 handlers ran at once: {max}");
    assert!(max >= 2, "lanes did not run in parallel: {max}");
    app.shutdown().await;
}

/// Handlers that block on `job.n == 0` (or on key "slow") until released.
static SLOW: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static FREE_LANE: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static FREE_KEYED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

async fn block_if_slow(job: &Job, log: &Mutex<Vec<u64>>) {
    if job.n == 0 || job.key == "slow" {
        let _ = SLOW.acquire().await.map(|p| p.forget());
    }
    log.lock().unwrap().push(job.n);
}

#[subscriber(RedisStream::new("free-lane").group("g"), workers(2))]
async fn free_lane(job: &Job) {
    block_if_slow(job, &FREE_LANE).await;
}

#[subscriber(RedisStream::new("free-keyed").group("g"), workers(2, by_key))]
async fn free_keyed(job: &Job) {
    block_if_slow(job, &FREE_KEYED).await;
}

/// Keyless entries are not tied to a lane: while one lane is stuck on a
/// slow entry, every later entry runs on the other lane, with or without
/// `by_key`.
#[tokio::test(start_paused = true)]
async fn keyless_entries_go_to_any_free_lane_while_another_is_stuck() {
    let broker = MemoryBroker::new();
    let app = start_two(&broker, free_lane, free_keyed).await;
    let publisher = Publisher::new(Arc::new(broker.clone()));
    publish(&broker, "free-lane", (0..11).map(job)).await;
    let slow = Job {
        n: 100,
        key: "slow".into(),
    };
    publisher
        .publish(&slow)
        .to("free-keyed")
        .partition_key("slow")
        .await
        .unwrap();
    publish(&broker, "free-keyed", (1..11).map(job)).await;

    until("the free lanes ran everything else", async || {
        FREE_LANE.lock().unwrap().len() == 10 && FREE_KEYED.lock().unwrap().len() == 10
    })
    .await;
    assert_eq!(*FREE_LANE.lock().unwrap(), (1..11).collect::<Vec<_>>());
    assert_eq!(*FREE_KEYED.lock().unwrap(), (1..11).collect::<Vec<_>>());

    SLOW.add_permits(2);
    until("the slow entries finished", async || {
        FREE_LANE.lock().unwrap().len() == 11 && FREE_KEYED.lock().unwrap().len() == 11
    })
    .await;
    app.shutdown().await;
}

static STUCK: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static STUCK_STARTED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::claiming("stuck", MIN_IDLE).group("g"), workers(2), prefetch(6))]
async fn stuck(_job: &Job) {
    STUCK_STARTED.fetch_add(1, Ordering::SeqCst);
    let _ = STUCK.acquire().await.map(|p| p.forget());
}

#[tokio::test(start_paused = true)]
async fn read_ahead_stays_bounded_while_handlers_are_stuck_and_shutdown_hands_back_the_rest() {
    let (broker, app) = running(stuck, "stuck", (0..100).map(job)).await;
    until("both lanes busy", async || {
        STUCK_STARTED.load(Ordering::SeqCst) == 2
    })
    .await;
    for _ in 0..5 {
        advance(Duration::from_secs(1), 1).await;
        let held = group_info(&broker, "stuck", "g").await.pending;
        assert!(held <= 6, "read ahead past the bound: {held} entries held");
    }
    assert_eq!(group_info(&broker, "stuck", "g").await.pending, 6);

    // Shut down; the two running handlers finish during the deadline.
    let shutdown = tokio::spawn(app.shutdown_within(Duration::from_secs(10)));
    settle().await;
    STUCK.add_permits(2);
    shutdown.await.unwrap();
    assert_eq!(
        STUCK_STARTED.load(Ordering::SeqCst),
        2,
        "no new handler started"
    );
    let info = group_info(&broker, "stuck", "g").await;
    assert_eq!(info.pending, 4, "the two finished entries were acked");
    // The four read-but-unstarted entries are owed now: another consumer
    // gets them at once, without waiting out min_idle.
    let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
    let batch = broker
        .read(ReadRequest::new("stuck", "g", "other", mode, 10))
        .await
        .unwrap();
    let owed: Vec<_> = batch
        .deliveries
        .iter()
        .filter(|d| d.delivery_count == 1)
        .collect();
    assert_eq!(owed.len(), 4, "handed back for immediate redelivery");
}

static BACKLOG: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("backlog").group("g"))]
async fn backlog(_job: &Job) {
    BACKLOG.fetch_add(1, Ordering::SeqCst);
}

/// A shutdown asked for while the broker always has entries ready (a
/// backlog on the memory broker) stops reading at once: only what was
/// already read is handled, the rest stays in the stream.
#[tokio::test(start_paused = true)]
async fn shutdown_stops_reading_even_with_a_backlog() {
    let (broker, app) = running(backlog, "backlog", (0..5_000).map(job)).await;
    // Let the subscription get going on the backlog.
    tokio::task::yield_now().await;
    let before = BACKLOG.load(Ordering::SeqCst);
    assert!(before > 0, "the subscription started on the backlog");
    app.shutdown_within(Duration::from_secs(1)).await;
    let handled = BACKLOG.load(Ordering::SeqCst);
    // workers(1): at most one read of 4 entries more, and what it was
    // running.
    assert!(
        handled <= before + 8,
        "{} entries handled after the shutdown was asked for",
        handled - before
    );
    // Read but not started: handed back, owed to the group, held by nobody.
    let owed = pending(&broker, "backlog", "g").await;
    assert!(owed.iter().all(|p| p.consumer.is_none()), "{owed:?}");
    let info = group_info(&broker, "backlog", "g").await;
    assert_eq!(info.lag as usize + owed.len() + handled, 5_000);
}

static HANG: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[subscriber(RedisStream::new("hang").group("g"))]
async fn hang(_job: &Job) {
    let _ = HANG.acquire().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_past_the_shutdown_deadline_is_stopped_and_its_entry_handed_back() {
    let (broker, app) = running(hang, "hang", [job(1)]).await;
    until_pending("running", &broker, "hang", "g", 1).await;
    let started = tokio::time::Instant::now();
    app.shutdown_within(Duration::from_secs(3)).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "waited exactly the deadline"
    );
    let p = pending(&broker, "hang", "g").await;
    assert_eq!(p[0].consumer, None, "owed again, held by nobody");
    assert_eq!(p[0].owed_in_ms, Some(0));
}

// ---- restart recovery ------------------------------------------------------------------------------

static RECOVERED: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("recover").group("g").consumer("worker-a"))]
async fn recover(job: &Job, ctx: &mut Context<'_>) {
    note(&RECOVERED, job, ctx);
}

static RECOVERED_CLAIMING: Log = Mutex::new(Vec::new());

#[subscriber(RedisStream::claiming("recover-claiming", MIN_IDLE).group("g").consumer("worker-b"))]
async fn recover_claiming(job: &Job, ctx: &mut Context<'_>) {
    note(&RECOVERED_CLAIMING, job, ctx);
}

/// A fresh memory broker with group `g` on `stream` (from its end) and
/// jobs 0, 1 and 2 published to it, all three read as `consumer` (in
/// `mode`) and never acked: a process that crashed holding them.
async fn crashed_holding_three(stream: &str, consumer: &str, mode: ReadMode) -> MemoryBroker {
    let broker = MemoryBroker::new();
    broker
        .ensure_group(stream, "g", ruststream::StreamStart::New)
        .await
        .unwrap();
    publish(&broker, stream, (0..3).map(job)).await;
    let batch = broker
        .read(ReadRequest::new(stream, "g", consumer, mode, 3))
        .await
        .unwrap();
    assert_eq!(batch.deliveries.len(), 3);
    broker
}

/// The live window at the default keep-alive: entries refreshed more
/// recently than this belong to a live process (docs/guarantees.md,
/// "Shared consumer names").
const LIVE_WINDOW: Duration = Duration::from_secs(15);

/// A subscription restarted under the consumer name of one that crashed
/// (longer than the live window ago) first handles what that one held,
/// then new entries: on a `new` subscription nothing else would ever hand
/// those entries out again.
#[tokio::test(start_paused = true)]
async fn a_restarted_consumer_handles_what_it_held_before_the_crash() {
    let broker = crashed_holding_three("recover", "worker-a", ReadMode::New).await;
    publish(&broker, "recover", (3..5).map(job)).await;
    tokio::time::advance(LIVE_WINDOW).await;

    let app = start_one(&broker, recover).await;
    until("all handled", async || seen(&RECOVERED).len() == 5).await;
    assert_eq!(
        seen(&RECOVERED),
        vec![(0, 1), (1, 1), (2, 1), (3, 0), (4, 0)],
        "the held entries first, as redeliveries"
    );
    until_acked("all acked", &broker, "recover", "g").await;
    app.shutdown().await;
}

/// On a claiming subscription the restarted consumer does not wait out
/// `min_idle` for what it held itself: it takes it back once the live
/// window (three keep-alive intervals, under `min_idle`) has passed.
#[tokio::test(start_paused = true)]
async fn a_restarted_claiming_consumer_does_not_wait_for_min_idle() {
    let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
    let broker = crashed_holding_three("recover-claiming", "worker-b", mode).await;

    let started = tokio::time::Instant::now();
    let app = start_one(&broker, recover_claiming).await;
    // The look waits for the blocking read in flight (5 s at most).
    tokio::time::sleep(LIVE_WINDOW + Duration::from_secs(6)).await;
    until("all handled", async || seen(&RECOVERED_CLAIMING).len() == 3).await;
    assert!(
        started.elapsed() < MIN_IDLE,
        "taken back after the live window, before min_idle: {:?}",
        started.elapsed()
    );
    assert_eq!(seen(&RECOVERED_CLAIMING), vec![(0, 1), (1, 1), (2, 1)]);
    app.shutdown().await;
}

// ---- acks ----------------------------------------------------------------------------------------

static BATCHED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("batched").group("g"), workers(8))]
async fn batched(_job: &Job) {
    BATCHED.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test(start_paused = true)]
async fn acks_are_batched_and_a_lone_message_is_acked_at_once() {
    let (spy, app) = start_fresh_named::<Spy>("t", batched).await;
    publish(&spy.inner, "batched", [job(0)]).await;
    until("lone ack", async || spy.acks() == 1).await;
    assert_eq!(BATCHED.load(Ordering::SeqCst), 1);
    assert!(
        pending(&spy, "batched", "g").await.is_empty(),
        "acked without any clock movement"
    );

    publish(&spy.inner, "batched", (1..=500).map(job)).await;
    until("all acked", async || {
        BATCHED.load(Ordering::SeqCst) == 501 && pending(&spy, "batched", "g").await.is_empty()
    })
    .await;
    let calls = spy.acks() - 1;
    assert!(calls < 100, "500 entries took {calls} ack calls");
    app.shutdown().await;
}

// ---- observer ---------------------------------------------------------------------------------------

static WATCHED_HANG: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[subscriber(RedisStream::new("watched").group("g"), workers(3))]
async fn watched(job: &Job, ctx: &mut Context<'_>) {
    match job.n {
        1 if ctx.delivery_count() == 0 => panic!("job one fails the first time"),
        2 => {
            let _ = WATCHED_HANG.acquire().await;
        }
        _ => {}
    }
}

#[derive(Default)]
struct Recorder(Mutex<Vec<(u64, ruststream::Settlement)>>);

impl ruststream::Observer for Recorder {
    fn handled(&self, event: &ruststream::Handled<'_>) {
        let job: Job = serde_json::from_slice(event.delivery.entry.payload()).unwrap();
        self.0
            .lock()
            .unwrap()
            .push((job.n, event.settlement.clone()));
    }
}

/// The observer hears of every outcome with its delivery: an ack, a
/// panic's retry (and the retry's ack), and a handler stopped at the
/// shutdown deadline.
#[tokio::test(start_paused = true)]
async fn the_observer_sees_acks_panics_and_entries_handed_back_at_the_deadline() {
    let broker = MemoryBroker::new();
    let recorder = Arc::new(Recorder::default());
    let app = RustStream::new(AppInfo::new("test", "0"))
        .observe(recorder.clone())
        .with_broker(broker.clone(), |b| {
            b.include(watched);
        })
        .start()
        .await
        .unwrap();
    publish(&broker, "watched", [job(0), job(1), job(2)]).await;
    until("three outcomes", async || {
        recorder.0.lock().unwrap().len() == 3
    })
    .await;
    app.shutdown_within(Duration::from_secs(1)).await;

    let mut seen = recorder.0.lock().unwrap().clone();
    seen.sort_by_key(|(n, _)| *n);
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0], (0, ruststream::Settlement::Acked));
    assert_eq!(
        seen[1],
        (
            1,
            ruststream::Settlement::Retried {
                reason: Some("handler panicked: job one fails the first time".into())
            }
        )
    );
    assert_eq!(seen[2], (1, ruststream::Settlement::Acked), "the retry");
    assert_eq!(seen[3], (2, ruststream::Settlement::HandedBack));
}

struct PanickyObserver;

impl ruststream::Observer for PanickyObserver {
    fn handled(&self, _event: &ruststream::Handled<'_>) {
        panic!("observer bug");
    }
}

#[subscriber(RedisStream::new("observed-badly").group("g"), workers(2))]
async fn observed_badly(_job: &Job) {}

/// An observer that panics is logged and ignored: entries are still
/// settled and the app shuts down.
#[tokio::test(start_paused = true)]
async fn a_panicking_observer_does_not_stop_the_subscription() {
    let broker = MemoryBroker::new();
    let app = RustStream::new(AppInfo::new("test", "0"))
        .observe(Arc::new(PanickyObserver))
        .with_broker(broker.clone(), |b| {
            b.include(observed_badly);
        })
        .start()
        .await
        .unwrap();
    publish(&broker, "observed-badly", (0..10).map(job)).await;
    until("all acked", async || app.stats().await[0].acked == 10).await;
    let info = group_info(&broker, "observed-badly", "g").await;
    assert_eq!((info.pending, info.lag), (0, 0));
    app.shutdown_within(Duration::from_secs(1)).await;
}

// ---- stats ------------------------------------------------------------------------------------------

#[subscriber(RedisStream::new("timed").group("g"), workers(2))]
async fn timed(job: &Job) {
    // Job n sleeps n seconds; job 0 finishes without waiting.
    sleep_n_seconds(job).await;
}

/// Sleeps `job.n` seconds.
async fn sleep_n_seconds(job: &Job) {
    tokio::time::sleep(Duration::from_secs(job.n)).await;
}

/// Handler time is measured on tokio's clock: on a paused clock, handlers
/// that sleep are timed exactly, and one that does not wait adds nothing.
#[tokio::test(start_paused = true)]
async fn stats_time_handlers_on_the_tokio_clock() {
    let stats = stats_after_ten_seconds("timed", [0, 3, 5], timed).await;
    assert_eq!(stats.acked, 3);
    assert_eq!(stats.delivered, 3);
    assert_eq!(stats.handler_time, Duration::from_secs(8));
    assert_eq!(stats.handler_max, Duration::from_secs(5));
}

/// Starts an app with one subscriber, publishes jobs `ns` to `stream`,
/// lets ten seconds pass on the paused clock (sleeping, so the clock jumps
/// to the handlers' timers) and returns the subscriber's stats.
async fn stats_after_ten_seconds(
    stream: &str,
    ns: impl IntoIterator<Item = u64>,
    subscriber: impl ruststream::Subscriber,
) -> ruststream::SubscriptionStats {
    let (_broker, app) = running(subscriber, stream, ns.into_iter().map(job)).await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stats = app.stats().await.remove(0);
    app.shutdown().await;
    stats
}

#[subscriber(RedisStream::new("timed-chain").group("g"))]
async fn timed_chain(job: &Job) {
    sleep_n_seconds(job).await;
}

/// On one lane, a handler that waits and two that do not, run back to
/// back: each is timed on its own.
#[tokio::test(start_paused = true)]
async fn a_waiting_handler_is_timed_alone_when_quick_ones_follow_it() {
    let stats = stats_after_ten_seconds("timed-chain", [5, 0, 0], timed_chain).await;
    assert_eq!(stats.acked, 3);
    assert_eq!(stats.handler_max, Duration::from_secs(5));
    assert_eq!(stats.handler_time, Duration::from_secs(5));
}

static COUNTED_BLOCK: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static COUNTED_STARTED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("counted").group("g"))]
async fn counted(_job: &Job) {
    COUNTED_STARTED.fetch_add(1, Ordering::SeqCst);
    let _ = COUNTED_BLOCK.acquire().await.map(|p| p.forget());
}

/// `delivered` counts a handler as soon as it starts, not when the task
/// next wakes.
#[tokio::test(start_paused = true)]
async fn a_running_handler_is_counted_as_delivered() {
    let (_broker, app) = running(counted, "counted", [job(1)]).await;
    until("started", async || {
        COUNTED_STARTED.load(Ordering::SeqCst) == 1
    })
    .await;
    settle().await;
    assert_eq!(app.stats().await[0].delivered, 1);
    COUNTED_BLOCK.add_permits(1);
    app.shutdown().await;
}

// ---- start-up validation ------------------------------------------------------------------------

#[subscriber(RedisStream::claiming("validated", MIN_IDLE).group("g"))]
async fn needs_claiming(_job: &Job) {}

#[tokio::test(start_paused = true)]
async fn a_subscription_the_broker_cannot_serve_stops_the_app_before_it_reads() {
    let spy = Spy::default();
    spy.refuse_claiming.store(true, Ordering::SeqCst);
    let result = RustStream::new(AppInfo::new("t", "0"))
        .with_broker(spy.clone(), |b| {
            b.include(needs_claiming);
        })
        .start()
        .await;
    let err = result.expect_err("must not start");
    assert!(matches!(err, StartError::Unsupported { .. }));
    let text = err.to_string();
    assert!(text.contains("needs_claiming"), "{text}");
    assert!(
        text.contains("\"validated\"") && text.contains("\"g\""),
        "{text}"
    );
    assert!(text.contains("8.4"), "{text}");
    assert_eq!(spy.read_calls.load(Ordering::SeqCst), 0, "nothing was read");
    assert!(
        spy.inner.stream_info("validated").await.unwrap().is_none(),
        "no group created"
    );
}

// ---- dropping the app --------------------------------------------------------------------------

static DROPPED: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[subscriber(RedisStream::new("dropped").group("g"))]
async fn dropped_handler(_job: &Job) {
    let _ = DROPPED.acquire().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_the_running_app_hands_everything_back() {
    let (broker, app) = running(dropped_handler, "dropped", [job(1), job(2)]).await;
    until_pending("running", &broker, "dropped", "g", 2).await;
    drop(app);
    until("handed back", async || {
        pending(&broker, "dropped", "g")
            .await
            .iter()
            .all(|p| p.consumer.is_none())
    })
    .await;
    let p = pending(&broker, "dropped", "g").await;
    assert_eq!(p.len(), 2, "nothing acked, nothing lost");
    assert!(p.iter().all(|p| p.owed_in_ms == Some(0)), "{p:?}");
}
