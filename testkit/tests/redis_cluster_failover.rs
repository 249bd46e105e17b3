//! An app consuming from a Redis Cluster while the master holding its
//! stream is killed (SIGKILL) and its replica takes over, with two
//! producers publishing throughout: one that takes the master's reply as
//! enough (the default), one that waits for a replica to hold each publish
//! ([`ReplicaAck`]). The test starts its own cluster (six private
//! `redis-server` processes), never the shared one.
//!
//! Checked:
//! - the app rides the failover out (backoff, no crash) and handles
//!   entries published after it;
//! - nothing is skipped: every entry the stream holds after the failover is
//!   handled;
//! - with `ReplicaAck`, no publish that returned `Ok` is lost, and after
//!   the failover (the promoted master has no replica left) such publishes
//!   fail instead of returning `Ok`. Without it, replication is
//!   asynchronous and the newest writes may be lost with the master: those
//!   are counted and printed, not failed on.
//!
//! The cluster really fails over, so this runs in real time (about 10 s).

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ruststream::prelude::*;
use ruststream::{Broker, EntryId, RedisBroker, RedisConfig, ReplicaAck};
use support::redis_cluster::RedisCluster;
use support::{Job, assert_none, start_app, stored_jobs, wait_until};

const STREAM: &str = "failover-jobs";
/// Jobs of the producer that waits for a replica are numbered from here.
const REPLICATED: u64 = 1_000_000;
/// Steady production: one publish per producer per this long.
const PACE: Duration = Duration::from_millis(5);
/// The app handles entries published after the failover within this long.
const RESUME_WITHIN: Duration = Duration::from_secs(20);

static HANDLED: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());

#[subscriber(RedisStream::new(STREAM).group("g").consumer("failover"), workers(2), prefetch(16))]
async fn handler(job: &Job) {
    *HANDLED.lock().unwrap().entry(job.n).or_default() += 1;
}

/// A publish that returned `Ok`, and whether the failover had happened
/// when it was called.
#[derive(Clone, Copy, Debug)]
struct Published {
    n: u64,
    id: EntryId,
    after_failover: bool,
}

#[derive(Default)]
struct Producer {
    failed_over: Arc<AtomicBool>,
    stop: AtomicBool,
    published: Mutex<Vec<Published>>,
    failed: AtomicU64,
}

