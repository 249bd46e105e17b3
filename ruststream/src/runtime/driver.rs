//! The subscription's task: one poll loop that reads, runs every lane's
//! handler in place, and hands decisions to the settler. Each wake event
//! is one method of [`Driver`].
//!
//! - Each lane has a slot holding the handler it runs; the slots are polled
//!   by this task, so an entry costs no channel hop and no task wakeup of
//!   its own.
//! - A lane whose handler finishes starts its next entry in the same wake,
//!   so handlers that finish without waiting run back to back, a whole read
//!   batch per wake, lanes taking turns (they finish in about the order
//!   they were read, which keeps the broker's pending lists cheap to
//!   settle).
//! - A panic in a handler is caught where its slot is polled: the entry is
//!   retried and the lane goes on.
//! - Handler time is measured on tokio's clock (so a paused test clock
//!   measures it too), read once each time the task polls its lanes rather
//!   than twice per entry: a handler's time runs from the poll that started
//!   it to the poll that saw it finish. A handler that finishes in the poll
//!   that started it (it never waited) counts as taking no time.
//! - Shutdown is checked before every wake (a version check of the
//!   signal), so a broker that always has entries ready cannot keep the
//!   task from seeing it. Then reading stops, entries not started are
//!   handed back (an immediate nack, so any consumer gets them at once),
//!   running handlers get the deadline to finish (past it they are dropped
//!   and their entries handed back too), and the settler flushes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use ruststream_core::{BrokerResult, Delivery, EntryId, ReadBatch, ReadMode};
use tokio::sync::watch;

use super::Counters;
use super::Env;
use super::claims::KeepAlive;
use super::handle::Pipeline;
use super::lanes::{Finished, Held, Lane, Lanes, Polled, Started};
use super::read::{LastRead, ReadWake, Reader, Taken};
use super::settle::{Decided, Decision, InHand, Outbox, SettleBatch};
use crate::Subscriber;
use crate::observe::Settlement;

/// Runs the subscription's task until it has stopped and every entry it
/// read is handled or handed back.
pub(super) async fn drive<S: Subscriber>(
    pipeline: &Pipeline<S>,
    outbox: &Outbox,
    last_read: &LastRead,
) {
    // The future a lane's slot holds. The task enters the delivery's span
    // around every poll of it (see `Pipeline::delivery_span`). A batch
    // subscriber's lanes each hold one entry of a batch (`batch.rs`).
    match &pipeline.batches {
        None => {
            let make = |delivery| pipeline.handle(delivery);
            Driver::new(pipeline, outbox, last_read, make).run().await;
        }
        Some(batches) => {
            let make = |delivery| pipeline.in_batch(batches, delivery);
            Driver::new(pipeline, outbox, last_read, make).run().await;
        }
    }
}

/// What woke the task.
enum Wake {
    /// Handlers finished (their decisions are in the batch), together
    /// taking `total` nanoseconds, the longest `longest`.
    Progress { total: u64, longest: u64 },
    /// The reader: a read returned, a backoff ended, or room appeared.
    Read(ReadWake),
    /// An entry held on its lane after a retry is due to run again.
    Due,
    /// Entries joined a batch still gathering: they no longer count
    /// against the read window, so a read the window held back may go out.
    Parked,
    /// Time to refresh the claims on the entries the lanes hold.
    KeepAlive,
    /// Shutdown was asked for.
    Stop,
    /// The shutdown deadline passed with handlers still running.
    Deadline,
}

