//! Whole apps on a real Redis server: three workers sharing 300 jobs while
//! one of them dies, the start-up gate for claiming subscriptions, and a
//! subscription that rides out lost connections and a flushed server.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Message, StartError};
use ruststream_redis::RedisBroker;
use support::{kill_clients_of_db, unique, url, url_db};

#[derive(Debug, Deserialize, Serialize)]
struct Job {
    n: u64,
}

// ---- three workers, 300 jobs ------------------------------------------------

const JOBS: u64 = 300;
const POISON: u64 = 123;
const CRASH_AFTER: usize = 15;
const MIN_IDLE: Duration = Duration::from_millis(500);

fn jobs() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| unique("jobs")).clone()
}

/// Good jobs done, with how many times each was done.
static DONE: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());
static CRASHY_HANDLED: AtomicUsize = AtomicUsize::new(0);
static TAKEN_OVER: AtomicUsize = AtomicUsize::new(0);

fn work(job: &Job) -> HandlerOutcome {
    if job.n == POISON {
        return HandlerOutcome::retry();
    }
    *DONE.lock().unwrap().entry(job.n).or_default() += 1;
    HandlerOutcome::ack()
}

/// New jobs. A retry here appends a copy that carries the count.
#[subscriber(
    RedisStream::new(jobs()).group("workers").start_id(StreamStart::Beginning),
    workers(4),
    max_deliveries(3)
)]
async fn take_new(job: &Job) -> HandlerOutcome {
    work(job)
}

/// Recovery on a server without claiming reads: jobs a stopped worker held
/// for `MIN_IDLE`.
#[subscriber(
    RedisStream::reclaim(jobs(), MIN_IDLE).group("workers"),
    workers(2),
    max_deliveries(3)
)]
async fn take_over(job: &Job) -> HandlerOutcome {
    TAKEN_OVER.fetch_add(1, Ordering::SeqCst);
    work(job)
}

/// A worker that handles 15 jobs, then hangs on the next one until its
/// process dies, never acking what it holds.
#[subscriber(
    RedisStream::new(jobs()).group("workers").start_id(StreamStart::Beginning),
    max_deliveries(3)
)]
async fn crashy(job: &Job) -> HandlerOutcome {
    if CRASHY_HANDLED.load(Ordering::SeqCst) >= CRASH_AFTER {
        std::future::pending::<()>().await;
    }
    CRASHY_HANDLED.fetch_add(1, Ordering::SeqCst);
    work(job)
}

fn worker_app() -> RustStream {
    RustStream::new(AppInfo::new("jobs", "0.1.0")).with_broker(
        RedisBroker::standalone(url()),
        |b| {
            b.include(take_new);
            b.include(take_over);
        },
    )
}

async fn wait_until(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_share_300_jobs_while_one_dies_and_one_job_is_poison() {
    let started = std::time::Instant::now();
    let admin = RedisBroker::standalone(url());
    let stream = jobs();
    let payloads: Vec<Message> = (0..JOBS)
        .map(|n| Message::new(serde_json::to_vec(&Job { n }).unwrap()))
        .collect();
    admin.publish_batch(&stream, payloads).await.unwrap();

    // The crashy worker runs in a process of its own (a runtime here), so
    // that killing it drops everything it held, as kill -9 would.
    let crashy_process = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    crashy_process.spawn(async {
        let app = RustStream::new(AppInfo::new("jobs", "0.1.0")).with_broker(
            RedisBroker::standalone(url()),
            |b| {
                b.include(crashy);
            },
        );
        let _running = app.start().await.unwrap();
        std::future::pending::<()>().await;
    });
    wait_until(
        "the crashy worker to handle its 15 jobs",
        Duration::from_secs(10),
        async || CRASHY_HANDLED.load(Ordering::SeqCst) >= CRASH_AFTER,
    )
    .await;
    // Let it read past its 15th job (it holds them, hung), then start the others.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let w1 = worker_app().start().await.unwrap();
    let w2 = worker_app().start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    crashy_process.shutdown_background();
    let held = admin
        .pending(&stream, "workers", ruststream::EntryId::ZERO, 100, None)
        .await
        .unwrap();
    assert!(
        !held.is_empty(),
        "the crashy worker died holding jobs it never acked"
    );

    wait_until(
        "every good job, the dead letter and an empty pending list",
        Duration::from_secs(20),
        async || {
            let done = DONE.lock().unwrap().len() as u64;
            let Ok(info) = admin.group_info(&stream, "workers").await else {
                return false;
            };
            done == JOBS - 1 && info.dead_letters == 1 && info.pending == 0
        },
    )
    .await;
    w1.shutdown().await;
    w2.shutdown().await;

    let done = DONE.lock().unwrap().clone();
    let expected: BTreeSet<u64> = (0..JOBS).filter(|&n| n != POISON).collect();
    assert_eq!(done.keys().copied().collect::<BTreeSet<_>>(), expected);
    let twice = done.values().filter(|&&c| c > 1).count();

    let dead = admin
        .dead_letters(&stream, "workers", ruststream::EntryId::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let poison: Job = serde_json::from_slice(dead[0].entry.payload()).unwrap();
    assert_eq!(poison.n, POISON);
    assert_eq!(dead[0].times_delivered, 3);
    assert!(
        dead[0].reason.contains("max_deliveries"),
        "{}",
        dead[0].reason
    );

    assert!(
        TAKEN_OVER.load(Ordering::SeqCst) > 0,
        "the jobs the crashy worker held were taken over"
    );
    let info = admin.group_info(&stream, "workers").await.unwrap();
    assert_eq!(info.pending, 0);
    let consumers = admin.consumers(&stream, "workers").await.unwrap();
    assert!(consumers.iter().all(|c| c.pending == 0), "{consumers:?}");
    eprintln!(
        "300 jobs: {} done ({twice} more than once), {} taken over from the dead worker, poison dead-lettered after {} deliveries, {:?}",
        done.len(),
        TAKEN_OVER.load(Ordering::SeqCst),
        dead[0].times_delivered,
        started.elapsed()
    );
}

// ---- claiming subscriptions on an older server --------------------------------

fn ledger_stream() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| unique("payments")).clone()
}

