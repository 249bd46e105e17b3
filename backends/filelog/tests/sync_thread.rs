//! The sync thread ends with its broker: dropping the last clone of a
//! broker, publishes waiting or not, neither hangs nor leaves the thread
//! running. Alone in its test binary, as it counts the process's threads.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::TempDir;
use ruststream_core::{Broker, Message};
use ruststream_filelog::{FileLogBroker, FileLogOptions, SyncPolicy};

/// The process's threads named as the sync thread (the kernel keeps the
/// first 15 bytes of a name).
fn sync_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "ruststream-file")
        .count()
}

/// Waits (real time, polling: a thread names itself, and ends, when the
/// scheduler runs it) until there are `count` sync threads; fails after
/// 10 s.
fn assert_sync_threads(count: usize) {
    let until = Instant::now() + Duration::from_secs(10);
    while sync_threads() != count {
        assert!(
            Instant::now() < until,
            "{} sync threads, not {count}",
            sync_threads()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn dropping_the_broker_ends_its_sync_thread_even_with_publishes_cut_off() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new()).collect();
    let policies = [
        SyncPolicy::EveryPublish,
        SyncPolicy::Interval(Duration::from_millis(5)),
        SyncPolicy::EveryPublish,
    ];
    let brokers: Vec<FileLogBroker> = dirs
        .iter()
        .zip(policies)
        .map(|(dir, sync)| {
            let options = FileLogOptions {
                sync,
                ..FileLogOptions::default()
            };
            FileLogBroker::open_with(&dir.0, options).unwrap()
        })
        .collect();
    assert_sync_threads(3);
    let started = Instant::now();
    runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for b in &brokers {
            for p in 0..8 {
                let b = b.clone();
                tasks.spawn(async move {
                    loop {
                        let message = Message::new(format!("{p}").into_bytes());
                        b.publish("jobs", message).await.unwrap();
                        // An `Interval` publish is ready at once.
                        tokio::task::yield_now().await;
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Cut off wherever they are, waiting for a sync or not.
        tasks.shutdown().await;
    });
    drop(brokers);
    assert_sync_threads(0);
    drop(runtime);
    assert!(started.elapsed() < Duration::from_secs(30));
}
