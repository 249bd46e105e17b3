//! Batch subscribers (`docs/batches.md`), one scenario per rule, written
//! once for every broker: `batch_memory.rs` runs them on the memory broker
//! on tokio's paused clock, `batch_redis.rs` on a Redis server in real
//! time. Each scenario has its own stream and subscriber; stream names
//! carry the test binary's prefix ([`set_prefix`]).
//!
//! Waiting is [`until`]: a condition polled with 1 ms sleeps on tokio's
//! clock, which on the paused clock moves only when the app is idle. Times
//! a scenario asserts are the tokio instants its handlers recorded.

#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ruststream::prelude::*;
use ruststream::{Handled, Message, Observer, Running, Settlement, Subscriber};
use tokio::time::Instant;

/// What every batch subscriber here takes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "jobs")]
pub struct Job {
    pub n: u64,
}

static PREFIX: OnceLock<String> = OnceLock::new();

/// Sets the prefix of every stream name (once per test binary).
pub fn set_prefix(prefix: String) {
    let _ = PREFIX.set(prefix);
}

/// The stream of scenario `name`.
pub fn stream(name: &str) -> String {
    format!("{}batch-{name}", PREFIX.get().map_or("", String::as_str))
}

const GROUP: &str = "batch";

/// The batches one handler ran: the jobs of each, and when it ran.
type Batches = Mutex<Vec<(Vec<u64>, Instant)>>;

fn record(batches: &Batches, jobs: &[Job]) {
    let ns = jobs.iter().map(|job| job.n).collect();
    batches.lock().unwrap().push((ns, Instant::now()));
}

fn ran(batches: &Batches) -> Vec<(Vec<u64>, Instant)> {
    batches.lock().unwrap().clone()
}

fn handled(batches: &Batches) -> usize {
    ran(batches).iter().map(|(ns, _)| ns.len()).sum()
}

/// Every settlement the runtime reported: the payload, how it settled.
#[derive(Default)]
struct Settled(Mutex<Vec<(Vec<u8>, Settlement)>>);

impl Observer for Settled {
    fn handled(&self, event: &Handled<'_>) {
        let payload = event.delivery.entry.payload().to_vec();
        let settlement = event.settlement.clone();
        self.0.lock().unwrap().push((payload, settlement));
    }
}

impl Settled {
    fn all(&self) -> Vec<(Vec<u8>, Settlement)> {
        self.0.lock().unwrap().clone()
    }
}

/// Polls `cond` every millisecond of tokio's clock, for at most 20 s.
pub async fn until(what: &str, cond: impl AsyncFnMut() -> bool) {
    let (every, limit) = (Duration::from_millis(1), Duration::from_secs(20));
    crate::support::poll_until(what, every, limit, cond).await;
}

async fn publish<B: Broker + Clone>(broker: &B, stream: &str, ns: impl IntoIterator<Item = u64>) {
    let publisher = Publisher::new(Arc::new(broker.clone()));
    for n in ns {
        publisher.publish(&Job { n }).to(stream).await.unwrap();
    }
}

async fn start<B: Broker + Clone>(
    broker: &B,
    observer: &Arc<Settled>,
    subscriber: impl Subscriber,
) -> Running {
    RustStream::new(AppInfo::new("batches", "0"))
        .with_broker(broker.clone(), |b| {
            b.include(subscriber);
        })
        .observe(Arc::clone(observer) as Arc<dyn Observer>)
        .start()
        .await
        .expect("app starts")
}

/// Starts an app on `broker` running `subscriber`, observed; waits
/// until `batches` has seen `n` entries and the group has settled
/// everything on `stream`. Returns the app and what it settled.
async fn run_until_handled<B: Broker + Clone>(
    broker: &B,
    subscriber: impl Subscriber,
    batches: &Batches,
    n: usize,
    stream: &str,
) -> (Running, Vec<(Vec<u8>, Settlement)>) {
    let observer = Arc::new(Settled::default());
    let app = start(broker, &observer, subscriber).await;
    until(&format!("{n} entries handled"), async || {
        handled(batches) == n
    })
    .await;
    until_settled(broker, stream).await;
    (app, observer.all())
}

/// Declares `static $batches: Batches` and the batch subscriber `$name`
/// of scenario stream `$stream` (group [`GROUP`], from the beginning),
/// batched as `batch(...)` says, that records each batch it runs there
/// and acks it.
macro_rules! recording_subscriber {
    ($batches:ident, $name:ident, $stream:literal, batch($($batch:tt)*)) => {
        static $batches: Batches = Mutex::new(Vec::new());

        #[subscriber(
            RedisStream::new(stream($stream)).group(GROUP).start_id(StreamStart::Beginning),
            batch($($batch)*)
        )]
        async fn $name(jobs: Vec<Job>) {
            record(&$batches, &jobs);
        }
    };
}

