//! Batch subscribers (`batch(max = n, wait = d)`, `docs/batches.md`):
//! gathering entries into batches and running a batch's handler.
//!
//! A batch subscriber runs on the same lanes as any other, one entry per
//! lane, with `workers * max` lanes: every entry is read, counted, kept
//! claimed, settled and handed back at shutdown on its own, exactly as a
//! single entry is (the read-ahead bound, metrics and stats count entries,
//! never batches). What changes is the future a lane runs:
//!
//! - the entry joins the open batch ([`Batches::join`]), or opens one and
//!   *leads* it: the leader waits until the batch holds `max` entries, or
//!   `wait` has passed since it opened (tokio's clock, so a paused test
//!   clock moves it), or shutdown is asked for, and closes it; the next
//!   entry opens the next batch;
//! - the leader then takes one of `workers` permits (so at most `workers`
//!   batches run at once, in the order they closed), runs
//!   [`Subscriber::handle_batch`] on the entries in stream order, and
//!   leaves each entry's outcome in the batch;
//! - every entry of the batch (the leader's included) then settles its
//!   own outcome as a single handler's would be ([`Pipeline::decide`]).
//!
//! Every lane is polled by the subscription's one task, which is woken
//! through one waker kept per batch: the leader's when a joining entry
//! fills it, the waiting entries' when the batch is done.
//!
//! A panic in the batch's handler is caught by the leader: an entry whose
//! payload did not decode (the handler never saw it) is still dead-lettered
//! with its decode error, one entry the handler was given (the leader, if
//! it was) reports the panic as a single handler's panic is reported, and
//! the other entries given are retried as failed, pointing to it.
//!
//! A leader that stops before its batch is done marks the batch abandoned
//! (the [`Abandon`] guard), and an entry still waiting on it is retried as
//! failed. At the shutdown deadline that is moot: the leader's future is
//! dropped with every other lane's, and all their entries are handed back.

use std::any::Any;
use std::future::poll_fn;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;

use ruststream_core::{Delivery, EntryId};
use tokio::sync::Semaphore;

use super::Counters;
use super::handle::{Pipeline, panic_message};
use super::lanes::Started;
use super::settle::Decided;
use crate::metrics::ErrorKind;
use crate::{Batch, EntryBatch, Settle, Subscriber};

/// A batch subscriber's batches: the one gathering entries, and the
/// permits of the batches running.
pub(super) struct Batches {
    max: usize,
    wait: Duration,
    /// The batch gathering entries, if any.
    open: Mutex<Option<Arc<Gather>>>,
    /// One permit per worker: how many batches run at once.
    running: Semaphore,
    /// Told how many entries the open batch holds: they wait on the clock
    /// (its `wait`) or on more entries, so they count against the
    /// read-ahead bound but not against the read window (reading goes on to
    /// fill the batch, `window.rs`), and the testkit counts them as waiting
    /// on the clock.
    counters: Arc<Counters>,
}

impl Batches {
    /// Batches as `batch` says, `workers` of them running at once.
    pub(super) fn new(batch: Batch, workers: usize, counters: Arc<Counters>) -> Self {
        Batches {
            max: batch.max.max(1),
            wait: batch.wait,
            open: Mutex::new(None),
            running: Semaphore::new(workers.max(1)),
            counters,
        }
    }

    /// Adds `delivery` to the open batch, opening one if none is: returns
    /// the batch, the entry's place in it and whether this entry opened it
    /// (and so leads it). The entry that fills the batch closes it.
    fn join(&self, delivery: Delivery) -> (Arc<Gather>, usize, bool) {
        let mut open = lock(&self.open);
        let (gather, leads) = match open.as_ref() {
            Some(gather) => (Arc::clone(gather), false),
            None => {
                let gather = Arc::new(Gather::default());
                *open = Some(Arc::clone(&gather));
                (gather, true)
            }
        };
        let mut state = lock(&gather.state);
        state.deliveries.push(delivery);
        let index = state.deliveries.len() - 1;
        if state.deliveries.len() >= self.max {
            state.closed = true;
            *open = None;
            state.wake();
            self.counters.set_held(0);
        } else {
            self.counters.set_held(state.deliveries.len() as u64);
        }
        drop(state);
        (gather, index, leads)
    }

