//! The lanes entries wait and run on: `workers(n)` gives n lanes, each
//! running one handler at a time.
//!
//! Entries wait in one shared queue and an idle lane takes the next. With
//! `by_key`, an entry with a partition key waits instead in the own queue
//! of the lane its key hashes to, which runs it before anything from the
//! shared queue: one key's entries are handled one after another in stream
//! order, and keyless entries still go to whichever lane is free.
//!
//! The order holds through retries: when a keyed entry's handler asks for
//! another attempt (`retry()`, `retry_after(d)`, an error, a panic), the
//! entry is [`Held`] on its lane and runs again there after its delay,
//! counted as a new delivery, while the lane's own queue waits (keyless
//! entries from the shared queue may still run on it meanwhile). The entry
//! stays pending under this consumer all along; nothing is sent to the
//! broker until its handler settles it for good.

use std::any::Any;
use std::collections::VecDeque;
use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use ruststream_core::{Delivery, EntryId};

use super::handle::Pipeline;
use super::settle::{Decided, Decision};
use crate::Subscriber;
use crate::observe::Settlement;

/// What the task keeps of the entry a lane runs: enough to report a panic
/// and to hand the entry back if its handler outlives the shutdown
/// deadline. (The handler's future owns the delivery itself.)
#[derive(Clone, Copy)]
pub(super) struct Started {
    pub(super) id: EntryId,
    pub(super) delivery_count: u32,
    /// Whether it came from the lane's own queue (a keyed entry on a
    /// `by_key` lane), whose order a retry must keep.
    pub(super) keyed: bool,
}

impl Started {
    /// What is kept of `delivery` (not from a lane's own queue).
    pub(super) fn of(delivery: &Delivery) -> Self {
        Started {
            id: delivery.id(),
            delivery_count: delivery.delivery_count,
            keyed: false,
        }
    }

    /// As [`Delivery::id`], so that `report!` takes either.
    pub(super) fn id(&self) -> EntryId {
        self.id
    }
}

/// What a poll of a lane's handler found.
pub(super) enum Polled {
    /// Nothing ran, or the handler still runs.
    Pending,
    /// The handler acked an entry the lane keeps no copy of (no observer
    /// to tell, not on a `by_key` lane): only the ack is left to do.
    Acked(EntryId),
    /// The handler ended any other way: the entry it ran and how.
    Ended(Started, Finished),
}

/// How a lane's handler ended.
pub(super) enum Finished {
    /// It returned: how to settle its entry.
    Returned(Decided),
    /// It panicked, with this payload.
    Panicked(Box<dyn Any + Send>),
}

/// A keyed entry waiting on its lane to run again after a retry.
pub(super) struct Held {
    /// The delivery to run, its count already raised for the re-run.
    delivery: Delivery,
    /// When it may run; `None` once due.
    due: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Held {
    /// Holds `delivery` for `delay`, as its next delivery.
    pub(super) fn new(mut delivery: Delivery, delay: std::time::Duration) -> Self {
        delivery.delivery_count = delivery.delivery_count.saturating_add(1);
        delivery.idle_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        let due = (!delay.is_zero()).then(|| Box::pin(tokio::time::sleep(delay)));
        Held { delivery, due }
    }

    fn is_due(&self) -> bool {
        self.due.is_none()
    }

    /// The held delivery, as handed back at shutdown: with the count of
    /// the delivery that ran, as the broker has it (the planned re-run was
    /// never counted there), so a hand-back made again after a lost reply
    /// is made only while the broker still shows that count under this
    /// consumer (`docs/guarantees.md`, "Under faults").
    pub(super) fn into_delivery(mut self) -> Delivery {
        self.delivery.delivery_count = self.delivery.delivery_count.saturating_sub(1);
        self.delivery
    }
}

/// One lane: its own queue (with `by_key`) and the handler it runs (the
/// future `F`).
pub(super) struct Lane<F> {
    /// With `by_key`, the entries whose key hashes to this lane.
    own: VecDeque<Delivery>,
    /// The handler running (or, until the lane's next entry replaces it or
    /// [`Lane::free`] drops it, the one that ended last), pinned in a slot
    /// allocated once and refilled in place.
    slot: Pin<Box<Option<F>>>,
    /// The entry the handler runs; `Some` exactly while a handler runs.
    running: Option<Started>,
    /// A copy of the delivery the handler runs, kept with an observer (it
    /// is told about it with its outcome) and on `by_key` lanes (a retried
    /// keyed entry is held and run again from it).
    pub(super) current: Option<Delivery>,
    /// A keyed entry held after a retry: it runs before anything else of
    /// the lane's own queue.
    pub(super) held: Option<Held>,
    /// The delivery span, when that is enabled.
    span: Option<tracing::Span>,
    /// When the handler started, in nanoseconds since the task's epoch.
    pub(super) since: u64,
    /// Whether the handler started in the current round of polls, to be
    /// polled in the next.
    pub(super) fresh: bool,
}

impl<F: Future<Output = Decided>> Lane<F> {
    fn new() -> Self {
        Lane {
            own: VecDeque::new(),
            slot: Box::pin(None),
            running: None,
            current: None,
            held: None,
            span: None,
            since: 0,
            fresh: false,
        }
    }

