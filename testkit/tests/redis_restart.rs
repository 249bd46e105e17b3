//! An app consuming from Redis while the server is killed (SIGKILL) and
//! restarted on the same port mid-run, with a producer publishing
//! steadily throughout. Each test starts its own `redis-server` (a private
//! port and directory, never the shared server).
//!
//! - With persistence (`--appendonly yes --appendfsync always`): nothing
//!   whose publish returned `Ok` is lost, and every such entry is handled.
//! - Without (`--save "" --appendonly no`): the server comes back empty,
//!   stream and group gone. What was published before the kill is lost
//!   with the server: that is what running without persistence means, and
//!   is not checked. Nothing published after the restart may be skipped:
//!   the group must come back at the last id the app read, or at the start
//!   of the stream that is new since then, not at `$`.
//!
//! In both, the app rides the outage out: it logs errors and retries with
//! backoff (reads counted while the server is down: no hot loop), does not
//! crash, and handles new entries within a bounded time of the restart.
//!
//! The server really dies, so these run in real time (7 to 12 s, the two
//! side by side).

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ruststream::prelude::*;
use ruststream::{
    Broker, BrokerFuture, BrokerScope, EntryId, Message, ReadBatch, ReadRequest, RedisBroker,
    forward_broker,
};
use support::redis_server::{Persistence, RedisServer};
use support::{Job, assert_none, stored_jobs};

const STREAM: &str = "restart-jobs";
/// How long the server stays down.
const DOWN: Duration = Duration::from_secs(2);
/// Most reads the app may attempt while the server is down: backoff from
/// 50 ms doubling to 5 s makes about 6 in 2 s; a hot loop makes thousands.
const MAX_READS_DOWN: u64 = 30;
/// The app handles entries published after the restart within this long
/// (the backoff is at most 5 s, and a recreated group costs one more).
const RESUME_WITHIN: Duration = Duration::from_secs(15);
/// Steady production: one publish per this long.
const PACE: Duration = Duration::from_millis(5);
/// Bound on the producer's publishes.
const MAX_JOBS: u64 = 20_000;

/// Jobs handled, with how many times, per test.
static AOF_HANDLED: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());
static BARE_HANDLED: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());

fn count(handled: &Mutex<BTreeMap<u64, u32>>, n: u64) {
    *handled.lock().unwrap().entry(n).or_default() += 1;
}

// A `new` subscription with the default start (`$`): on a server that
// lost the group, where it is recreated decides what is skipped.
#[subscriber(RedisStream::new(STREAM).group("g").consumer("restart-aof"), workers(2), prefetch(16))]
async fn aof_handler(job: &Job) {
    count(&AOF_HANDLED, job.n);
}

#[subscriber(RedisStream::new(STREAM).group("g").consumer("restart-bare"), workers(2), prefetch(16))]
async fn bare_handler(job: &Job) {
    count(&BARE_HANDLED, job.n);
}

/// The app's broker: a Redis broker whose reads are counted.
struct Counted {
    inner: RedisBroker,
    reads: AtomicU64,
    failed_reads: AtomicU64,
}

impl Broker for Counted {
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let result = self.inner.read(request).await;
            if result.is_err() {
                self.failed_reads.fetch_add(1, Ordering::SeqCst);
            }
            result
        })
    }

    forward_broker!(
        inner: name, failure, check_mode, publish, publish_batch, ensure_group,
        set_group_position, ack, retry, dead_letter, redrive, discard, group_info, consumers,
        pending, dead_letters, range, stream_info, trim,
        extend_claim, count_deliveries,
    );
}

/// A publish that returned `Ok`.
#[derive(Clone, Copy, Debug)]
struct Published {
    n: u64,
    id: EntryId,
    /// The server's generation when the publish was called: 0 before the
    /// kill (or while down), 1 once the restarted server answered.
    generation: u32,
}

#[derive(Default)]
struct Producer {
    generation: AtomicU32,
    stop: AtomicBool,
    published: Mutex<Vec<Published>>,
    failed: AtomicU64,
}

impl Producer {
    fn acked(&self) -> Vec<Published> {
        self.published.lock().unwrap().clone()
    }
}

