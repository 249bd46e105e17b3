//! Running one subscription: a reader, worker lanes and a settler.
//!
//! ```text
//!   broker ──read──▶ reader ──dispatch──▶ lane 0..n ──outcome──▶ settler ──ack/retry/dead──▶ broker
//!                      ▲                     │
//!                      └──── permits ◀───────┘  (read-ahead bound)
//! ```
//!
//! - The reader holds one permit per entry read and not yet handled, so
//!   read-ahead never exceeds the subscription's bound; it asks the broker
//!   for as many entries as it has permits.
//! - `workers(n)` runs n lanes, each handling one entry at a time. With
//!   `by_key`, entries with the same partition key always go to the same
//!   lane, so they are handled one after another in stream order; keyless
//!   entries go to the lane with the shortest queue.
//! - The settler applies outcomes in batches: it takes whatever outcomes
//!   are waiting when it wakes, so a lone ack goes out at once and a busy
//!   subscription acks many entries per broker call.
//! - Shutdown: the reader stops, lanes hand back entries they have not
//!   started (an immediate nack, so any consumer gets them at once), running
//!   handlers get the deadline to finish, and the settler flushes.

use std::any::Any;
use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use ruststream_core::{Broker, BrokerError, Delivery, EntryId, Message, ReadRequest, Retry};
use tokio::sync::{Semaphore, mpsc, watch};
use tracing::Instrument;

use crate::app::ReplyTarget;
use crate::observe::{Handled, Observer, Settlement};
use crate::{Context, HandlerOutcome, Publisher, Settle, Subscriber, Subscription};

/// Logs a `warn!`/`error!` about a delivery inside its context: the
/// delivery's own span when that is enabled (debug), else an info-level
/// span made for this event alone, so the common path creates no span at
/// info level.
macro_rules! report {
    ($worker:expr, $delivery:expr, $($event:tt)+) => {{
        if tracing::Span::current().is_disabled() {
            $worker.context_span($delivery).in_scope(|| tracing::$($event)+);
        } else {
            tracing::$($event)+;
        }
    }};
}

/// How long one blocking read waits before asking again.
const READ_BLOCK: Duration = Duration::from_secs(5);
/// Outcomes applied per settle batch at most.
const SETTLE_BATCH: usize = 1024;
/// Attempts at a settle call that fails transiently before giving up (the
/// entries then stay pending and are redelivered).
const SETTLE_ATTEMPTS: u32 = 6;

/// Everything a subscription's tasks share.
#[derive(Clone)]
pub(crate) struct Env {
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) publisher: Publisher,
    pub(crate) consumer: String,
    pub(crate) name: &'static str,
    pub(crate) subscription: Subscription,
    pub(crate) reply: ReplyTarget,
    /// `None` while running; `Some(deadline)` once shutting down.
    pub(crate) shutdown: watch::Receiver<Option<Duration>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
}

impl Env {
    fn stream(&self) -> &str {
        self.subscription.stream.stream_name()
    }

    fn group(&self) -> &str {
        self.subscription.stream.group_name().unwrap_or_default()
    }

    fn stopping(&self) -> bool {
        self.shutdown.borrow().is_some()
    }
}

/// Counters of one subscription.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Entries received from the broker.
    read: AtomicU64,
    /// Entries whose settle decision has been applied (or given up on).
    settled: AtomicU64,
    delivered: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    failed: AtomicU64,
    panicked: AtomicU64,
    handed_back: AtomicU64,
    handler_nanos: AtomicU64,
    handler_max_nanos: AtomicU64,
}

impl Metrics {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Entries read and not yet settled.
    pub(crate) fn in_flight(&self) -> u64 {
        self.read
            .load(Ordering::SeqCst)
            .saturating_sub(self.settled.load(Ordering::SeqCst))
    }

    /// Entries read so far (a progress counter for quiescence checks).
    pub(crate) fn read_so_far(&self) -> u64 {
        self.read.load(Ordering::SeqCst)
    }