#[subscriber(RedisStream::claiming(ledger_stream(), Duration::from_secs(30)).group("ledger"))]
async fn post_payment(job: &Job) {
    let _ = job.n;
}

#[tokio::test]
async fn an_app_with_a_claiming_subscription_does_not_start_before_redis_8_4() {
    let probe = RedisBroker::standalone(url());
    let supported = probe
        .check_mode(ruststream::ReadMode::Claiming {
            min_idle: Duration::from_secs(1),
        })
        .await
        .is_ok();
    let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
        RedisBroker::standalone(url()),
        |b| {
            b.include(post_payment);
        },
    );
    match app.start().await {
        Ok(running) => {
            assert!(supported, "started on a server without claiming reads");
            running.shutdown().await;
        }
        Err(e) => {
            assert!(!supported, "refused on a server with claiming reads: {e}");
            assert!(matches!(e, StartError::Unsupported { .. }), "{e:?}");
            let text = e.to_string();
            for needle in ["post_payment", "ledger", "8.4", "reclaim"] {
                assert!(text.contains(needle), "{needle:?} missing from: {text}");
            }
            // Nothing was read or created: the group does not exist.
            assert!(probe.group_info(&ledger_stream(), "ledger").await.is_err());
        }
    }
}

// ---- resilience -------------------------------------------------------------------

const RESILIENT_DB: u32 = 11;

fn resilient_stream() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| unique("resilient")).clone()
}

static RECEIVED: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

#[subscriber(
    RedisStream::new(resilient_stream())
        .group("g")
        .start_id(StreamStart::Beginning),
    workers(2)
)]
async fn resilient(job: &Job) {
    RECEIVED.lock().unwrap().insert(job.n);
}

async fn publish_until_ok(broker: &RedisBroker, n: u64) {
    let body = serde_json::to_vec(&Job { n }).unwrap();
    for _ in 0..100 {
        match broker
            .publish(&resilient_stream(), Message::new(body.clone()))
            .await
        {
            Ok(_) => return,
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    panic!("could not publish job {n}");
}

/// Publishes jobs `jobs` (each until the broker takes it), then waits up
/// to 10 s until every job up to `jobs.end` has been received.
async fn publish_then_wait(publisher: &RedisBroker, jobs: std::ops::Range<u64>, what: &str) {
    let total = usize::try_from(jobs.end).unwrap();
    for n in jobs {
        publish_until_ok(publisher, n).await;
    }
    wait_until(what, Duration::from_secs(10), async || {
        RECEIVED.lock().unwrap().len() >= total
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_rides_out_killed_connections_and_a_flushed_server() {
    let publisher = RedisBroker::standalone(url_db(RESILIENT_DB));
    let app = RustStream::new(AppInfo::new("resilient", "0.1.0")).with_broker(
        RedisBroker::standalone(url_db(RESILIENT_DB)),
        |b| {
            b.include(resilient);
        },
    );
    let running = app.start().await.unwrap();

    publish_then_wait(&publisher, 0..10, "the first 10 jobs").await;

    // The connections drop (a network failure, a proxy restart).
    assert!(kill_clients_of_db(RESILIENT_DB).await >= 1);
    publish_then_wait(
        &publisher,
        10..20,
        "10 jobs after the connections were killed",
    )
    .await;

    // The server loses everything (a restart without persistence): the
    // group is gone, reads say NOGROUP, and the runtime recreates it from
    // the subscription's start position.
    let mut cli = support::raw(RESILIENT_DB).await;
    let _: () = redis::cmd("FLUSHDB").query_async(&mut cli).await.unwrap();
    publish_then_wait(&publisher, 20..30, "10 jobs after the server was flushed").await;
    running.shutdown().await;
    assert_eq!(RECEIVED.lock().unwrap().len(), 30);
}
