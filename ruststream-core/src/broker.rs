//! The Broker trait: the one seam between the runtime and a backend.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::{
    BrokerResult, ConsumerInfo, DeadLetter, Delivery, Entry, EntryId, GroupInfo, Message,
    PendingEntry, StreamInfo, StreamStart,
};

/// The future a broker call returns: boxed, so that `dyn Broker` works and
/// a test harness can swap one broker for another behind an `Arc`.
///
/// Calls are batch-oriented (a read returns many entries, an ack takes many
/// ids), so the one allocation per call is spread over a batch.
pub type BrokerFuture<'a, T> = Pin<Box<dyn Future<Output = BrokerResult<T>> + Send + 'a>>;

/// Which entries a read hands out. Every mode but `OwnPending` first hands
/// out the entries *owed* to the group (retried with a delay that has
/// passed, nacked, or redriven), in the order they became owed, before
/// anything else (rule 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadMode {
    /// Owed entries, then entries past the group's cursor (Redis
    /// `XREADGROUP ... >`). Moves the cursor.
    New,
    /// Owed entries, then entries pending for at least `min_idle` under
    /// any consumer (their ownership moves to the reader and their delivery
    /// count goes up), then new entries; all in one read (Redis 8.4
    /// `XREADGROUP ... CLAIM min_idle`).
    Claiming {
        /// How long an entry must have been idle to be taken over.
        min_idle: Duration,
    },
    /// Owed entries and entries pending for at least `min_idle`, never new
    /// ones (Redis `XAUTOCLAIM`).
    Reclaim {
        /// How long an entry must have been idle to be taken over.
        min_idle: Duration,
    },
    /// The reading consumer's own pending entries with ids after `after`
    /// that have been idle for at least `min_idle`, oldest first (Redis
    /// `XREADGROUP ... <id>`, or `XPENDING ... IDLE` and `XCLAIM` with a
    /// `min_idle`): what a restarted consumer with a stable name held
    /// before it stopped. Pass [`EntryId::ZERO`] to start, then the last
    /// id received to page on. Each one's delivery count goes up. Owed
    /// entries are not included: they belong to nobody.
    ///
    /// `min_idle` passes over entries whose claim was refreshed (or which
    /// were delivered) more recently: entries that another live process
    /// sharing the consumer name still works on. [`Duration::ZERO`] takes
    /// them all.
    OwnPending {
        /// Only entries with ids greater than this.
        after: EntryId,
        /// Only entries idle for at least this long.
        min_idle: Duration,
    },
}

impl ReadMode {
    /// The own pending entries after `after`, however recently delivered
    /// (`OwnPending` with no `min_idle`).
    #[must_use]
    pub const fn own_pending(after: EntryId) -> Self {
        ReadMode::OwnPending {
            after,
            min_idle: Duration::ZERO,
        }
    }
}

/// A read from a consumer group.
#[derive(Clone, Copy, Debug)]
pub struct ReadRequest<'a> {
    /// The stream.
    pub stream: &'a str,
    /// The group; it must exist ([`crate::BrokerError::NoGroup`] otherwise).
    pub group: &'a str,
    /// The reading consumer; created on its first read.
    pub consumer: &'a str,
    /// Which entries to hand out.
    pub mode: ReadMode,
    /// At most this many deliveries (at least 1).
    pub count: usize,
    /// If nothing is available, wait up to this long for something to
    /// arrive (a publish, an entry becoming owed or idle enough) and return
    /// an empty batch if nothing does. `None` returns at once.
    pub block: Option<Duration>,
    /// The attempt bound: an entry that has already been delivered this many
    /// times is dead-lettered instead of being handed out again, and listed
    /// in [`ReadBatch::dead_lettered`]. `None`: unbounded.
    pub max_deliveries: Option<u32>,
    /// Entries the reading consumer still holds (handlers running them,
    /// decisions about them on their way). A read that takes idle entries
    /// (claiming, reclaim, or the own pending list with an idle bound)
    /// first refreshes the claims on those of them pending under the
    /// reader, as [`Broker::extend_claim`] does, in the same step: so it
    /// never takes back, and counts a delivery for, an entry its reader
    /// still works on, even when the reader's claim refreshes fell behind.
    /// Other reads pass it over. Usually empty: the runtime fills it only
    /// while its refreshes are failing or late (`docs/semantics.md`,
    /// Claims).
    pub held: &'a [EntryId],
}

