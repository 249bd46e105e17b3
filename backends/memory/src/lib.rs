//! The in-memory broker: ruststream's consumer-group engine behind a lock,
//! with wakeups for blocking reads.
//!
//! Everything in SPEC section 3 but durability, in process. It is the
//! broker of the testkit and a fine choice for a single process that can
//! afford to lose its queue on exit.
//!
//! Blocking reads wake as soon as a publish, a retry, a redrive or a group
//! change touches their stream, and otherwise sleep on the broker's
//! [`Clock`] until the block time passes or the next entry falls due (an
//! owed entry, or a pending one reaching `min_idle`). The clock follows
//! tokio's, so under a paused test clock `tokio::time::advance` drives
//! claims, delays and block timeouts together.
//!
//! ```
//! use ruststream_core::{Broker, Message, ReadMode, ReadRequest, StreamStart};
//! use ruststream_memory::MemoryBroker;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ruststream_core::BrokerError> {
//! let broker = MemoryBroker::new();
//! broker.ensure_group("jobs", "workers", StreamStart::New).await?;
//! let id = broker.publish("jobs", Message::new(b"hello".to_vec())).await?;
//! let batch = broker
//!     .read(ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 16))
//!     .await?;
//! assert_eq!(batch.deliveries[0].entry.payload(), b"hello");
//! broker.ack("jobs", "workers", &[id]).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use ruststream_core::{
    Broker, BrokerFuture, BrokerResult, Clock, ConsumerInfo, DeadLetter, Entry, EntryId, GroupInfo,
    Message, NameKind, PendingEntry, ReadBatch, ReadMode, ReadRequest, Retry, StreamInfo,
    StreamStart, Trim, check_name, check_stream_group,
};
use ruststream_engine::{Change, Engine};
use tokio::sync::Notify;

/// Where a local broker keeps its changes: nowhere ([`Volatile`], the
/// memory broker) or on disk (the file-log broker).
///
/// The broker calls [`Persistence::persist`] under its lock after every
/// call that changed state, with the engine's recorded changes, in order.
pub trait Persistence: Send + 'static {
    /// The broker's name in messages: `"memory"`, `"filelog"`.
    fn name(&self) -> &'static str;

    /// Whether the engine should record changes for [`Persistence::persist`].
    fn records(&self) -> bool;

    /// Persists (and drains) the changes of one call. Returns a ticket that
    /// [`Durability::wait`] resolves once those changes are durable.
    fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64>;

    /// Called under the lock right after [`Persistence::persist`] failed,
    /// with the engine that already holds the failed call's changes, so
    /// that a persistence able to can put the engine back to what it has
    /// stored: what readers see must never run ahead of the disk. The
    /// default leaves the engine as it is.
    fn undo(&mut self, engine: &mut Engine) {
        let _ = engine;
    }
}

/// Waiting for persisted changes to become durable (group commit).
pub trait Durability: Send + Sync + 'static {
    /// Resolves once everything persisted up to `ticket` is durable.
    fn wait(&self, ticket: u64) -> BrokerFuture<'_, ()>;
}

/// Keeps nothing: the memory broker.
#[derive(Debug, Default, Clone, Copy)]
pub struct Volatile;

impl Persistence for Volatile {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn records(&self) -> bool {
        false
    }

    fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
        changes.clear();
        Ok(0)
    }
}

/// The engine behind a lock, with wakeups for blocking reads and a
/// [`Persistence`] for its changes. [`MemoryBroker`] is the one without
/// persistence; the file-log broker wraps one that writes to disk.
pub struct LocalBroker<P: Persistence = Volatile> {
    shared: Arc<Shared<P>>,
}

/// An in-memory broker. Cheap to clone: clones share the same streams.
pub type MemoryBroker = LocalBroker<Volatile>;

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
    clock: Clock,
    durability: Option<Arc<dyn Durability>>,
    name: &'static str,
}

struct State<P> {
    engine: Engine,
    persistence: P,
    /// Changes being handed to the persistence (a reused buffer).
    changes: Vec<Change>,
    /// One wakeup per stream that a blocking read has waited on.
    wakeups: HashMap<String, Arc<Notify>>,
}

