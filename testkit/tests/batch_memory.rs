//! Batch subscribers (`docs/batches.md`) on the memory broker, on tokio's
//! paused clock: the scenarios every broker runs (`batch_scenarios`), and
//! the testkit's `TestApp` driving a batch that waits on the clock.

#![allow(clippy::unwrap_used)]

mod batch_scenarios;
mod support;

use batch_scenarios::{Job, stream};
use ruststream::prelude::*;
use ruststream::{MemoryBroker, Settlement, Subscriber};
use ruststream_testkit::TestApp;

batch_scenarios::batch_scenario_tests!(
    #[tokio::test(start_paused = true)]
    MemoryBroker::new()
);

#[subscriber(
    RedisStream::new(stream("testkit")).group("batch"),
    workers(2),
    batch(max = 5, wait = 1s)
)]
async fn ledger(jobs: Vec<Job>) -> Result<(), String> {
    if jobs.iter().any(|job| job.n == 99) {
        return Err("job 99 fails its batch".into());
    }
    Ok(())
}

/// The app `ledger` on a fresh memory broker running `subscriber` alone,
/// started, with a job for each of `jobs` published to `stream`.
async fn start_with(
    subscriber: impl Subscriber,
    stream: &str,
    jobs: impl IntoIterator<Item = u64>,
) -> TestApp {
    let app = RustStream::new(AppInfo::new("ledger", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(subscriber);
    });
    let tb = TestApp::start(app).await.unwrap();
    for n in jobs {
        tb.publish(&Job { n }).to(stream).await.unwrap();
    }
    tb
}

/// `run_until_quiet` counts a gathering batch as waiting on the clock, and
/// `advance` moves it to its wait: exactly at 1 s, not a millisecond
/// before. Full batches run at once; a failing batch retries every entry.
#[tokio::test]
async fn testkit_drives_a_batch_on_the_paused_clock() {
    let stream = stream("testkit");
    let tb = start_with(ledger, &stream, 0..7).await;
    tb.run_until_quiet().await;
    assert_eq!(tb.received("ledger").len(), 5, "the full batch ran at once");
    tb.advance(Duration::from_millis(999)).await;
    assert_eq!(tb.received("ledger").len(), 5, "not before the wait");
    tb.advance(Duration::from_millis(1)).await;
    assert_eq!(
        tb.received("ledger").len(),
        7,
        "the partial batch at the wait"
    );

    for n in [98, 99] {
        tb.publish(&Job { n }).to(&stream).await.unwrap();
    }
    tb.advance(Duration::from_secs(1)).await;
    let received = tb.received("ledger");
    let failed: Vec<u64> = received
        .iter()
        .filter(|r| matches!(&r.settlement, Settlement::Retried { reason: Some(e) } if e == "job 99 fails its batch"))
        .map(|r| r.payload::<Job>().n)
        .collect();
    assert!(failed.starts_with(&[98, 99]), "{failed:?}");
    tb.shutdown().await;
}

static PANICKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[subscriber(RedisStream::new(stream("panic")).group("batch"), batch(max = 3, wait = 1s))]
async fn explodes_once(jobs: Vec<Job>) {
    if !PANICKED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        panic!("the ledger exploded on {} jobs", jobs.len());
    }
}

/// A batch handler that panics retries every entry of its batch: the first
/// with the panic's message, the others pointing to it; the copies then
/// run as a batch of their own and are acked.
#[tokio::test]
async fn a_panic_retries_the_whole_batch() {
    let stream = stream("panic");
    let tb = start_with(explodes_once, &stream, 0..3).await;
    tb.run_until_quiet().await;
    let received = tb.received("explodes_once");
    let reasons: Vec<String> = received
        .iter()
        .filter_map(|r| match &r.settlement {
            Settlement::Retried {
                reason: Some(reason),
            } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons.len(), 3, "{received:?}");
    assert_eq!(
        reasons
            .iter()
            .filter(|r| r.contains("the ledger exploded on 3 jobs"))
            .count(),
        1,
        "{reasons:?}"
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|r| r.contains("the batch handler panicked: see the error logged for entry"))
            .count(),
        2,
        "{reasons:?}"
    );
    let acked = received
        .iter()
        .filter(|r| r.settlement == Settlement::Acked)
        .count();
    assert_eq!(acked, 3, "the copies run as a batch: {received:?}");
    tb.shutdown().await;
}

static AT_STOP: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::new(stream("stop")).group("batch"), batch(max = 10, wait = 1h))]
async fn gathers_for_an_hour(jobs: Vec<Job>) {
    AT_STOP.lock().unwrap().extend(jobs.iter().map(|job| job.n));
}

/// At shutdown a batch still gathering runs at once rather than wait out
/// its hour, and its entries are acked.
#[tokio::test]
async fn shutdown_runs_a_gathering_batch() {
    let stream = stream("stop");
    let tb = start_with(gathers_for_an_hour, &stream, 0..2).await;
    tb.run_until_quiet().await;
    assert!(AT_STOP.lock().unwrap().is_empty(), "still gathering");
    let broker = tb.broker().clone();
    let started = tokio::time::Instant::now();
    tb.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "no hour waited"
    );
    assert_eq!(*AT_STOP.lock().unwrap(), [0, 1]);
    let info = broker.group_info(&stream, "batch").await.unwrap();
    assert_eq!(info.pending, 0, "acked before the app stopped");
}