    /// Polls the lane's handler once, inside its span, catching a panic.
    /// When the handler has ended the lane is free again and the entry it
    /// ran is returned with how the handler ended (a plain ack in short,
    /// see [`Polled::Acked`]).
    #[inline]
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Polled {
        if self.running.is_none() {
            return Polled::Pending;
        }
        let Some(future) = self.slot.as_mut().as_pin_mut() else {
            return Polled::Pending;
        };
        let entered = self.span.as_ref().map(tracing::Span::enter);
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
        drop(entered);
        // Looked at in place, before anything moves the outcome.
        let acked = match &polled {
            Ok(Poll::Pending) => return Polled::Pending,
            Ok(Poll::Ready(Decided {
                decision: Decision::Ack(id),
                settlement: Settlement::Acked,
            })) if self.current.is_none() => Some(*id),
            _ => None,
        };
        // The ended future stays in the slot until the lane's next entry
        // replaces it, or `free` drops it: one drop per entry, not two.
        self.span = None;
        // `running` is set whenever a handler runs (see `Lanes::start`).
        let Some(started) = self.running.take() else {
            return Polled::Pending;
        };
        if let Some(id) = acked {
            // An ack holds nothing to drop (no string, no box): forgetting
            // it spares the call to the outcome's drop glue.
            std::mem::forget(polled);
            return Polled::Acked(id);
        }
        let finished = match polled {
            Ok(Poll::Ready(decided)) => Finished::Returned(decided),
            Err(panic) => Finished::Panicked(panic),
            // Returned above.
            Ok(Poll::Pending) => return Polled::Pending,
        };
        Polled::Ended(started, finished)
    }

    /// Drops the future of a handler that has ended, if the slot still
    /// holds one (it is kept there for the lane's next entry to replace).
    pub(super) fn free(&mut self) {
        if self.running.is_none() && self.slot.is_some() {
            self.slot.set(None);
        }
    }

    /// Whether a handler runs on the lane.
    pub(super) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Takes what waits on the lane, in the order it would have run: the
    /// held entry, then the lane's own queue.
    pub(super) fn take_waiting(&mut self) -> impl Iterator<Item = Delivery> + '_ {
        self.held
            .take()
            .map(Held::into_delivery)
            .into_iter()
            .chain(self.own.drain(..))
    }

    /// Polls the held entry's delay; true when it has just become due.
    pub(super) fn poll_held(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(held) = &mut self.held else {
            return false;
        };
        let Some(due) = &mut held.due else {
            return false;
        };
        if due.as_mut().poll(cx).is_pending() {
            return false;
        }
        held.due = None;
        true
    }

    /// Stops the lane's handler (dropped where it waits) and returns the
    /// entry it ran, if any.
    pub(super) fn stop(&mut self) -> Option<Started> {
        self.slot.set(None);
        self.span = None;
        self.running.take()
    }
}

/// A subscription's lanes, and the queue they share.
pub(super) struct Lanes<F> {
    /// Entries any lane may take.
    shared: VecDeque<Delivery>,
    pub(super) lanes: Vec<Lane<F>>,
    pub(super) by_key: bool,
    keep_copies: bool,
    /// Held entries started again since the last [`Lanes::take_reruns`],
    /// each with its delivery count at the broker for that run (this run
    /// included): deliveries no read made, which the broker is told of
    /// (`Broker::count_deliveries`).
    reruns: Vec<(EntryId, u32)>,
}

impl<F: Future<Output = Decided>> Lanes<F> {
    pub(super) fn new(lanes: usize, by_key: bool, observed: bool) -> Self {
        Lanes {
            shared: VecDeque::new(),
            lanes: (0..lanes).map(|_| Lane::new()).collect(),
            by_key,
            keep_copies: observed || by_key,
            reruns: Vec::new(),
        }
    }

    /// Moves the held entries started again since the last call (see
    /// `reruns`) into `into`.
    pub(super) fn take_reruns(&mut self, into: &mut Vec<(EntryId, u32)>) {
        into.append(&mut self.reruns);
    }