impl<P: Persistence> State<P> {
    fn wakeup(&self, stream: &str) -> Option<Arc<Notify>> {
        self.wakeups.get(stream).cloned()
    }

    /// Hands the changes of the call just made to the persistence.
    fn persist(&mut self) -> BrokerResult<u64> {
        if !self.persistence.records() {
            return Ok(0);
        }
        self.engine.take_changes_into(&mut self.changes);
        if self.changes.is_empty() {
            return Ok(0);
        }
        let persisted = self.persistence.persist(&mut self.changes);
        if persisted.is_err() {
            self.persistence.undo(&mut self.engine);
        }
        persisted
    }
}

fn ready<T: Send + 'static>(result: BrokerResult<T>) -> BrokerFuture<'static, T> {
    Box::pin(std::future::ready(result))
}

impl Default for MemoryBroker {
    fn default() -> Self {
        MemoryBroker::new()
    }
}

impl MemoryBroker {
    /// An empty broker on a clock that starts at the current wall time and
    /// follows tokio's.
    pub fn new() -> Self {
        MemoryBroker::with_clock(Clock::new())
    }

    /// An empty broker on the given clock.
    pub fn with_clock(clock: Clock) -> Self {
        LocalBroker::with_persistence(Engine::new(), Volatile, None, clock)
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
        engine.record_changes(persistence.records());
        LocalBroker {
            shared: Arc::new(Shared {
                name: persistence.name(),
                state: Mutex::new(State {
                    engine,
                    persistence,
                    changes: Vec::new(),
                    wakeups: HashMap::new(),
                }),
                clock,
                durability,
            }),
        }
    }

    /// The broker's clock.
    pub fn clock(&self) -> Clock {
        self.shared.clock
    }

    /// Runs `f` on the persistence, under the broker's lock.
    pub fn with_persistence_mut<T>(&self, f: impl FnOnce(&mut P, &Engine) -> T) -> T {
        let mut state = self.lock();
        let state = &mut *state;
        f(&mut state.persistence, &state.engine)
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

    /// Runs `f` on the engine under the lock, persists what changed, then
    /// wakes blocking readers of `stream` if `wake`. Returns the result
    /// and the persistence ticket.
    fn change<T>(
        &self,
        stream: &str,
        wake: bool,
        f: impl FnOnce(&mut Engine, u64) -> BrokerResult<T>,
    ) -> BrokerResult<(T, u64)> {
        let now = self.shared.clock.now_ms();
        let (out, wakeup) = {
            let mut state = self.lock();
            let out = f(&mut state.engine, now);
            let ticket = state.persist();
            let wakeup = if wake { state.wakeup(stream) } else { None };
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
        wake: bool,
        f: impl FnOnce(&mut Engine, u64) -> BrokerResult<T>,
    ) -> BrokerFuture<'static, T> {
        ready(self.change(stream, wake, f).map(|(out, _)| out))
    }

    /// [`LocalBroker::change`], then waits until the change is durable.
    fn mutate_durably<'a, T: Send + 'a>(
        &'a self,
        stream: &'a str,
        f: impl FnOnce(&mut Engine, u64) -> BrokerResult<T>,
    ) -> BrokerFuture<'a, T> {
        let changed = self.change(stream, true, f);
        match (&self.shared.durability, changed) {
            (Some(durability), Ok((out, ticket))) => Box::pin(async move {
                durability.wait(ticket).await?;
                Ok(out)
            }),
            (_, changed) => Box::pin(std::future::ready(changed.map(|(out, _)| out))),
        }
    }

    /// Runs `f` on the engine under the lock, read-only.
    fn inspect<T>(&self, f: impl FnOnce(&Engine, u64) -> T) -> T {
        let now = self.shared.clock.now_ms();
        f(&self.lock().engine, now)
    }

    /// One read attempt; with `next_due`, also when the read could next
    /// return something if it returned nothing now.
    fn read_once(
        &self,
        request: &ReadRequest<'_>,
        with_next_due: bool,
    ) -> BrokerResult<(ReadBatch, Option<u64>)> {
        self.change(request.stream, false, |e, now| {
            let batch = e.read(request, now)?;
            let next_due = if with_next_due && batch.is_empty() {
                e.next_due(request, now)
            } else {
                None
            };
            Ok((batch, next_due))
        })
        .map(|(out, _)| out)
    }