impl<'a> ReadRequest<'a> {
    /// A non-blocking read of up to `count` entries, with no attempt bound.
    pub fn new(
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        mode: ReadMode,
        count: usize,
    ) -> Self {
        ReadRequest {
            stream,
            group,
            consumer,
            mode,
            count,
            block: None,
            max_deliveries: None,
            held: &[],
        }
    }

    /// Checks the request before a broker does anything with it: a count of
    /// at least 1 and names the rules allow (the consumer is created by
    /// its first read). Every broker calls this first.
    ///
    /// ```
    /// use ruststream_core::{ReadMode, ReadRequest};
    ///
    /// let empty = ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 0);
    /// assert!(empty.validate().unwrap_err().to_string().contains("asked for 0 entries"));
    /// ```
    pub fn validate(&self) -> crate::BrokerResult<()> {
        if self.count == 0 {
            return Err(crate::BrokerError::InvalidArgument(format!(
                "read from group {:?} on stream {:?} asked for 0 entries; count must be at least 1",
                self.group, self.stream
            )));
        }
        crate::check_stream_group(self.stream, self.group)?;
        crate::check_name(crate::NameKind::Consumer, self.consumer)
    }

    /// The same read, blocking up to `block`.
    pub fn block(mut self, block: Duration) -> Self {
        self.block = Some(block);
        self
    }

    /// The same read, with an attempt bound.
    pub fn max_deliveries(mut self, max: u32) -> Self {
        self.max_deliveries = Some(max);
        self
    }

    /// The same read, naming the entries the reader still holds (see
    /// [`ReadRequest::held`]).
    pub fn holding(mut self, held: &'a [EntryId]) -> Self {
        self.held = held;
        self
    }

    /// Whether this read takes entries that sat idle long enough, wherever
    /// they are pending (claiming and reclaim reads) or under the reader
    /// (an own-pending read with an idle bound): the reads
    /// [`ReadRequest::held`] is for.
    #[must_use]
    pub fn takes_idle(&self) -> bool {
        match self.mode {
            ReadMode::Claiming { .. } | ReadMode::Reclaim { .. } => true,
            ReadMode::OwnPending { min_idle, .. } => !min_idle.is_zero(),
            ReadMode::New => false,
        }
    }
}

/// What a read returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadBatch {
    /// Deliveries, owed and claimed entries first, then new ones in id order.
    pub deliveries: Vec<Delivery>,
    /// Entries this read dead-lettered because they had reached the
    /// request's `max_deliveries`.
    pub dead_lettered: Vec<EntryId>,
}

impl ReadBatch {
    /// Whether nothing was delivered.
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }
}

/// How a pending entry is handed back for another attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Append a copy of the entry to the stream and acknowledge the
    /// original, atomically. The copy goes to this group only (other groups
    /// pass over it), carries the original's delivery count, and is
    /// delivered behind the entries appended meanwhile. What the runtime
    /// does for `retry()` on a `new` subscription.
    Copy,
    /// Keep the entry pending, held by nobody, and make it owed again once
    /// this much time has passed; not before. `Duration::ZERO` is an
    /// immediate nack. Brokers document whether they re-time the entry in
    /// place or park it in a delayed set.
    After(Duration),
}

/// How much of a stream to trim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    /// Keep at most this many of the newest entries.
    MaxLen(u64),
    /// Remove entries with ids below this one.
    MinId(EntryId),
}