    pub(crate) fn snapshot(&self, subscriber: &'static str, consumer: &str) -> SubscriptionStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SubscriptionStats {
            subscriber,
            consumer: consumer.to_owned(),
            delivered: get(&self.delivered),
            acked: get(&self.acked),
            retried: get(&self.retried),
            dead_lettered: get(&self.dead_lettered),
            failed: get(&self.failed),
            panicked: get(&self.panicked),
            handed_back: get(&self.handed_back),
            handler_time: Duration::from_nanos(get(&self.handler_nanos)),
            handler_max: Duration::from_nanos(get(&self.handler_max_nanos)),
            lag: None,
            pending: None,
            oldest_pending_ms: None,
        }
    }
}

/// What one subscription has done so far, and its group's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionStats {
    /// The subscriber's name.
    pub subscriber: &'static str,
    /// The consumer it reads as.
    pub consumer: String,
    /// Entries handed to the handler.
    pub delivered: u64,
    /// Entries acked.
    pub acked: u64,
    /// Entries retried (by outcome, error or panic).
    pub retried: u64,
    /// Entries dead-lettered (by outcome, decode failure or attempt bound).
    pub dead_lettered: u64,
    /// Handler calls that returned an error.
    pub failed: u64,
    /// Handler calls that panicked.
    pub panicked: u64,
    /// Entries read but handed back unstarted at shutdown.
    pub handed_back: u64,
    /// Total time spent in the handler.
    pub handler_time: Duration,
    /// Longest single handler call.
    pub handler_max: Duration,
    /// The group's lag (entries not yet delivered), if the broker answered.
    pub lag: Option<u64>,
    /// The group's pending count, if the broker answered.
    pub pending: Option<u64>,
    /// Idle time of the oldest pending entry, in milliseconds.
    pub oldest_pending_ms: Option<u64>,
}

/// A settle decision on its way to the broker.
#[derive(Debug)]
enum Op {
    Ack(EntryId),
    /// Retry on a new subscription: copy and ack.
    Copy(EntryId),
    /// Owed again after a delay (zero: an immediate nack).
    After(EntryId, Duration),
    Dead(EntryId, String),
    /// Retry on a claiming or reclaim subscription: nothing to tell the
    /// broker, the entry stays pending under its own id until a claiming
    /// read takes it once idle. Not acking it is the retry.
    Leave,
}

/// Runs one subscription until shutdown.
pub(crate) async fn run_subscription<S: Subscriber>(subscriber: Arc<S>, env: Env) {
    let workers = env.subscription.workers.max(1);
    let read_ahead = env.subscription.read_ahead();
    let permits = Arc::new(Semaphore::new(read_ahead));
    let (settle_tx, settle_rx) = mpsc::unbounded_channel();
    let settler = tokio::spawn(settle_loop(env.clone(), settle_rx));

    let mut lanes = Vec::with_capacity(workers);
    let mut lane_tasks = Vec::with_capacity(workers);
    for index in 0..workers {
        let (tx, rx) = mpsc::unbounded_channel();
        let lane = Lane {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            running: Arc::new(Mutex::new(None)),
        };
        let worker = LaneWorker {
            subscriber: Arc::clone(&subscriber),
            env: env.clone(),
            settle: settle_tx.clone(),
            permits: Arc::clone(&permits),
            queued: Arc::clone(&lane.queued),
            running: Arc::clone(&lane.running),
        };
        let span = tracing::debug_span!("lane", subscriber = env.name, lane = index);
        lane_tasks.push(tokio::spawn(worker.run(rx).instrument(span)));
        lanes.push(lane);
    }

    read_loop(&env, &permits, &lanes).await;

    // Stop: lanes drain what is queued (handing it back) and end.
    let running: Vec<_> = lanes.iter().map(|l| Arc::clone(&l.running)).collect();
    drop(lanes);
    let deadline = env.shutdown.borrow().unwrap_or(Duration::ZERO);
    let all_lanes = async {
        for task in &mut lane_tasks {
            let _ = task.await;
        }
    };
    if tokio::time::timeout(deadline, all_lanes).await.is_err() {
        for task in &lane_tasks {
            task.abort();
        }
        for slot in &running {
            let stuck = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(id) = stuck {
                tracing::warn!(
                    subscriber = env.name,
                    %id,
                    ?deadline,
                    "handler still running at the shutdown deadline: stopped, entry handed back"
                );
                let _ = settle_tx.send(Op::After(id, Duration::ZERO));
            }
        }
    }
    drop(settle_tx);
    let _ = settler.await;
    tracing::info!(subscriber = env.name, "subscriber stopped");
}

