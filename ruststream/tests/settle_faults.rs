//! The runtime against a failing broker, on a paused clock: outcomes that
//! cannot be applied are kept and applied again, the read-ahead bound
//! counts entries until the broker confirms their settle, and a group the
//! broker loses is recreated without skipping anything.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{
    Broker, BrokerError, BrokerFuture, EntryId, ReadBatch, ReadMode, ReadRequest, StreamStart,
    broker_methods, forward_broker,
};
use support::{
    Job, advance, group_with_jobs, keep_claims_fresh, publish_jobs, publish_keyed, read_new_as,
    refused, start_fresh_named, start_one_named, start_two_named, stream_len,
};

/// A memory broker whose settles (ack, retry, dead letter) can be made to
/// fail, and that counts what reads delivered and settles confirmed.
#[derive(Clone, Default)]
struct Flaky {
    inner: MemoryBroker,
    fail_settles: Arc<AtomicBool>,
    failed: Arc<AtomicUsize>,
    delivered: Arc<AtomicU64>,
    confirmed: Arc<AtomicU64>,
    /// The most entries ever delivered and not yet confirmed settled.
    peak_unsettled: Arc<AtomicU64>,
    /// Makes the next non-empty read lose its reply: the entries are
    /// handed out at the broker, and the caller gets an error.
    lose_next_read: Arc<AtomicBool>,
    /// Makes the next ordinary read time out (6 s, then an error), not
    /// applied at the broker.
    time_out_next_read: Arc<AtomicBool>,
    /// What `failure` reports: a broker that stopped taking writes.
    stopped: Arc<std::sync::Mutex<Option<String>>>,
}

impl Flaky {
    fn refuse(&self) -> Option<BrokerError> {
        self.fail_settles.load(Ordering::SeqCst).then(|| {
            self.failed.fetch_add(1, Ordering::SeqCst);
            refused("flaky")
        })
    }

    fn confirm(&self, n: usize) {
        self.confirmed.fetch_add(n as u64, Ordering::SeqCst);
    }
}

/// The body of a settle of [`Flaky`]: refused while settles fail, else
/// the same call to the inner broker, its ids counted as confirmed.
macro_rules! confirmed_settle {
    ($this:ident, [] $method:ident($stream:ident, $group:ident, $ids:ident $(, $param:ident)*)) => {
        Box::pin(async move {
            if let Some(error) = $this.refuse() {
                return Err(error);
            }
            let n = $this.inner.$method($stream, $group, $ids $(, $param)*).await?;
            $this.confirm($ids.len());
            Ok(n)
        })
    };
}

impl Broker for Flaky {
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        Box::pin(async move {
            let own = matches!(request.mode, ReadMode::OwnPending { .. });
            if !own && self.time_out_next_read.swap(false, Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(6)).await;
                return Err(BrokerError::Connection {
                    broker: "flaky",
                    detail: "injected: timed out".into(),
                });
            }
            let batch = self.inner.read(request).await?;
            if !batch.is_empty() && self.lose_next_read.swap(false, Ordering::SeqCst) {
                return Err(BrokerError::Connection {
                    broker: "flaky",
                    detail: "injected: reply lost".into(),
                });
            }
            let now = self
                .delivered
                .fetch_add(batch.deliveries.len() as u64, Ordering::SeqCst)
                + batch.deliveries.len() as u64;
            let unsettled = now.saturating_sub(self.confirmed.load(Ordering::SeqCst));
            self.peak_unsettled.fetch_max(unsettled, Ordering::SeqCst);
            Ok(batch)
        })
    }

    broker_methods!(confirmed_settle: ack, retry);

    fn failure(&self) -> Option<String> {
        self.stopped.lock().unwrap().clone()
    }

    forward_broker!(
        inner: name, check_mode, publish, publish_batch, ensure_group, set_group_position,
        dead_letter, redrive, discard, group_info, consumers, pending, dead_letters, range,
        stream_info, trim,
        extend_claim, count_deliveries,
    );
}

async fn pending(broker: &MemoryBroker, stream: &str) -> u64 {
    broker.group_info(stream, "g").await.unwrap().pending
}

