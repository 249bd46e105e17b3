//! Running one subscription: one task that reads and runs the handlers,
//! and a settler.
//!
//! ```text
//!   broker ──read──▶ [ queue ─▶ slot ] × n lanes ──outcomes──▶ settler ──ack/retry/dead──▶ broker
//!                 (one task polls the read and every slot)
//! ```
//!
//! - The read-ahead bound counts every entry read and not yet settled at
//!   the broker: queued on a lane, running, or handled with its outcome on
//!   the way to the broker (or being applied again after a failure). The
//!   task reads only while that is below the bound, asking the broker for
//!   the room left, so a crash redelivers at most the read-ahead. It reads
//!   again once no more than one entry per lane is unsettled, so reads
//!   come in batches of most of the bound; the settler wakes it when
//!   outcomes land.
//! - `workers(n)` gives n lanes, each a slot running one handler at a time;
//!   the task polls the slots side by side, so at most n handlers run at
//!   once and an entry costs no channel hop or task wakeup of its own.
//!   Entries wait in one shared queue and an idle lane takes the next. With
//!   `by_key`, an entry with a partition key waits instead in the queue of
//!   the lane its key hashes to, which runs it before anything from the
//!   shared queue: one key's entries are handled one after another in
//!   stream order, and keyless entries still go to whichever lane is free.
//! - A lane whose handler finishes starts its next entry in the same wake
//!   of the task, so handlers that finish without waiting run back to back,
//!   a whole read batch per wake, lanes taking turns (they finish in about
//!   the order they were read, which keeps the broker's pending lists
//!   cheap to settle).
//! - A panic in a handler is caught where its slot is polled: the entry is
//!   retried and the lane goes on.
//! - The settler applies outcomes in batches: it takes whatever outcomes
//!   are waiting when it wakes (the task appends them to a shared buffer
//!   the settler swaps out, so no hand-over allocates), so a lone ack goes
//!   out at once and a busy subscription acks many entries per broker call.
//!   A broker call that fails is made again with backoff until it lands:
//!   an outcome is never dropped while the subscription runs (see
//!   `settle_call`).
//! - A group the broker lost (a server restarted without persistence) is
//!   recreated after the last id the subscription read, never at the
//!   stream's end (see `Worker::recreate_group`).
//! - Handler time is measured on tokio's clock (so a paused test clock
//!   measures it too), read once each time the task polls its lanes rather
//!   than twice per entry: a handler's time runs from the poll that started
//!   it to the poll that saw it finish. A handler that finishes in the poll
//!   that started it (it never waited) counts as taking no time.
//! - A subscription first re-reads its own pending list (`OwnPending`,
//!   page by page, not blocking) and handles what a predecessor with the
//!   same consumer name left there, then reads as its kind says. Consumer
//!   names are stable (`ruststream-0`, ... or `.consumer(..)`), so a
//!   restarted process picks up what it held when it crashed, on any kind
//!   of subscription, without waiting for `min_idle` or another consumer.
//! - Shutdown is checked before every wake (a version check of the
//!   signal), so a broker that always has entries ready cannot keep the
//!   task from seeing it.
//! - Shutdown: reading stops, entries not started are handed back (an
//!   immediate nack, so any consumer gets them at once), running handlers
//!   get the deadline to finish (past it they are dropped and their entries
//!   handed back too), and the settler flushes.

use std::any::Any;
use std::collections::VecDeque;
use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use ruststream_core::{
    Broker, BrokerError, BrokerFuture, BrokerResult, Delivery, EntryId, Message, ReadBatch,
    ReadMode, ReadRequest, Retry, StreamStart,
};
use tokio::sync::{Notify, watch};
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
            $worker
                .context_span($delivery.id(), $delivery.delivery_count)
                .in_scope(|| tracing::$($event)+);
        } else {
            tracing::$($event)+;
        }
    }};
}

/// How long one blocking read waits before asking again.
const READ_BLOCK: Duration = Duration::from_secs(5);
/// Outcomes applied per settle batch at most.
const SETTLE_BATCH: usize = 1024;
/// Attempts at a settle call once the subscription has stopped (the
/// process is shutting down) before the settler gives up on it. While the
/// subscription runs there is no limit: an outcome is applied again, with
/// backoff, until it lands (see `settle_call`).
const SETTLE_ATTEMPTS_AT_STOP: u32 = 6;

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
    /// The group's last delivered id when the subscription started: where a
    /// group the broker loses (a server restart without persistence) is
    /// recreated from until the subscription has read past it.
    pub(crate) resume_floor: EntryId,
}

