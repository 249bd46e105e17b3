//! Batch subscribers (`docs/batches.md`) where several batches meet: more
//! than one worker, the read-ahead bound, the shutdown deadline, and a
//! broker that fails calls while batches panic and the app restarts. On
//! the memory broker, on tokio's paused clock; the rules each batch keeps
//! on its own are in `batch_scenarios`.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ruststream::prelude::*;
use ruststream::{Broker, EntryId, Handled, MemoryBroker, Observer, Settlement};
use ruststream_testkit::{CallKind, Fault, FaultyBroker};
use tokio::time::Instant;

/// What every batch subscriber here takes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "jobs")]
pub struct Job {
    /// The job's number, in publishing order.
    pub n: u64,
}

/// The jobs the runtime settled, with how.
#[derive(Default)]
struct Settled(Mutex<Vec<(u64, Settlement)>>);

impl Observer for Settled {
    fn handled(&self, event: &Handled<'_>) {
        let job = serde_json::from_slice::<Job>(event.delivery.entry.payload()).unwrap();
        let settlement = event.settlement.clone();
        self.0.lock().unwrap().push((job.n, settlement));
    }
}

impl Settled {
    fn acked(&self) -> BTreeSet<u64> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| *s == Settlement::Acked)
            .map(|(n, _)| *n)
            .collect()
    }
}

/// Polls `cond` every 5 ms of tokio's clock, for at most 120 s.
async fn until(what: &str, cond: impl AsyncFnMut() -> bool) {
    let (every, limit) = (Duration::from_millis(5), Duration::from_secs(120));
    support::poll_until(what, every, limit, cond).await;
}

/// Waits until `group` has settled everything on `stream`.
async fn until_settled(memory: &MemoryBroker, stream: &str, group: &str) {
    until("the group settles everything", async || {
        support::group_settled(memory, stream, group).await
    })
    .await;
}

/// Whether this is the first time `n` is seen in `seen`.
fn first_time(seen: &Mutex<BTreeMap<u64, u32>>, n: u64) -> bool {
    let mut seen = seen.lock().unwrap();
    let count = seen.entry(n).or_insert(0);
    *count += 1;
    *count == 1
}

// ---- workers: batches start in the order they closed ---------------------

/// Each batch this handler ran: its first job, when it started, its jobs.
static ORDER: Mutex<Vec<(u64, Instant, Vec<u64>)>> = Mutex::new(Vec::new());

#[subscriber(
    RedisStream::new("order").group("g").start_id(StreamStart::Beginning),
    workers(3),
    batch(max = 3, wait = 40ms)
)]
async fn ordered_batches(jobs: Vec<Job>) {
    let ns: Vec<u64> = jobs.iter().map(|j| j.n).collect();
    ORDER
        .lock()
        .unwrap()
        .push((ns[0], Instant::now(), ns.clone()));
    // Run times vary with the batch's first job, so batches end out of
    // the order they started in.
    let h = ns[0].wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    let ms = [3u64, 50, 7, 120, 1, 30, 90, 15, 0, 0, 2][(h % 11) as usize];
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// `workers(3)`, batches of 3 gathered for 40 ms, entries arriving in
/// bursts and gaps, handlers of varying length: a batch of earlier entries
/// never starts after a batch of later ones (they close in stream order,
/// and take the workers' permits in the order they closed), and each batch
/// is in stream order. Protects the user from batches overtaking each
/// other when a worker frees up.
#[tokio::test(start_paused = true)]
async fn batches_start_in_the_order_they_closed() {
    let memory = MemoryBroker::new();
    let app = support::start_shared("batches", Arc::new(memory.clone()), ordered_batches).await;
    let publisher = Publisher::new(Arc::new(memory.clone()));
    const N: u64 = 600;
    for n in 0..N {
        publisher.publish(&Job { n }).to("order").await.unwrap();
        let h = n.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 35;
        let gap = [0u64, 0, 1, 0, 5, 0, 0, 13, 0, 2, 0, 0, 0, 31, 0, 0, 0][(h % 17) as usize];
        if gap > 0 {
            tokio::time::sleep(Duration::from_millis(gap)).await;
        }
    }
    until("every job ran", async || {
        let order = ORDER.lock().unwrap();
        order.iter().map(|(_, _, ns)| ns.len()).sum::<usize>() >= N as usize
    })
    .await;
    app.shutdown().await;
    let order = ORDER.lock().unwrap().clone();
    for (_, _, ns) in &order {
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "{ns:?}");
    }
    let mut overtaken = Vec::new();
    for (i, a) in order.iter().enumerate() {
        for b in &order[i + 1..] {
            if b.0 < a.0 && b.1 > a.1 {
                overtaken.push((a.2.clone(), b.2.clone(), b.1 - a.1));
            }
        }
    }
    assert!(
        overtaken.is_empty(),
        "batches started out of order: {:?}",
        &overtaken[..overtaken.len().min(5)]
    );
}