/// Writes one test per scenario: `#[$test] async fn NAME()` running it on
/// `$broker`.
macro_rules! batch_scenario_tests {
    (#[$test:meta] $broker:expr) => {
        batch_scenarios::batch_scenario_tests!(
            @each #[$test] $broker;
            all_ack,
            per_entry_outcomes,
            length_mismatch_retries_the_batch,
            undecodable_entry_is_dead_lettered_alone,
            undecodable_entry_is_dead_lettered_even_if_the_batch_panics,
            wait_flushes_a_partial_batch,
            a_filling_batch_keeps_reading
        );
    };
    (@each #[$test:meta] $broker:expr; $($name:ident),+) => {
        $(
            #[$test]
            async fn $name() {
                batch_scenarios::$name($broker).await;
            }
        )+
    };
}
pub(crate) use batch_scenario_tests;

/// The reasons of the settlements that retried an entry with one.
fn retried_reasons(settled: &[(Vec<u8>, Settlement)]) -> Vec<&str> {
    settled
        .iter()
        .filter_map(|(_, s)| match s {
            Settlement::Retried {
                reason: Some(reason),
            } => Some(reason.as_str()),
            _ => None,
        })
        .collect()
}

/// How many of the settlements acked their entry.
fn acked(settled: &[(Vec<u8>, Settlement)]) -> usize {
    settled
        .iter()
        .filter(|(_, s)| *s == Settlement::Acked)
        .count()
}

/// Waits until the group has settled everything: nothing pending, nothing
/// left to read.
async fn until_settled<B: Broker>(broker: &B, stream: &str) {
    until("the group settles everything", async || {
        crate::support::group_settled(broker, stream, GROUP).await
    })
    .await;
}

const WAIT: Duration = Duration::from_millis(200);

// ---- all ack: full batches run at once, the rest after `wait` ------------

recording_subscriber!(ACK, ack_all, "ack", batch(max = 4, wait = 200ms));

/// Ten entries, batches of four: two full batches, then two entries after
/// the wait, all acked, in stream order.
pub async fn all_ack<B: Broker + Clone>(broker: B) {
    let stream = stream("ack");
    publish(&broker, &stream, 0..10).await;
    let published = Instant::now();
    let (app, settled) = run_until_handled(&broker, ack_all, &ACK, 10, &stream).await;
    let batches = ran(&ACK);
    let sizes: Vec<usize> = batches.iter().map(|(ns, _)| ns.len()).collect();
    assert_eq!(sizes, [4, 4, 2], "{batches:?}");
    let order: Vec<u64> = batches.iter().flat_map(|(ns, _)| ns.clone()).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "stream order");
    let (_, last) = batches[2];
    assert!(
        last - published >= WAIT,
        "the partial batch waited {WAIT:?}"
    );
    assert_eq!(settled.len(), 10);
    assert!(
        settled.iter().all(|(_, s)| *s == Settlement::Acked),
        "{settled:?}"
    );
    let stats = app.stats().await;
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].delivered, 10, "stats count entries, not batches");
    assert_eq!(stats[0].acked, 10);
    app.shutdown().await;
}

// ---- per-entry outcomes: ack, retry, retry after a delay, dead letter ----

static EACH: Batches = Mutex::new(Vec::new());
static EACH_SEEN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// The first time `n` is seen.
fn first_time(n: u64) -> bool {
    EACH_SEEN
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(n)
}

const DELAY: Duration = Duration::from_millis(300);

#[subscriber(
    RedisStream::new(stream("each")).group(GROUP).start_id(StreamStart::Beginning),
    batch(max = 6, wait = 200ms)
)]
async fn each_outcome(jobs: &[Job]) -> Vec<HandlerOutcome> {
    record(&EACH, jobs);
    jobs.iter()
        .map(|job| match (job.n, first_time(job.n)) {
            (1 | 4, _) => HandlerOutcome::dead_letter(format!("job {} refused", job.n)),
            (2, true) => HandlerOutcome::retry(),
            (5, true) => HandlerOutcome::retry_after(DELAY),
            _ => HandlerOutcome::ack(),
        })
        .collect()
}

