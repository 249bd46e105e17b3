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
use std::sync::{Arc, Mutex, MutexGuard};

use ruststream_core::{
    Broker, BrokerFuture, BrokerResult, Clock, ConsumerInfo, DeadLetter, Entry, EntryId, GroupInfo,
    Message, PendingEntry, ReadBatch, ReadMode, ReadRequest, Retry, StreamInfo, StreamStart, Trim,
};
use ruststream_engine::Engine;
use tokio::sync::Notify;

/// An in-memory broker. Cheap to clone: clones share the same streams.
#[derive(Clone, Debug)]
pub struct MemoryBroker {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    clock: Clock,
}

#[derive(Debug, Default)]
struct State {
    engine: Engine,
    /// One wakeup per stream that a blocking read has waited on.
    wakeups: HashMap<String, Arc<Notify>>,
}

impl State {
    fn wakeup(&self, stream: &str) -> Option<Arc<Notify>> {
        self.wakeups.get(stream).cloned()
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
        MemoryBroker {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                clock,
            }),
        }
    }

    /// The broker's clock.
    pub fn clock(&self) -> Clock {
        self.shared.clock
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave the engine half
        // updated in a way later calls could not handle (every engine call
        // validates before it mutates), so a poisoned lock is used as is.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the engine under the lock, then wakes blocking readers of
    /// `stream`.
    fn mutate<T>(&self, stream: &str, f: impl FnOnce(&mut Engine, u64) -> T) -> T {
        let now = self.shared.clock.now_ms();
        let (out, wake) = {
            let mut state = self.lock();
            let out = f(&mut state.engine, now);
            (out, state.wakeup(stream))
        };
        if let Some(wake) = wake {
            wake.notify_waiters();
        }
        out
    }

    /// Runs `f` on the engine under the lock, read-only.
    fn inspect<T>(&self, f: impl FnOnce(&Engine, u64) -> T) -> T {
        let now = self.shared.clock.now_ms();
        f(&self.lock().engine, now)
    }

    async fn blocking_read(&self, request: ReadRequest<'_>) -> BrokerResult<ReadBatch> {
        let first = self.inspect_read(&request)?;
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
            let (batch, next_due) = {
                let now = self.shared.clock.now_ms();
                let mut state = self.lock();
                let batch = state.engine.read(&request, now)?;
                let next_due = if batch.is_empty() {
                    state.engine.next_due(&request, now)
                } else {
                    None
                };
                (batch, next_due)
            };
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

    fn inspect_read(&self, request: &ReadRequest<'_>) -> BrokerResult<ReadBatch> {
        let now = self.shared.clock.now_ms();
        self.lock().engine.read(request, now)
    }
}

impl Broker for MemoryBroker {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn check_mode(&self, _mode: ReadMode) -> BrokerFuture<'_, ()> {
        ready(Ok(()))
    }

    fn publish<'a>(&'a self, stream: &'a str, message: Message) -> BrokerFuture<'a, EntryId> {
        let id = self.mutate(stream, |e, now| {
            e.publish_shared(stream, Arc::new(message), now)
        });
        ready(Ok(id))
    }

    fn publish_batch<'a>(
        &'a self,
        stream: &'a str,
        messages: Vec<Message>,
    ) -> BrokerFuture<'a, Vec<EntryId>> {
        ready(Ok(
            self.mutate(stream, |e, now| e.publish(stream, messages, now))
        ))
    }

    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        ready(Ok(self.mutate(stream, |e, now| {
            e.ensure_group(stream, group, start, now)
        })))
    }

    fn set_group_position<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        ready(self.mutate(stream, |e, _| e.set_group_position(stream, group, start)))
    }

    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        if request.block.is_none() {
            return ready(self.inspect_read(&request));
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
        ready(self.lock().engine.ack(stream, group, ids))
    }

    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        ready(self.mutate(stream, |e, now| {
            match how {
                Retry::Copy => e
                    .retry_copy(stream, group, ids, now)
                    .map(|r| r.len() as u64),
                Retry::After(delay) => {
                    let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                    e.retry_after(stream, group, ids, delay_ms, now)
                }
            }
        }))
    }

    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64> {
        let now = self.shared.clock.now_ms();
        ready(
            self.lock()
                .engine
                .dead_letter(stream, group, ids, reason, now),
        )
    }

    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        ready(self.mutate(stream, |e, now| e.redrive(stream, group, ids, now)))
    }

    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        ready(self.lock().engine.discard(stream, group, ids))
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
        ready(self.lock().engine.trim(stream, trim))
    }
}
