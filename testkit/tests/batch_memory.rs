//! Batch subscribers (`docs/batches.md`) on the memory broker, on tokio's
//! paused clock: the scenarios every broker runs (`batch_scenarios`), and
//! the testkit's `TestApp` driving a batch that waits on the clock.

#![allow(clippy::unwrap_used)]

mod batch_scenarios;

use batch_scenarios::{Job, stream};
use ruststream::prelude::*;
use ruststream::{MemoryBroker, Settlement};
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

fn app() -> impl App {
    RustStream::new(AppInfo::new("ledger", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(ledger);
    })
}

/// `run_until_quiet` counts a gathering batch as waiting on the clock, and
/// `advance` moves it to its wait: exactly at 1 s, not a millisecond
/// before. Full batches run at once; a failing batch retries every entry.
#[tokio::test]
async fn testkit_drives_a_batch_on_the_paused_clock() {
    let tb = TestApp::start(app()).await;
    let tb = tb.unwrap();
    let stream = stream("testkit");
    for n in 0..7 {
        tb.publish(&Job { n }).to(&stream).await.unwrap();
    }
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