/// The task's state between wakes.
struct Driver<'a, S, F, M> {
    pipeline: &'a Pipeline<S>,
    outbox: &'a Outbox,
    /// Makes a lane's handler future for a delivery.
    make: M,
    lanes: Lanes<F>,
    reader: Reader<'a>,
    keep_alive: KeepAlive<'a>,
    /// tokio's clock, so that a paused test clock measures handlers too.
    epoch: tokio::time::Instant,
    /// The clock, read once per poll of the lanes, in nanoseconds since
    /// `epoch`.
    now: u64,
    /// Entries read and not yet handled (queued or running).
    held: usize,
    /// Handlers started within a poll of the lanes, added to the counters
    /// after the wake.
    delivered: u64,
    stopping: bool,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A cheap look at the shutdown signal before every wake (a version
    /// check): a broker that always has entries ready (the memory broker, a
    /// file log with a backlog) would otherwise keep `stop` from ever being
    /// polled.
    peek: watch::Receiver<Option<Duration>>,
    stop: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    /// Decisions of this wake, handed to the settler at its end.
    decisions: SettleBatch,
    /// Retries this subscription left pending in place (claiming and
    /// reclaim), newest last, with when: its own, not another process's,
    /// for the looks at its pending list (see [`LeftInPlace`]).
    left: LeftInPlace,
}

/// The retries a claiming or reclaim subscription left pending in place
/// lately. They stay pending under its consumer, unrefreshed, until a
/// claiming read takes them once idle `min_idle`; a look at the own
/// pending list must not take them for another live process's entries,
/// nor for strays. Kept for `min_idle` plus a live window, and at most
/// [`LeftInPlace::MOST`].
#[derive(Default)]
struct LeftInPlace(std::collections::VecDeque<(EntryId, tokio::time::Instant)>);

impl LeftInPlace {
    /// How many are kept at most (the oldest go first).
    const MOST: usize = 1 << 16;

    /// Notes `ids`, left now, and forgets those left longer ago than
    /// `keep`.
    fn note(&mut self, ids: impl Iterator<Item = EntryId>, keep: Duration) {
        let now = tokio::time::Instant::now();
        self.0.extend(ids.map(|id| (id, now)));
        while self
            .0
            .front()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) > keep)
            || self.0.len() > Self::MOST
        {
            self.0.pop_front();
        }
    }

    fn ids(&self) -> impl Iterator<Item = EntryId> + '_ {
        self.0.iter().map(|(id, _)| *id)
    }
}