// ---- an outcome that cannot be applied is kept -----------------------------------

static OUTAGE_HANDLED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("outage").group("g"), workers(2), prefetch(4))]
async fn outage(_job: &Job) {
    OUTAGE_HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// Acks that fail for a minute (far past any fixed number of attempts)
/// are applied once the broker answers again: no entry is left pending
/// under the live consumer, which would never read it again. Meanwhile
/// the subscription reads nothing past its read-ahead.
#[tokio::test(start_paused = true)]
async fn a_settle_that_keeps_failing_is_applied_once_the_broker_answers() {
    let flaky = Flaky::default();
    flaky.fail_settles.store(true, Ordering::SeqCst);
    let app = start_one_named("test", flaky.clone(), outage).await;
    publish_jobs(&flaky.inner, "outage", 0..20).await;
    advance(Duration::from_secs(1), 60).await;
    assert!(
        flaky.failed.load(Ordering::SeqCst) > 6,
        "acks were tried again"
    );
    assert_eq!(
        OUTAGE_HANDLED.load(Ordering::SeqCst),
        4,
        "nothing read past the read-ahead while acks failed"
    );
    assert_eq!(pending(&flaky.inner, "outage").await, 4);

    flaky.fail_settles.store(false, Ordering::SeqCst);
    advance(Duration::from_secs(1), 10).await;
    assert_eq!(OUTAGE_HANDLED.load(Ordering::SeqCst), 20);
    assert_eq!(pending(&flaky.inner, "outage").await, 0, "every ack landed");
    app.shutdown().await;
}

// ---- a read whose reply was lost ----------------------------------------------------

static LOST_READ: std::sync::Mutex<Vec<(u64, u32)>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::new("lost-read").group("g"), workers(2), prefetch(4))]
async fn lost_read(job: &Job, ctx: &mut Context<'_>) {
    let count = ctx
        .headers()
        .get_str(DELIVERY_COUNT_HEADER)
        .unwrap()
        .parse()
        .unwrap();
    LOST_READ.lock().unwrap().push((job.n, count));
}

/// A read on a `new` subscription that the broker applied but whose reply
/// was lost left entries pending under the consumer, where no other read
/// would hand them out again. Once what it holds has settled, the
/// subscription re-reads its own pending list and handles them (counted as
/// a redelivery), and goes on with new entries.
#[tokio::test(start_paused = true)]
async fn entries_of_a_read_whose_reply_was_lost_are_handled_all_the_same() {
    let (flaky, app) = start_fresh_named::<Flaky>("test", lost_read).await;
    publish_jobs(&flaky.inner, "lost-read", 0..2).await;
    advance(Duration::from_millis(20), 3).await;
    flaky.lose_next_read.store(true, Ordering::SeqCst);
    publish_jobs(&flaky.inner, "lost-read", 2..6).await;
    advance(Duration::from_millis(100), 40).await;
    publish_jobs(&flaky.inner, "lost-read", 6..8).await;
    advance(Duration::from_millis(100), 10).await;
    let mut seen = LOST_READ.lock().unwrap().clone();
    seen.sort_unstable();
    let jobs: Vec<u64> = seen.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        jobs,
        (0..8).collect::<Vec<_>>(),
        "each handled once: {seen:?}"
    );
    // The lost read took the first entries published after it was armed;
    // they came back as redeliveries.
    assert!(
        seen[2].1 == 1 && seen.iter().all(|(_, c)| *c <= 1),
        "{seen:?}"
    );
    assert_eq!(pending(&flaky.inner, "lost-read").await, 0);
    app.shutdown().await;
}

static LOST_KEYED: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(
    RedisStream::claiming("lost-keyed", Duration::from_secs(30)).group("g"),
    workers(1, by_key)
)]
async fn lost_keyed(job: &Job) {
    LOST_KEYED.lock().unwrap().push(job.n);
}