/// Six entries in one batch, each settled as its own element says: two
/// dead-lettered, one retried at once (a copy, on a `new` subscription),
/// one retried after a delay, the rest acked.
pub async fn per_entry_outcomes<B: Broker + Clone>(broker: B) {
    let stream = stream("each");
    publish(&broker, &stream, 0..6).await;
    let (app, settled) = run_until_handled(&broker, each_outcome, &EACH, 8, &stream).await;
    let batches = ran(&EACH);
    assert_eq!(batches[0].0, [0, 1, 2, 3, 4, 5], "{batches:?}");
    let again: Vec<u64> = batches[1..].iter().flat_map(|(ns, _)| ns.clone()).collect();
    assert_eq!(again, [2, 5], "the retried jobs come back: {batches:?}");
    let (_, first) = batches[0];
    let (_, delayed) = batches.last().unwrap();
    assert!(*delayed - first >= DELAY, "retry_after waits its delay");
    let dead = broker
        .dead_letters(&stream, GROUP, EntryId::ZERO, 10)
        .await
        .unwrap();
    let mut reasons: Vec<&str> = dead.iter().map(|d| d.reason.as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["job 1 refused", "job 4 refused"]);
    let count = |want: fn(&Settlement) -> bool| settled.iter().filter(|(_, s)| want(s)).count();
    assert_eq!(count(|s| *s == Settlement::Acked), 4, "{settled:?}");
    assert_eq!(count(|s| matches!(s, Settlement::Retried { .. })), 1);
    assert_eq!(count(|s| *s == Settlement::RetriedAfter(DELAY)), 1);
    assert_eq!(count(|s| matches!(s, Settlement::DeadLettered { .. })), 2);
    app.shutdown().await;
}

// ---- a per-entry list of the wrong length retries the whole batch --------

static MISMATCH: Batches = Mutex::new(Vec::new());
static MISMATCHED: AtomicBool = AtomicBool::new(false);

#[subscriber(
    RedisStream::new(stream("mismatch")).group(GROUP).start_id(StreamStart::Beginning),
    batch(max = 3, wait = 200ms)
)]
async fn mismatched(jobs: Vec<Job>) -> Vec<HandlerOutcome> {
    record(&MISMATCH, &jobs);
    if MISMATCHED.swap(true, Ordering::SeqCst) {
        jobs.iter().map(|_| HandlerOutcome::ack()).collect()
    } else {
        vec![HandlerOutcome::ack()]
    }
}

/// A batch of three answered with one outcome: every entry of it is
/// retried with an error that says so, and then acked.
pub async fn length_mismatch_retries_the_batch<B: Broker + Clone>(broker: B) {
    let stream = stream("mismatch");
    publish(&broker, &stream, 0..3).await;
    let (app, settled) = run_until_handled(&broker, mismatched, &MISMATCH, 6, &stream).await;
    let batches = ran(&MISMATCH);
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!(batches[0].0, [0, 1, 2]);
    assert_eq!(batches[1].0, [0, 1, 2], "the whole batch again");
    let retried = retried_reasons(&settled);
    assert_eq!(retried.len(), 3, "{settled:?}");
    for reason in retried {
        assert!(
            reason.contains("the batch handler returned 1 outcomes for 3 entries"),
            "{reason}"
        );
    }
    assert_eq!(acked(&settled), 3);
    assert!(
        broker
            .dead_letters(&stream, GROUP, EntryId::ZERO, 10)
            .await
            .unwrap()
            .is_empty()
    );
    app.shutdown().await;
}

// ---- a payload that does not decode is dead-lettered alone ---------------

/// Asserts that `bad` is the one entry dead-lettered on `stream`, with the
/// decode error as its reason.
async fn assert_dead_lettered_undecodable<B: Broker>(broker: &B, stream: &str, bad: EntryId) {
    let dead = broker
        .dead_letters(stream, GROUP, EntryId::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].id(), bad);
    assert!(
        dead[0].reason.starts_with("cannot decode the payload as"),
        "{}",
        dead[0].reason
    );
}

static DECODE: Batches = Mutex::new(Vec::new());

#[subscriber(
    RedisStream::new(stream("decode")).group(GROUP).start_id(StreamStart::Beginning),
    batch(max = 3, wait = 200ms)
)]
async fn decoding(jobs: Vec<Job>) -> HandlerOutcome {
    record(&DECODE, &jobs);
    HandlerOutcome::ack()
}

/// A batch of two jobs and one entry that is not a job: the handler runs
/// on the two, which are acked; the third is dead-lettered with the decode
/// error.
pub async fn undecodable_entry_is_dead_lettered_alone<B: Broker + Clone>(broker: B) {
    let stream = stream("decode");
    publish(&broker, &stream, [0]).await;
    let bad = broker
        .publish(&stream, Message::new(b"not a job".to_vec()))
        .await
        .unwrap();
    publish(&broker, &stream, [2]).await;
    let (app, settled) = run_until_handled(&broker, decoding, &DECODE, 2, &stream).await;
    assert_eq!(ran(&DECODE)[0].0, [0, 2]);
    assert_dead_lettered_undecodable(&broker, &stream, bad).await;
    assert_eq!(acked(&settled), 2);
    app.shutdown().await;
}

// ---- ... even when the handler panics on the rest of its batch -----------

