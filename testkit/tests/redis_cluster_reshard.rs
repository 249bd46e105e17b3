//! An app consuming from a Redis Cluster while the slot holding its busy
//! stream (and the stream's side keys: due set, owed hash, dead letters,
//! wake key) moves to another master, a few keys at a time, with a
//! producer publishing and the handler asking for retries throughout. The
//! broker meets `ASK` (a key already moved), `TRYAGAIN` (a script's keys
//! split between the two masters for a moment) and finally `MOVED`; it
//! follows each, or fails the call as transient and the runtime tries
//! again. The test starts its own cluster, never the shared one.
//!
//! Checked: no publish that returned `Ok` is lost, every one is handled
//! (nothing skipped), and retried entries come back after the move.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ruststream::prelude::*;
use ruststream::{Broker, EntryId, RedisBroker};
use support::redis_cluster::RedisCluster;
use support::{Job, assert_none, start_app, stored_jobs, wait_until};

const STREAM: &str = "reshard-jobs";
const PACE: Duration = Duration::from_millis(3);

/// Deliveries by job.
static SEEN: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());

/// Every fifth job is retried once (after 50 ms), so the group's side keys
/// are busy while they move.
#[subscriber(RedisStream::new(STREAM).group("g").consumer("reshard"), workers(4), prefetch(32))]
async fn handler(job: &Job) -> HandlerOutcome {
    let seen = {
        let mut seen = SEEN.lock().unwrap();
        let count = seen.entry(job.n).or_default();
        *count += 1;
        *count
    };
    if job.n.is_multiple_of(5) && seen == 1 {
        HandlerOutcome::retry_after(Duration::from_millis(50))
    } else {
        HandlerOutcome::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_keeps_consuming_while_its_slot_moves_to_another_master() {
    let started = Instant::now();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start("reshard"));
    let broker = RedisBroker::cluster(cluster.urls());
    let running = start_app("reshard", &broker, handler).await;

    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let published: Arc<Mutex<Vec<(u64, EntryId)>>> = Arc::default();
    let production = {
        let (broker, stop, failed, published) = (
            broker.clone(),
            Arc::clone(&stop),
            Arc::clone(&failed),
            Arc::clone(&published),
        );
        tokio::spawn(async move {
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                match broker.publish(STREAM, Job::message(n)).await {
                    Ok(id) => published.lock().unwrap().push((n, id)),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(PACE).await;
            }
        })
    };
    assert!(
        wait_until(Duration::from_secs(15), async || SEEN.lock().unwrap().len()
            >= 200)
        .await,
        "the app did not handle 200 jobs before the move"
    );

    // Move the stream's slot to another master, two keys at a time.
    let slot = cluster.slot_of(STREAM);
    let from = cluster.master_of(slot);
    let to = cluster
        .nodes()
        .into_iter()
        .find(|n| n.master && !n.failed && n.id != from.id)
        .unwrap();
    let moving = Instant::now();
    tokio::task::block_in_place(|| cluster.move_slot(slot, &to, 2, Duration::from_millis(100)));
    let moved_in = moving.elapsed();
    assert_eq!(cluster.master_of(slot).id, to.id, "the slot did not move");
    let handled_at_move = SEEN.lock().unwrap().len();

    // Production goes on after the move, then stops.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    production.await.unwrap();
    let published = published.lock().unwrap().clone();

    let all_handled = async || {
        let seen = SEEN.lock().unwrap();
        published.iter().all(|(n, _)| {
            seen.get(n)
                .is_some_and(|c| *c > u32::from(n.is_multiple_of(5)))
        })
    };
    wait_until(Duration::from_secs(20), all_handled).await;
    tokio::time::timeout(Duration::from_secs(10), running.shutdown())
        .await
        .unwrap_or_else(|_| panic!("the app did not shut down within 10 s"));

    let stored = stored_jobs(&broker, STREAM).await;
    let seen = SEEN.lock().unwrap().clone();
    let lost: Vec<u64> = published
        .iter()
        .filter(|(n, id)| stored.get(id) != Some(n))
        .map(|(n, _)| *n)
        .collect();
    let never: Vec<u64> = published
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !seen.contains_key(n))
        .collect();
    let not_retried: Vec<u64> = published
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.is_multiple_of(5) && seen.get(n).is_some_and(|c| *c < 2))
        .collect();
    println!(
        "slot {slot} moved from :{} to :{} in {moved_in:?} ({handled_at_move} jobs handled by \
         then); {} published ({} failed), {} handled, {} lost, {} never handled, {} retries \
         never redelivered; {:?} in all",
        from.port,
        to.port,
        published.len(),
        failed.load(Ordering::SeqCst),
        seen.len(),
        lost.len(),
        never.len(),
        not_retried.len(),
        started.elapsed()
    );
    assert!(published.len() >= 300, "too few publishes to test");
    assert_none(
        &lost,
        5,
        "across the move",
        "publishes that returned Ok lost",
    );
    assert_none(&never, 5, "across the move", "published jobs never handled");
    assert_none(
        &not_retried,
        5,
        "across the move",
        "retried jobs never delivered again",
    );
}
