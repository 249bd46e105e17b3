//! Publish combining: while one caller publishes under the broker's lock,
//! the single-message publishes that arrive meanwhile queue up, and that
//! caller (the *combiner*) publishes them as soon as it is done, all at
//! once: one pass through the engine and one write to the persistence for
//! the lot. Without it each of them waits for the lock in turn: the lock
//! covers the engine, the encoding and the write, so the other worker
//! threads sit idle while the broker's state moves from core to core on
//! every publish.
//!
//! - **Order.** Ids of single publishes follow the order in which
//!   `publish` was called: the
//!   queue is first in, first out, and a caller that finds publishes
//!   queued with no combiner serving them queues its own behind them.
//! - **Outcomes.** Each publish gets its own id. A batch is persisted as
//!   one call, as a `publish_batch` is: if the persistence refuses or fails
//!   it (and so takes it back, [`Persistence::persist_recorded`]), every
//!   publish in it fails with that error, as their bytes were in the write
//!   that failed.
//! - **Fairness.** A combiner serves at most [`ROUNDS`] batches after its
//!   own publish, then hands over: it wakes the callers still queued, and
//!   the first one polled combines next.
//! - **Cancellation.** A queued publish whose future is dropped before it
//!   was served is still published, as one that was not queued is (when
//!   `publish` is called): the drop combines if no one else is, and a
//!   combiner does not hand over while such a publish is queued.
//! - **Gathering.** Where each publish costs a write to the operating
//!   system (the file log), callers that publish one after another on the
//!   same worker thread never overlap, so there is nothing to combine. A
//!   caller that finds no one combining therefore queues its own publish
//!   and marks the queue *gathering*: it and every publish queued while
//!   the mark stands yield once (waking their own task) before they try to
//!   combine. A yielding task goes to the back of its thread's run queue,
//!   so the publishers ready to run there queue up before the first of
//!   them is back, and that one serves the lot in one write. No publish
//!   waits for a particular other one: whichever is polled first after its
//!   yield serves the queue, and a dropped one serves it in its drop (as
//!   any queued publish does), so a publish that is not polled (or
//!   awaited after a later one, or polled once and kept) holds no one up.
//!   Gathering goes on while turns find company; after [`LONE_TURNS`]
//!   turns in a row that served one publish alone, publishes go out at
//!   once, and one turn in [`PROBE`] gathers again to look for company, so
//!   a lone publisher yields once every [`PROBE`] publishes.
//! - **Publish batches** serve what is queued first when no one else is
//!   combining, so that a batch does not overtake the single publishes its
//!   own task called before it. While another thread combines, a queued
//!   publish and a later batch may go either way: as with any broker, a
//!   publish whose future has not been polled to the end is not ordered
//!   against later calls (Redis sends a command when it is first polled).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use ruststream_core::{BrokerError, BrokerFuture, BrokerResult, EntryId, Message};

use crate::{Effect, LocalBroker, Persistence, State, cooperative};

/// Batches a combiner serves after its own publish before it hands over.
const ROUNDS: usize = 4;

/// Turns in a row that serve one publish alone before publishes stop
/// gathering (one such turn may be a publisher on another thread that got
/// back first).
const LONE_TURNS: u32 = 8;

/// Once publishes stopped gathering, every this many turns gathers once
/// more, to find out whether others publish too.
const PROBE: u32 = 1024;

/// What a publish comes back with: its id and the persistence ticket.
type Outcome = BrokerResult<(EntryId, u64)>;

/// The queue of publishes waiting for a combiner.
pub(crate) struct Combiner {
    queue: Mutex<Queue>,
    /// Whether a caller gathers others before it serves (see the module
    /// docs): where the persistence writes each call out.
    gathers: bool,
}

#[derive(Default)]
struct Queue {
    /// A caller is combining: new publishes queue up.
    combining: bool,
    /// Publishes queue up and yield once before they combine (see the
    /// module docs); cleared when a caller starts combining.
    gathering: bool,
    /// Publishes waiting to be served, oldest first.
    pending: Vec<Arc<Slot>>,
    /// Turns in a row that served one publish alone.
    alone: u32,
}

impl Queue {
    /// Whether the next turn gathers: while turns find company, and every
    /// [`PROBE`] turns otherwise.
    fn gathers(&self) -> bool {
        self.alone < LONE_TURNS || self.alone.is_multiple_of(PROBE)
    }
}