impl Env {
    fn stream(&self) -> &str {
        self.subscription.stream.stream_name()
    }

    fn group(&self) -> &str {
        self.subscription.stream.group_name().unwrap_or_default()
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

    /// Adds handler calls that took `total` nanoseconds together, the
    /// longest `longest`.
    fn add_handler_time(&self, total: u64, longest: u64) {
        Self::add(&self.handler_nanos, total);
        // A load first: the maximum rarely moves, and a plain load is far
        // cheaper than the compare-and-swap loop of fetch_max.
        if longest > self.handler_max_nanos.load(Ordering::Relaxed) {
            self.handler_max_nanos.fetch_max(longest, Ordering::Relaxed);
        }
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
    /// Total time spent in the handler: for each call, from the runtime
    /// starting it to the runtime seeing it finish. The runtime reads the
    /// clock once each time it polls its handlers, not per call, so the
    /// figure is exact (to within one such poll) for handlers that wait on
    /// I/O or a timer, and a call that finishes without ever waiting counts
    /// as taking no time.
    pub handler_time: Duration,
    /// Longest single handler call, measured the same way.
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
    let outbox = Arc::new(Outbox::default());
    let settler = tokio::spawn(settle_loop(env.clone(), Arc::clone(&outbox)));
    let worker = Worker {
        subscriber,
        env: env.clone(),
    };
    let span = tracing::debug_span!("subscription", subscriber = env.name);
    {
        // Closes the outbox however `drive` ends, a panic included, so the
        // settler always applies what it has and stops.
        let _close = CloseOnDrop(&outbox);
        drive(&worker, &outbox).instrument(span).await;
    }
    let _ = settler.await;
    tracing::info!(subscriber = env.name, "subscriber stopped");
}

/// Outcomes on their way from a subscription's task to its settler: a
/// batch the task appends to and the settler swaps for its own empty one,
/// so a hand-over moves the outcomes and allocates nothing.
#[derive(Default)]
struct Outbox {
    ops: Mutex<SettleBatch>,
    ready: Notify,
    closed: AtomicBool,
    /// Signalled by the settler each time outcomes reach the broker: the
    /// task may then have room to read again (see `Metrics::in_flight`).
    settled: Notify,
}

impl Outbox {
    /// Moves `ops` (left empty, its capacity kept) to the settler.
    fn push(&self, ops: &mut SettleBatch) {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(ops);
        self.ready.notify_one();
    }

    /// Whether no more outcomes will come: the subscription has stopped.
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// No more outcomes will come.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
    }

    /// Waits for outcomes and swaps them into `into` (which must be empty).
    /// Returns `false` once the outbox is closed and empty.
    async fn take(&self, into: &mut SettleBatch) -> bool {
        loop {
            // `closed` is read before the buffer: outcomes pushed before the
            // close are then always seen.
            let closed = self.closed.load(Ordering::Acquire);
            {
                let mut ops = self.ops.lock().unwrap_or_else(PoisonError::into_inner);
                if !ops.is_empty() {
                    std::mem::swap(&mut *ops, into);
                    return true;
                }
            }
            if closed {
                return false;
            }
            // A push or close since the checks above left a permit, so
            // this returns at once.
            self.ready.notified().await;
        }
    }
}

/// Closes an outbox when dropped.
struct CloseOnDrop<'a>(&'a Outbox);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// How a handler's entry is to be settled, and what to tell an observer.
type Done = (Op, Settlement);

/// What woke the subscription's task.
enum Wake {
    /// Handlers finished (their outcomes are in `ops`).
    Progress,
    /// The read in flight returned.
    Read(BrokerResult<ReadBatch>),
    /// Shutdown was asked for.
    Stop,
    /// The shutdown deadline passed with handlers still running.
    Deadline,
    /// The backoff after a failed read is over.
    BackedOff,
    /// Outcomes reached the broker: there may be room to read.
    Settled,
}

/// What the task keeps of the entry a slot runs: enough to report a panic
/// and to hand the entry back if its handler outlives the shutdown
/// deadline. (The handler's future owns the delivery itself.)
#[derive(Clone, Copy)]
struct Running {
    id: EntryId,
    delivery_count: u32,
}

impl Running {
    /// As [`Delivery::id`], so that `report!` takes either.
    fn id(&self) -> EntryId {
        self.id
    }
}

