//! Edge cases of the runtime found in review, on the memory broker and the
//! paused clock: a failed read behind a long handler, dead letters made by
//! a read, replies the broker refuses, settles failing at shutdown, a
//! key's queued entries at shutdown, and a settler that dies. Each test
//! failed on the runtime before its fix.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{
    Broker, BrokerError, BrokerFuture, EntryId, ReadBatch, ReadRequest, broker_methods,
    forward_broker,
};
use support::{
    Job, advance, group_info, publish_jobs, refused, settle, start_fresh_named, start_one_named,
};

#[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "replies")]
struct Reply {
    n: u64,
}

/// A memory broker with switches: the next read fails before it is
/// applied, settles fail, the next ack panics.
#[derive(Clone, Default)]
struct Faulty {
    inner: MemoryBroker,
    fail_next_read: Arc<AtomicBool>,
    fail_settles: Arc<AtomicBool>,
    /// Failing settles take 5 s to fail, as against a server that does not
    /// answer (the Redis broker's default response timeout).
    slow_failures: Arc<AtomicBool>,
    panic_next_ack: Arc<AtomicBool>,
}

impl Faulty {
    async fn settle_fault(&self) -> Option<BrokerError> {
        if !self.fail_settles.load(Ordering::SeqCst) {
            return None;
        }
        if self.slow_failures.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Some(refused("faulty"))
    }
}

/// The body of a settle of [`Faulty`]: the settle fault when settles
/// fail, else the same call to the inner broker.
macro_rules! faulty_settle {
    ($this:ident, [] $method:ident($($param:ident),*)) => {
        Box::pin(async move {
            if let Some(error) = $this.settle_fault().await {
                return Err(error);
            }
            $this.inner.$method($($param),*).await
        })
    };
}

impl Broker for Faulty {
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        Box::pin(async move {
            if self.fail_next_read.swap(false, Ordering::SeqCst) {
                return Err(refused("faulty"));
            }
            self.inner.read(request).await
        })
    }

    fn ack<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        Box::pin(async move {
            assert!(
                !self.panic_next_ack.swap(false, Ordering::SeqCst),
                "injected: a broker bug panics in ack"
            );
            if let Some(error) = self.settle_fault().await {
                return Err(error);
            }
            self.inner.ack(s, g, ids).await
        })
    }

    broker_methods!(faulty_settle: retry, dead_letter);

    forward_broker!(
        inner: name, check_mode, publish, publish_batch, ensure_group, set_group_position,
        redrive, discard, group_info, consumers, pending, dead_letters, range, stream_info, trim,
        extend_claim, count_deliveries,
    );
}

async fn publish_keyed(broker: &MemoryBroker, stream: &str, key: &str, ns: std::ops::Range<u64>) {
    let publisher = Publisher::new(Arc::new(broker.clone()));
    for n in ns {
        publisher
            .publish(&Job { n })
            .to(stream)
            .partition_key(key)
            .await
            .unwrap();
    }
}

// ---- a failed read behind a long handler ----------------------------------------------

static STALL_SEEN: Mutex<Vec<u64>> = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("stall").group("g"), workers(2))]
async fn stall(job: &Job) {
    if job.n == 0 {
        // A long handler (a report, a video): an hour.
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    STALL_SEEN.lock().unwrap().push(job.n);
}

/// A failed read (its reply may have been lost) does not stop a `new`
/// subscription reading until every entry it holds has settled: one long
/// handler must not idle the other lanes.
#[tokio::test(start_paused = true)]
async fn one_failed_read_does_not_stop_reading_behind_a_long_handler() {
    let (broker, app) = start_fresh_named::<Faulty>("review", stall).await;
    publish_jobs(&broker.inner, "stall", [0]).await;
    advance(Duration::from_millis(20), 3).await;
    // A blocking read is in flight; the one after it fails (nothing applied).
    broker.fail_next_read.store(true, Ordering::SeqCst);
    publish_jobs(&broker.inner, "stall", [1]).await;
    advance(Duration::from_millis(20), 5).await;
    publish_jobs(&broker.inner, "stall", 2..6).await;
    advance(Duration::from_secs(1), 60).await;
    let mut seen = STALL_SEEN.lock().unwrap().clone();
    seen.sort_unstable();
    assert_eq!(
        seen,
        [1, 2, 3, 4, 5],
        "a free lane sat idle for a minute after one failed read"
    );
    app.shutdown_within(Duration::from_millis(10)).await;
}

// ---- entries dead-lettered by a blocking read ------------------------------------------

static DL_RUNS: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("dl-count").group("g"), max_deliveries(2))]
async fn dl_count(_job: &Job) -> HandlerOutcome {
    DL_RUNS.fetch_add(1, Ordering::SeqCst);
    HandlerOutcome::retry()
}