/// Reads until shutdown, handing each entry to a lane.
async fn read_loop(env: &Env, permits: &Arc<Semaphore>, lanes: &[Lane]) {
    let mut shutdown = env.shutdown.clone();
    let mut backoff = Backoff::new();
    let read_ahead = env.subscription.read_ahead();
    let mode = env.subscription.stream.read_mode();
    loop {
        if env.stopping() {
            return;
        }
        // At least one free slot, then every other free slot at once.
        let first = tokio::select! {
            permit = permits.acquire() => permit,
            _ = shutdown.changed() => return,
        };
        let Ok(first) = first else { return };
        first.forget();
        let mut count = 1;
        while count < read_ahead {
            match permits.try_acquire() {
                Ok(p) => {
                    p.forget();
                    count += 1;
                }
                Err(_) => break,
            }
        }
        let mut request = ReadRequest::new(env.stream(), env.group(), &env.consumer, mode, count)
            .block(READ_BLOCK);
        request.max_deliveries = env.subscription.max_deliveries;
        let result = tokio::select! {
            r = env.broker.read(request) => r,
            _ = shutdown.changed() => {
                permits.add_permits(count);
                return;
            }
        };
        let batch = match result {
            Ok(batch) => {
                backoff.reset();
                batch
            }
            Err(error) => {
                permits.add_permits(count);
                if !recover(env, &error, &mut backoff, &mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        permits.add_permits(count - batch.deliveries.len().min(count));
        env.metrics
            .read
            .fetch_add(batch.deliveries.len() as u64, Ordering::SeqCst);
        for id in &batch.dead_lettered {
            Metrics::add(&env.metrics.dead_lettered, 1);
            tracing::warn!(
                subscriber = env.name,
                stream = env.stream(),
                group = env.group(),
                %id,
                max_deliveries = env.subscription.max_deliveries,
                "entry dead-lettered: delivered max_deliveries times"
            );
        }
        for delivery in batch.deliveries {
            dispatch(env, lanes, delivery);
        }
    }
}

/// Handles a failed read: backs off (with jitter) and, for a group the
/// broker lost, recreates it. Returns `false` if shutdown came meanwhile.
async fn recover(
    env: &Env,
    error: &BrokerError,
    backoff: &mut Backoff,
    shutdown: &mut watch::Receiver<Option<Duration>>,
) -> bool {
    let delay = backoff.next_delay();
    tracing::error!(
        subscriber = env.name,
        stream = env.stream(),
        group = env.group(),
        %error,
        retry_in = ?delay,
        "read failed"
    );
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = shutdown.changed() => return false,
    }
    if matches!(error, BrokerError::NoGroup { .. }) {
        let start = env.subscription.stream.start();
        match env
            .broker
            .ensure_group(env.stream(), env.group(), start)
            .await
        {
            Ok(true) => tracing::warn!(
                stream = env.stream(),
                group = env.group(),
                ?start,
                "consumer group was missing (server restart or flush?): recreated"
            ),
            Ok(false) => {}
            Err(e) => tracing::error!(%e, "could not recreate the consumer group"),
        }
    }
    !env.stopping()
}

struct Lane {
    tx: mpsc::UnboundedSender<Delivery>,
    queued: Arc<AtomicUsize>,
    /// The entry this lane's handler is running, for shutdown.
    running: Arc<Mutex<Option<EntryId>>>,
}

fn dispatch(env: &Env, lanes: &[Lane], delivery: Delivery) {
    let key = env
        .subscription
        .by_key
        .then(|| {
            delivery
                .entry
                .headers()
                .get_str(crate::PARTITION_KEY_HEADER)
        })
        .flatten();
    let lane = match key {
        Some(key) => {
            let mut h = DefaultHasher::new();
            key.hash(&mut h);
            &lanes[(h.finish() % lanes.len() as u64) as usize]
        }
        None => lanes
            .iter()
            .min_by_key(|l| l.queued.load(Ordering::Relaxed))
            .unwrap_or(&lanes[0]),
    };
    lane.queued.fetch_add(1, Ordering::Relaxed);
    if let Err(returned) = lane.tx.send(delivery) {
        // The lane is gone (it panicked outside a handler, which the lane
        // code does not do); hand the entry back rather than lose it.
        lane.queued.fetch_sub(1, Ordering::Relaxed);
        tracing::error!(id = %returned.0.id(), "worker lane closed; entry left pending");
    }
}

struct LaneWorker<S> {
    subscriber: Arc<S>,
    env: Env,
    settle: mpsc::UnboundedSender<Op>,
    permits: Arc<Semaphore>,
    queued: Arc<AtomicUsize>,
    running: Arc<Mutex<Option<EntryId>>>,
}

impl<S: Subscriber> LaneWorker<S> {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Delivery>) {
        while let Some(delivery) = rx.recv().await {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            let id = delivery.id();
            if self.env.stopping() {
                Metrics::add(&self.env.metrics.handed_back, 1);
                self.observe(&delivery, || Settlement::HandedBack);
                let _ = self.settle.send(Op::After(id, Duration::ZERO));
            } else {
                self.set_running(Some(id));
                let (op, settlement) = self.handle(&delivery).await;
                self.set_running(None);
                self.observe(&delivery, || settlement);
                let _ = self.settle.send(op);
            }
            self.permits.add_permits(1);
        }
    }

    fn observe(&self, delivery: &Delivery, settlement: impl FnOnce() -> Settlement) {
        if let Some(observer) = &self.env.observer {
            observer.handled(&Handled {
                subscriber: self.env.name,
                stream: self.env.stream(),
                group: self.env.group(),
                consumer: &self.env.consumer,
                delivery,
                settlement: &settlement(),
            });
        }
    }

    fn set_running(&self, id: Option<EntryId>) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = id;
    }

    /// Runs the handler on one delivery and decides how to settle it.
    ///
    /// The delivery's span is at debug level: at info level a span per
    /// delivery costs more than the rest of the path together (measured:
    /// about 15,000 instructions and 7 allocations with the fmt subscriber).
    /// Warnings and errors about a delivery still carry its context (see
    /// [`report!`]).
    async fn handle(&self, delivery: &Delivery) -> (Op, Settlement) {
        let env = &self.env;
        let span = tracing::debug_span!(
            "delivery",
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            consumer = %env.consumer,
            id = %delivery.id(),
            delivery_count = delivery.delivery_count,
        );
        self.handle_in_span(delivery).instrument(span).await
    }

    /// The delivery's context as an info-level span, made only when a
    /// warning or error about it is logged.
    fn context_span(&self, delivery: &Delivery) -> tracing::Span {
        let env = &self.env;
        tracing::info_span!(
            "delivery",
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            consumer = %env.consumer,
            id = %delivery.id(),
            delivery_count = delivery.delivery_count,
        )
    }

    async fn handle_in_span(&self, delivery: &Delivery) -> (Op, Settlement) {
        let env = &self.env;
        let id = delivery.id();
        Metrics::add(&env.metrics.delivered, 1);
        let started = Instant::now();
        let outcome = {
            let mut ctx = Context::new(
                delivery,
                env.stream(),
                env.group(),
                &env.consumer,
                &env.publisher,
            );
            catch_unwind(self.subscriber.handle(&mut ctx)).await
        };
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Metrics::add(&env.metrics.handler_nanos, nanos);
        env.metrics
            .handler_max_nanos
            .fetch_max(nanos, Ordering::Relaxed);
        let settle = match outcome {
            Ok(settle) => settle,
            Err(panic) => {
                Metrics::add(&env.metrics.panicked, 1);
                let message = panic_message(&*panic);
                report!(
                    self,
                    delivery,
                    error!(panic = %message, "handler panicked; entry will be retried")
                );
                return self.retry(id, Some(format!("handler panicked: {message}")));
            }
        };
        match settle {
            Settle::Outcome(HandlerOutcome::Ack) => (Op::Ack(id), Settlement::Acked),
            Settle::Outcome(HandlerOutcome::Retry) => {
                tracing::debug!("handler asked for a retry");
                self.retry(id, None)
            }
            Settle::Outcome(HandlerOutcome::RetryAfter(delay)) => {
                tracing::debug!(?delay, "handler asked for a retry after a delay");
                Metrics::add(&env.metrics.retried, 1);
                (Op::After(id, delay), Settlement::RetriedAfter(delay))
            }
            Settle::Outcome(HandlerOutcome::DeadLetter(reason)) => {
                report!(
                    self,
                    delivery,
                    warn!(%reason, "handler dead-lettered the entry")
                );
                dead(id, reason)
            }
            Settle::Failed(error) => {
                Metrics::add(&env.metrics.failed, 1);
                report!(
                    self,
                    delivery,
                    warn!(%error, "handler failed; entry will be retried")
                );
                self.retry(id, Some(error))
            }
            Settle::Undecodable(error) => {
                report!(
                    self,
                    delivery,
                    warn!(%error, "payload cannot be decoded; entry dead-lettered")
                );
                dead(id, error)
            }
            Settle::ReplyUnencodable(error) => {
                report!(
                    self,
                    delivery,
                    error!(%error, "reply cannot be encoded; entry will be retried")
                );
                self.retry(id, Some(error))
            }
            Settle::Reply { stream, payload } => {
                self.publish_reply(delivery, stream, payload).await
            }
        }
    }

    /// Retry as the subscription kind says: leave pending (claiming,
    /// reclaim: the next claiming read takes it once idle) or copy (new).
    fn retry(&self, id: EntryId, reason: Option<String>) -> (Op, Settlement) {
        Metrics::add(&self.env.metrics.retried, 1);
        let op = if self.env.subscription.stream.retries_in_place() {
            Op::Leave
        } else {
            Op::Copy(id)
        };
        (op, Settlement::Retried { reason })
    }

    async fn publish_reply(
        &self,
        delivery: &Delivery,
        own: &'static str,
        payload: Vec<u8>,
    ) -> (Op, Settlement) {
        let id = delivery.id();
        let stream = match &self.env.reply {
            ReplyTarget::Discard => return (Op::Ack(id), Settlement::Acked),
            ReplyTarget::OwnStream => own,
            ReplyTarget::Stream(s) => s.as_str(),
        };
        match self.env.broker.publish(stream, Message::new(payload)).await {
            Ok(reply_id) => {
                tracing::debug!(reply_stream = stream, %reply_id, "reply published");
                let settlement = Settlement::Replied {
                    stream: stream.to_owned(),
                };
                (Op::Ack(id), settlement)
            }
            Err(error) => {
                report!(
                    self,
                    delivery,
                    error!(reply_stream = stream, %error, "reply not published; entry will be retried")
                );
                self.retry(id, Some(format!("reply not published: {error}")))
            }
        }
    }
}