/// A subscription's lanes: the entries waiting, and one slot per lane
/// running a handler (the future `F`).
struct Lanes<F> {
    /// Entries any lane may take.
    shared: VecDeque<Delivery>,
    /// With `by_key`, each lane's own entries; empty otherwise.
    keyed: Vec<VecDeque<Delivery>>,
    /// One pinned slot per lane, allocated once and refilled in place.
    slots: Vec<Pin<Box<Option<F>>>>,
    /// The entry each slot runs.
    running: Vec<Option<Running>>,
    /// With an observer, a copy of the delivery each slot runs (the
    /// observer is told about it with its outcome); empty otherwise.
    copies: Vec<Option<Delivery>>,
    /// Each slot's delivery span, when that is enabled.
    spans: Vec<Option<tracing::Span>>,
    /// When each lane's handler started, in nanoseconds since the task's
    /// epoch.
    started: Vec<u64>,
    /// Lanes that started a handler in the current round of polls, to be
    /// polled in the next.
    fresh: Vec<bool>,
}

impl<F: Future<Output = Done>> Lanes<F> {
    fn new(lanes: usize, by_key: bool, keep_copies: bool) -> Self {
        Lanes {
            shared: VecDeque::new(),
            keyed: if by_key {
                (0..lanes).map(|_| VecDeque::new()).collect()
            } else {
                Vec::new()
            },
            slots: (0..lanes).map(|_| Box::pin(None)).collect(),
            running: vec![None; lanes],
            copies: if keep_copies {
                (0..lanes).map(|_| None).collect()
            } else {
                Vec::new()
            },
            spans: (0..lanes).map(|_| None).collect(),
            started: vec![0; lanes],
            fresh: vec![false; lanes],
        }
    }

    /// Queues `delivery`: on its key's lane with `by_key`, else shared.
    fn queue<S: Subscriber>(&mut self, worker: &Worker<S>, delivery: Delivery) {
        let own = if self.keyed.is_empty() {
            None
        } else {
            worker.key_lane(&delivery, self.keyed.len())
        };
        match own {
            Some(lane) => self.keyed[lane].push_back(delivery),
            None => self.shared.push_back(delivery),
        }
    }

    /// Every entry still waiting, taken out of the queues.
    fn drain_waiting(&mut self) -> impl Iterator<Item = Delivery> + '_ {
        self.keyed
            .iter_mut()
            .chain([&mut self.shared])
            .flat_map(|queue| queue.drain(..))
    }

    /// Starts `lane`'s next entry, its own first, then a shared one, if
    /// the lane is idle. Returns whether it started one.
    #[inline]
    fn start<S: Subscriber>(
        &mut self,
        lane: usize,
        worker: &Worker<S>,
        traced: bool,
        make: &impl Fn(Delivery) -> F,
    ) -> bool {
        if self.slots[lane].is_some() {
            return false;
        }
        let next = match self.keyed.get_mut(lane).and_then(VecDeque::pop_front) {
            Some(delivery) => delivery,
            None => match self.shared.pop_front() {
                Some(delivery) => delivery,
                None => return false,
            },
        };
        self.spans[lane] = if traced {
            worker.delivery_span(&next)
        } else {
            None
        };
        self.running[lane] = Some(Running {
            id: next.id(),
            delivery_count: next.delivery_count,
        });
        if let Some(copy) = self.copies.get_mut(lane) {
            *copy = Some(next.clone());
        }
        self.slots[lane].set(Some(make(next)));
        true
    }

    /// Whether no entry waits in any queue: a start would find nothing.
    fn nothing_to_start(&self) -> bool {
        self.shared.is_empty() && self.keyed.iter().all(VecDeque::is_empty)
    }
}

