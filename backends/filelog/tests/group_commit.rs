//! Group commit: concurrent durable publishes share fsyncs (the leader of
//! a sync waits for the publishers it expects, on either runtime flavor,
//! without a timer), every one of them completes and is on disk, and a
//! publish dropped while it leads a sync leaves no one stuck. Concurrent
//! publishes combined into one write keep each publisher's order and are
//! stored under the ids they were given.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::TempDir;
use ruststream_core::{Broker, EntryId, Message};
use ruststream_filelog::{FileLogBroker, FileLogOptions, SyncPolicy};

const STREAM: &str = "jobs";

/// `publishers` tasks each publishing `each` messages, awaiting each one;
/// returns how many were published.
async fn publish_concurrently(b: &FileLogBroker, publishers: usize, each: usize) -> usize {
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..publishers {
        let b = b.clone();
        tasks.spawn(async move {
            for i in 0..each {
                b.publish(STREAM, Message::new(format!("{p}-{i}").into_bytes()))
                    .await
                    .unwrap();
            }
        });
    }
    let mut done = 0;
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
        done += each;
    }
    done
}

/// Checks that `b` took at most `most` syncs for `published` publishes
/// (`what` says why), then that all of them are there after a reopen.
async fn check_shared_and_stored(
    b: FileLogBroker,
    dir: &TempDir,
    published: u64,
    most: u64,
    what: &str,
) {
    let syncs = b.syncs();
    assert!(
        syncs <= most,
        "{syncs} syncs for {published} publishes: {what}"
    );
    drop(b);
    assert_eq!(stored(dir).await, published);
}

async fn stored(dir: &TempDir) -> u64 {
    let b = FileLogBroker::open(&dir.0).unwrap();
    b.range(STREAM, EntryId::ZERO, EntryId::MAX, 100_000)
        .await
        .unwrap()
        .len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishers_share_syncs_and_every_publish_is_stored() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    let published = publish_concurrently(&b, 16, 20).await as u64;
    assert_eq!(published, 320);
    check_shared_and_stored(b, &dir, published, published - 1, "none was shared").await;
}

#[tokio::test(start_paused = true)]
async fn on_a_current_thread_runtime_the_leader_gathers_the_publishers_without_a_timer() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    let before = tokio::time::Instant::now();
    let published = publish_concurrently(&b, 8, 10).await as u64;
    // No timer was waited on: the paused clock did not move.
    assert_eq!(tokio::time::Instant::now(), before);
    // After the first sync, the 8 share each sync: 11 in all (without
    // the leader's wait, two groups of about 4 take turns: about 20).
    let most = published / 8 + 3;
    check_shared_and_stored(b, &dir, published, most, "8 publishers took turns").await;
}

#[tokio::test(start_paused = true)]
async fn a_publish_dropped_while_it_leads_a_sync_leaves_no_one_stuck() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    // Polled once: it writes, leads the sync and waits for the fsync on the
    // blocking pool; then it is dropped.
    let dropped = tokio::time::timeout(
        Duration::ZERO,
        b.publish(STREAM, Message::new(b"dropped".to_vec())),
    )
    .await;
    assert!(dropped.is_err(), "the publish was not pending: {dropped:?}");
    // The next publish leads a sync of its own, covering the dropped one's
    // write too.
    b.publish(STREAM, Message::new(b"next".to_vec()))
        .await
        .unwrap();
    b.sync().await.unwrap();
    drop(b);
    assert_eq!(stored(&dir).await, 2);
}

/// 16 publishers on two worker threads: the publishes that arrive while
/// one holds the broker's lock are combined into one write (see
/// `ruststream_local`'s `combine`). Each publisher's ids still increase,
/// and after a reopen (nothing synced by hand first: a process that died
/// here would leave the same files) every publish is there under its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_publishes_keep_each_publishers_order_and_are_stored_under_their_ids() {
    for sync in [
        SyncPolicy::EveryPublish,
        SyncPolicy::Interval(Duration::from_millis(10)),
    ] {
        let dir = TempDir::new();
        let options = FileLogOptions {
            sync,
            ..FileLogOptions::default()
        };
        let b = FileLogBroker::open_with(&dir.0, options).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for p in 0..16 {
            let b = b.clone();
            tasks.spawn(async move {
                let mut published = Vec::new();
                for i in 0..100 {
                    let payload = format!("{p}-{i}");
                    let message = Message::new(payload.clone().into_bytes());
                    published.push((b.publish(STREAM, message).await.unwrap(), payload));
                }
                published
            });
        }
        let mut all = std::collections::BTreeMap::new();
        while let Some(joined) = tasks.join_next().await {
            let published = joined.unwrap();
            assert!(
                published.windows(2).all(|w| w[0].0 < w[1].0),
                "{sync:?}: a publisher's ids went back"
            );
            all.extend(published);
        }
        assert_eq!(all.len(), 1_600, "{sync:?}: an id was given twice");
        drop(b);
        let b = FileLogBroker::open(&dir.0).unwrap();
        let stored: std::collections::BTreeMap<EntryId, String> = b
            .range(STREAM, EntryId::ZERO, EntryId::MAX, 10_000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.id, String::from_utf8(e.message.payload.to_vec()).unwrap()))
            .collect();
        assert_eq!(stored, all, "{sync:?}");
    }
}