fn dead(id: EntryId, reason: String) -> (Op, Settlement) {
    let settlement = Settlement::DeadLettered {
        reason: reason.clone(),
    };
    (Op::Dead(id, reason), settlement)
}

/// Polls `future`, turning a panic inside it into an `Err` (without an
/// allocation or a spawned task per call).
async fn catch_unwind<F: Future>(future: F) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut future = pin!(future);
    std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    })
    .await
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// Applies settle decisions in batches until every sender is gone.
async fn settle_loop(env: Env, mut rx: mpsc::UnboundedReceiver<Op>) {
    let mut ops = Vec::new();
    let mut batch = SettleBatch::default();
    while let Some(op) = rx.recv().await {
        ops.push(op);
        while ops.len() < SETTLE_BATCH {
            match rx.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        let settled = ops.len() as u64;
        batch.fill(ops.drain(..));
        batch.apply(&env).await;
        env.metrics.settled.fetch_add(settled, Ordering::SeqCst);
    }
}

/// Settle decisions grouped into broker calls.
#[derive(Default)]
struct SettleBatch {
    acks: Vec<EntryId>,
    copies: Vec<EntryId>,
    delayed: Vec<(Duration, EntryId)>,
    dead: Vec<(EntryId, String)>,
}

impl SettleBatch {
    fn fill(&mut self, ops: impl Iterator<Item = Op>) {
        for op in ops {
            match op {
                Op::Ack(id) => self.acks.push(id),
                Op::Copy(id) => self.copies.push(id),
                Op::Leave => {}
                Op::After(id, delay) => self.delayed.push((delay, id)),
                Op::Dead(id, reason) => self.dead.push((id, reason)),
            }
        }
    }

    async fn apply(&mut self, env: &Env) {
        let (stream, group) = (env.stream(), env.group());
        let broker = &*env.broker;
        if !self.acks.is_empty() {
            let ids = &self.acks;
            if settle_call(env, "ack", ids.len(), || broker.ack(stream, group, ids)).await {
                Metrics::add(&env.metrics.acked, ids.len() as u64);
            }
            self.acks.clear();
        }
        if !self.copies.is_empty() {
            let ids = &self.copies;
            settle_call(env, "retry (copy)", ids.len(), || {
                broker.retry(stream, group, ids, Retry::Copy)
            })
            .await;
            self.copies.clear();
        }
        self.delayed.sort();
        for run in self.delayed.chunk_by(|a, b| a.0 == b.0) {
            let delay = run[0].0;
            let ids: Vec<EntryId> = run.iter().map(|(_, id)| *id).collect();
            settle_call(env, "retry (delay)", ids.len(), || {
                broker.retry(stream, group, &ids, Retry::After(delay))
            })
            .await;
        }
        self.delayed.clear();
        for (id, reason) in self.dead.drain(..) {
            let ids = [id];
            if settle_call(env, "dead-letter", 1, || {
                broker.dead_letter(stream, group, &ids, &reason)
            })
            .await
            {
                Metrics::add(&env.metrics.dead_lettered, 1);
            }
        }
    }
}

/// Runs one settle call, retrying transient failures with backoff. Returns
/// whether it succeeded; on failure the entries stay pending (and will be
/// redelivered), which is logged.
async fn settle_call<'a, T, F>(env: &Env, what: &str, entries: usize, call: F) -> bool
where
    F: Fn() -> ruststream_core::BrokerFuture<'a, T>,
{
    let mut backoff = Backoff::new();
    for attempt in 1..=SETTLE_ATTEMPTS {
        match call().await {
            Ok(_) => return true,
            Err(error) if error.is_transient() && attempt < SETTLE_ATTEMPTS => {
                let delay = backoff.next_delay();
                tracing::warn!(subscriber = env.name, %error, attempt, retry_in = ?delay, "{what} failed");
                tokio::time::sleep(delay).await;
            }
            Err(error) => {
                tracing::error!(
                    subscriber = env.name,
                    stream = env.stream(),
                    group = env.group(),
                    %error,
                    entries,
                    "{what} failed; the entries stay pending and will be delivered again"
                );
                return false;
            }
        }
    }
    false
}

/// Exponential backoff with full jitter: 50 ms doubling up to 5 s.
pub(crate) struct Backoff {
    attempt: u32,
    seed: u64,
}

impl Backoff {
    const BASE: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        static SEEDS: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Backoff {
            attempt: 0,
            seed: SEEDS.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ u64::from(nanos),
        }
    }

    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The next delay: uniform in [ceiling/2, ceiling], where the ceiling
    /// doubles per attempt up to the maximum.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = Self::BASE
            .saturating_mul(1u32 << self.attempt.min(16))
            .min(Self::MAX);
        self.attempt = self.attempt.saturating_add(1);
        // splitmix64: a tiny, good-enough generator for jitter.
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let half = ceiling / 2;
        let jitter_ms = z % (half.as_millis() as u64 + 1);
        half + Duration::from_millis(jitter_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stays_bounded() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..12).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(25) && delays[0] <= Duration::from_millis(50));
        assert!(delays[3] >= Duration::from_millis(200) && delays[3] <= Duration::from_millis(400));
        assert!(delays.iter().all(|d| *d <= Backoff::MAX));
        assert!(delays[11] >= Backoff::MAX / 2);
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn catch_unwind_turns_a_panic_into_an_error() {
        let ok = catch_unwind(async { 7 }).await;
        assert_eq!(ok.ok(), Some(7));
        let err = catch_unwind(async { panic!("boom") }).await;
        assert_eq!(panic_message(&*err.err().unwrap()), "boom");
    }
}