/// On a claiming subscription, a claiming read would take back what a lost
/// read handed out only once idle (30 s here), after later entries of the
/// same keys had run. The re-check hands them back at once instead, and
/// they run first: one consumer runs a key's entries in stream order.
#[tokio::test(start_paused = true)]
async fn a_lost_read_on_a_claiming_subscription_keeps_by_key_order() {
    let (flaky, app) = start_fresh_named::<Flaky>("test", lost_keyed).await;
    advance(Duration::from_millis(20), 3).await;
    flaky.lose_next_read.store(true, Ordering::SeqCst);
    publish_keyed(&flaky.inner, "lost-keyed", &[(1, "a"), (2, "a")]).await;
    advance(Duration::from_millis(10), 20).await;
    assert!(
        !flaky.lose_next_read.load(Ordering::SeqCst),
        "the read was lost"
    );
    publish_keyed(&flaky.inner, "lost-keyed", &[(3, "a")]).await;
    // The re-check lists twice, one and a half refresh intervals apart
    // (5 s here), reading nothing meanwhile.
    advance(Duration::from_secs(1), 10).await;
    assert_eq!(*LOST_KEYED.lock().unwrap(), [1, 2, 3], "key a in order");
    assert_eq!(pending(&flaky.inner, "lost-keyed").await, 0);
    app.shutdown().await;
}

static LEFT: std::sync::Mutex<Vec<(u64, u32)>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::claiming("left", Duration::from_secs(30)).group("g"))]
async fn left(job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    let count = ctx.headers().get_str(DELIVERY_COUNT_HEADER).unwrap();
    LEFT.lock().unwrap().push((job.n, count.parse().unwrap()));
    if job.n == 0 && count == "0" {
        HandlerOutcome::Retry
    } else {
        HandlerOutcome::Ack
    }
}

/// A claiming subscription's retry stays pending under its name until the
/// next claiming read takes it once idle. The re-check after a lost read
/// hands back only what was delivered since that read was sent, so the
/// retry still waits out its 30 s.
#[tokio::test(start_paused = true)]
async fn the_recheck_after_a_lost_read_leaves_a_claiming_retry_to_its_idle_time() {
    let (flaky, app) = start_fresh_named::<Flaky>("test", left).await;
    publish_jobs(&flaky.inner, "left", 0..1).await;
    advance(Duration::from_secs(1), 10).await;
    flaky.lose_next_read.store(true, Ordering::SeqCst);
    publish_jobs(&flaky.inner, "left", 1..2).await;
    advance(Duration::from_secs(1), 20).await;
    assert!(
        !flaky.lose_next_read.load(Ordering::SeqCst),
        "the read was lost"
    );
    assert_eq!(
        *LEFT.lock().unwrap(),
        [(0, 0), (1, 1)],
        "the lost read's entry came back (a redelivery); the retry did not"
    );
    advance(Duration::from_secs(30), 4).await;
    assert_eq!(*LEFT.lock().unwrap(), [(0, 0), (1, 1), (0, 1)]);
    assert_eq!(pending(&flaky.inner, "left").await, 0);
    app.shutdown().await;
}

static TWIN_SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(
    RedisStream::claiming("twin-claim", Duration::from_secs(30)).group("g").consumer("twin-name"),
)]
async fn twin_claim(job: &Job) {
    TWIN_SEEN.lock().unwrap().push(job.n);
}

/// Another live process runs entries under this subscription's consumer
/// name and keeps their claims fresh. After a failed read, the re-check of
/// a claiming subscription hands back only entries nobody refreshes: the
/// twin's are left to it, whether or not the last look saw the twin.
#[tokio::test(start_paused = true)]
async fn the_recheck_of_a_claiming_subscription_leaves_a_live_twins_entries() {
    let flaky = Flaky::default();
    group_with_jobs(&flaky.inner, "twin-claim", 0..3).await;
    let held = read_new_as(&flaky.inner, "twin-claim", "twin-name", 3).await;
    // The twin refreshes its claims every 5 s, as a subscription does.
    let refresher = keep_claims_fresh(flaky.inner.clone(), ("twin-claim", "g", "twin-name"), held);
    let app = start_one_named("test", flaky.clone(), twin_claim).await;
    advance(Duration::from_secs(1), 23).await;
    flaky.time_out_next_read.store(true, Ordering::SeqCst);
    advance(Duration::from_secs(1), 30).await;
    refresher.abort();
    assert!(
        TWIN_SEEN.lock().unwrap().is_empty(),
        "a live twin's entries were run here: {:?}",
        TWIN_SEEN.lock().unwrap()
    );
    app.shutdown().await;
}