/// A stream broker, as the runtime sees it.
///
/// Implementations: the memory broker, the file-log broker and the Redis
/// broker. All of them pass the conformance suite in `ruststream-testkit`,
/// which is the executable form of the rules documented here and in
/// `docs/semantics.md`. Every call is batch-oriented, safe to call concurrently, and
/// idempotent where the description says so.
///
/// Times (idle, delays, block) follow the broker's clock, which for local
/// brokers is [`crate::Clock`] (tokio's clock, paused in tests).
pub trait Broker: Send + Sync + 'static {
    /// A short name for messages and metrics: `"memory"`, `"filelog"`,
    /// `"redis"`.
    fn name(&self) -> &'static str;

    /// Why the broker has stopped taking writes, if it has: a durable broker
    /// that could not make a write durable (an fsync error) stops for good
    /// (fail-stop) and says so here, so an app can report it in its health.
    /// `None` while the broker works (the default).
    fn failure(&self) -> Option<String> {
        None
    }

    /// Checks that the broker can serve reads in `mode`, before an app
    /// reads anything. An error is [`crate::BrokerError::Unsupported`]
    /// explaining why and what to do instead (for Redis `Claiming`: the
    /// server's version and the 8.4 it needs).
    fn check_mode(&self, mode: ReadMode) -> BrokerFuture<'_, ()>;

    /// Appends one message to `stream` (creating the stream if needed) and
    /// returns its id. Returns only once the broker's durability policy is
    /// met: for a durable broker the entry survives a crash after this
    /// returns.
    fn publish<'a>(&'a self, stream: &'a str, message: Message) -> BrokerFuture<'a, EntryId> {
        Box::pin(async move {
            let ids = self.publish_batch(stream, vec![message]).await?;
            ids.into_iter().next().ok_or_else(|| {
                crate::BrokerError::InvalidArgument(format!(
                    "publish to stream {stream:?} returned no id"
                ))
            })
        })
    }

    /// Appends messages to `stream` in order, as one batch (one round trip,
    /// one fsync), and returns their ids, strictly increasing.
    fn publish_batch<'a>(
        &'a self,
        stream: &'a str,
        messages: Vec<Message>,
    ) -> BrokerFuture<'a, Vec<EntryId>>;

    /// Creates `group` on `stream` at `start` (creating the stream if
    /// needed) and returns `true`; if the group exists, leaves it exactly as
    /// it is (its cursor does not move) and returns `false`.
    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool>;

    /// Moves an existing group's cursor to `start`. Pending entries and dead
    /// letters are untouched. A forward move passes over the entries behind
    /// the new cursor but not the group's retry copies among them: each is
    /// made owed, with the count it carries (`docs/semantics.md`, "Where
    /// the rules leave a choice").
    fn set_group_position<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()>;

    /// Reads from a group: see [`ReadMode`] for which entries and in which
    /// order. Every delivered entry is pending (owner, delivery count, last
    /// delivery time) until acknowledged, retried or dead-lettered, and is
    /// not handed out again while its claim stands. Each new entry goes to
    /// exactly one consumer of the group.
    ///
    /// Blocking reads wake promptly when something becomes available and
    /// return an empty batch (not an error) when the block time passes.
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch>;

    /// [`Broker::read`] answered on the spot, for a broker that can answer
    /// without waiting (the local brokers): the read `request` asks for,
    /// but never blocking (its `block` is passed over), written into
    /// `batch`, whose buffers are cleared and reused, so that reading again
    /// and again with one batch allocates nothing. `None`, the default: the
    /// broker cannot, and the caller uses [`Broker::read`].
    ///
    /// The runtime reads through this first and, when it comes back empty
    /// and the subscription would block, waits with [`Broker::read`]. A
    /// wrapper that changes reads leaves this at its default (or changes it
    /// the same way); passing it on unchanged is only for wrappers that
    /// pass reads on unchanged.
    fn read_now(
        &self,
        request: &ReadRequest<'_>,
        batch: &mut ReadBatch,
    ) -> Option<BrokerResult<()>> {
        let _ = (request, batch);
        None
    }

    /// Acknowledges entries: they leave the pending list. Idempotent: ids
    /// that are not pending (already acknowledged, unknown) are ignored.
    /// Returns how many entries left the pending list.
    fn ack<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64>;

    /// [`Broker::ack`] answered on the spot, for a broker that can answer
    /// without waiting (the local brokers), with no future to allocate.
    /// `None`, the default: the broker cannot, and the caller uses
    /// [`Broker::ack`]. As with [`Broker::read_now`], only a wrapper that
    /// passes acks on unchanged passes this on.
    fn ack_now(&self, stream: &str, group: &str, ids: &[EntryId]) -> Option<BrokerResult<u64>> {
        let _ = (stream, group, ids);
        None
    }

    /// Hands pending entries back for another attempt (see [`Retry`]). Ids
    /// that are not pending are ignored. Returns how many were retried.
    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64>;

    /// Records pending entries as dead letters with `reason` and their
    /// delivery counts, and removes them from the pending list. The entries
    /// themselves are kept for as long as the dead letters exist. Ids that
    /// are not pending are ignored. Returns how many were dead-lettered.
    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64>;

    /// Refreshes `consumer`'s claim on pending entries it holds, for a
    /// handler that is still working on them: each id pending under
    /// `consumer` gets its last delivery time reset to now, so that it is
    /// not idle (and so not claimable by another consumer) until `min_idle`
    /// after this call (`docs/semantics.md`, rules 3 and 4). Its delivery
    /// count is left alone: nothing was delivered. Ids not pending, pending
    /// under another consumer, or owed (held by nobody) are ignored, and a
    /// consumer the group does not know holds nothing. Returns how many
    /// claims were refreshed.
    ///
    /// No default: a wrapper must decide whether to pass it on.
    fn extend_claim<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64>;

    /// Counts deliveries made without a read: `consumer` runs again
    /// pending entries it holds (a `by_key` lane runs a held entry again
    /// after a retry's delay, `docs/semantics.md`, Lanes). Each `(id,
    /// times)` pending under `consumer` gets its delivery count (deliveries
    /// so far, this one included) raised to `times`, never lowered, and its
    /// last delivery time set to now, as a read's delivery would. So the
    /// count survives a hand-back or a crash, and `max_deliveries` holds
    /// across them. Ids not pending under `consumer` (settled, owed, held by
    /// another consumer, gone from the stream) are ignored, and a call made
    /// again after a lost reply changes nothing more. Returns how many were
    /// counted.
    ///
    /// No default: a wrapper must decide whether to pass it on.
    fn count_deliveries<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        counts: &'a [(EntryId, u32)],
    ) -> BrokerFuture<'a, u64>;

    /// The names of every stream the broker holds, sorted (the keys of
    /// Redis streams, but not ruststream's own side keys). For operators'
    /// tools: it may scan the whole server.
    ///
    /// The default answers [`crate::BrokerError::Unsupported`].
    fn streams(&self) -> BrokerFuture<'_, Vec<String>> {
        unsupported(self.name(), "listing streams is not supported")
    }

    /// Deletes `consumer` from the group if, at that moment, it holds no
    /// pending entry and has been idle (no read or claim of its own) for at
    /// least `min_idle` (Redis `XGROUP DELCONSUMER`, checked and done in one
    /// script). Returns whether it was deleted; an unknown consumer is not.
    /// Deleting a consumer loses nothing: it holds nothing, and a later
    /// read under its name joins the group again. Used to prune the names
    /// of replaced instances (`docs/guarantees.md`, "Shared consumer
    /// names").
    ///
    /// The default answers [`crate::BrokerError::Unsupported`]: pruning is
    /// optional, and a wrapper that does not pass this on only keeps names.
    fn delete_consumer<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        min_idle: Duration,
    ) -> BrokerFuture<'a, bool> {
        let _ = (stream, group, consumer, min_idle);
        unsupported(self.name(), "deleting consumers is not supported")
    }

    /// Makes dead letters owed again, with their delivery counts reset to
    /// zero. The group's cursor does not move. Returns how many were
    /// redriven; unknown ids are ignored.
    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64>;

    /// Drops dead letters for good. Returns how many were dropped.
    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64>;

    /// A group's summary: lag, pending, dead letters, consumers, cursor.
    fn group_info<'a>(&'a self, stream: &'a str, group: &'a str) -> BrokerFuture<'a, GroupInfo>;

    /// A group's consumers with their pending counts and idle times.
    fn consumers<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
    ) -> BrokerFuture<'a, Vec<ConsumerInfo>>;

    /// Up to `count` entries of a group's pending list with ids at or after
    /// `from`, in id order; only `consumer`'s when given.
    fn pending<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
        consumer: Option<&'a str>,
    ) -> BrokerFuture<'a, Vec<PendingEntry>>;

    /// Up to `count` of a group's dead letters with ids at or after `from`,
    /// in id order.
    fn dead_letters<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<DeadLetter>>;

    /// Up to `count` entries with ids in `from..=to`, in id order (replay).
    /// A missing stream reads as empty.
    fn range<'a>(
        &'a self,
        stream: &'a str,
        from: EntryId,
        to: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<Entry>>;

    /// A stream's summary, or `None` if there is no such stream.
    fn stream_info<'a>(&'a self, stream: &'a str) -> BrokerFuture<'a, Option<StreamInfo>>;

    /// Trims old entries and returns how many left the stream. Local
    /// brokers never delete an entry that a group still has pending or
    /// dead-lettered: such entries stay readable until settled.
    fn trim<'a>(&'a self, stream: &'a str, trim: Trim) -> BrokerFuture<'a, u64>;
}

/// The answer of a default method for a call the broker does not serve:
/// [`crate::BrokerError::Unsupported`] naming `broker`, with `detail`.
fn unsupported<'a, T: Send + 'a>(broker: &'static str, detail: &str) -> BrokerFuture<'a, T> {
    let error = crate::BrokerError::Unsupported {
        broker,
        detail: detail.to_owned(),
    };
    Box::pin(std::future::ready(Err(error)))
}