    async fn blocking_read(&self, request: ReadRequest<'_>) -> BrokerResult<ReadBatch> {
        let (first, _) = self.read_once(&request, false)?;
        let Some(block) = request.block.filter(|_| first.is_empty()) else {
            return Ok(first);
        };
        let deadline = tokio::time::Instant::now() + block;
        let wake = {
            let mut state = self.lock();
            Arc::clone(state.wakeups.entry(request.stream.to_owned()).or_default())
        };
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (batch, next_due) = self.read_once(&request, true)?;
            if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
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

    fn check_mode(&self, _mode: ReadMode) -> BrokerFuture<'_, ()> {
        ready(Ok(()))
    }

    fn publish<'a>(&'a self, stream: &'a str, message: Message) -> BrokerFuture<'a, EntryId> {
        if let Err(error) = check_name(NameKind::Stream, stream) {
            return ready(Err(error));
        }
        self.mutate_durably(stream, |e, now| {
            Ok(e.publish_shared(stream, Arc::new(message), now))
        })
    }

    fn publish_batch<'a>(
        &'a self,
        stream: &'a str,
        messages: Vec<Message>,
    ) -> BrokerFuture<'a, Vec<EntryId>> {
        if let Err(error) = check_name(NameKind::Stream, stream) {
            return ready(Err(error));
        }
        self.mutate_durably(stream, |e, now| Ok(e.publish(stream, messages, now)))
    }

    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        if let Err(error) = check_stream_group(stream, group) {
            return ready(Err(error));
        }
        self.mutate_durably(stream, |e, now| {
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
        self.mutate_durably(stream, |e, _| e.set_group_position(stream, group, start))
    }

    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        // A read creates its consumer: its name must be one the rules allow.
        if let Err(error) = check_name(NameKind::Consumer, request.consumer) {
            return ready(Err(error));
        }
        if request.block.is_none() {
            return ready(self.read_once(&request, false).map(|(batch, _)| batch));
        }
        Box::pin(self.blocking_read(request))
    }

    fn ack<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        // An ack makes nothing readable, so no wakeup is needed.
        self.mutate(stream, false, |e, _| e.ack(stream, group, ids))
    }

    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        self.mutate(stream, true, |e, now| match how {
            Retry::Copy => e
                .retry_copy(stream, group, ids, now)
                .map(|r| r.len() as u64),
            Retry::After(delay) => {
                let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                e.retry_after(stream, group, ids, delay_ms, now)
            }
        })
    }

    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64> {
        self.mutate(stream, false, |e, now| {
            e.dead_letter(stream, group, ids, reason, now)
        })
    }

    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        self.mutate(stream, true, |e, now| e.redrive(stream, group, ids, now))
    }

    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        self.mutate(stream, false, |e, _| e.discard(stream, group, ids))
    }

    fn group_info<'a>(&'a self, stream: &'a str, group: &'a str) -> BrokerFuture<'a, GroupInfo> {
        ready(self.inspect(|e, _| e.group_info(stream, group)))
    }

    fn consumers<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
    ) -> BrokerFuture<'a, Vec<ConsumerInfo>> {
        ready(self.inspect(|e, now| e.consumers(stream, group, now)))
    }

    fn pending<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
        consumer: Option<&'a str>,
    ) -> BrokerFuture<'a, Vec<PendingEntry>> {
        ready(self.inspect(|e, now| e.pending(stream, group, from, count, consumer, now)))
    }

    fn dead_letters<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<DeadLetter>> {
        ready(self.inspect(|e, _| e.dead_letters(stream, group, from, count)))
    }

    fn range<'a>(
        &'a self,
        stream: &'a str,
        from: EntryId,
        to: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<Entry>> {
        ready(Ok(self.inspect(|e, _| e.range(stream, from, to, count))))
    }

    fn stream_info<'a>(&'a self, stream: &'a str) -> BrokerFuture<'a, Option<StreamInfo>> {
        ready(Ok(self.inspect(|e, _| e.stream_info(stream))))
    }

    fn trim<'a>(&'a self, stream: &'a str, trim: Trim) -> BrokerFuture<'a, u64> {
        self.mutate(stream, false, |e, _| e.trim(stream, trim))
    }
}
