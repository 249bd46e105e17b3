//! Crash test of the file log: a child process publishes and consumes, and
//! is killed with SIGKILL at random moments, over and over. After each kill
//! a checker opens the log and verifies that every publish acknowledged to
//! the producer is there (0 lost) and that neither group skipped anything:
//! every entry at or before a group's cursor was handled or is still
//! pending or dead-lettered (0 skipped). At the end a last child drains
//! both groups and exits: every published entry was then handled by both,
//! the `new` group `audit` included, which gets back what a killed child
//! held only through the restarted child's recovery of its own pending
//! list. Entries handled more than once (allowed: delivery is at least
//! once) are reported per kill, and no kill may cause more than the
//! read-ahead of the group's subscriptions (see
//! `support::crash::Seen::report_duplicates`).
//!
//! This test kills real processes, so it runs in real time (about ten
//! seconds); every other test of time uses the paused clock.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;
use std::time::Duration;

use ruststream::{Broker, EntryId, FileLogBroker, ReadMode, ReadRequest};
use support::crash::{Lcg, STREAM, Seen, run_and_kill, run_to_exit};

const KILLS: usize = 24;

fn child() -> Command {
    Command::new(env!("CARGO_BIN_EXE_filelog-crash-child"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_and_skips_nothing() {
    let started = std::time::Instant::now();
    let dir = std::env::temp_dir().join(format!("ruststream-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut rng, seed) = Lcg::seeded();
    println!("seed {seed} (set RUSTSTREAM_CRASH_SEED to replay)");
    let mut seen = Seen::default();
    for round in 0..KILLS {
        let life = Duration::from_millis(80 + rng.below(400));
        let out = run_and_kill(child().arg(&dir), life).await;
        seen.take(&out, round);
        let broker = FileLogBroker::open(&dir)
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        seen.check_kill(&broker, round, life).await;
    }
    seen.assert_published_enough("the child");

    // A last child drains both groups: what killed children held comes
    // back to it by claiming (`workers`) and by its own pending list
    // (`audit`, where nothing else would hand it out again).
    let (status, out) =
        run_to_exit(child().arg(&dir).arg("--drain"), Duration::from_secs(45)).await;
    assert!(status.success(), "the draining child failed: {status}");
    seen.take(&out, KILLS);

    // Whatever `workers` still has (nothing, after the drain) is claimed
    // here, as part of the last life.
    let broker = FileLogBroker::open(&dir).unwrap();
    for _ in 0..1000 {
        let mode = ReadMode::Claiming {
            min_idle: Duration::ZERO,
        };
        let batch = broker
            .read(ReadRequest::new(STREAM, "workers", "drain", mode, 1000))
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        let ids: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
        for id in &ids {
            seen.group_mut("workers").handle(*id, KILLS);
        }
        broker.ack(STREAM, "workers", &ids).await.unwrap();
    }
    seen.check_all(&broker, KILLS).await;
    seen.assert_all_handled();
    println!(
        "seed {seed}: {KILLS} kills, {} acknowledged publishes, 0 lost, 0 skipped, {:?}",
        seen.published.len(),
        started.elapsed()
    );
    seen.report_duplicates(seed, KILLS);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