/// Publishes job after job, one per `PACE`, until told to stop; records
/// what was acknowledged (publish returned `Ok`) and counts failures.
async fn produce(url: String, state: Arc<Producer>) {
    let broker = RedisBroker::standalone(url);
    for n in 0..MAX_JOBS {
        if state.stop.load(Ordering::SeqCst) {
            return;
        }
        let generation = state.generation.load(Ordering::SeqCst);
        let body = serde_json::to_vec(&Job { n }).unwrap();
        match broker.publish(STREAM, Message::new(body)).await {
            Ok(id) => state
                .published
                .lock()
                .unwrap()
                .push(Published { n, id, generation }),
            Err(_) => {
                state.failed.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(PACE).await;
    }
}

/// Waits (in real time, at most `limit`) until `done` holds; returns
/// whether it did.
async fn wait_until(limit: Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the app through one kill and restart of its server.
async fn restart_mid_run(
    persistence: Persistence,
    handled: &'static Mutex<BTreeMap<u64, u32>>,
    include: impl FnOnce(&mut BrokerScope<'_>),
) {
    let started = Instant::now();
    let label = format!("{persistence:?}");
    let mut server = RedisServer::start(&label.to_lowercase(), persistence);
    let url = server.url();
    let handled_count = || handled.lock().unwrap().len();
    let broker = Arc::new(Counted {
        inner: RedisBroker::standalone(&url),
        reads: AtomicU64::new(0),
        failed_reads: AtomicU64::new(0),
    });
    let running = RustStream::new(AppInfo::new("restart", "0"))
        .with_shared_broker(Arc::clone(&broker) as Arc<dyn Broker>, include)
        .start()
        .await
        .unwrap();
    let producer = Arc::new(Producer::default());
    let production = tokio::spawn(produce(url.clone(), Arc::clone(&producer)));
    let checker = RedisBroker::standalone(&url);

    assert!(
        wait_until(Duration::from_secs(10), async || handled_count() >= 100).await,
        "{label}: the app did not handle 100 jobs before the kill"
    );

    // Kill the server and keep it down for a while.
    let reads_before = broker.reads.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| server.kill());
    let killed = Instant::now();
    tokio::time::sleep(DOWN).await;
    let reads_down = broker.reads.load(Ordering::SeqCst) - reads_before;
    let handled_before = handled_count();

    // Back on the same port.
    tokio::task::block_in_place(|| server.restart(persistence));
    let restarted = Instant::now();
    let reads_at_restart = broker.reads.load(Ordering::SeqCst);
    if persistence == Persistence::None {
        // The restarted server is empty: nothing of before the kill is
        // left (the app or the producer may already have made the stream
        // and group anew).
        let before: BTreeSet<EntryId> = producer.acked().iter().map(|p| p.id).collect();
        let now = checker
            .range(STREAM, EntryId::ZERO, EntryId::MAX, usize::MAX)
            .await
            .unwrap();
        assert!(
            now.iter().all(|e| !before.contains(&e.id)),
            "{label}: entries of before the kill survived a restart without persistence"
        );
    }
    producer.generation.store(1, Ordering::SeqCst);

    // The app resumes: it handles a job published after the restart.
    let after_restart = || {
        let handled = handled.lock().unwrap();
        producer
            .acked()
            .iter()
            .filter(|p| p.generation == 1)
            .any(|p| handled.contains_key(&p.n))
    };
    let resumed = wait_until(RESUME_WITHIN, async || after_restart()).await;
    let resumed_in = restarted.elapsed();
    let reads_to_resume = broker.reads.load(Ordering::SeqCst) - reads_at_restart;
    assert!(
        resumed,
        "{label}: no job published after the restart was handled within {RESUME_WITHIN:?} \
         ({reads_to_resume} reads since the restart)"
    );

    // Production goes on for a while, then stops.
    tokio::time::sleep(Duration::from_secs(1)).await;
    producer.stop.store(true, Ordering::SeqCst);
    production.await.unwrap();
    let acked = producer.acked();

    // What must be handled: with AOF, everything acknowledged; without
    // persistence, everything in the new stream (it holds only what was
    // published since the restart: the rest was lost with the server).
    let stored = stored_jobs(&checker, STREAM).await;
    let must_be_stored: Vec<&Published> = acked
        .iter()
        .filter(|p| persistence == Persistence::AofAlways || p.generation == 1)
        .collect();
    let lost: Vec<u64> = must_be_stored
        .iter()
        .filter(|p| stored.get(&p.id) != Some(&p.n))
        .map(|p| p.n)
        .collect();
    let required: BTreeSet<u64> = stored.values().copied().collect();
    // Wait until every required job is handled, or the app has caught up
    // (nothing left to read, nothing in flight: no more will come).
    let caught_up = async || {
        let handled = handled.lock().unwrap().clone();
        if required.iter().all(|n| handled.contains_key(n)) {
            return true;
        }
        let lag = checker.group_info(STREAM, "g").await.map(|g| g.lag);
        matches!(lag, Ok(0)) && running.in_flight() == 0
    };
    wait_until(Duration::from_secs(20), caught_up).await;
    let stats = running.stats().await;
    tokio::time::timeout(Duration::from_secs(10), running.shutdown())
        .await
        .unwrap_or_else(|_| panic!("{label}: the app did not shut down within 10 s"));

    let handled = handled.lock().unwrap().clone();
    let skipped: Vec<u64> = required
        .iter()
        .filter(|n| !handled.contains_key(n))
        .copied()
        .collect();
    let after: Vec<&Published> = acked.iter().filter(|p| p.generation == 1).collect();
    let lost_with_server = acked.iter().filter(|p| !stored.contains_key(&p.id)).count();
    let twice = handled.values().filter(|c| **c > 1).count();
    let pending = stats.first().and_then(|s| s.pending);
    println!(
        "{label}: {} publishes acknowledged ({} after the restart, {} failed), {} handled \
         ({twice} more than once); server down {:?}: {reads_down} reads while down \
         ({} failed reads in all), resumed {resumed_in:?} after the restart ({reads_to_resume} \
         reads); {} acknowledged entries not in the stream after the restart (lost with the \
         server: {}), {} lost that must not be, {} of {} required entries never handled, e.g. \
         {:?}; {} entries left pending; {handled_before} handled before the restart; {:?} in all",
        acked.len(),
        after.len(),
        producer.failed.load(Ordering::SeqCst),
        handled.len(),
        killed.elapsed() - restarted.elapsed(),
        broker.failed_reads.load(Ordering::SeqCst),
        lost_with_server,
        if persistence == Persistence::None {
            "allowed"
        } else {
            "not allowed"
        },
        lost.len(),
        skipped.len(),
        required.len(),
        &skipped[..skipped.len().min(5)],
        pending.map_or("?".to_owned(), |p| p.to_string()),
        started.elapsed(),
    );

    assert!(
        reads_down <= MAX_READS_DOWN,
        "{label}: {reads_down} reads in {DOWN:?} while the server was down: a hot loop"
    );
    assert!(
        after.len() >= 50,
        "{label}: too few publishes after the restart to test: {}",
        after.len()
    );
    assert!(
        lost.is_empty(),
        "{label}: {} acknowledged publishes lost, e.g. jobs {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    if persistence == Persistence::AofAlways {
        let never: Vec<u64> = acked
            .iter()
            .map(|p| p.n)
            .filter(|n| !handled.contains_key(n))
            .collect();
        assert_none(&never, 5, &label, "acknowledged jobs never handled");
    }
    let first_after = after.first().map(|p| p.n);
    assert!(
        skipped.is_empty(),
        "{label}: {} of the {} entries published since the restart were never handled, e.g. \
         jobs {:?} (the first published after the restart: {first_after:?}); the group was \
         recreated past them",
        skipped.len(),
        required.len(),
        &skipped[..skipped.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_rides_out_a_redis_restart_with_aof_and_loses_nothing() {
    restart_mid_run(Persistence::AofAlways, &AOF_HANDLED, |b| {
        b.include(aof_handler);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_rides_out_a_redis_restart_without_persistence_and_skips_nothing_new() {
    restart_mid_run(Persistence::None, &BARE_HANDLED, |b| {
        b.include(bare_handler);
    })
    .await;
}