// ---- the read-ahead bound counts entries of gathering batches ------------

static BOUNDED_SEEN: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());

#[subscriber(
    RedisStream::new("bound").group("g").consumer("c1").start_id(StreamStart::Beginning),
    workers(2),
    prefetch(5),
    batch(max = 5, wait = 30ms)
)]
async fn bounded_batches(jobs: Vec<Job>) -> Vec<HandlerOutcome> {
    tokio::time::sleep(Duration::from_millis(3 * (jobs[0].n % 5))).await;
    jobs.iter()
        .map(|j| {
            if j.n % 9 == 4 && first_time(&BOUNDED_SEEN, j.n) {
                HandlerOutcome::retry()
            } else {
                HandlerOutcome::ack()
            }
        })
        .collect()
}

/// `prefetch(5)` with two workers and batches of five, some entries
/// retried: the consumer never holds more than five entries at once,
/// counting those gathering in a batch, running, and retried (as the
/// broker saw them handed out). Protects the user from a batch subscriber
/// reading past the bound it was given.
#[tokio::test(start_paused = true)]
async fn the_read_ahead_bound_holds_for_batches() {
    let memory = MemoryBroker::new();
    let faults = Arc::new(FaultyBroker::new(Arc::new(memory.clone()), 3));
    let app = support::start_shared("batches", faults.clone(), bounded_batches).await;
    let publisher = Publisher::new(Arc::new(memory.clone()));
    for n in 0..200u64 {
        publisher.publish(&Job { n }).to("bound").await.unwrap();
        if n % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    until_settled(&memory, "bound", "g").await;
    app.shutdown().await;
    let high = faults.held_high_water("bound", "g", "c1");
    assert!(high <= 5, "held {high} entries at once, bound 5");
}

// ---- the shutdown deadline hands back every batch still unfinished --------

static STOP_RAN: Mutex<Vec<Vec<u64>>> = Mutex::new(Vec::new());
static STOP_SLOW: AtomicBool = AtomicBool::new(true);

#[subscriber(
    RedisStream::new("stop").group("g").start_id(StreamStart::Beginning),
    batch(max = 3, wait = 10ms)
)]
async fn stop_batches(jobs: Vec<Job>) {
    STOP_RAN
        .lock()
        .unwrap()
        .push(jobs.iter().map(|j| j.n).collect());
    if STOP_SLOW.load(Ordering::SeqCst) && jobs.iter().any(|j| j.n == 0) {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// At shutdown one batch runs past the deadline (an hour), one waits for
/// the only worker, one is gathering: at the deadline the running batch
/// is dropped and all six entries are handed back (pending, owned by no
/// consumer, not retried as failed), and the next start runs every one of
/// them. Protects the user from a batch dropped at the deadline losing
/// its entries or spending a delivery of each on a failure.
#[tokio::test(start_paused = true)]
async fn the_shutdown_deadline_hands_back_every_unfinished_batch() {
    let memory = MemoryBroker::new();
    let start = || {
        RustStream::new(AppInfo::new("batches", "0"))
            .with_broker(memory.clone(), |b| {
                b.include(stop_batches);
            })
            .shutdown_deadline(Duration::from_secs(1))
            .start()
    };
    let app = start().await.unwrap();
    let publisher = Publisher::new(Arc::new(memory.clone()));
    publisher.publish(&Job { n: 0 }).to("stop").await.unwrap();
    // The batch [0] runs, for an hour.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for n in 1..3 {
        publisher.publish(&Job { n }).to("stop").await.unwrap();
    }
    // The batch [1, 2] waits for the worker.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for n in 3..6 {
        publisher.publish(&Job { n }).to("stop").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    app.shutdown().await;
    assert_eq!(*STOP_RAN.lock().unwrap(), [vec![0]]);
    let pending = memory
        .pending("stop", "g", EntryId::ZERO, 100, None)
        .await
        .unwrap();
    assert_eq!(pending.len(), 6, "{pending:?}");
    assert!(
        pending
            .iter()
            .all(|p| p.consumer.is_none() && p.times_delivered == 1),
        "handed back: {pending:?}"
    );

    STOP_SLOW.store(false, Ordering::SeqCst);
    let app = start().await.unwrap();
    until_settled(&memory, "stop", "g").await;
    app.shutdown().await;
    let ran: BTreeSet<u64> = STOP_RAN.lock().unwrap().iter().flatten().copied().collect();
    assert_eq!(ran, (0..6).collect(), "{:?}", STOP_RAN.lock().unwrap());
}

// ---- broker faults, panics and restarts ------------------------------------

static CHAOS_SEEN: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());