// ---- the read-ahead bound covers unsettled entries -------------------------------

static BOUND_HANDLED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("bound").group("g"), workers(4), prefetch(8))]
async fn bound(_job: &Job) {
    BOUND_HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// Entries read and not yet settled at the broker (waiting, running, or
/// handled with the ack on its way) never exceed the read-ahead: a crash
/// then redelivers at most that many. Under a constant backlog the acks
/// still go out (the broker's pending list stays within the bound).
#[tokio::test(start_paused = true)]
async fn handled_entries_count_against_read_ahead_until_their_ack_lands() {
    let (flaky, app) = start_fresh_named::<Flaky>("test", bound).await;
    publish_jobs(&flaky.inner, "bound", 0..2_000).await;
    for _ in 0..2_000 {
        tokio::task::yield_now().await;
        let pending = pending(&flaky.inner, "bound").await;
        assert!(pending <= 8, "{pending} entries pending at the broker");
        if BOUND_HANDLED.load(Ordering::SeqCst) == 2_000 && pending == 0 {
            break;
        }
    }
    assert_eq!(BOUND_HANDLED.load(Ordering::SeqCst), 2_000);
    let peak = flaky.peak_unsettled.load(Ordering::SeqCst);
    assert!(peak <= 8, "{peak} entries read and not yet settled at once");

    // The same bound while acks fail: reading stops at 8.
    flaky.fail_settles.store(true, Ordering::SeqCst);
    publish_jobs(&flaky.inner, "bound", 2_000..2_100).await;
    advance(Duration::from_secs(1), 30).await;
    assert_eq!(BOUND_HANDLED.load(Ordering::SeqCst), 2_008);
    flaky.fail_settles.store(false, Ordering::SeqCst);
    advance(Duration::from_secs(1), 10).await;
    assert_eq!(BOUND_HANDLED.load(Ordering::SeqCst), 2_100);
    assert_eq!(pending(&flaky.inner, "bound").await, 0);
    app.shutdown().await;
}

// ---- a lost group is recreated after what was read ---------------------------------

/// A memory broker that can forget a group, as a Redis server restarted
/// without persistence does: from then on the group's name maps to a
/// fresh inner group that does not exist until `ensure_group` creates it,
/// so calls get `NoGroup` until then. Blocking reads poll, so a read in
/// flight at the loss sees it too.
#[derive(Clone, Default)]
struct Forgetful {
    inner: MemoryBroker,
    generation: Arc<AtomicU64>,
    created: Arc<AtomicU64>,
    /// While set, `new` reads wait (polling) before looking at the group,
    /// so that another subscription of the group finds a loss first.
    hold_new_reads: Arc<AtomicBool>,
}

impl Forgetful {
    fn lose_group(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// With `new` reads held, lets another subscription of the group find
    /// it lost and recreate it (checked), then lets the `new` reads go on.
    async fn recreated_by_another_then_release_new_reads(&self) {
        advance(Duration::from_millis(50), 20).await;
        assert_eq!(
            self.created.load(Ordering::SeqCst),
            self.generation.load(Ordering::SeqCst),
            "another subscription recreated the group"
        );
        self.hold_new_reads.store(false, Ordering::SeqCst);
        advance(Duration::from_millis(50), 200).await;
    }

    /// The inner name of `group` now, or `None` while it is lost.
    fn mapped(&self, group: &str) -> Option<String> {
        let generation = self.generation.load(Ordering::SeqCst);
        (self.created.load(Ordering::SeqCst) == generation).then(|| format!("{group}~{generation}"))
    }
}

impl Broker for Forgetful {
    fn ensure_group<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        Box::pin(async move {
            let generation = self.generation.load(Ordering::SeqCst);
            let created = self
                .inner
                .ensure_group(s, &format!("{g}~{generation}"), start)
                .await?;
            self.created.store(generation, Ordering::SeqCst);
            Ok(created)
        })
    }

    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + request.block.unwrap_or_default();
            loop {
                if request.mode == ReadMode::New && self.hold_new_reads.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let Some(group) = self.mapped(request.group) else {
                    return Err(BrokerError::no_group(request.stream, request.group));
                };
                let once = ReadRequest {
                    group: &group,
                    block: None,
                    ..request
                };
                let batch = self.inner.read(once).await?;
                if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
                    return Ok(batch);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    }

    fn ack<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        Box::pin(async move {
            let Some(group) = self.mapped(g) else {
                return Err(BrokerError::no_group(s, g));
            };
            self.inner.ack(s, &group, ids).await
        })
    }

    fn set_group_position<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        Box::pin(async move {
            let Some(group) = self.mapped(g) else {
                return Err(BrokerError::no_group(s, g));
            };
            self.inner.set_group_position(s, &group, start).await
        })
    }

    fn group_info<'a>(&'a self, s: &'a str, g: &'a str) -> BrokerFuture<'a, ruststream::GroupInfo> {
        Box::pin(async move {
            let Some(group) = self.mapped(g) else {
                return Err(BrokerError::no_group(s, g));
            };
            self.inner.group_info(s, &group).await
        })
    }

    forward_broker!(
        inner: name, check_mode, publish, publish_batch, retry, dead_letter,
        redrive, discard, consumers, pending, dead_letters, range, stream_info, trim,
        extend_claim, count_deliveries,
    );
}