/// A blocking read whose only result is an entry dead-lettered at
/// `max_deliveries` returns it, so the runtime counts and logs it.
#[tokio::test(start_paused = true)]
async fn an_entry_dead_lettered_by_a_read_is_counted() {
    let broker = MemoryBroker::new();
    let app = start_one_named("review", broker.clone(), dl_count).await;
    publish_jobs(&broker, "dl-count", [1]).await;
    advance(Duration::from_millis(50), 20).await;
    assert_eq!(DL_RUNS.load(Ordering::SeqCst), 2);
    let info = group_info(&broker, "dl-count", "g").await;
    assert_eq!(info.dead_letters, 1, "the broker dead-lettered it");
    advance(Duration::from_secs(1), 10).await;
    let stats = app.stats().await;
    assert_eq!(
        stats[0].dead_lettered, 1,
        "SubscriptionStats::dead_lettered misses the read's dead letter"
    );
    app.shutdown().await;
}

// ---- a reply the broker refuses ----------------------------------------------------------

static BAD_REPLY_RUNS: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("bad-reply").group("g"), reply)]
async fn bad_reply(job: &Job) -> Reply {
    BAD_REPLY_RUNS.fetch_add(1, Ordering::SeqCst);
    Reply { n: job.n }
}

/// A reply the broker refuses for good is dead-lettered, not retried in a
/// loop that appends a copy on every turn.
#[tokio::test(start_paused = true)]
async fn a_reply_stream_the_broker_refuses_is_not_retried_in_a_hot_loop() {
    let broker = MemoryBroker::new();
    let started = RustStream::new(AppInfo::new("review", "0"))
        .with_broker(broker.clone(), |b| {
            b.include(bad_reply).out_reply(Publish::to("bad{reply}"));
        })
        .start()
        .await;
    let Ok(app) = started else {
        return; // refused at start: fixed
    };
    publish_jobs(&broker, "bad-reply", [1]).await;
    settle().await;
    settle().await;
    let runs = BAD_REPLY_RUNS.load(Ordering::SeqCst);
    let len = support::stream_len(&broker, "bad-reply").await;
    assert!(
        runs <= 3,
        "handler ran {runs} times in zero time; the stream grew to {len} entries"
    );
    app.shutdown().await;
}

// ---- settles at shutdown -----------------------------------------------------------------

static BLIP_HANDLED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("blip").group("g"))]
async fn blip(_job: &Job) {
    BLIP_HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// A settle failing for a moment at shutdown is tried again with short
/// delays, so a brief blip does not leave a handled entry pending.
#[tokio::test(start_paused = true)]
async fn a_settle_failing_at_shutdown_is_retried_with_backoff() {
    let (broker, app) = start_fresh_named::<Faulty>("review", blip).await;
    broker.fail_settles.store(true, Ordering::SeqCst);
    publish_jobs(&broker.inner, "blip", [1]).await;
    advance(Duration::from_millis(100), 5).await;
    assert_eq!(BLIP_HANDLED.load(Ordering::SeqCst), 1);
    let heal = broker.fail_settles.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        heal.store(false, Ordering::SeqCst);
    });
    app.shutdown_within(Duration::from_secs(1)).await;
    advance(Duration::from_millis(100), 5).await;
    let pending = group_info(&broker.inner, "blip", "g").await.pending;
    assert_eq!(pending, 0, "the ack was given up after a 300 ms blip");
}

