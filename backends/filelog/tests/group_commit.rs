//! Group commit: concurrent durable publishes share fsyncs (the sync
//! thread waits for the publishers it expects, on either runtime flavor;
//! on a current-thread one they gather without a timer, and a paused clock
//! does not move while they wait), every one of them completes and is on
//! disk, a publish dropped while it waits (at any point) leaves no one
//! stuck, and a failed sync fails every publish it covered. Concurrent
//! publishes combined into one write keep each publisher's order and are
//! stored under the ids they were given.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{TempDir, publish_bytes};
use ruststream_core::{Broker, BrokerError, EntryId, Message};
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
    // Polled once: it writes, starts gathering the waiters of the next sync
    // (yielding); then it is dropped, which asks for that sync.
    let dropped = tokio::time::timeout(
        Duration::ZERO,
        b.publish(STREAM, Message::new(b"dropped".to_vec())),
    )
    .await;
    assert!(dropped.is_err(), "the publish was not pending: {dropped:?}");
    // The next publish leads a sync of its own, covering the dropped one's
    // write too.
    publish_bytes(&b, STREAM, b"next").await;
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

/// While a current-thread runtime waits for the sync thread with nothing
/// else to run, a paused clock does not jump to the next timer (a task on
/// the blocking pool waits for the sync): timers in tests fire when the
/// test moves the clock, not because a publish waited for the disk.
#[tokio::test(start_paused = true)]
async fn a_paused_clock_does_not_move_while_publishes_wait_for_their_sync() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    let before = tokio::time::Instant::now();
    let timer = tokio::spawn(tokio::time::sleep(Duration::from_secs(3600)));
    for _ in 0..3 {
        publish_concurrently(&b, 4, 5).await;
        b.sync().await.unwrap();
    }
    assert_eq!(tokio::time::Instant::now(), before, "the clock moved");
    assert!(!timer.is_finished());
    timer.abort();
    drop(b);
    assert_eq!(stored(&dir).await, 60);
}

/// Publishes dropped at any point of their wait (before their sync, while
/// it runs, once it has woken them, or while they are to wake the others
/// it covered) stall no one: 16 publishers whose every publish has a short
/// timeout all finish, and then a publish without one completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_dropped_at_any_point_of_their_wait_leave_no_one_stuck() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..16u64 {
        let b = b.clone();
        tasks.spawn(async move {
            let mut timed_out = 0;
            for i in 0..40u64 {
                // 0 to 300 us: some are dropped before their sync, others
                // while it runs or after it.
                let wait = Duration::from_micros((p * 37 + i * 53) % 300);
                let publish = b.publish(STREAM, Message::new(format!("{p}-{i}").into_bytes()));
                match tokio::time::timeout(wait, publish).await {
                    Ok(published) => {
                        published.unwrap();
                    }
                    Err(_) => timed_out += 1,
                }
            }
            timed_out
        });
    }
    let all = async {
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
        publish_bytes(&b, STREAM, b"last").await;
        b.sync().await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("a publish was left waiting");
    drop(b);
    // Every publish was written (a dropped one too), and the last as well.
    assert_eq!(stored(&dir).await, 16 * 40 + 1);
}

/// A failed sync with 16 publishers waiting on two workers: every publish
/// it covered fails, none is reported durable after it, and every publish
/// after it fails at once (fail-stop), with no publisher left waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_fails_every_publish_it_covered_and_all_later_ones() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    publish_concurrently(&b, 16, 5).await;
    let failed_at = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..16 {
        let b = b.clone();
        let failed_at = std::sync::Arc::clone(&failed_at);
        tasks.spawn(async move {
            let mut acked_after_failure = 0;
            for i in 0.. {
                let stopped_before = failed_at.load(std::sync::atomic::Ordering::SeqCst);
                match b
                    .publish(STREAM, Message::new(format!("{p}-{i}").into_bytes()))
                    .await
                {
                    Ok(_) if stopped_before => acked_after_failure += 1,
                    Ok(_) => {}
                    Err(BrokerError::Failed { detail, .. }) => {
                        failed_at.store(true, std::sync::atomic::Ordering::SeqCst);
                        assert!(detail.contains("fsync"), "{detail}");
                        return acked_after_failure;
                    }
                    Err(other) => panic!("unexpected {other:?}"),
                }
                if p == 0 && i == 10 {
                    b.inject_fsync_failure();
                }
            }
            unreachable!()
        });
    }
    let joined = async {
        while let Some(acked_after_failure) = tasks.join_next().await {
            assert_eq!(acked_after_failure.unwrap(), 0, "acked after the failure");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), joined)
        .await
        .expect("a publisher was left waiting");
    assert!(b.failure().is_some_and(|f| f.contains("fsync")));
    let later = b.publish(STREAM, Message::new(b"later".to_vec())).await;
    assert!(
        matches!(later, Err(BrokerError::Failed { .. })),
        "{later:?}"
    );
    assert!(matches!(b.sync().await, Err(BrokerError::Failed { .. })));
}

/// A lone publisher on a multi-thread runtime syncs in place (no other
/// waiter, none expected): a failed sync there fails its publish, and the
/// broker stops as with the sync thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_of_a_lone_publisher_fails_it_and_stops_the_broker() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    for i in 0..3 {
        b.publish(STREAM, Message::new(format!("{i}").into_bytes()))
            .await
            .unwrap();
    }
    let syncs = b.syncs();
    assert!(syncs >= 3, "{syncs} syncs for 3 lone publishes");
    b.inject_fsync_failure();
    let failed = b.publish(STREAM, Message::new(b"lost".to_vec())).await;
    assert!(
        matches!(failed, Err(BrokerError::Failed { .. })),
        "{failed:?}"
    );
    let later = b.publish(STREAM, Message::new(b"later".to_vec())).await;
    assert!(
        matches!(later, Err(BrokerError::Failed { .. })),
        "{later:?}"
    );
    drop(b);
    assert_eq!(stored(&dir).await, 4);
}