/// The subscription's one task: reads, hands entries to `workers` lanes and
/// runs their handlers side by side, and passes outcomes to the settler.
///
/// Each lane has a slot holding the handler it is running; the slots are
/// polled by this task, so an entry costs no channel hop and no task wakeup
/// of its own. A lane whose handler finishes starts its next entry at once
/// and polls it in the same wake, so handlers that finish without waiting
/// run back to back, many per wake.
async fn drive<S: Subscriber>(worker: &Worker<S>, outbox: &Outbox) {
    let env = &worker.env;
    let lanes_n = env.subscription.workers.max(1);
    let read_ahead = env.subscription.read_ahead();
    let mode = env.subscription.stream.read_mode();
    // The future a lane's slot holds. The task enters the delivery's span
    // around every poll of it (see `delivery_span`).
    let make = |delivery| worker.handle(delivery);
    let mut lanes = Lanes::new(lanes_n, env.subscription.by_key, env.observer.is_some());
    // tokio's clock, so that a paused test clock measures handlers too.
    let epoch = tokio::time::Instant::now();
    // The clock, read once per poll of the task's poll loop.
    let mut now = 0u64;
    let mut held = 0usize; // entries read and not yet handled
    // The highest id this subscription has read: a group the broker loses
    // is recreated after it (see `Worker::recreate_group`).
    let mut last_read = env.resume_floor;
    // Armed while the read-ahead is full of outcomes not yet confirmed by
    // the broker: the settler's signal that some landed.
    let mut room: Option<Pin<Box<tokio::sync::futures::Notified<'_>>>> = None;
    let mut read: Option<BrokerFuture<'_, ReadBatch>> = None;
    let mut backoff = Backoff::new();
    let mut backing_off: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut deadline: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut stopping = false;
    // A cheap look at the shutdown signal before every wake (a version
    // check): a broker that always has entries ready (the memory broker,
    // a file log with a backlog) would otherwise keep `stop` from ever
    // being polled.
    let mut peek = env.shutdown.clone();
    let mut shutdown = env.shutdown.clone();
    let mut stop = pin!(async move {
        while shutdown.borrow_and_update().is_none() {
            if shutdown.changed().await.is_err() {
                return;
            }
        }
    });
    let mut ops = SettleBatch::default();
    // Entries a predecessor with this consumer name left pending (it
    // crashed, or was killed) come first: the subscription pages through
    // its own pending list (rule 5) before its first ordinary read. `Some`
    // holds the id to page on from.
    let mut recovering = Some(EntryId::ZERO);
    // Set when a `new` subscription's read failed: the broker may have
    // handed out entries whose reply was lost. They sit pending under this
    // consumer, and nothing else would hand them out again while it lives
    // (claiming and reclaim reads take such entries back once idle, so
    // those subscriptions need no check). Once everything the subscription
    // holds has settled, any entry still pending under its name is one of
    // those, and it re-reads its own pending list as at start-up.
    let mut recheck_own = false;
    // Whether a lost group was recreated since the last successful read.
    let mut recreated_since_read = false;

    loop {
        // Spans at debug level can be on only when the level filter lets
        // debug through: checked once per wake, not once per entry.
        let traced = tracing::level_filters::LevelFilter::current() >= tracing::Level::DEBUG;
        // Start a handler on every idle lane with work queued.
        let mut delivered = 0;
        for lane in 0..lanes_n {
            if lanes.nothing_to_start() {
                break;
            }
            if lanes.start(lane, worker, traced, &make) {
                lanes.started[lane] = now;
                delivered += 1;
            }
        }
        if delivered > 0 {
            Metrics::add(&env.metrics.delivered, delivered);
        }
        if stopping && held == 0 {
            break;
        }
        let stop_now = !stopping && shutdown_asked(&mut peek);
        // Read when nothing is in flight, no backoff runs, and no more
        // than one entry per lane is unsettled: reads then come in batches
        // of most of the read-ahead rather than one entry at a time, and no
        // lane runs dry while the read is out.
        //
        // The bound counts every entry read and not yet settled at the
        // broker: waiting in a lane, running, or handled with its outcome
        // on the way to the broker (or being applied again after a broker
        // failure). So a crash redelivers at most the read-ahead, and a
        // broker that refuses settles stops reading rather than letting
        // handled entries pile up. Outcomes of this wake are pushed below,
        // before the next read is considered, so they count already.
        let low_water = lanes_n.min(read_ahead.saturating_sub(1));
        let unsettled = usize::try_from(env.metrics.in_flight()).unwrap_or(usize::MAX);
        let may_read = read.is_none() && !stopping && !stop_now && backing_off.is_none();
        if recheck_own && may_read && unsettled == 0 {
            recheck_own = false;
            recovering = Some(EntryId::ZERO);
        }
        if may_read && unsettled <= low_water && !recheck_own {
            room = None;
            let (mode, block) = match recovering {
                // A pending list answers at once: no blocking.
                Some(after) => (ReadMode::OwnPending { after }, None),
                None => (mode, Some(READ_BLOCK)),
            };
            let mut request = ReadRequest::new(
                env.stream(),
                env.group(),
                &env.consumer,
                mode,
                read_ahead - unsettled,
            );
            request.block = block;
            request.max_deliveries = env.subscription.max_deliveries;
            read = Some(env.broker.read(request));
        } else if may_read && room.is_none() {
            room = Some(Box::pin(outbox.settled.notified()));
        }

        let mut progress = false;
        let mut delivered = 0;
        // Handler time finished in this wake: the sum and the longest.
        let (mut total, mut longest) = (0u64, 0u64);
        let poll_loop = std::future::poll_fn(|cx| {
            now = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            // Poll in rounds: every occupied slot first, then, while handlers
            // finish, only the slots that started a new handler in the round
            // before. Lanes take turns, so handlers that finish without
            // waiting complete in about the order they were read.
            let mut round_all = true;
            loop {
                let mut started_any = false;
                for lane in 0..lanes_n {
                    if !round_all && !std::mem::take(&mut lanes.fresh[lane]) {
                        continue;
                    }
                    let Some(future) = lanes.slots[lane].as_mut().as_pin_mut() else {
                        continue;
                    };
                    let entered = lanes.spans[lane].as_ref().map(tracing::Span::enter);
                    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
                    let running = lanes.running[lane].take();
                    let (op, settlement) = match polled {
                        Ok(Poll::Pending) => {
                            lanes.running[lane] = running;
                            continue;
                        }
                        Ok(Poll::Ready(done)) => done,
                        Err(panic) => match &running {
                            Some(entry) => worker.panicked(entry, &*panic),
                            // Not reached: a running slot has its record.
                            None => {
                                lanes.slots[lane].set(None);
                                drop(entered);
                                lanes.spans[lane] = None;
                                continue;
                            }
                        },
                    };
                    lanes.slots[lane].set(None);
                    drop(entered);
                    lanes.spans[lane] = None;
                    if let Some(delivery) = lanes.copies.get_mut(lane).and_then(Option::take) {
                        worker.observe(&delivery, settlement);
                    }
                    ops.add(op);
                    held -= 1;
                    let took = now.saturating_sub(lanes.started[lane]);
                    total = total.saturating_add(took);
                    longest = longest.max(took);
                    progress = true;
                    // The lane is free: start its next entry, polled in the
                    // next round of this same poll.
                    if !stopping && lanes.start(lane, worker, traced, &make) {
                        lanes.started[lane] = now;
                        lanes.fresh[lane] = true;
                        started_any = true;
                        delivered += 1;
                    }
                }
                if !started_any {
                    break;
                }
                round_all = false;
            }
            if progress {
                return Poll::Ready(Wake::Progress);
            }
            if let Some(r) = read.as_mut()
                && let Poll::Ready(result) = r.as_mut().poll(cx)
            {
                return Poll::Ready(Wake::Read(result));
            }
            if let Some(b) = backing_off.as_mut()
                && b.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Wake::BackedOff);
            }
            if let Some(r) = room.as_mut()
                && r.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Wake::Settled);
            }
            if !stopping && stop.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::Stop);
            }
            if let Some(d) = deadline.as_mut()
                && d.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Wake::Deadline);
            }
            Poll::Pending
        });
        let wake = if stop_now {
            Wake::Stop
        } else {
            poll_loop.await
        };
        if delivered > 0 {
            Metrics::add(&env.metrics.delivered, delivered);
        }

        match wake {
            Wake::Progress => env.metrics.add_handler_time(total, longest),
            Wake::Read(result) => {
                read = None;
                match result {
                    Ok(batch) => {
                        backoff.reset();
                        recreated_since_read = false;
                        if let Some(after) = &mut recovering {
                            // Page on past what this read handed out or
                            // dead-lettered; an empty page ends recovery.
                            let last = batch.deliveries.iter().map(Delivery::id);
                            match last.chain(batch.dead_lettered.iter().copied()).max() {
                                Some(last) => *after = last,
                                None => recovering = None,
                            }
                        }
                        let ids = batch.deliveries.iter().map(Delivery::id);
                        if let Some(max) = ids.chain(batch.dead_lettered.iter().copied()).max() {
                            last_read = last_read.max(max);
                        }
                        env.metrics
                            .read
                            .fetch_add(batch.deliveries.len() as u64, Ordering::SeqCst);
                        worker.report_dead_lettered(&batch.dead_lettered);
                        held += batch.deliveries.len();
                        if lanes.keyed.is_empty() {
                            lanes.shared.extend(batch.deliveries);
                        } else {
                            for delivery in batch.deliveries {
                                lanes.queue(worker, delivery);
                            }
                        }
                    }
                    Err(error) => {
                        // A failed own-pending read loses nothing: what it
                        // would have handed out is still pending here.
                        if recovering.is_none() && !env.subscription.stream.retries_in_place() {
                            recheck_own = true;
                        }
                        let delay = backoff.next_delay();
                        let recreated = worker.read_failed(&error, delay, last_read).await;
                        if recreated && !recreated_since_read {
                            // The group is back: the broker answers again,
                            // so read at once rather than after the backoff
                            // its outage built up. Once only until a read
                            // succeeds, so a broker that keeps losing the
                            // group still gets the backoff.
                            recreated_since_read = true;
                            backoff.reset();
                        } else {
                            backing_off = Some(Box::pin(tokio::time::sleep(delay)));
                        }
                    }
                }
            }
            Wake::BackedOff => backing_off = None,
            Wake::Settled => room = None,
            Wake::Stop => {
                stopping = true;
                read = None; // a blocking read in flight is abandoned
                backing_off = None;
                for delivery in lanes.drain_waiting() {
                    Metrics::add(&env.metrics.handed_back, 1);
                    worker.observe(&delivery, Settlement::HandedBack);
                    ops.add(Op::After(delivery.id(), Duration::ZERO));
                    held -= 1;
                }
                let grace = env.shutdown.borrow().unwrap_or(Duration::ZERO);
                deadline = Some(Box::pin(tokio::time::sleep(grace)));
            }
            Wake::Deadline => {
                for lane in 0..lanes_n {
                    if let Some(entry) = lanes.running[lane].take() {
                        tracing::warn!(
                            subscriber = env.name,
                            id = %entry.id,
                            "handler still running at the shutdown deadline: stopped, entry handed back"
                        );
                        lanes.slots[lane].set(None);
                        lanes.spans[lane] = None;
                        if let Some(delivery) = lanes.copies.get_mut(lane).and_then(Option::take) {
                            worker.observe(&delivery, Settlement::HandedBack);
                        }
                        ops.add(Op::After(entry.id, Duration::ZERO));
                        held -= 1;
                    }
                }
            }
        }
        if !ops.is_empty() {
            // One hand-over per wake, however many entries finished.
            outbox.push(&mut ops);
        }
        // A broker that always has work ready (the memory broker answers at
        // once) would otherwise keep this task from ever yielding.
        tokio::task::consume_budget().await;
    }
}