#[subscriber(RedisStream::new("dl-down").group("g").start_id(StreamStart::Beginning), prefetch(32))]
async fn dl_down(_job: &Job) -> HandlerOutcome {
    HandlerOutcome::dead_letter("bad input")
}

/// Against a broker that does not answer (each call times out), shutdown
/// gives up after one call's retries instead of retrying every call.
#[tokio::test(start_paused = true)]
async fn shutdown_with_an_unresponsive_broker_is_bounded() {
    let broker = Faulty::default();
    broker.fail_settles.store(true, Ordering::SeqCst);
    broker.slow_failures.store(true, Ordering::SeqCst);
    // Published first, so that one read takes the whole read-ahead.
    publish_jobs(&broker.inner, "dl-down", 0..32).await;
    let app = start_one_named("review", broker.clone(), dl_down).await;
    advance(Duration::from_millis(50), 20).await;
    let began = tokio::time::Instant::now();
    app.shutdown_within(Duration::from_secs(1)).await;
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "shutdown took {took:?} with 32 dead letters waiting on a broker that does not answer"
    );
}

// ---- by_key hand-back at shutdown --------------------------------------------------------

static KEY_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("keyed-back").group("g"), workers(2, by_key))]
async fn keyed_back(job: &Job, ctx: &mut Context<'_>) {
    KEY_LOG.lock().unwrap().push(format!("start {}", job.n));
    if job.n == 0 && ctx.delivery_count() == 0 {
        // Finishes well within the shutdown deadline.
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    KEY_LOG.lock().unwrap().push(format!("end {}", job.n));
}

/// At shutdown a key's queued entries are handed back only after the key's
/// running entry ends, so no other consumer runs them concurrently with it.
#[tokio::test(start_paused = true)]
async fn a_keys_queued_entries_wait_for_its_running_one_at_shutdown() {
    let broker = MemoryBroker::new();
    let old = start_one_named("review", broker.clone(), keyed_back).await;
    publish_keyed(&broker, "keyed-back", "k", 0..3).await;
    advance(Duration::from_millis(10), 3).await;
    // The new process of a rolling deploy, then the old one stops.
    let new = start_one_named("review", broker.clone(), keyed_back).await;
    let stopping = tokio::spawn(old.shutdown_within(Duration::from_secs(30)));
    advance(Duration::from_millis(100), 100).await;
    stopping.await.unwrap();
    let log = KEY_LOG.lock().unwrap().clone();
    let end0 = log.iter().position(|e| e == "end 0").unwrap();
    let start1 = log.iter().position(|e| e == "start 1").unwrap();
    assert!(
        end0 < start1,
        "key k's entry 1 started before its entry 0 ended: {log:?}"
    );
    new.shutdown().await;
}

// ---- a settler that dies -----------------------------------------------------------------

static AFTER_PANIC: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("settler-panic").group("g"), prefetch(4))]
async fn settler_panic(_job: &Job) {
    AFTER_PANIC.fetch_add(1, Ordering::SeqCst);
}

/// A settler that dies stops the subscription, and the app's health says
/// so, rather than the reader waiting for room for ever.
#[tokio::test(start_paused = true)]
async fn a_settler_that_dies_does_not_stall_the_subscription_silently() {
    let (broker, app) = start_fresh_named::<Faulty>("review", settler_panic).await;
    broker.panic_next_ack.store(true, Ordering::SeqCst);
    publish_jobs(&broker.inner, "settler-panic", 0..20).await;
    advance(Duration::from_secs(1), 30).await;
    let handled = AFTER_PANIC.load(Ordering::SeqCst);
    let healthy = app.health().is_healthy();
    assert!(
        handled == 20 || !healthy,
        "{handled} of 20 handled, and the app still says it is healthy"
    );
    app.shutdown().await;
}
