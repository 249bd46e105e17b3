//! The local broker: ruststream's consumer-group engine behind a lock, with
//! wakeups for blocking reads and a [`Persistence`] for its changes.
//!
//! [`LocalBroker`] is the whole [`Broker`] of both in-process brokers: the
//! memory broker is a `LocalBroker` whose persistence keeps nothing
//! (`ruststream_memory::MemoryBroker`), and the file-log broker wraps one
//! whose persistence writes to disk (`ruststream_filelog::FileLogBroker`).
//! What differs between them is the persistence: its limits, checked
//! before a call changes anything (`Persistence::check_*`), where changes
//! go ([`Persistence::persist`], [`Persistence::undo`]), upkeep after a call
//! ([`Persistence::upkeep`]: compaction, retention), where the payloads the
//! engine does not hold in memory come from ([`Persistence::load`]: the
//! file log's segments), and waiting for durability ([`Durability`], which
//! also reports a fail-stop).
//!
//! It lives in a crate of its own rather than in `ruststream-engine` so
//! that the engine stays pure (no lock, no async runtime, time passed in),
//! and so that the file log depends on the local broker, not on the memory
//! broker.
//!
//! Single-message publishes that arrive while another caller publishes
//! are queued and published by that caller in one go (one pass through
//! the engine, one persist: one write for the file log), in the order
//! they were called, rather than each waiting for the lock in turn.
//!
//! Blocking reads wake as soon as a publish, a retry, a redrive or a group
//! change touches their stream, and otherwise sleep on the broker's
//! [`Clock`] until the block time passes or the next entry falls due (an
//! owed entry, or a pending one reaching `min_idle`). The clock follows
//! tokio's, so under a paused test clock `tokio::time::advance` drives
//! claims, delays and block timeouts together.
//!
//! ```
//! use ruststream_core::{Broker, BrokerResult, Message, StreamStart};
//! use ruststream_engine::Change;
//! use ruststream_local::{LocalBroker, Persistence};
//!
//! /// Counts the changes it is handed, and refuses empty payloads.
//! #[derive(Default)]
//! struct Counting(usize);
//!
//! impl Persistence for Counting {
//!     fn name(&self) -> &'static str {
//!         "counting"
//!     }
//!     fn records(&self) -> bool {
//!         true
//!     }
//!     fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
//!         self.0 += changes.len();
//!         changes.clear();
//!         Ok(0)
//!     }
//!     fn check_messages(_stream: &str, messages: &[Message]) -> BrokerResult<()> {
//!         match messages.iter().any(|m| m.payload.is_empty()) {
//!             true => Err(ruststream_core::BrokerError::InvalidArgument("empty".into())),
//!             false => Ok(()),
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> BrokerResult<()> {
//! let broker = LocalBroker::<Counting>::new();
//! broker.ensure_group("jobs", "workers", StreamStart::New).await?;
//! broker.publish("jobs", Message::new(b"job-1".to_vec())).await?;
//! assert!(broker.publish("jobs", Message::new(Vec::new())).await.is_err());
//! assert_eq!(broker.with_persistence_mut(|counting, _| counting.0), 2);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod combine;
mod persistence;

pub use persistence::{Durability, Persistence};

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ruststream_core::{
    Broker, BrokerError, BrokerFuture, BrokerResult, Clock, ConsumerInfo, DeadLetter, Entry,
    EntryId, GroupInfo, Message, NameKind, PendingEntry, ReadBatch, ReadMode, ReadRequest, Retry,
    StreamInfo, StreamStart, Trim, check_name, check_stream_group,
};
use ruststream_engine::{Change, Engine};
use tokio::sync::Notify;

/// The engine behind a lock, with wakeups for blocking reads and a
/// [`Persistence`] for its changes. Cheap to clone: clones share the same
/// streams.
pub struct LocalBroker<P: Persistence> {
    shared: Arc<Shared<P>>,
}

impl<P: Persistence> Clone for LocalBroker<P> {
    fn clone(&self) -> Self {
        LocalBroker {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<P: Persistence> fmt::Debug for LocalBroker<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBroker")
            .field("name", &self.shared.name)
            .field("clock", &self.shared.clock)
            .finish_non_exhaustive()
    }
}

struct Shared<P> {
    state: Mutex<State<P>>,
    /// Publishes queued while another caller publishes (see `combine`).
    combiner: combine::Combiner,
    clock: Clock,
    durability: Option<Arc<dyn Durability>>,
    name: &'static str,
}

struct State<P> {
    engine: Engine,
    persistence: P,
    /// Changes being handed to the persistence (a reused buffer).
    changes: Vec<Change>,
    /// One wakeup per stream that a blocking read has waited on (looked up
    /// on every publish once a reader waits: foldhash, not SipHash).
    wakeups: HashMap<String, Arc<Notify>, foldhash::fast::RandomState>,
    /// The latest time a call gave the engine (see [`State::in_order`]).
    last_ms: u64,
}

impl<P: Persistence> State<P> {
    fn wakeup(&self, stream: &str) -> Option<Arc<Notify>> {
        self.wakeups.get(stream).cloned()
    }

    /// `now_ms`, read before the lock was taken, or the time the call
    /// before it had if that is later: calls racing for the lock reach the
    /// engine in another order than they read the clock, and the engine's
    /// time indexes (delivery times, in order) need times that never go
    /// back, or an idle entry could be claimed late.
    fn in_order(&mut self, now_ms: u64) -> u64 {
        self.last_ms = self.last_ms.max(now_ms);
        self.last_ms
    }
}

/// What a change means for others, besides its result.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// It makes nothing newly readable (an ack, a read): no reader wakes.
    Quiet,
    /// It may make entries readable (a retry, a redrive, a group change):
    /// the stream's blocking readers wake.
    Wakes,
    /// It appended entries: readers wake, and the persistence's upkeep
    /// knows (retention follows publishes).
    Publishes,
}

fn ready<'a, T: Send + 'a>(result: BrokerResult<T>) -> BrokerFuture<'a, T> {
    cooperative(std::future::ready(result))
}