impl<'a, S, F, M> Driver<'a, S, F, M>
where
    S: Subscriber,
    F: Future<Output = Decided>,
    M: Fn(Delivery) -> F,
{
    fn new(
        pipeline: &'a Pipeline<S>,
        outbox: &'a Outbox,
        last_read: &'a LastRead,
        make: M,
    ) -> Self {
        let env = &pipeline.env;
        let mut shutdown = env.shutdown.clone();
        let stop = Box::pin(async move {
            while shutdown.borrow_and_update().is_none() {
                if shutdown.changed().await.is_err() {
                    return;
                }
            }
        });
        Driver {
            pipeline,
            outbox,
            make,
            lanes: Lanes::new(
                env.subscription.lanes(),
                env.subscription.by_key,
                env.observer.is_some(),
            ),
            reader: Reader::new(env, outbox, last_read),
            keep_alive: KeepAlive::new(env),
            epoch: env.counters.signals.epoch(),
            now: 0,
            held: 0,
            delivered: 0,
            stopping: false,
            deadline: None,
            peek: env.shutdown.clone(),
            stop,
            decisions: SettleBatch::default(),
            left: LeftInPlace::default(),
        }
    }

    async fn run(mut self) {
        loop {
            // Spans at debug level can be on only when the level filter
            // lets debug through: checked once per wake, not per entry.
            let traced = tracing::level_filters::LevelFilter::current() >= tracing::Level::DEBUG;
            // Looked at before anything starts: once a stop is asked for,
            // entries not started yet go back, whatever else woke the task.
            let mut stop_now = !self.stopping && shutdown_asked(&mut self.peek);
            if !stop_now {
                self.start_idle_lanes(traced);
            }
            if self.stopping && self.held == 0 {
                break;
            }
            let (lanes, left) = (&self.lanes, &self.left);
            let was_reading = self.reader.reading();
            let holding = || {
                let mut ids = lanes.holding();
                ids.extend(left.ids());
                ids
            };
            let (decisions, outbox) = (&self.decisions, &self.outbox);
            let in_hand = || {
                let InHand { mut ending, owing } = in_hand(lanes, decisions, outbox);
                ending.extend(owing);
                ending
            };
            let claims = (&self.keep_alive, in_hand);
            self.reader
                .maybe_read(self.stopping || stop_now, self.held, holding, claims);
            if !was_reading
                && self.reader.reading()
                && std::future::poll_fn(|cx| Poll::Ready(self.reader.send(cx))).await
            {
                // The read is on its way: let the client send it before the
                // handlers run, so reading overlaps handling.
                tokio::task::yield_now().await;
                stop_now = !self.stopping && shutdown_asked(&mut self.peek);
            }
            let wake = if stop_now {
                Wake::Stop
            } else {
                std::future::poll_fn(|cx| self.poll_wake(cx, traced)).await
            };
            if self.delivered > 0 {
                Counters::add(&self.pipeline.env.counters.delivered, self.delivered);
                self.delivered = 0;
            }
            match wake {
                Wake::Progress { total, longest } => {
                    self.pipeline.env.counters.add_handler_time(total, longest);
                }
                Wake::Read(ReadWake::Read(result)) => self.on_read(result).await,
                Wake::Read(ReadWake::Looked(result)) => self.reader.looked(result),
                Wake::Read(ReadWake::BackedOff | ReadWake::Settled | ReadWake::LookDue)
                | Wake::Due
                | Wake::Parked => {}
                Wake::KeepAlive => {
                    let InHand { mut ending, owing } = self.in_hand();
                    ending.extend(owing);
                    self.keep_alive.refresh(ending);
                }
                Wake::Stop => self.on_stop(),
                Wake::Deadline => self.on_deadline(),
            }
            self.lanes.take_reruns(self.decisions.reruns());
            if !self.decisions.is_empty() {
                // One hand-over per wake, however many entries finished.
                let env = &self.pipeline.env;
                let min_idle = env.claimed_after.unwrap_or(Duration::ZERO);
                let keep = min_idle + super::claims::live_window(env);
                self.outbox.push(&mut self.decisions);
                self.left.note(self.decisions.take_left(), keep);
            }
            let counters = &self.pipeline.env.counters;
            counters
                .signals
                .set_oldest_running(self.lanes.oldest_running());
            counters.metrics.in_flight(
                counters.in_flight(),
                self.pipeline.env.subscription.read_ahead(),
            );
            if self.lanes.by_key {
                let counters = &self.pipeline.env.counters;
                counters.set_held(self.lanes.held_count());
            }
            // A broker that always has work ready (the memory broker answers
            // at once) would otherwise keep this task from ever yielding.
            tokio::task::consume_budget().await;
        }
    }

    /// Starts a handler on every idle lane with work queued, and counts
    /// them as delivered at once (before the task waits on them).
    fn start_idle_lanes(&mut self, traced: bool) {
        let mut started = 0;
        for lane in 0..self.lanes.lanes.len() {
            if self.lanes.nothing_to_start() {
                break;
            }
            if self
                .lanes
                .start(lane, self.pipeline, traced, self.now, &self.make, true)
            {
                started += 1;
            }
        }
        if started > 0 {
            Counters::add(&self.pipeline.env.counters.delivered, started);
        }
    }

    /// Polls every running handler, then the reader, the shutdown signal
    /// and the deadline, and says what woke the task.
    fn poll_wake(&mut self, cx: &mut Context<'_>, traced: bool) -> Poll<Wake> {
        let Driver {
            pipeline,
            make,
            lanes,
            epoch,
            now,
            held,
            delivered,
            stopping,
            decisions,
            peek,
            ..
        } = self;
        *now = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let (mut total, mut longest) = (0u64, 0u64);
        let mut progress = false;
        // Once a stop is asked for, a lane that frees up starts nothing: the
        // next turn of the loop sees the stop and hands its entries back.
        // Looked at once a poll (a look costs about 24 instructions).
        let stop_asked = !*stopping && shutdown_seen(peek);
        let parked = pipeline.env.counters.held();
        // Poll in rounds: every occupied lane first, then, while handlers
        // finish, only the lanes that started a new handler in the round
        // before. Lanes take turns, so handlers that finish without waiting
        // complete in about the order they were read.
        let mut round_all = true;
        loop {
            let mut started_any = false;
            for lane in 0..lanes.lanes.len() {
                let this = &mut lanes.lanes[lane];
                if !round_all && !std::mem::take(&mut this.fresh) {
                    continue;
                }
                match this.poll(cx) {
                    Polled::Pending => continue,
                    Polled::Acked(id) => {
                        decisions.add(Decision::Ack(id));
                        *held -= 1;
                    }
                    Polled::Ended(started, finished) => {
                        settle_ended(pipeline, this, decisions, held, &started, finished);
                    }
                }
                let took = now.saturating_sub(this.since);
                pipeline.env.counters.metrics.handler_ran(took);
                total = total.saturating_add(took);
                longest = longest.max(took);
                progress = true;
                if *stopping {
                    lanes.lanes[lane].free();
                    // With `by_key`, what waited behind this handler goes
                    // back only now, after it, so its keys stay in order.
                    for delivery in lanes.lanes[lane].take_waiting() {
                        hand_back(pipeline, decisions, held, &delivery);
                    }
                    continue;
                }
                // The lane is free: start its next entry, polled in the next
                // round of this same poll.
                if !stop_asked && lanes.start(lane, pipeline, traced, *now, make, false) {
                    lanes.lanes[lane].fresh = true;
                    started_any = true;
                    *delivered += 1;
                }
            }
            if !started_any {
                break;
            }
            round_all = false;
        }
        if progress {
            return Poll::Ready(Wake::Progress { total, longest });
        }
        // Handlers that joined a gathering batch finish nothing, but free
        // room in the read window: the loop looks at reading again (else
        // the batch would fill only once something else woke the task).
        if pipeline.env.counters.held() > parked {
            return Poll::Ready(Wake::Parked);
        }
        let mut due = false;
        for lane in &mut lanes.lanes {
            due |= lane.poll_held(cx);
        }
        if due {
            return Poll::Ready(Wake::Due);
        }
        if let Poll::Ready(wake) = self.reader.poll(cx) {
            return Poll::Ready(Wake::Read(wake));
        }
        if self.keep_alive.poll(cx).is_ready() {
            return Poll::Ready(Wake::KeepAlive);
        }
        if !self.stopping && self.stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Wake::Stop);
        }
        if let Some(d) = self.deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Wake::Deadline);
        }
        Poll::Pending
    }

    /// A read returned: its entries go to the lanes, or its error to the
    /// reader.
    async fn on_read(&mut self, result: BrokerResult<ReadBatch>) {
        match result {
            Ok(batch) => {
                let taken = self.reader.took(batch);
                let deliveries = self.skip_in_hand(taken);
                self.held += deliveries.len();
                let done = self.lanes.queue_all(deliveries);
                self.reader.recycle(done);
            }
            Err(error) => self.reader.failed(error).await,
        }
    }

    /// The entries the subscription holds: on its lanes (queued, running,
    /// held after a retry, in `ending`), and those whose decisions have not
    /// reached the broker yet.
    fn in_hand(&self) -> InHand {
        in_hand(&self.lanes, &self.decisions, self.outbox)
    }

    /// Leaves out of a read what the subscription already holds. A
    /// claiming or reclaim read takes any entry idle `min_idle`, this
    /// consumer's own included, and a claim is not refreshed while the
    /// broker cannot be reached: so after an outage, or while an ack keeps
    /// failing, a read can hand out again an entry a lane still runs, or
    /// whose ack is on its way. It is not run again (twice at once, or
    /// after its key's later entries): what holds it settles it
    /// (`docs/guarantees.md`, "Under faults": own take-backs). It counts as settled at
    /// once, as it was counted as read.
    fn skip_in_hand(&mut self, taken: Taken) -> Vec<Delivery> {
        let mut deliveries = taken.deliveries;
        // A first delivery cannot be held already.
        if !taken.redelivered {
            return deliveries;
        }
        // An entry whose delayed retry or hand-back has landed is rightly
        // handed out again, before the rest of its batch has landed: only
        // the entries on the lanes and those to be acked, copied or
        // dead-lettered are held.
        let mut in_hand = self.in_hand().ending;
        if in_hand.is_empty() {
            return deliveries;
        }
        in_hand.sort_unstable();
        let env = &self.pipeline.env;
        let before = deliveries.len();
        deliveries.retain(|delivery| {
            let id = delivery.id();
            let held = delivery.delivery_count > 0 && in_hand.binary_search(&id).is_ok();
            if held {
                // The broker counted this delivery: the decisions made for
                // the entry keep their counts, and are still this
                // subscription's to apply.
                self.outbox
                    .taken_back(id, delivery.delivery_count.saturating_add(1));
                group_event!(
                    info,
                    env,
                    %id,
                    delivery_count = delivery.delivery_count,
                    "a read handed out again an entry this subscription still holds: not run twice"
                );
            }
            !held
        });
        let skipped = before - deliveries.len();
        if skipped > 0 {
            env.counters.add_settled(skipped as u64);
        }
        deliveries
    }

    /// Shutdown was asked for: stop reading, hand back what was not
    /// started, and give running handlers the deadline.
    fn on_stop(&mut self) {
        self.stopping = true;
        // A read that came back but was not taken in yet: its entries join
        // the queue, and go back with it below.
        if let Some(Ok(batch)) = self.reader.take_returned() {
            let taken = self.reader.took(batch);
            let deliveries = self.skip_in_hand(taken);
            self.held += deliveries.len();
            let _done = self.lanes.queue_all(deliveries);
        }
        self.reader.stop();
        let env = &self.pipeline.env;
        let Driver {
            pipeline,
            lanes,
            decisions,
            held,
            ..
        } = self;
        for delivery in lanes.drain_shared() {
            hand_back(pipeline, decisions, held, &delivery);
        }
        // A lane's own entries (`by_key`) go back now only if nothing runs
        // on it; else after its handler ends (or at the deadline), so that
        // no other consumer runs a key's later entries while this one
        // still runs an earlier one. A held entry goes first: owed again at
        // once and in id order, any consumer takes them in stream order.
        for lane in lanes.lanes.iter_mut().filter(|lane| !lane.is_running()) {
            for delivery in lane.take_waiting() {
                hand_back(pipeline, decisions, held, &delivery);
            }
        }
        let grace = env.shutdown.borrow().unwrap_or(Duration::ZERO);
        self.deadline = Some(Box::pin(tokio::time::sleep(grace)));
    }

    /// The deadline passed: handlers still running are stopped and their
    /// entries handed back.
    fn on_deadline(&mut self) {
        let env = &self.pipeline.env;
        for lane in &mut self.lanes.lanes {
            let Some(started) = lane.stop() else {
                continue;
            };
            tracing::warn!(
                subscriber = env.name,
                id = %started.id,
                "handler still running at the shutdown deadline: stopped, entry handed back"
            );
            if let Some(delivery) = lane.current.take() {
                self.pipeline.observe(&delivery, Settlement::HandedBack);
            }
            let times = started.delivery_count.saturating_add(1);
            self.decisions.add(Decision::HandBack(started.id, times));
            self.held -= 1;
            for delivery in lane.take_waiting() {
                hand_back(
                    self.pipeline,
                    &mut self.decisions,
                    &mut self.held,
                    &delivery,
                );
            }
        }
    }
}