/// One queued publish.
struct Slot {
    stream: String,
    message: Arc<Message>,
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// Taken from the queue by a combiner, which fills in the outcome.
    taken: bool,
    /// The outcome is filled in (and may have been taken by the caller).
    filled: bool,
    outcome: Option<Outcome>,
    /// The caller dropped its future before the publish was taken: no one
    /// will poll for it, so a combiner must not leave it queued.
    orphaned: bool,
    waker: Option<Waker>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here is left half updated by a panic: see `LocalBroker::lock`.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Slot {
    fn new(stream: &str, message: Arc<Message>) -> Arc<Self> {
        Arc::new(Slot {
            stream: stream.to_owned(),
            message,
            state: Mutex::new(SlotState::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, SlotState> {
        locked(&self.state)
    }

    /// Fills in the outcome and wakes the caller waiting for it.
    fn fill(&self, outcome: Outcome) {
        let waker = {
            let mut state = self.lock();
            state.filled = true;
            state.outcome = Some(outcome);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Combiner {
    /// A combiner; `gathers`: see the module docs.
    pub(crate) fn new(gathers: bool) -> Self {
        Combiner {
            queue: Mutex::new(Queue::default()),
            gathers,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        locked(&self.queue)
    }
}

/// A combiner's turn. It ends when nothing is queued, or, once its rounds
/// are used up, with a hand-over: the next caller may combine, and the
/// callers still queued are woken so that one of them does. Dropped before
/// it ended (the combiner panicked), it hands over too, so that no caller
/// waits for a combiner that is gone.
struct Turn<'a> {
    combiner: &'a Combiner,
    ended: bool,
    /// Publishes served in this turn.
    served: usize,
}

impl<'a> Turn<'a> {
    fn new(combiner: &'a Combiner) -> Self {
        Turn {
            combiner,
            ended: false,
            served: 0,
        }
    }

    /// Takes the next batch to serve, or ends the turn and returns `None`:
    /// when nothing is queued, or when `more` is false and every queued
    /// caller can still combine for itself (none dropped its future).
    fn next_batch(&mut self, more: bool) -> Option<Vec<Arc<Slot>>> {
        let mut queue = self.combiner.lock();
        let orphans = || queue.pending.iter().any(|slot| slot.lock().orphaned);
        if !queue.pending.is_empty() && (more || orphans()) {
            let batch = std::mem::take(&mut queue.pending);
            for slot in &batch {
                slot.lock().taken = true;
            }
            return Some(batch);
        }
        // Decided and ended under the same lock: a publish dropped from now
        // on finds no combiner, and combines itself.
        self.end(queue);
        None
    }

    /// Lets the next caller combine, and wakes the callers still queued.
    fn end(&mut self, mut queue: MutexGuard<'_, Queue>) {
        self.ended = true;
        queue.combining = false;
        queue.alone = match self.served {
            0 | 1 => queue.alone.wrapping_add(1),
            _ => 0,
        };
        if queue.pending.is_empty() {
            return;
        }
        let wakers: Vec<Waker> = queue
            .pending
            .iter()
            .filter_map(|slot| slot.lock().waker.take())
            .collect();
        drop(queue);
        for waker in wakers {
            waker.wake();
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.end(self.combiner.lock());
        }
    }
}

/// Fills in, when dropped, the outcome of every publish of a batch still
/// without one (the combiner panicked while serving it), so that no caller
/// waits for it for ever.
struct FillAll<'a>(&'a [Arc<Slot>]);

impl Drop for FillAll<'_> {
    fn drop(&mut self) {
        for slot in self.0 {
            if !slot.lock().filled {
                slot.fill(Err(BrokerError::InvalidArgument(
                    "the publish was interrupted: the call publishing it panicked".into(),
                )));
            }
        }
    }
}

impl<P: Persistence> LocalBroker<P> {
    /// Publishes `message` to `stream` (already checked): at once if no one
    /// else is publishing, else queued for the combiner.
    pub(crate) fn publish_combined<'a>(
        &'a self,
        stream: &'a str,
        message: Arc<Message>,
    ) -> BrokerFuture<'a, EntryId> {
        let combiner = &self.shared.combiner;
        let earlier = {
            let mut queue = combiner.lock();
            let gather =
                !queue.combining && !queue.gathering && combiner.gathers && queue.gathers();
            if queue.combining || queue.gathering || gather {
                // Behind what is queued; when gathering, ahead of what
                // queues up while it yields.
                queue.gathering |= gather;
                let slot = Slot::new(stream, message);
                queue.pending.push(Arc::clone(&slot));
                let queued = Queued {
                    broker: self,
                    slot,
                    done: false,
                    yield_first: queue.gathering,
                };
                drop(queue);
                return cooperative(async move {
                    let (id, ticket) = queued.await?;
                    if let Some(durability) = &self.shared.durability {
                        durability.wait(ticket).await?;
                    }
                    Ok(id)
                });
            }
            queue.combining = true;
            std::mem::take(&mut queue.pending)
        };
        let mut turn = Turn::new(combiner);
        let own = if earlier.is_empty() {
            turn.served = 1;
            self.change(stream, Effect::Publishes, |e, _, now| {
                Ok(e.publish_shared(stream, message, now))
            })
        } else {
            // Callers queued before this one, whose combiner handed over,
            // go first, and this publish with them.
            let own = Slot::new(stream, message);
            let mut batch = earlier;
            for slot in &batch {
                slot.lock().taken = true;
            }
            batch.push(Arc::clone(&own));
            turn.served = batch.len();
            self.serve(&batch);
            let outcome = own.lock().outcome.take();
            outcome.unwrap_or_else(|| Err(unserved()))
        };
        self.combine(&mut turn);
        self.when_durable(own)
    }

    /// Serves what is queued, [`ROUNDS`] batches at most (more while a
    /// dropped publish is queued), then ends the turn.
    fn combine(&self, turn: &mut Turn<'_>) {
        let mut round = 0;
        while let Some(batch) = turn.next_batch(round < ROUNDS) {
            turn.served += batch.len();
            self.serve(&batch);
            round += 1;
        }
    }

    /// Combines if no one is and something is queued. Returns whether it
    /// did. (With nothing queued, a publish not yet served was taken by a
    /// combiner, which fills it in.)
    pub(crate) fn combine_if_idle(&self) -> bool {
        let combiner = &self.shared.combiner;
        {
            let mut queue = combiner.lock();
            if queue.combining || queue.pending.is_empty() {
                return false;
            }
            queue.combining = true;
            queue.gathering = false;
        }
        self.combine(&mut Turn::new(combiner));
        true
    }

    /// Publishes a batch of queued publishes as one call: one pass through
    /// the engine, one persist. If the persistence refuses or fails it,
    /// every publish of the batch gets the error (a failed persist has
    /// taken the whole call back, as it would a `publish_batch`).
    fn serve(&self, batch: &[Arc<Slot>]) {
        let _fill_all = FillAll(batch);
        let now = self.shared.clock.now_ms();
        let mut wakeups = Vec::new();
        let served = {
            let mut state = self.lock();
            let now = state.in_order(now);
            let State {
                engine,
                persistence,
                changes,
                wakeups: readers,
                ..
            } = &mut *state;
            match persistence.refuses_changes() {
                Some(refused) => Err(refused),
                None => {
                    let ids: Vec<EntryId> = batch
                        .iter()
                        .map(|s| engine.publish_shared(&s.stream, Arc::clone(&s.message), now))
                        .collect();
                    let ticket = persistence.persist_recorded(engine, changes);
                    for (i, slot) in batch.iter().enumerate() {
                        if i > 0 && batch[i - 1].stream == slot.stream {
                            continue;
                        }
                        persistence.upkeep(engine, &slot.stream, now, true);
                        wakeups.extend(readers.get(&slot.stream).cloned());
                    }
                    ticket.map(|ticket| (ids, ticket))
                }
            }
        };
        for wakeup in wakeups {
            wakeup.notify_waiters();
        }
        match served {
            Ok((ids, ticket)) => {
                for (slot, id) in batch.iter().zip(ids) {
                    slot.fill(Ok((id, ticket)));
                }
            }
            Err(error) => {
                for slot in batch {
                    slot.fill(Err(same_again(&error)));
                }
            }
        }
    }
}

/// The same error again, for each publish of a batch that failed as one
/// (`BrokerError` is not `Clone`: an I/O error keeps its kind and text).
fn same_again(error: &BrokerError) -> BrokerError {
    match error {
        BrokerError::NoGroup { stream, group } => BrokerError::no_group(stream, group),
        BrokerError::InvalidArgument(detail) => BrokerError::InvalidArgument(detail.clone()),
        BrokerError::Unsupported { broker, detail } => BrokerError::Unsupported {
            broker,
            detail: detail.clone(),
        },
        BrokerError::Connection { broker, detail } => BrokerError::Connection {
            broker,
            detail: detail.clone(),
        },
        BrokerError::Io { path, source } => BrokerError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        BrokerError::Corrupt {
            path,
            offset,
            detail,
        } => BrokerError::Corrupt {
            path: path.clone(),
            offset: *offset,
            detail: detail.clone(),
        },
        BrokerError::InUse { path, holder } => BrokerError::InUse {
            path: path.clone(),
            holder: holder.clone(),
        },
        BrokerError::Failed { broker, detail } => BrokerError::Failed {
            broker,
            detail: detail.clone(),
        },
        BrokerError::Closed { broker } => BrokerError::Closed { broker },
        BrokerError::Backend { broker, detail } => BrokerError::Backend {
            broker,
            detail: detail.clone(),
        },
        other => BrokerError::Backend {
            broker: "local",
            detail: other.to_string(),
        },
    }
}

/// The error of a publish its own combiner left without an outcome (which
/// does not happen: a combiner fills in every outcome of its batch).
fn unserved() -> BrokerError {
    BrokerError::InvalidArgument("a combined publish got no outcome (a local broker bug)".into())
}

/// A queued publish, waiting to be served (combining, if no one else is).
struct Queued<'a, P: Persistence> {
    broker: &'a LocalBroker<P>,
    slot: Arc<Slot>,
    /// Its outcome was taken.
    done: bool,
    /// Queued while gathering: it yields once before it combines.
    yield_first: bool,
}

impl<P: Persistence> Queued<'_, P> {
    /// The outcome if filled in; else `waker` is woken when it is.
    fn outcome(&mut self, waker: &Waker) -> Option<Outcome> {
        let mut state = self.slot.lock();
        let outcome = state.outcome.take();
        match outcome {
            Some(_) => self.done = true,
            None => state.waker = Some(waker.clone()),
        }
        outcome
    }
}

impl<P: Persistence> Future for Queued<'_, P> {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        if let Some(outcome) = self.outcome(cx.waker()) {
            return Poll::Ready(outcome);
        }
        if std::mem::take(&mut self.yield_first) {
            // Gathering: the tasks ready to run publish (and queue) before
            // the first of the gathered publishes is back to serve them.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        // No one is serving the queue: combine.
        if self.broker.combine_if_idle()
            && let Some(outcome) = self.outcome(cx.waker())
        {
            return Poll::Ready(outcome);
        }
        Poll::Pending
    }
}