#[subscriber(
    RedisStream::claiming("chaos", Duration::from_millis(300))
        .group("g")
        .consumer("c2")
        .start_id(StreamStart::Beginning),
    workers(2),
    max_deliveries(50),
    batch(max = 4, wait = 25ms)
)]
async fn chaos_claiming(jobs: Vec<Job>) -> Vec<Result<(), String>> {
    let firsts: Vec<bool> = jobs.iter().map(|j| first_time(&CHAOS_SEEN, j.n)).collect();
    if jobs
        .iter()
        .zip(&firsts)
        .any(|(j, first)| *first && j.n % 19 == 3)
    {
        panic!("injected batch panic");
    }
    tokio::time::sleep(Duration::from_millis(jobs[0].n % 40)).await;
    jobs.iter()
        .zip(&firsts)
        .map(|(j, first)| {
            if *first && j.n % 5 == 1 {
                Err(format!("first try of {}", j.n))
            } else {
                Ok(())
            }
        })
        .collect()
}

/// A claiming batch subscriber with two workers whose handler panics on
/// some batches and fails some entries, on a broker that fails about 5%
/// of its reads and settles before applying them and 5% after, stopped
/// and started again
/// three times with a short shutdown deadline while jobs arrive: once the
/// faults stop, every job is acked and nothing is left pending. Protects
/// the user from a batch whose entries are lost or stuck when panics,
/// failed settles, hand-backs and claims meet.
#[tokio::test(start_paused = true)]
async fn batches_settle_everything_through_faults_panics_and_restarts() {
    let memory = MemoryBroker::new();
    let faults = Arc::new(FaultyBroker::new(Arc::new(memory.clone()), 7));
    let observer = Arc::new(Settled::default());
    let start = || {
        RustStream::new(AppInfo::new("batches", "0"))
            .with_shared_broker(Arc::clone(&faults) as Arc<dyn Broker>, |b| {
                b.include(chaos_claiming);
            })
            .observe(Arc::clone(&observer) as Arc<dyn Observer>)
            .keep_alive(Duration::from_millis(100))
            .shutdown_deadline(Duration::from_millis(20))
            .start()
    };
    let kinds = [
        CallKind::Read,
        CallKind::Ack,
        CallKind::RetryCopy,
        CallKind::RetryAfter,
        CallKind::DeadLetter,
    ];
    faults.set_rate(&kinds, Fault::Before, 0.05);
    faults.set_rate(&kinds, Fault::After, 0.05);
    let publisher = Publisher::new(Arc::new(memory.clone()));
    const N: u64 = 300;
    let mut n = 0;
    for _ in 0..3 {
        let app = start().await.unwrap();
        for _ in 0..N / 3 {
            publisher.publish(&Job { n }).to("chaos").await.unwrap();
            n += 1;
            if n % 7 == 0 {
                tokio::time::sleep(Duration::from_millis(9)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(37)).await;
        app.shutdown().await;
    }
    faults.set_enabled(false);
    let app = start().await.unwrap();
    until_settled(&memory, "chaos", "g").await;
    app.shutdown().await;
    assert!(faults.injected().total() > 0, "faults were injected");
    let acked = observer.acked();
    let missing: Vec<u64> = (0..N).filter(|n| !acked.contains(n)).collect();
    assert!(missing.is_empty(), "never acked: {missing:?}");
}
