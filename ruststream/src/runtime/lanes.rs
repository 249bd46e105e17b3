//! The lanes entries wait and run on: `workers(n)` gives n lanes, each
//! running one handler at a time.
//!
//! Entries wait in one shared queue and an idle lane takes the next. With
//! `by_key`, an entry with a partition key waits instead in the own queue
//! of the lane its key hashes to, which runs it before anything from the
//! shared queue: one key's entries are handled one after another in stream
//! order, and keyless entries still go to whichever lane is free.

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
use super::settle::Decided;
use crate::Subscriber;

/// What the task keeps of the entry a lane runs: enough to report a panic
/// and to hand the entry back if its handler outlives the shutdown
/// deadline. (The handler's future owns the delivery itself.)
#[derive(Clone, Copy)]
pub(super) struct Started {
    pub(super) id: EntryId,
    pub(super) delivery_count: u32,
}

impl Started {
    /// As [`Delivery::id`], so that `report!` takes either.
    pub(super) fn id(&self) -> EntryId {
        self.id
    }
}

/// How a lane's handler ended.
pub(super) enum Finished {
    /// It returned: how to settle its entry.
    Returned(Decided),
    /// It panicked, with this payload.
    Panicked(Box<dyn Any + Send>),
}

/// One lane: its own queue (with `by_key`) and the handler it runs (the
/// future `F`).
pub(super) struct Lane<F> {
    /// With `by_key`, the entries whose key hashes to this lane.
    own: VecDeque<Delivery>,
    /// The handler running, pinned in a slot allocated once and refilled
    /// in place.
    slot: Pin<Box<Option<F>>>,
    /// The entry the handler runs; `Some` exactly while the slot is.
    running: Option<Started>,
    /// With an observer, a copy of the delivery the handler runs (the
    /// observer is told about it with its outcome).
    pub(super) copy: Option<Delivery>,
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
            copy: None,
            span: None,
            since: 0,
            fresh: false,
        }
    }

    /// Polls the lane's handler once, inside its span, catching a panic.
    /// When the handler has ended the lane is free again and the entry it
    /// ran is returned with how the handler ended.
    #[inline]
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Option<(Started, Finished)> {
        let future = self.slot.as_mut().as_pin_mut()?;
        let entered = self.span.as_ref().map(tracing::Span::enter);
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
        drop(entered);
        let finished = match polled {
            Ok(Poll::Pending) => return None,
            Ok(Poll::Ready(decided)) => Finished::Returned(decided),
            Err(panic) => Finished::Panicked(panic),
        };
        self.slot.set(None);
        self.span = None;
        // `running` is set whenever the slot is (see `Lanes::start`).
        self.running.take().map(|started| (started, finished))
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
    by_key: bool,
    keep_copies: bool,
}

impl<F: Future<Output = Decided>> Lanes<F> {
    pub(super) fn new(lanes: usize, by_key: bool, keep_copies: bool) -> Self {
        Lanes {
            shared: VecDeque::new(),
            lanes: (0..lanes).map(|_| Lane::new()).collect(),
            by_key,
            keep_copies,
        }
    }

    /// Queues a read batch's deliveries: each on its key's lane with
    /// `by_key`, else in the shared queue.
    pub(super) fn queue_all(&mut self, deliveries: Vec<Delivery>) {
        if !self.by_key {
            self.shared.extend(deliveries);
            return;
        }
        let n = self.lanes.len();
        for delivery in deliveries {
            match key_lane(&delivery, n) {
                Some(lane) => self.lanes[lane].own.push_back(delivery),
                None => self.shared.push_back(delivery),
            }
        }
    }

    /// Every entry still waiting, taken out of the queues.
    pub(super) fn drain_waiting(&mut self) -> impl Iterator<Item = Delivery> + '_ {
        self.lanes
            .iter_mut()
            .map(|lane| &mut lane.own)
            .chain([&mut self.shared])
            .flat_map(|queue| queue.drain(..))
    }

    /// Starts `lane`'s next entry, its own first, then a shared one, if
    /// the lane is idle. Returns whether it started one.
    #[inline]
    pub(super) fn start<S: Subscriber>(
        &mut self,
        lane: usize,
        pipeline: &Pipeline<S>,
        traced: bool,
        now: u64,
        make: &impl Fn(Delivery) -> F,
    ) -> bool {
        let Lanes {
            shared,
            lanes,
            keep_copies,
            ..
        } = self;
        let lane = &mut lanes[lane];
        if lane.slot.is_some() {
            return false;
        }
        let next = match lane.own.pop_front() {
            Some(delivery) => delivery,
            None => match shared.pop_front() {
                Some(delivery) => delivery,
                None => return false,
            },
        };
        lane.span = if traced {
            pipeline.delivery_span(&next)
        } else {
            None
        };
        lane.running = Some(Started {
            id: next.id(),
            delivery_count: next.delivery_count,
        });
        if *keep_copies {
            lane.copy = Some(next.clone());
        }
        lane.slot.set(Some(make(next)));
        lane.since = now;
        true
    }

    /// Whether no entry waits in any queue: a start would find nothing.
    pub(super) fn nothing_to_start(&self) -> bool {
        self.shared.is_empty() && self.lanes.iter().all(|lane| lane.own.is_empty())
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