    /// Closes `gather` to new entries: its wait has passed, or shutdown.
    fn close(&self, gather: &Arc<Gather>) {
        let mut open = lock(&self.open);
        if open.as_ref().is_some_and(|g| Arc::ptr_eq(g, gather)) {
            *open = None;
            self.counters.set_held(0);
        }
        lock(&gather.state).closed = true;
    }
}

/// One batch, shared by the futures of its entries.
#[derive(Default)]
struct Gather {
    state: Mutex<GatherState>,
}

#[derive(Default)]
struct GatherState {
    /// The entries, in the order they joined; taken by the leader when the
    /// batch runs.
    deliveries: Vec<Delivery>,
    /// No more entries join.
    closed: bool,
    /// Each entry's outcome, in the order they joined, once the batch is
    /// done.
    outcomes: Vec<Option<Outcome>>,
    done: bool,
    /// Why the batch will never be done: its leader stopped (dropped at
    /// the shutdown deadline, or a panic outside the handler).
    abandoned: Option<String>,
    /// The subscription task's waker, to be woken when the batch closes
    /// or is done.
    waker: Option<Waker>,
}

impl GatherState {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn register(&mut self, waker: &Waker) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            self.waker = Some(waker.clone());
        }
    }
}

/// How the batch's handler left one entry.
enum Outcome {
    /// Settled as this says.
    Settle(Settle),
    /// The handler panicked, with this payload: the entry reports the
    /// panic ([`Pipeline::panicked`]) and is retried.
    Panicked(Box<dyn Any + Send>),
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks a batch abandoned if its leader stops before the batch is done.
struct Abandon<'a> {
    batches: &'a Batches,
    gather: &'a Arc<Gather>,
    leader: EntryId,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.batches.close(self.gather);
        let mut state = lock(&self.gather.state);
        if !state.done {
            state.abandoned = Some(format!(
                "the batch stopped without an outcome (see the error logged for entry {})",
                self.leader
            ));
            state.wake();
        }
    }
}

impl<S: Subscriber> Pipeline<S> {
    /// A lane's future on a batch subscriber: the entry joins a batch (and
    /// runs it, if it opened it), then settles as the batch's handler
    /// decided for it.
    pub(super) async fn in_batch(&self, batches: &Batches, delivery: Delivery) -> Decided {
        let entry = Started::of(&delivery);
        self.note_delivery(&delivery);
        let (gather, index, leads) = batches.join(delivery);
        if leads {
            // Boxed: the handler's future is the batch's, not every lane's.
            Box::pin(self.lead(batches, &gather, entry.id, index)).await;
        }
        let outcome = poll_fn(|cx| {
            let mut state = lock(&gather.state);
            if state.done {
                return Poll::Ready(Ok(state.outcomes.get_mut(index).and_then(Option::take)));
            }
            if let Some(why) = &state.abandoned {
                return Poll::Ready(Err(why.clone()));
            }
            state.register(cx.waker());
            Poll::Pending
        })
        .await;
        match outcome {
            Ok(Some(Outcome::Settle(settle))) => self.decide(&entry, settle),
            Ok(Some(Outcome::Panicked(panic))) => self.panicked(&entry, &*panic),
            Ok(None) => self.decide(
                &entry,
                Settle::Failed("the batch handler settled no outcome for this entry".into()),
            ),
            Err(why) => self.decide(&entry, Settle::Failed(why)),
        }
    }