static POISON: Batches = Mutex::new(Vec::new());
static POISON_PANICKED: AtomicBool = AtomicBool::new(false);

#[subscriber(
    RedisStream::new(stream("poison")).group(GROUP).start_id(StreamStart::Beginning),
    batch(max = 3, wait = 200ms)
)]
async fn panics_once(jobs: Vec<Job>) {
    record(&POISON, &jobs);
    if !POISON_PANICKED.swap(true, Ordering::SeqCst) {
        panic!("the handler panicked on {} jobs", jobs.len());
    }
}

/// An entry that is not a job, then two jobs, in one batch whose handler
/// panics on the jobs. Protects the user from a panic over values the
/// handler got turning the dead letter of an entry it never saw into a
/// retry: that would cost the entry a delivery (towards `max_deliveries`),
/// hold it for `min_idle` on a claiming subscription, and dead-letter it in
/// the end for the wrong reason. The undecodable entry is dead-lettered at
/// once with its decode error (even though it opened the batch); the
/// panic is logged with one of the jobs, the other points to it, and both
/// are retried and then acked.
pub async fn undecodable_entry_is_dead_lettered_even_if_the_batch_panics<B: Broker + Clone>(
    broker: B,
) {
    let stream = stream("poison");
    let bad = broker
        .publish(&stream, Message::new(b"not a job".to_vec()))
        .await
        .unwrap();
    publish(&broker, &stream, [1, 2]).await;
    let (app, settled) = run_until_handled(&broker, panics_once, &POISON, 4, &stream).await;
    let batches = ran(&POISON);
    assert_eq!(batches[0].0, [1, 2], "{batches:?}");
    assert_dead_lettered_undecodable(&broker, &stream, bad).await;
    let poison: Vec<&Settlement> = settled
        .iter()
        .filter(|(payload, _)| payload.as_slice() == b"not a job")
        .map(|(_, s)| s)
        .collect();
    assert!(
        matches!(poison.as_slice(), [Settlement::DeadLettered { .. }]),
        "dead-lettered at its first delivery: {poison:?}"
    );
    let reasons = retried_reasons(&settled);
    assert_eq!(reasons.len(), 2, "{settled:?}");
    assert!(
        reasons.contains(&"handler panicked: the handler panicked on 2 jobs"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("the batch handler panicked: see the error logged for entry")),
        "{reasons:?}"
    );
    assert_eq!(acked(&settled), 2, "{settled:?}");
    app.shutdown().await;
}

// ---- a batch still gathering keeps reading until it is full ---------------

recording_subscriber!(FILLING, filling, "filling", batch(max = 10, wait = 1h));

/// Six entries of a batch of ten, then four more: entries gathering do not
/// count against the read window, so the subscription reads on and the
/// batch runs once the tenth arrives, not at its wait (an hour) nor at the
/// next keep-alive tick (5 s).
pub async fn a_filling_batch_keeps_reading<B: Broker + Clone>(broker: B) {
    let stream = stream("filling");
    publish(&broker, &stream, 0..6).await;
    let observer = Arc::new(Settled::default());
    let app = start(&broker, &observer, filling).await;
    until("six entries read, gathering", async || {
        broker.group_info(&stream, GROUP).await.unwrap().pending == 6
    })
    .await;
    assert!(ran(&FILLING).is_empty(), "six of ten: still gathering");
    publish(&broker, &stream, 6..10).await;
    let published = Instant::now();
    until("the batch of ten ran", async || handled(&FILLING) == 10).await;
    let batches = ran(&FILLING);
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(batches[0].0, (0..10).collect::<Vec<u64>>());
    let after = batches[0].1 - published;
    assert!(
        after < Duration::from_secs(1),
        "the full batch ran {after:?} after its tenth entry was published"
    );
    until_settled(&broker, &stream).await;
    app.shutdown().await;
}

// ---- the wait flushes a partial batch -------------------------------------

recording_subscriber!(PARTIAL, partial, "partial", batch(max = 100, wait = 200ms));

/// Three entries for a batch of a hundred: they run together once the
/// wait has passed since the first arrived, not before.
pub async fn wait_flushes_a_partial_batch<B: Broker + Clone>(broker: B) {
    let stream = stream("partial");
    publish(&broker, &stream, 0..3).await;
    let published = Instant::now();
    let (app, settled) = run_until_handled(&broker, partial, &PARTIAL, 3, &stream).await;
    let batches = ran(&PARTIAL);
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(batches[0].0, [0, 1, 2]);
    assert!(
        batches[0].1 - published >= WAIT,
        "ran {:?} after publishing, before the wait",
        batches[0].1 - published
    );
    assert!(
        settled.iter().all(|(_, s)| *s == Settlement::Acked),
        "{settled:?}"
    );
    app.shutdown().await;
}