/// Whether shutdown has been asked for since `peek` last looked: a version
/// check, then a look at the value only when it changed. A dropped sender
/// counts as a shutdown.
fn shutdown_asked(peek: &mut watch::Receiver<Option<Duration>>) -> bool {
    match peek.has_changed() {
        Ok(false) => false,
        Ok(true) => peek.borrow_and_update().is_some(),
        Err(_) => true,
    }
}

struct Worker<S> {
    subscriber: Arc<S>,
    env: Env,
}

impl<S: Subscriber> Worker<S> {
    /// The lane whose own queue `delivery` waits in: with `by_key` (when
    /// `lanes` is not zero), the lane its partition key hashes to; `None`
    /// for the shared queue.
    fn key_lane(&self, delivery: &Delivery, lanes: usize) -> Option<usize> {
        if lanes == 0 {
            return None;
        }
        let key = delivery
            .entry
            .headers()
            .get_str(crate::PARTITION_KEY_HEADER)?;
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        Some((h.finish() % lanes as u64) as usize)
    }

    fn report_dead_lettered(&self, ids: &[EntryId]) {
        let env = &self.env;
        for id in ids {
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
    }

    /// Logs a failed read and, for a group the broker lost, recreates it
    /// after `last_read` (see [`Worker::recreate_group`]). Returns whether
    /// it recreated the group.
    async fn read_failed(
        &self,
        error: &BrokerError,
        retry_in: Duration,
        last_read: EntryId,
    ) -> bool {
        let env = &self.env;
        tracing::error!(
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            %error,
            ?retry_in,
            "read failed"
        );
        matches!(error, BrokerError::NoGroup { .. }) && self.recreate_group(last_read).await
    }

    /// Recreates a group the broker lost (a server restart without
    /// persistence, a flush) so that nothing published since is skipped:
    /// after `last_read`, the highest id this subscription has read (or the
    /// group's position when it started), or at the beginning when the
    /// stream itself is new since then (its last id is below `last_read`,
    /// or nothing was read from a stream that was empty). Never at the
    /// subscription's own start position: for `New` that is the stream's
    /// end, which would pass over everything published between the loss
    /// and now. Entries read before the loss and published after
    /// `last_read` by nobody are not skipped either; entries the lost group
    /// had pending lose their pending state with it (the broker forgot
    /// them), as `docs/guarantees.md` says.
    async fn recreate_group(&self, last_read: EntryId) -> bool {
        let env = &self.env;
        let start = if last_read == EntryId::ZERO {
            StreamStart::Beginning
        } else {
            match env.broker.stream_info(env.stream()).await {
                Ok(Some(info)) if info.last_id >= last_read => StreamStart::Id(last_read),
                Ok(_) => StreamStart::Beginning,
                // The next read fails again and retries this.
                Err(_) => StreamStart::Id(last_read),
            }
        };
        {
            match env
                .broker
                .ensure_group(env.stream(), env.group(), start)
                .await
            {
                Ok(created) => {
                    if created {
                        tracing::warn!(
                            stream = env.stream(),
                            group = env.group(),
                            ?start,
                            "consumer group was missing (server restart or flush?): recreated"
                        );
                    }
                    true
                }
                Err(e) => {
                    tracing::error!(
                        stream = env.stream(),
                        group = env.group(),
                        %e,
                        "could not recreate the consumer group; trying again after the next failed read"
                    );
                    false
                }
            }
        }
    }

    /// The outcome of a handler that panicked: retried, and logged.
    fn panicked(&self, entry: &Running, panic: &(dyn Any + Send)) -> Done {
        Metrics::add(&self.env.metrics.panicked, 1);
        let message = panic_message(panic);
        report!(
            self,
            entry,
            error!(panic = %message, "handler panicked; entry will be retried")
        );
        self.retry(entry.id, Some(format!("handler panicked: {message}")))
    }

    #[inline]
    fn observe(&self, delivery: &Delivery, settlement: Settlement) {
        if let Some(observer) = &self.env.observer {
            let event = Handled {
                subscriber: self.env.name,
                stream: self.env.stream(),
                group: self.env.group(),
                consumer: &self.env.consumer,
                delivery,
                settlement: &settlement,
            };
            // An observer is user code: its panic is logged, and the
            // subscription goes on.
            let called = std::panic::catch_unwind(AssertUnwindSafe(|| observer.handled(&event)));
            if let Err(panic) = called {
                tracing::error!(
                    subscriber = self.env.name,
                    id = %delivery.id(),
                    panic = %panic_message(&*panic),
                    "observer panicked"
                );
            }
        }
    }

    /// The span a delivery's handler runs in, `None` when it is disabled.
    ///
    /// It is at debug level: at info level a span per delivery costs more
    /// than the rest of the path together (measured: about 15,000
    /// instructions and 7 allocations with the fmt subscriber). Warnings and
    /// errors about a delivery still carry its context (see [`report!`]).
    /// The task enters it around each poll of the handler rather than
    /// wrapping the handler in `Instrumented`: a disabled span then costs a
    /// check, where the wrapper cost about 10% of the throughput of a small
    /// handler (measured with the runtime benchmark).
    fn delivery_span(&self, delivery: &Delivery) -> Option<tracing::Span> {
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
        (!span.is_disabled()).then_some(span)
    }

    /// The delivery's context as an info-level span, made only when a
    /// warning or error about it is logged.
    fn context_span(&self, id: EntryId, delivery_count: u32) -> tracing::Span {
        let env = &self.env;
        tracing::info_span!(
            "delivery",
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            consumer = %env.consumer,
            %id,
            delivery_count,
        )
    }

    /// Runs the handler on one delivery and decides how to settle it.
    async fn handle(&self, delivery: Delivery) -> Done {
        let delivery = &delivery;
        let env = &self.env;
        let id = delivery.id();
        let outcome = {
            let mut ctx = Context::new(
                delivery,
                env.stream(),
                env.group(),
                &env.consumer,
                &env.publisher,
            );
            self.subscriber.handle(&mut ctx).await
        };
        match outcome {
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

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// Applies settle decisions in batches until the outbox is closed and
/// empty.
async fn settle_loop(env: Env, outbox: Arc<Outbox>) {
    let mut batch = SettleBatch::default();
    while outbox.take(&mut batch).await {
        let settled = batch.count;
        batch.apply(&env, &outbox).await;
        env.metrics
            .settled
            .fetch_add(settled as u64, Ordering::SeqCst);
        outbox.settled.notify_one();
    }
}

/// Settle decisions grouped into broker calls.
#[derive(Default)]
struct SettleBatch {
    /// Decisions in the batch, `Op::Leave` included.
    count: usize,
    acks: Vec<EntryId>,
    copies: Vec<EntryId>,
    delayed: Vec<(Duration, EntryId)>,
    dead: Vec<(EntryId, String)>,
}

impl SettleBatch {
    #[inline]
    fn add(&mut self, op: Op) {
        self.count += 1;
        match op {
            Op::Ack(id) => self.acks.push(id),
            Op::Copy(id) => self.copies.push(id),
            Op::Leave => {}
            Op::After(id, delay) => self.delayed.push((delay, id)),
            Op::Dead(id, reason) => self.dead.push((id, reason)),
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Moves `other`'s decisions into this batch.
    fn append(&mut self, other: &mut SettleBatch) {
        self.count += std::mem::take(&mut other.count);
        self.acks.append(&mut other.acks);
        self.copies.append(&mut other.copies);
        self.delayed.append(&mut other.delayed);
        self.dead.append(&mut other.dead);
    }

    /// Applies the batch, in broker calls of at most `SETTLE_BATCH`
    /// entries, and empties it. Each call is made again until it lands (see
    /// [`settle_call`]).
    async fn apply(&mut self, env: &Env, outbox: &Outbox) {
        let (stream, group) = (env.stream(), env.group());
        let broker = &*env.broker;
        self.count = 0;
        for ids in self.acks.chunks(SETTLE_BATCH) {
            if settle_call(env, outbox, "ack", ids.len(), || {
                broker.ack(stream, group, ids)
            })
            .await
            {
                Metrics::add(&env.metrics.acked, ids.len() as u64);
            }
        }
        self.acks.clear();
        for ids in self.copies.chunks(SETTLE_BATCH) {
            settle_call(env, outbox, "retry (copy)", ids.len(), || {
                broker.retry(stream, group, ids, Retry::Copy)
            })
            .await;
        }
        self.copies.clear();
        self.delayed.sort();
        for run in self.delayed.chunk_by(|a, b| a.0 == b.0) {
            let delay = run[0].0;
            let ids: Vec<EntryId> = run.iter().map(|(_, id)| *id).collect();
            settle_call(env, outbox, "retry (delay)", ids.len(), || {
                broker.retry(stream, group, &ids, Retry::After(delay))
            })
            .await;
        }
        self.delayed.clear();
        for (id, reason) in self.dead.drain(..) {
            let ids = [id];
            if settle_call(env, outbox, "dead-letter", 1, || {
                broker.dead_letter(stream, group, &ids, &reason)
            })
            .await
            {
                Metrics::add(&env.metrics.dead_lettered, 1);
            }
        }
    }
}

/// Runs one settle call until it lands. Returns whether it did.
///
/// A failed call is made again with backoff (jittered, up to 5 s apart),
/// whatever the error, for as long as the subscription runs: an outcome
/// that could not be applied is never dropped, so an entry is never left
/// pending under a live consumer (which would not read it again). Broker
/// calls are all-or-nothing, so a failed one changed nothing and making it
/// again is safe; one whose reply was lost after it was applied is a no-op
/// the second time (acks, retries and dead letters ignore entries that
/// are no longer pending). While outcomes wait here the read-ahead stays
/// full, so the subscription reads nothing new.
///
/// Once the subscription has stopped (the process is shutting down) the
/// call gets `SETTLE_ATTEMPTS_AT_STOP` more tries, and a closed broker
/// none: the entries then stay pending at the broker as they were, and are
/// delivered again (to this consumer's successor by its own-pending
/// re-read, to a claiming reader once idle).
async fn settle_call<'a, T, F>(
    env: &Env,
    outbox: &Outbox,
    what: &str,
    entries: usize,
    call: F,
) -> bool
where
    F: Fn() -> ruststream_core::BrokerFuture<'a, T>,
{
    let mut backoff = Backoff::new();
    let mut attempts_at_stop = 0u32;
    loop {
        let error = match call().await {
            Ok(_) => return true,
            Err(error) => error,
        };
        if outbox.is_closed() {
            if attempts_at_stop == 0 {
                // Short delays from here: the process is stopping.
                backoff.reset();
            }
            attempts_at_stop += 1;
        }
        let give_up = matches!(error, BrokerError::Closed { .. })
            || attempts_at_stop >= SETTLE_ATTEMPTS_AT_STOP;
        if give_up {
            tracing::error!(
                subscriber = env.name,
                stream = env.stream(),
                group = env.group(),
                %error,
                entries,
                "{what} failed while stopping; not applied: the broker still holds the entries as \
                 pending, and they are delivered again after a restart or once idle"
            );
            return false;
        }
        let delay = backoff.next_delay();
        tracing::warn!(
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            %error,
            entries,
            retry_in = ?delay,
            "{what} failed; applying it again"
        );
        tokio::time::sleep(delay).await;
    }
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
}