/// Settles an entry whose handler ended other than by a plain ack (see
/// [`Polled::Acked`]): tells the observer, and keeps a keyed entry's retry
/// on its lane (held there) or puts the decision in the batch.
fn settle_ended<S: Subscriber, F>(
    pipeline: &Pipeline<S>,
    this: &mut Lane<F>,
    decisions: &mut SettleBatch,
    held: &mut usize,
    started: &Started,
    finished: Finished,
) {
    let Decided {
        decision,
        settlement,
    } = match finished {
        Finished::Returned(decided) => decided,
        Finished::Panicked(panic) => pipeline.panicked(started, &*panic),
    };
    let current = this.current.take();
    if let Some(delivery) = &current {
        pipeline.observe(delivery, settlement);
    }
    // Only a keyed entry's retry stays on its lane.
    let on_lane = if started.keyed {
        retry_on_lane(&pipeline.env, started, &decision)
    } else {
        None
    };
    match (on_lane, current) {
        (Some(OnLane::Hold(delay)), Some(delivery)) => {
            this.held = Some(Held::new(delivery, delay));
        }
        (Some(OnLane::DeadLetter(dead)), _) => {
            decisions.add(dead);
            *held -= 1;
        }
        _ => {
            decisions.add(decision);
            *held -= 1;
        }
    }
}