/// Boxes `future` as the answer to a broker call, taking part in tokio's
/// cooperative scheduling: the call uses one unit of its task's budget, and
/// once the budget is spent the task yields before it gets its answer.
/// This broker's calls mostly complete at once, and a loop of calls that
/// never waits would otherwise keep its worker thread from every other task
/// on it (other publishers, subscribers, timers, an admin endpoint): see
/// `docs/guarantees.md`, "Fair turns". Outside a tokio runtime it changes
/// nothing.
pub(crate) fn cooperative<'a, T>(
    future: impl Future<Output = BrokerResult<T>> + Send + 'a,
) -> BrokerFuture<'a, T> {
    Box::pin(tokio::task::coop::cooperative(future))
}

impl<P: Persistence + Default> Default for LocalBroker<P> {
    fn default() -> Self {
        LocalBroker::new()
    }
}

impl<P: Persistence + Default> LocalBroker<P> {
    /// An empty broker with a fresh persistence, on a clock that starts at
    /// the current wall time and follows tokio's.
    pub fn new() -> Self {
        LocalBroker::with_clock(Clock::new())
    }

    /// An empty broker with a fresh persistence, on the given clock.
    pub fn with_clock(clock: Clock) -> Self {
        LocalBroker::with_persistence(Engine::new(), P::default(), None, clock)
    }
}

impl<P: Persistence> LocalBroker<P> {
    /// A broker over `engine` (already restored, for a durable broker),
    /// handing its changes to `persistence`; publishes wait on
    /// `durability` when given.
    pub fn with_persistence(
        mut engine: Engine,
        persistence: P,
        durability: Option<Arc<dyn Durability>>,
        clock: Clock,
    ) -> Self {
        let records = persistence.records();
        engine.record_changes(records);
        LocalBroker {
            shared: Arc::new(Shared {
                name: persistence.name(),
                state: Mutex::new(State {
                    engine,
                    persistence,
                    changes: Vec::new(),
                    wakeups: HashMap::default(),
                    last_ms: 0,
                }),
                combiner: combine::Combiner::new(records),
                clock,
                durability,
            }),
        }
    }

    /// The broker's clock.
    pub fn clock(&self) -> Clock {
        self.shared.clock
    }