    /// Queues a read batch's deliveries: each on its key's lane with
    /// `by_key`, else in the shared queue. Returns a buffer done with
    /// (empty), for the next read to fill ([`Reader::recycle`]).
    ///
    /// [`Reader::recycle`]: super::read::Reader::recycle
    pub(super) fn queue_all(&mut self, mut deliveries: Vec<Delivery>) -> Vec<Delivery> {
        if !self.by_key {
            if self.shared.is_empty() {
                // The usual case (lanes take a read batch's entries before
                // the next read lands): the batch's buffer becomes the
                // queue, with no copy, and the empty queue's buffer goes
                // back to the reader.
                let done = std::mem::replace(&mut self.shared, VecDeque::from(deliveries));
                return Vec::from(done);
            }
            self.shared.extend(deliveries.drain(..));
            return deliveries;
        }
        let n = self.lanes.len();
        for delivery in deliveries.drain(..) {
            match key_lane(&delivery, n) {
                Some(lane) => self.lanes[lane].own.push_back(delivery),
                None => self.shared.push_back(delivery),
            }
        }
        deliveries
    }

    /// The entries waiting in the shared queue, taken out of it.
    pub(super) fn drain_shared(&mut self) -> impl Iterator<Item = Delivery> + '_ {
        self.shared.drain(..)
    }

    /// Starts `lane`'s next entry, if the lane is idle: its held entry once
    /// due (only with `held_ok`), else its own queue's next (unless an entry
    /// is held), else a shared one. Returns whether it started one.
    ///
    /// A held entry is never restarted in the poll whose handler just
    /// asked to retry it (`held_ok` false there): the task yields between
    /// re-runs, so a handler that fails at once cannot spin the task.
    #[inline]
    pub(super) fn start<S: Subscriber>(
        &mut self,
        lane: usize,
        pipeline: &Pipeline<S>,
        traced: bool,
        now: u64,
        make: &impl Fn(Delivery) -> F,
        held_ok: bool,
    ) -> bool {
        let Lanes {
            shared,
            lanes,
            keep_copies,
            reruns,
            ..
        } = self;
        let lane = &mut lanes[lane];
        if lane.running.is_some() {
            return false;
        }
        let next = match &lane.held {
            Some(held) if held.is_due() => {
                if !held_ok {
                    // Due, but its handler only just asked to retry it (or
                    // another ran here this poll): the lane stays idle, and
                    // the next turn's start runs it, before any keyless
                    // entry could take the lane again.
                    lane.free();
                    return false;
                }
                let rerun = lane.held.take().map(|h| (h.delivery, true));
                if let Some((delivery, _)) = &rerun {
                    reruns.push((delivery.id(), delivery.delivery_count.saturating_add(1)));
                }
                rerun
            }
            // A held entry keeps its keys' later entries waiting.
            Some(_) => shared.pop_front().map(|d| (d, false)),
            None => match lane.own.pop_front() {
                Some(delivery) => Some((delivery, true)),
                None => shared.pop_front().map(|d| (d, false)),
            },
        };
        let Some((next, keyed)) = next else {
            lane.free();
            return false;
        };
        lane.span = pipeline.lane_span(&next, traced);
        lane.running = Some(Started {
            id: next.id(),
            delivery_count: next.delivery_count,
            keyed,
        });
        if *keep_copies {
            lane.current = Some(next.clone());
        }
        // Drops the future of the handler that ran last, if any.
        lane.slot.set(Some(make(next)));
        lane.since = now;
        true
    }

    /// How many entries wait on a retry's delay: those held after a retry,
    /// and the entries queued on their lanes behind them (they cannot start
    /// before the held one has run; `docs/semantics.md`, Lanes, keeps them
    /// out of the adaptive window so that other keys keep being read).
    pub(super) fn held_count(&self) -> u64 {
        self.lanes
            .iter()
            .filter(|lane| lane.held.is_some())
            .map(|lane| 1 + lane.own.len() as u64)
            .sum()
    }

    /// Every entry the lanes hold: queued, running, or held after a retry.
    pub(super) fn holding(&self) -> Vec<EntryId> {
        let mut ids: Vec<EntryId> = self.shared.iter().map(Delivery::id).collect();
        for lane in &self.lanes {
            ids.extend(lane.own.iter().map(Delivery::id));
            ids.extend(lane.running.map(|started| started.id));
            ids.extend(lane.held.as_ref().map(|held| held.delivery.id()));
        }
        ids
    }

    /// When the longest-running handler started (see [`Lane::since`]), if
    /// one runs.
    pub(super) fn oldest_running(&self) -> Option<u64> {
        self.lanes
            .iter()
            .filter(|lane| lane.running.is_some())
            .map(|lane| lane.since)
            .min()
    }

    /// Whether no entry waits in any queue: a start would find nothing.
    pub(super) fn nothing_to_start(&self) -> bool {
        self.shared.is_empty()
            && self
                .lanes
                .iter()
                .all(|lane| lane.own.is_empty() && lane.held.as_ref().is_none_or(|h| !h.is_due()))
    }
}

/// The lane a delivery's partition key hashes to, among `lanes`; `None`
/// for a delivery without a key.
fn key_lane(delivery: &Delivery, lanes: usize) -> Option<usize> {
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