/// Whether shutdown has been asked for, without marking the change seen:
/// a version check, then a look at the value only when it changed. A
/// dropped sender counts as a shutdown.
fn shutdown_seen(peek: &watch::Receiver<Option<Duration>>) -> bool {
    match peek.has_changed() {
        Ok(false) => false,
        Ok(true) => peek.borrow().is_some(),
        Err(_) => true,
    }
}

/// Whether shutdown has been asked for since `peek` last looked
/// ([`shutdown_seen`]), marking it seen.
fn shutdown_asked(peek: &mut watch::Receiver<Option<Duration>>) -> bool {
    let asked = shutdown_seen(peek);
    if asked {
        peek.mark_unchanged();
    }
    asked
}

/// Hands an entry read but not finished back to the broker at shutdown:
/// owed again at once, so any consumer gets it without waiting `min_idle`.
fn hand_back<S: Subscriber>(
    pipeline: &Pipeline<S>,
    decisions: &mut SettleBatch,
    held: &mut usize,
    delivery: &Delivery,
) {
    pipeline.observe(delivery, Settlement::HandedBack);
    let times = delivery.delivery_count.saturating_add(1);
    decisions.add(Decision::HandBack(delivery.id(), times));
    *held -= 1;
}

/// What a keyed entry's retry becomes on its `by_key` lane.
enum OnLane {
    /// Held on the lane for this long, then run again there.
    Hold(Duration),
    /// Dead-lettered instead: the re-run would pass `max_deliveries`.
    DeadLetter(Decision),
}