    /// Runs `f` on the persistence and the engine, under the broker's lock:
    /// for work a persistence does outside a call (compaction, retention).
    /// What `f` changes in the engine, the persistence persists
    /// ([`Persistence::persist_recorded`]).
    pub fn with_persistence_mut<T>(&self, f: impl FnOnce(&mut P, &mut Engine) -> T) -> T {
        let mut state = self.lock();
        let state = &mut *state;
        f(&mut state.persistence, &mut state.engine)
    }

    fn lock(&self) -> MutexGuard<'_, State<P>> {
        // A panic while the lock was held cannot leave the engine half
        // updated in a way later calls could not handle (every engine call
        // validates before it mutates), so a poisoned lock is used as is.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fails a call at once once the broker has stopped (fail-stop): what
    /// is in memory may not be durable, so not even inspecting calls are
    /// answered.
    fn admit(&self) -> BrokerResult<()> {
        match self.failure() {
            None => Ok(()),
            Some(detail) => Err(BrokerError::Failed {
                broker: self.shared.name,
                detail,
            }),
        }
    }

    /// Runs `f` on the engine under the lock, persists what changed, runs
    /// the persistence's upkeep, then wakes blocking readers of `stream` as
    /// `effect` says. Returns the result and the persistence ticket.
    fn change<T>(
        &self,
        stream: &str,
        effect: Effect,
        f: impl FnOnce(&mut Engine, &mut P, u64) -> BrokerResult<T>,
    ) -> BrokerResult<(T, u64)> {
        let now = self.shared.clock.now_ms();
        let (out, wakeup) = {
            let mut state = self.lock();
            let now = state.in_order(now);
            let State {
                engine,
                persistence,
                changes,
                ..
            } = &mut *state;
            if let Some(refused) = persistence.refuses_changes() {
                return Err(refused);
            }
            let out = f(engine, persistence, now);
            let ticket = persistence.persist_recorded(engine, changes);
            persistence.upkeep(engine, stream, now, effect == Effect::Publishes);
            let wakeup = match effect {
                Effect::Quiet => None,
                Effect::Wakes | Effect::Publishes => state.wakeup(stream),
            };
            (out.and_then(|out| Ok((out, ticket?))), wakeup)
        };
        if let Some(wakeup) = wakeup {
            wakeup.notify_waiters();
        }
        out
    }