/// Publishes jobs numbered from `first`, one per `PACE`, until told to
/// stop.
async fn produce(broker: RedisBroker, first: u64, state: Arc<Producer>) {
    for n in first.. {
        if state.stop.load(Ordering::SeqCst) {
            return;
        }
        let after_failover = state.failed_over.load(Ordering::SeqCst);
        match broker.publish(STREAM, Job::message(n)).await {
            Ok(id) => state.published.lock().unwrap().push(Published {
                n,
                id,
                after_failover,
            }),
            Err(_) => {
                state.failed.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(PACE).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_rides_out_a_master_failover_and_replica_acked_publishes_survive() {
    let started = Instant::now();
    let mut cluster = tokio::task::block_in_place(|| RedisCluster::start("failover"));
    let urls = cluster.urls();
    let broker = RedisBroker::cluster(urls.clone());
    let running = start_app("failover", &broker, handler).await;

    let failed_over = Arc::new(AtomicBool::new(false));
    let plain = Arc::new(Producer {
        failed_over: Arc::clone(&failed_over),
        ..Producer::default()
    });
    let replicated = Arc::new(Producer {
        failed_over: Arc::clone(&failed_over),
        ..Producer::default()
    });
    let waiting = RedisConfig {
        publish_replicas: Some(ReplicaAck {
            replicas: 1,
            timeout: Duration::from_millis(500),
        }),
        ..RedisConfig::default()
    };
    let productions = [
        tokio::spawn(produce(
            RedisBroker::cluster(urls.clone()),
            0,
            Arc::clone(&plain),
        )),
        tokio::spawn(produce(
            RedisBroker::cluster_with(urls.clone(), waiting),
            REPLICATED,
            Arc::clone(&replicated),
        )),
    ];
    let handled_count = || HANDLED.lock().unwrap().len();
    assert!(
        wait_until(Duration::from_secs(15), async || handled_count() >= 200).await,
        "the app did not handle 200 jobs before the failover"
    );

    // Kill the master of the stream's slot; its replica takes over.
    let slot = cluster.slot_of(STREAM);
    let killed = Instant::now();
    let (old, promoted) =
        tokio::task::block_in_place(|| cluster.fail_over(slot, Duration::from_secs(30)));
    let failover_took = killed.elapsed();
    failed_over.store(true, Ordering::SeqCst);

    // The app resumes: it handles a job published after the failover.
    let after_failover = || {
        let handled = HANDLED.lock().unwrap();
        [&plain, &replicated].iter().any(|p| {
            p.published
                .lock()
                .unwrap()
                .iter()
                .any(|p| p.after_failover && handled.contains_key(&p.n))
        })
    };
    let resumed = wait_until(RESUME_WITHIN, async || after_failover()).await;
    assert!(
        resumed,
        "no job published after the failover was handled within {RESUME_WITHIN:?}"
    );
    let resumed_in = killed.elapsed();

    tokio::time::sleep(Duration::from_secs(1)).await;
    for p in [&plain, &replicated] {
        p.stop.store(true, Ordering::SeqCst);
    }
    for production in productions {
        production.await.unwrap();
    }

    // What the stream holds now is what must be handled.
    let stored = stored_jobs(&broker, STREAM).await;
    let required: BTreeSet<u64> = stored.values().copied().collect();
    let caught_up = async || {
        let handled = HANDLED.lock().unwrap().clone();
        required.iter().all(|n| handled.contains_key(n))
    };
    wait_until(Duration::from_secs(20), caught_up).await;
    tokio::time::timeout(Duration::from_secs(10), running.shutdown())
        .await
        .unwrap_or_else(|_| panic!("the app did not shut down within 10 s"));

    let handled = HANDLED.lock().unwrap().clone();
    let lost = |p: &Producer| -> Vec<u64> {
        p.published
            .lock()
            .unwrap()
            .iter()
            .filter(|p| stored.get(&p.id) != Some(&p.n))
            .map(|p| p.n)
            .collect()
    };
    let lost_plain = lost(&plain);
    let lost_replicated = lost(&replicated);
    let skipped: Vec<u64> = required
        .iter()
        .filter(|n| !handled.contains_key(n))
        .copied()
        .collect();
    let count = |p: &Producer| p.published.lock().unwrap().len();
    println!(
        "failover of slot {slot} from :{} to :{} took {failover_took:?}; app resumed \
         {resumed_in:?} after the kill. Master-acked producer: {} published, {} failed, {} lost \
         in the failover. Replica-acked producer: {} published, {} failed, {} lost. {} entries \
         in the stream, {} jobs handled ({} more than once), {} skipped; {:?} in all",
        old.port,
        promoted.port,
        count(&plain),
        plain.failed.load(Ordering::SeqCst),
        lost_plain.len(),
        count(&replicated),
        replicated.failed.load(Ordering::SeqCst),
        lost_replicated.len(),
        stored.len(),
        handled.len(),
        handled.values().filter(|c| **c > 1).count(),
        skipped.len(),
        started.elapsed(),
    );
    // The replica-acked producer was exercised before the failover. After
    // it, the promoted master has no replica (its old master is dead), so
    // `WAIT 1` cannot be met and such publishes fail rather than claim a
    // durability they do not have.
    let replicated_after = replicated
        .published
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.after_failover)
        .count();
    assert!(
        count(&replicated) - replicated_after >= 10,
        "too few replica-acked publishes before the failover to test: {}",
        count(&replicated) - replicated_after
    );
    assert_eq!(
        replicated_after, 0,
        "a replica-acked publish returned Ok with no replica to hold it"
    );
    assert_none(
        &lost_replicated,
        5,
        "replica-acked producer",
        "publishes that returned Ok lost in the failover",
    );
    assert_none(
        &skipped,
        5,
        "after the failover",
        "entries in the stream never handled",
    );
}