/// On a `by_key` lane, a retry of a keyed entry (a copy on a `new`
/// subscription, leaving it pending on a claiming one, or a delay) keeps
/// its key's order: the entry is held on its lane and run again after its
/// delay (`retry_after(d)`: `d`; `retry()` on a claiming or reclaim
/// subscription: `min_idle`; on a new one: at once), counted as a delivery.
/// At the attempt bound it is dead-lettered instead and the key moves on.
/// `None` for anything else, which is settled as decided. (The caller
/// checks that the entry is keyed.)
fn retry_on_lane(env: &Env, started: &Started, decision: &Decision) -> Option<OnLane> {
    let delay = match decision {
        Decision::Copy(_) => Duration::ZERO,
        Decision::After(_, delay, _) => *delay,
        Decision::Leave(_) => match env.subscription.stream.read_mode() {
            ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } => min_idle,
            ReadMode::New | ReadMode::OwnPending { .. } => Duration::ZERO,
        },
        Decision::Ack(_) | Decision::Dead(..) | Decision::HandBack(..) => return None,
    };
    let deliveries = started.delivery_count.saturating_add(1);
    if let Some(max) = env.subscription.max_deliveries
        && deliveries >= max
    {
        group_event!(
            warn,
            env,
            id = %started.id,
            max_deliveries = max,
            "entry dead-lettered: delivered max_deliveries times on its by_key lane"
        );
        return Some(OnLane::DeadLetter(Decision::Dead(
            started.id,
            format!("delivered {deliveries} times (max_deliveries({max})) on its by_key lane"),
        )));
    }
    Some(OnLane::Hold(delay))
}

/// The entries a subscription holds: on its `lanes` (queued, running, held
/// after a retry, in `ending`), and those whose `decisions` (made this
/// wake, or in the `outbox`) have not reached the broker yet.
fn in_hand<F: Future<Output = Decided>>(
    lanes: &Lanes<F>,
    decisions: &SettleBatch,
    outbox: &Outbox,
) -> InHand {
    let mut in_hand = InHand {
        ending: lanes.holding(),
        owing: Vec::new(),
    };
    decisions.in_hand(&mut in_hand);
    outbox.in_hand(&mut in_hand);
    in_hand
}