    /// [`LocalBroker::change`] without waiting for durability.
    fn mutate<T: Send + 'static>(
        &self,
        stream: &str,
        effect: Effect,
        f: impl FnOnce(&mut Engine, &mut P, u64) -> BrokerResult<T>,
    ) -> BrokerFuture<'static, T> {
        ready(self.change(stream, effect, f).map(|(out, _)| out))
    }

    /// [`LocalBroker::change`], then waits until the change is durable.
    fn mutate_durably<'a, T: Send + 'a>(
        &'a self,
        stream: &'a str,
        effect: Effect,
        f: impl FnOnce(&mut Engine, u64) -> BrokerResult<T>,
    ) -> BrokerFuture<'a, T> {
        let changed = self.change(stream, effect, |e, _, now| f(e, now));
        self.when_durable(changed)
    }

    /// `changed`'s result, once its changes are durable (see
    /// [`LocalBroker::change`]).
    fn when_durable<'a, T: Send + 'a>(
        &'a self,
        changed: BrokerResult<(T, u64)>,
    ) -> BrokerFuture<'a, T> {
        match (&self.shared.durability, changed) {
            (Some(durability), Ok((out, ticket))) => cooperative(async move {
                durability.wait(ticket).await?;
                Ok(out)
            }),
            (_, changed) => ready(changed.map(|(out, _)| out)),
        }
    }

    /// Runs `f` on the engine under the lock, read-only, once admitted;
    /// `f` gets the persistence to load payloads with
    /// ([`Persistence::load`]).
    fn inspect<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine, &mut P, u64) -> BrokerResult<T>,
    ) -> BrokerFuture<'static, T> {
        if let Err(error) = self.admit() {
            return ready(Err(error));
        }
        let now = self.shared.clock.now_ms();
        let mut state = self.lock();
        let now = state.in_order(now);
        let State {
            engine,
            persistence,
            ..
        } = &mut *state;
        ready(f(engine, persistence, now))
    }

    /// A call that changes the group state of `ids` entries, once admitted
    /// and within the persistence's limits (see
    /// [`Persistence::check_group_change`]), answered on the spot (a group
    /// change never waits for durability).
    fn group_change(
        &self,
        call: &str,
        stream: &str,
        ids: usize,
        extra: usize,
        effect: Effect,
        f: impl FnOnce(&mut Engine, &mut P, u64) -> BrokerResult<u64>,
    ) -> BrokerResult<u64> {
        self.admit()
            .and_then(|()| P::check_group_change(call, stream, ids, extra))?;
        self.change(stream, effect, f).map(|(out, _)| out)
    }

    /// A change to what the group keeps of `consumer`, once the names are
    /// checked: its claims on `ids` entries (their times, their counts), or
    /// the consumer itself. None makes anything readable sooner: no wakeup
    /// (a blocking claiming read finds a later idle time when it next
    /// looks).
    fn consumer_change(
        &self,
        call: &str,
        (stream, group, consumer): (&str, &str, &str),
        ids: usize,
        f: impl FnOnce(&mut Engine, u64) -> BrokerResult<u64>,
    ) -> BrokerResult<u64> {
        check_stream_group(stream, group)
            .and_then(|()| check_name(NameKind::Consumer, consumer))?;
        self.group_change(call, stream, ids, 0, Effect::Quiet, |e, _, now| f(e, now))
    }

    /// Checks a publish of `messages` to `stream` before anything changes.
    fn check_publish(&self, stream: &str, messages: &[Message]) -> BrokerResult<()> {
        self.admit()?;
        P::check_stream(stream)?;
        P::check_messages(stream, messages)
    }

    /// One read attempt; with `next_due`, also when the read could next
    /// return something if it returned nothing now.
    fn read_once(
        &self,
        request: &ReadRequest<'_>,
        with_next_due: bool,
    ) -> BrokerResult<(ReadBatch, Option<u64>)> {
        let mut batch = ReadBatch::default();
        let next_due = self.read_into(request, with_next_due, &mut batch)?;
        Ok((batch, next_due))
    }

    /// [`LocalBroker::read_once`] into `batch`, whose buffers are reused
    /// (see [`Engine::read_into`]); on an error the batch is left empty.
    fn read_into(
        &self,
        request: &ReadRequest<'_>,
        with_next_due: bool,
        batch: &mut ReadBatch,
    ) -> BrokerResult<Option<u64>> {
        let read = self.change(request.stream, Effect::Quiet, |e, p, now| {
            e.read_into(request, now, batch)?;
            // Payloads not in memory come from storage; if that fails the
            // read fails, and what it handed out stays pending (claimed
            // again once idle).
            p.load(
                request.stream,
                batch.deliveries.iter_mut().map(|d| &mut d.entry),
            )?;
            Ok(if with_next_due && batch.is_empty() {
                e.next_due(request, now)
            } else {
                None
            })
        });
        match read {
            Ok((next_due, _)) => Ok(next_due),
            Err(error) => {
                batch.deliveries.clear();
                batch.dead_lettered.clear();
                Err(error)
            }
        }
    }

    /// Acknowledges `ids` (see [`Broker::ack`]), on the spot.
    fn acked(&self, stream: &str, group: &str, ids: &[EntryId]) -> BrokerResult<u64> {
        // An ack makes nothing readable, so no wakeup is needed.
        self.group_change("an ack", stream, ids.len(), 0, Effect::Quiet, |e, _, _| {
            e.ack(stream, group, ids)
        })
    }

    /// Checks a read before it starts, and caps its count.
    fn admit_read(&self, request: &mut ReadRequest<'_>) -> BrokerResult<()> {
        request.count = request.count.min(P::MAX_READ_COUNT);
        // Checked here as well as by the engine, so that a bad request
        // fails before a blocking read starts waiting.
        self.admit().and_then(|()| request.validate())
    }

    async fn blocking_read(&self, request: ReadRequest<'_>) -> BrokerResult<ReadBatch> {
        let (first, _) = self.read_once(&request, false)?;
        // A read that only dead-lettered entries (at `max_deliveries`) has
        // something to report: it returns rather than waits.
        let quiet = |batch: &ReadBatch| batch.is_empty() && batch.dead_lettered.is_empty();
        let Some(block) = request.block.filter(|_| quiet(&first)) else {
            return Ok(first);
        };
        // A block too long to add to the clock waits for ever (a century).
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(block)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let wake = {
            let mut state = self.lock();
            Arc::clone(state.wakeups.entry(request.stream.to_owned()).or_default())
        };
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (batch, next_due) = self.read_once(&request, true)?;
            if !quiet(&batch) || tokio::time::Instant::now() >= deadline {
                return Ok(batch);
            }
            let wake_at = next_due
                .map(|due| self.shared.clock.instant_at(due).min(deadline))
                .unwrap_or(deadline);
            // Either a change to the stream or the next due time: read again.
            let _ = tokio::time::timeout_at(wake_at, notified).await;
        }
    }
}