    /// Gathers the batch `gather` (which `leader`, the `leader_index`-th
    /// entry to join, opened), runs it, and leaves each entry's outcome in
    /// it.
    async fn lead(
        &self,
        batches: &Batches,
        gather: &Arc<Gather>,
        leader: EntryId,
        leader_index: usize,
    ) {
        let mut guard = Abandon {
            batches,
            gather,
            leader,
            armed: true,
        };
        let mut timer = pin!(tokio::time::sleep(batches.wait));
        let mut shutdown = self.env.shutdown.clone();
        let mut stopping = pin!(async move {
            while shutdown.borrow_and_update().is_none() {
                if shutdown.changed().await.is_err() {
                    return;
                }
            }
        });
        poll_fn(|cx| {
            let mut state = lock(&gather.state);
            if state.closed {
                return Poll::Ready(());
            }
            state.register(cx.waker());
            drop(state);
            if timer.as_mut().poll(cx).is_ready() || stopping.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            Poll::Pending
        })
        .await;
        batches.close(gather);
        // The semaphore is never closed; were it, the batch would run
        // without a permit rather than never.
        let _permit = batches.running.acquire().await;
        let joined = std::mem::take(&mut lock(&gather.state).deliveries);
        // Entries join in the order their lanes are polled; the handler
        // sees them in stream order.
        let mut order: Vec<usize> = (0..joined.len()).collect();
        order.sort_by_key(|&i| joined[i].id());
        let mut slots: Vec<Option<Delivery>> = joined.into_iter().map(Some).collect();
        let sorted = order.iter().filter_map(|&i| slots[i].take()).collect();
        let mut batch = EntryBatch::new(sorted);
        // A panic is caught here, not by the leader's lane: the entries
        // `batch` has already settled (those that did not decode) keep
        // their outcome.
        let panic = {
            let mut handling = pin!(self.subscriber.handle_batch(&mut batch));
            poll_fn(|cx| {
                match std::panic::catch_unwind(AssertUnwindSafe(|| handling.as_mut().poll(cx))) {
                    Ok(Poll::Pending) => Poll::Pending,
                    Ok(Poll::Ready(())) => Poll::Ready(None),
                    Err(panic) => Poll::Ready(Some(panic)),
                }
            })
            .await
        };
        let in_order = match panic {
            None => {
                if let Some((returned, given)) = batch.mismatch() {
                    tracing::error!(
                        subscriber = self.env.name,
                        stream = self.env.stream(),
                        group = self.env.group(),
                        returned,
                        given,
                        "the batch handler returned {returned} outcomes for {given} entries; the whole batch will be retried"
                    );
                }
                batch
                    .into_settles()
                    .into_iter()
                    .map(Outcome::Settle)
                    .collect()
            }
            Some(panic) => {
                let leads_at = order.iter().position(|&i| i == leader_index);
                self.after_panic(batch, leads_at, panic)
            }
        };
        let mut outcomes: Vec<Option<Outcome>> = order.iter().map(|_| None).collect();
        for (outcome, &i) in in_order.into_iter().zip(&order) {
            outcomes[i] = Some(outcome);
        }
        let mut state = lock(&gather.state);
        state.outcomes = outcomes;
        state.done = true;
        state.wake();
        guard.armed = false;
    }

    /// The outcomes, in stream order, of `batch` whose handler panicked
    /// with `panic` (the leader being its `leader`-th entry): an entry that
    /// did not decode keeps its dead letter; of the entries the handler was
    /// given, one reports the panic (the leader, if it was given one, else
    /// the first) and the others are retried as failed, pointing to it.
    fn after_panic(
        &self,
        batch: EntryBatch,
        leader: Option<usize>,
        panic: Box<dyn Any + Send>,
    ) -> Vec<Outcome> {
        let ids: Vec<EntryId> = batch.deliveries().iter().map(Delivery::id).collect();
        let settles: Vec<Option<Settle>> = batch
            .into_settles()
            .into_iter()
            .map(|settle| match settle {
                Settle::Undecodable(_) => Some(settle),
                _ => None,
            })
            .collect();
        let given = |i: usize| settles.get(i).is_some_and(Option::is_none);
        let reporter = leader
            .filter(|&i| given(i))
            .or_else(|| (0..settles.len()).find(|&i| given(i)));
        let Some(reporter) = reporter else {
            // Only a hand-written `handle_batch` panics with no entry given
            // to it: the panic is logged here, once.
            self.env.counters.handler_failed(ErrorKind::Panic);
            tracing::error!(
                subscriber = self.env.name,
                stream = self.env.stream(),
                group = self.env.group(),
                panic = %panic_message(&*panic),
                "the batch handler panicked with no entry given to it"
            );
            return settles.into_iter().flatten().map(Outcome::Settle).collect();
        };
        let why = format!(
            "the batch handler panicked: see the error logged for entry {}",
            ids[reporter]
        );
        let mut outcomes: Vec<Outcome> = settles
            .into_iter()
            .map(|settle| Outcome::Settle(settle.unwrap_or_else(|| Settle::Failed(why.clone()))))
            .collect();
        if let Some(slot) = outcomes.get_mut(reporter) {
            *slot = Outcome::Panicked(panic);
        }
        outcomes
    }
}