impl<P: Persistence> Drop for Queued<'_, P> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        {
            let queue = self.broker.shared.combiner.lock();
            let mut state = self.slot.lock();
            if state.taken {
                return;
            }
            if queue.combining {
                // The combiner serves it before its turn ends.
                state.orphaned = true;
                return;
            }
        }
        // Still queued and no one combining: published all the same.
        self.broker.combine_if_idle();
    }
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use std::sync::Condvar;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use ruststream_core::{Broker, Clock};
    use ruststream_engine::{Change, Engine};

    use super::*;

    /// What a [`Gated`] persistence saw and is told, shared with the test.
    #[derive(Default)]
    struct Control {
        /// The ids each persist call was handed, call by call.
        calls: Mutex<Vec<Vec<EntryId>>>,
        /// A persist call is waiting at the gate.
        waiting: AtomicBool,
        /// Persist calls wait while it is closed (`false`).
        open: Mutex<bool>,
        opened: Condvar,
        /// Persist calls of more than one entry fail.
        fail_batches: AtomicBool,
    }

    impl Control {
        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    /// A persistence whose persist calls wait at a gate, so that a test
    /// can hold the broker's lock while others publish.
    struct Gated(Arc<Control>);

    impl Persistence for Gated {
        fn name(&self) -> &'static str {
            "gated"
        }
        fn records(&self) -> bool {
            true
        }
        fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
            let ids: Vec<EntryId> = changes
                .drain(..)
                .filter_map(|c| match c {
                    Change::Appended { id, .. } => Some(id),
                    _ => None,
                })
                .collect();
            let control = &self.0;
            let mut open = control.open.lock().unwrap();
            control.waiting.store(true, Ordering::SeqCst);
            while !*open {
                open = control.opened.wait(open).unwrap();
            }
            drop(open);
            let many = ids.len() > 1;
            control.calls.lock().unwrap().push(ids);
            if many && control.fail_batches.load(Ordering::SeqCst) {
                return Err(BrokerError::Io {
                    path: "gated".into(),
                    source: std::io::Error::other("the disk is full"),
                });
            }
            Ok(0)
        }
    }

    fn broker(control: &Arc<Control>) -> LocalBroker<Gated> {
        let gated = Gated(Arc::clone(control));
        LocalBroker::with_persistence(Engine::new(), gated, None, Clock::new())
    }

    /// A broker whose persist calls go through at once.
    fn open_broker() -> (Arc<Control>, LocalBroker<Gated>) {
        let control = Arc::new(Control::default());
        control.open();
        let b = broker(&control);
        (control, b)
    }

    fn message(text: &str) -> Message {
        Message::new(text.as_bytes().to_vec())
    }

    fn queued(b: &LocalBroker<Gated>) -> usize {
        b.shared.combiner.lock().pending.len()
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..2_000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("timed out waiting until {what}");
    }

    /// Starts a publish of "first" on a thread of its own, and returns once
    /// it holds the broker's lock (waiting at the closed gate).
    fn hold_the_lock(
        b: &LocalBroker<Gated>,
        control: &Control,
    ) -> std::thread::JoinHandle<BrokerResult<EntryId>> {
        let first = b.clone();
        let holder = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(first.publish("s", message("first")))
        });
        wait_until("the first publish holds the lock", || {
            control.waiting.load(Ordering::SeqCst)
        });
        holder
    }

    async fn payloads(b: &LocalBroker<Gated>) -> Vec<String> {
        b.range("s", EntryId::ZERO, EntryId::MAX, 100)
            .await
            .unwrap()
            .iter()
            .map(|e| String::from_utf8(e.message.payload.to_vec()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn publishes_that_arrive_while_one_holds_the_lock_go_out_as_one_batch_in_call_order() {
        let control = Arc::new(Control::default());
        let b = broker(&control);
        let holder = hold_the_lock(&b, &control);
        // Called (not awaited) in this order while the lock is held: queued.
        let futures: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|text| b.publish("s", message(text)))
            .collect();
        assert_eq!(queued(&b), 3);
        control.open();
        let first = holder.join().unwrap().unwrap();
        let mut ids = vec![first];
        for future in futures {
            ids.push(future.await.unwrap());
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        // The holder served them, after its own publish, in one call.
        let calls = control.calls.lock().unwrap().clone();
        assert_eq!(calls, vec![vec![ids[0]], ids[1..].to_vec()]);
        assert_eq!(payloads(&b).await, ["first", "a", "b", "c"]);
        // Nothing queued any more: the next publish goes straight through.
        b.publish("s", message("d")).await.unwrap();
        assert_eq!(control.calls.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_queued_publish_whose_future_is_dropped_is_still_published() {
        let control = Arc::new(Control::default());
        let b = broker(&control);
        let holder = hold_the_lock(&b, &control);
        drop(b.publish("s", message("dropped")));
        let kept = b.publish("s", message("kept"));
        control.open();
        holder.join().unwrap().unwrap();
        kept.await.unwrap();
        assert_eq!(payloads(&b).await, ["first", "dropped", "kept"]);
    }

    #[tokio::test]
    async fn every_publish_of_a_failed_batch_gets_the_error() {
        let control = Arc::new(Control::default());
        control.fail_batches.store(true, Ordering::SeqCst);
        let b = broker(&control);
        let holder = hold_the_lock(&b, &control);
        let futures: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|text| b.publish("s", message(text)))
            .collect();
        control.open();
        holder.join().unwrap().unwrap();
        for future in futures {
            let error = future.await.unwrap_err();
            assert!(
                matches!(&error, BrokerError::Io { source, .. } if source.to_string() == "the disk is full"),
                "{error:?}"
            );
        }
        // The broker goes on: a single publish is persisted on its own.
        b.publish("s", message("after")).await.unwrap();
    }

    #[test]
    fn a_combiner_hands_over_after_its_rounds_and_a_queued_caller_combines() {
        let (control, b) = open_broker();
        // Queued as if another caller were combining, which then stopped
        // with them still queued (its rounds used up).
        b.shared.combiner.lock().combining = true;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let futures: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|text| b.publish("s", message(text)))
            .collect();
        let mut turn = Turn::new(&b.shared.combiner);
        assert!(turn.next_batch(false).is_none(), "no one was orphaned");
        // The first queued caller polled combines, for both.
        let ids: Vec<EntryId> = runtime.block_on(async {
            let mut ids = Vec::new();
            for future in futures {
                ids.push(future.await.unwrap());
            }
            ids
        });
        assert!(ids[0] < ids[1]);
        assert_eq!(control.calls.lock().unwrap().clone(), vec![ids]);
        assert!(!b.shared.combiner.lock().combining);
    }

    /// Polls `future` once, with a waker that does nothing.
    fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn publishes_ready_on_the_same_thread_are_gathered_into_one_call_in_call_order() {
        let (control, b) = open_broker();
        // One thread (a current-thread runtime): the publishes never
        // overlap unless the first one waits for the others.
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let b = b.clone();
                tokio::spawn(async move { b.publish("s", message(&i.to_string())).await })
            })
            .collect();
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(task.await.unwrap().unwrap());
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(control.calls.lock().unwrap().clone(), vec![ids]);
        assert_eq!(payloads(&b).await, ["0", "1", "2", "3", "4", "5", "6", "7"]);
    }

    #[tokio::test]
    async fn a_gathering_publish_dropped_while_it_yields_still_publishes_itself_and_those_behind_it()
     {
        let (control, b) = open_broker();
        let mut first = b.publish("s", message("dropped"));
        assert!(poll_once(&mut first).is_pending(), "it gathers");
        let mut second = b.publish("s", message("queued"));
        assert!(poll_once(&mut second).is_pending(), "queued behind it");
        drop(first);
        let id = second.await.unwrap();
        assert_eq!(payloads(&b).await, ["dropped", "queued"]);
        let calls = control.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].last(), Some(&id));
        assert!(!b.shared.combiner.lock().combining);
    }

    #[tokio::test]
    async fn a_lone_publisher_stops_gathering_and_probes_once_every_probe_turns() {
        let (control, b) = open_broker();
        let mut gathered = 0;
        // Without tokio's budget, whose yields (every 128 calls) would
        // count here as gathering.
        tokio::task::unconstrained(async {
            for i in 0..2 * PROBE {
                let mut publish = b.publish("s", message(&i.to_string()));
                if poll_once(&mut publish).is_pending() {
                    gathered += 1;
                    publish.await.unwrap();
                }
            }
        })
        .await;
        // The first turns, then one probe: no one else ever came.
        assert_eq!(gathered, LONE_TURNS + 1);
        assert_eq!(control.calls.lock().unwrap().len(), 2 * PROBE as usize);
    }

    #[tokio::test]
    async fn a_gathering_publish_dropped_before_its_first_poll_is_published_and_holds_no_one_up() {
        let (_, b) = open_broker();
        drop(b.publish("s", message("dropped")));
        b.publish("s", message("next")).await.unwrap();
        assert_eq!(payloads(&b).await, ["dropped", "next"]);
        let queue = b.shared.combiner.lock();
        assert!(!queue.combining && !queue.gathering && queue.pending.is_empty());
    }

    #[tokio::test]
    async fn publishes_awaited_in_reverse_call_order_keep_their_call_order() {
        let (_, b) = open_broker();
        // The first gathers but is not polled until the second is done.
        let first = b.publish("s", message("a"));
        let second = b.publish("s", message("b"));
        let b_id = second.await.unwrap();
        let a_id = first.await.unwrap();
        assert!(a_id < b_id, "{a_id} {b_id}");
        assert_eq!(payloads(&b).await, ["a", "b"]);
    }

    #[tokio::test]
    async fn a_publish_batch_does_not_overtake_a_single_publish_called_before_it() {
        let (_, b) = open_broker();
        let single = b.publish("s", message("single"));
        let batch = b.publish_batch("s", vec![message("batch")]).await.unwrap();
        let single = single.await.unwrap();
        assert!(single < batch[0], "{single} {}", batch[0]);
        assert_eq!(payloads(&b).await, ["single", "batch"]);
    }

    #[tokio::test]
    async fn a_gathered_publish_polled_once_and_kept_holds_no_one_up() {
        let (_, b) = open_broker();
        let mut kept = b.publish("s", message("kept"));
        assert!(poll_once(&mut kept).is_pending(), "it gathers");
        // Served by the next publish, which does not wait for `kept`.
        b.publish("s", message("next")).await.unwrap();
        assert_eq!(payloads(&b).await, ["kept", "next"]);
        {
            let queue = b.shared.combiner.lock();
            assert!(!queue.combining && !queue.gathering && queue.pending.is_empty());
        }
        kept.await.unwrap();
    }
}