impl<P: Persistence> Broker for LocalBroker<P> {
    fn name(&self) -> &'static str {
        self.shared.name
    }

    fn failure(&self) -> Option<String> {
        self.shared.durability.as_ref()?.failure()
    }

    fn check_mode(&self, _mode: ReadMode) -> BrokerFuture<'_, ()> {
        ready(Ok(()))
    }

    fn publish<'a>(&'a self, stream: &'a str, message: Message) -> BrokerFuture<'a, EntryId> {
        if let Err(error) = self.check_publish(stream, std::slice::from_ref(&message)) {
            return ready(Err(error));
        }
        // Allocated before the lock is taken, not while others wait for it.
        self.publish_combined(stream, Arc::new(message))
    }

    fn publish_batch<'a>(
        &'a self,
        stream: &'a str,
        messages: Vec<Message>,
    ) -> BrokerFuture<'a, Vec<EntryId>> {
        if let Err(error) = self.check_publish(stream, &messages) {
            return ready(Err(error));
        }
        // Single publishes called before this one go first.
        self.combine_if_idle();
        self.mutate_durably(stream, Effect::Publishes, |e, now| {
            Ok(e.publish(stream, messages, now))
        })
    }

    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        let checked = self
            .admit()
            .and_then(|()| P::check_stream(stream))
            .and_then(|()| check_name(NameKind::Group, group));
        if let Err(error) = checked {
            return ready(Err(error));
        }
        self.mutate_durably(stream, Effect::Wakes, |e, now| {
            e.check_start(stream, start)?;
            Ok(e.ensure_group(stream, group, start, now))
        })
    }

    fn set_group_position<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        if let Err(error) = self.admit() {
            return ready(Err(error));
        }
        self.mutate_durably(stream, Effect::Wakes, |e, now| {
            e.set_group_position(stream, group, start, now)
        })
    }

    fn read<'a>(&'a self, mut request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        if let Err(error) = self.admit_read(&mut request) {
            return ready(Err(error));
        }
        if request.block.is_none() {
            return ready(self.read_once(&request, false).map(|(batch, _)| batch));
        }
        cooperative(self.blocking_read(request))
    }

    fn read_now(
        &self,
        request: &ReadRequest<'_>,
        batch: &mut ReadBatch,
    ) -> Option<BrokerResult<()>> {
        let mut request = *request;
        request.block = None;
        let read = self
            .admit_read(&mut request)
            .and_then(|()| self.read_into(&request, false, batch).map(drop));
        if read.is_err() {
            batch.deliveries.clear();
            batch.dead_lettered.clear();
        }
        Some(read)
    }

    fn ack<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        ready(self.acked(stream, group, ids))
    }

    fn ack_now(&self, stream: &str, group: &str, ids: &[EntryId]) -> Option<BrokerResult<u64>> {
        Some(self.acked(stream, group, ids))
    }

    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        ready(self.group_change(
            "a retry",
            stream,
            ids.len(),
            0,
            Effect::Wakes,
            |e, p, now| {
                match how {
                    Retry::Copy => e
                        .retry_copy_loading(stream, group, ids, now, |id| p.load_one(stream, id))
                        .map(|r| r.len() as u64),
                    Retry::After(delay) => {
                        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                        e.retry_after(stream, group, ids, delay_ms, now)
                    }
                }
            },
        ))
    }

    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64> {
        let extra = reason.len();
        ready(self.group_change(
            "a dead letter",
            stream,
            ids.len(),
            extra,
            Effect::Quiet,
            |e, _, now| e.dead_letter(stream, group, ids, reason, now),
        ))
    }

    fn extend_claim<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        ready(self.consumer_change(
            "an extend_claim",
            (stream, group, consumer),
            ids.len(),
            |e, now| e.extend_claim(stream, group, consumer, ids, now),
        ))
    }

    fn count_deliveries<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        counts: &'a [(EntryId, u32)],
    ) -> BrokerFuture<'a, u64> {
        ready(self.consumer_change(
            "a count_deliveries",
            (stream, group, consumer),
            counts.len(),
            |e, now| e.count_deliveries(stream, group, consumer, counts, now),
        ))
    }

    fn delete_consumer<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        min_idle: Duration,
    ) -> BrokerFuture<'a, bool> {
        let deleted = self.consumer_change(
            "a delete_consumer",
            (stream, group, consumer),
            0,
            |e, now| {
                e.delete_consumer(stream, group, consumer, min_idle, now)
                    .map(u64::from)
            },
        );
        ready(deleted.map(|n| n == 1))
    }

    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        ready(self.group_change(
            "a redrive",
            stream,
            ids.len(),
            0,
            Effect::Wakes,
            |e, _, now| e.redrive(stream, group, ids, now),
        ))
    }

    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        ready(self.group_change(
            "a discard",
            stream,
            ids.len(),
            0,
            Effect::Quiet,
            |e, _, _| e.discard(stream, group, ids),
        ))
    }

    fn group_info<'a>(&'a self, stream: &'a str, group: &'a str) -> BrokerFuture<'a, GroupInfo> {
        self.inspect(|e, _, _| e.group_info(stream, group))
    }

    fn consumers<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
    ) -> BrokerFuture<'a, Vec<ConsumerInfo>> {
        self.inspect(|e, _, now| e.consumers(stream, group, now))
    }

    fn pending<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
        consumer: Option<&'a str>,
    ) -> BrokerFuture<'a, Vec<PendingEntry>> {
        self.inspect(|e, _, now| e.pending(stream, group, from, count, consumer, now))
    }

    fn dead_letters<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<DeadLetter>> {
        self.inspect(|e, p, _| {
            let mut dead = e.dead_letters(stream, group, from, count)?;
            p.load(stream, dead.iter_mut().map(|d| &mut d.entry))?;
            Ok(dead)
        })
    }

    fn range<'a>(
        &'a self,
        stream: &'a str,
        from: EntryId,
        to: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<Entry>> {
        self.inspect(|e, p, _| {
            let mut entries = e.range(stream, from, to, count);
            p.load(stream, entries.iter_mut())?;
            Ok(entries)
        })
    }

    fn stream_info<'a>(&'a self, stream: &'a str) -> BrokerFuture<'a, Option<StreamInfo>> {
        self.inspect(|e, _, _| Ok(e.stream_info(stream)))
    }

    fn streams(&self) -> BrokerFuture<'_, Vec<String>> {
        self.inspect(|e, _, _| Ok(e.stream_names()))
    }

    fn trim<'a>(&'a self, stream: &'a str, trim: Trim) -> BrokerFuture<'a, u64> {
        if let Err(error) = self.admit() {
            return ready(Err(error));
        }
        self.mutate(stream, Effect::Quiet, |e, _, _| e.trim(stream, trim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A persistence that keeps nothing.
    #[derive(Default)]
    struct Nothing;

    impl Persistence for Nothing {
        fn name(&self) -> &'static str {
            "nothing"
        }
        fn records(&self) -> bool {
            false
        }
        fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
            changes.clear();
            Ok(0)
        }
        fn check_messages(_stream: &str, _messages: &[Message]) -> BrokerResult<()> {
            Ok(())
        }
    }

    /// Calls read the clock before they take the lock, so they may reach
    /// the engine out of order: each gets at least the time of the call
    /// before it, so the engine's times never go back.
    #[test]
    fn times_reach_the_engine_in_order() {
        let b = LocalBroker::<Nothing>::new();
        let mut state = b.lock();
        assert_eq!(state.in_order(100), 100);
        assert_eq!(
            state.in_order(90),
            100,
            "a call that read the clock earlier"
        );
        assert_eq!(state.in_order(105), 105);
    }
}