static LOST_SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::new("lost").group("g"))]
async fn lost(job: &Job) {
    LOST_SEEN.lock().unwrap().push(job.n);
}

/// After the broker loses the group, the subscription recreates it after
/// the last entry it read, not at the stream's end: entries published
/// between the loss and the recreation are delivered, not skipped.
#[tokio::test(start_paused = true)]
async fn a_lost_group_is_recreated_after_the_last_entry_read() {
    let (broker, app) = start_fresh_named::<Forgetful>("test", lost).await;
    publish_jobs(&broker.inner, "lost", 0..5).await;
    advance(Duration::from_millis(20), 3).await;
    assert_eq!(*LOST_SEEN.lock().unwrap(), [0, 1, 2, 3, 4]);

    broker.lose_group();
    publish_jobs(&broker.inner, "lost", 5..10).await;
    advance(Duration::from_millis(50), 200).await;
    assert_eq!(
        *LOST_SEEN.lock().unwrap(),
        (0..10).collect::<Vec<_>>(),
        "nothing published after the loss was skipped, nothing before it repeated"
    );
    assert_eq!(stream_len(&broker.inner, "lost").await, 10);
    app.shutdown().await;
}

static SHARED_SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::new("shared-lost").group("g"))]
async fn shared_new(job: &Job) {
    SHARED_SEEN.lock().unwrap().push(job.n);
}

#[subscriber(RedisStream::reclaim("shared-lost", Duration::from_secs(60)).group("g"))]
async fn shared_reclaim(job: &Job) {
    SHARED_SEEN.lock().unwrap().push(job.n);
}

/// Two subscriptions of one group in one app (`new` beside `reclaim`, the
/// pattern for servers without claiming reads): whichever finds the group
/// lost recreates it after the last entry either of them read. The
/// reclaim subscription, which reads no new entries, finds the loss first
/// here; recreated from what it alone had read, the group would hand the
/// `new` subscription everything again from the stream's start.
#[tokio::test(start_paused = true)]
async fn a_lost_group_is_recreated_after_the_last_entry_any_of_its_subscriptions_read() {
    let broker = Forgetful::default();
    let app = start_two_named("test", broker.clone(), shared_new, shared_reclaim).await;
    publish_jobs(&broker.inner, "shared-lost", 0..5).await;
    advance(Duration::from_millis(20), 3).await;
    assert_eq!(*SHARED_SEEN.lock().unwrap(), [0, 1, 2, 3, 4]);

    broker.hold_new_reads.store(true, Ordering::SeqCst);
    broker.lose_group();
    publish_jobs(&broker.inner, "shared-lost", 5..10).await;
    broker.recreated_by_another_then_release_new_reads().await;
    assert_eq!(
        *SHARED_SEEN.lock().unwrap(),
        (0..10).collect::<Vec<_>>(),
        "nothing published after the loss was skipped, nothing before it repeated"
    );
    app.shutdown().await;
}

static MOVED_SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::reclaim("moved-lost", Duration::from_secs(60)).group("g"))]
async fn moved_reclaim(job: &Job) {
    MOVED_SEEN.lock().unwrap().push(job.n);
}

#[subscriber(
    RedisStream::new("moved-lost")
        .group("g")
        .start_at(StreamStart::Beginning)
)]
async fn moved_new(job: &Job) {
    MOVED_SEEN.lock().unwrap().push(job.n);
}

/// The group's position for a recreation is where it stands once all its
/// subscriptions were prepared: here the `new` one's `start_at(Beginning)`,
/// prepared after the reclaim one saw the cursor at the stream's end, moved
/// it back. Lost before anything was read, the group is recreated at the
/// beginning, and the old entries the `start_at` asked for are delivered.
#[tokio::test(start_paused = true)]
async fn a_group_lost_before_reading_is_recreated_where_start_at_moved_it() {
    let broker = Forgetful::default();
    publish_jobs(&broker.inner, "moved-lost", 0..5).await;
    broker
        .ensure_group("moved-lost", "g", StreamStart::New)
        .await
        .unwrap();
    broker.hold_new_reads.store(true, Ordering::SeqCst);
    let app = start_two_named("test", broker.clone(), moved_reclaim, moved_new).await;
    broker.lose_group();
    broker.recreated_by_another_then_release_new_reads().await;
    assert_eq!(*MOVED_SEEN.lock().unwrap(), [0, 1, 2, 3, 4]);
    app.shutdown().await;
}

// ---- health ---------------------------------------------------------------------

#[subscriber(RedisStream::new("health").group("g"))]
async fn health_a(_job: &Job) {}

#[subscriber(RedisStream::new("health").group("h"))]
async fn health_b(_job: &Job) {}

/// A broker that stopped taking writes (a file log after an fsync error)
/// makes the app unhealthy, naming the broker, the reason and the
/// subscribers it feeds; once per broker, however many subscribers.
#[tokio::test(start_paused = true)]
async fn a_broker_that_stopped_taking_writes_makes_the_app_unhealthy() {
    let flaky = Flaky::default();
    let app = start_two_named("test", flaky.clone(), health_a, health_b).await;
    assert!(app.health().is_healthy());
    assert_eq!(app.health().to_string(), "healthy");
    *flaky.stopped.lock().unwrap() = Some("fsync of segment 7 failed: EIO".into());
    let health = app.health();
    assert!(!health.is_healthy());
    assert_eq!(health.problems.len(), 1);
    assert_eq!(health.problems[0].subscribers, ["health_a", "health_b"]);
    assert_eq!(
        health.to_string(),
        "memory broker: fsync of segment 7 failed: EIO (subscribers: health_a, health_b)"
    );
    app.shutdown().await;
}

#[subscriber(RedisStream::new("durable").group("g"))]
async fn durable(_job: &Job) {}

/// End to end on the file log: after an fsync error the broker stops
/// taking writes, the publish that was not made durable fails, and the
/// app's health names the broker, the cause and the subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_log_fsync_failure_shows_in_the_apps_health() {
    let dir = std::env::temp_dir().join(format!(
        "ruststream-health-{}-{}",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let broker = ruststream::FileLogBroker::open(&dir).unwrap();
    let app = start_one_named("test", broker.clone(), durable).await;
    assert!(app.health().is_healthy());
    broker.inject_fsync_failure();
    let publisher = Publisher::new(Arc::new(broker.clone()));
    let refused = publisher.publish(&Job { n: 1 }).to("durable").await;
    assert!(
        refused.is_err(),
        "a publish that was not made durable fails"
    );
    let health = app.health();
    assert!(!health.is_healthy());
    let text = health.to_string();
    assert!(
        text.starts_with("filelog broker:") && text.contains("durable"),
        "{text}"
    );
    assert!(
        publisher
            .publish(&Job { n: 2 })
            .to("durable")
            .await
            .is_err()
    );
    app.shutdown_within(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
