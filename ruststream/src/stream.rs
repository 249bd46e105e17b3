//! Stream descriptors: what a subscriber reads and how.

use std::time::Duration;

use ruststream_core::{BackoffPolicy, ReadMode, StreamStart};

/// Describes which stream a subscriber reads, through which consumer group,
/// and which entries it takes. Backend-neutral: the same descriptor works on
/// the memory, file-log and Redis brokers.
///
/// ```
/// use std::time::Duration;
/// use ruststream::{RedisStream, StreamStart};
///
/// let ledger = RedisStream::claiming("payments", Duration::from_secs(30)).group("ledger");
/// let fraud = RedisStream::new("payments").group("fraud").start_id(StreamStart::Beginning);
/// assert_eq!(ledger.group_name(), Some("ledger"));
/// assert_eq!(fraud.stream_name(), "payments");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    stream: String,
    kind: Kind,
    group: Option<String>,
    consumer: Option<String>,
    start_id: StreamStart,
    start_at: Option<StreamStart>,
}

/// The seed's name for [`Stream`]; it works unchanged on every backend.
pub type RedisStream = Stream;

/// Which entries a subscription takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// New entries only.
    New,
    /// Entries idle for `min_idle` first, then new ones, in one read.
    Claiming {
        /// How long an entry must sit idle before it is taken over.
        min_idle: Duration,
    },
    /// Entries idle for `min_idle` only.
    Reclaim {
        /// How long an entry must sit idle before it is taken over.
        min_idle: Duration,
    },
}

impl Stream {
    fn with_kind(stream: impl Into<String>, kind: Kind) -> Self {
        Stream {
            stream: stream.into(),
            kind,
            group: None,
            consumer: None,
            start_id: StreamStart::New,
            start_at: None,
        }
    }

    /// New entries of `stream` only (Redis `XREADGROUP ... >`). A retry
    /// appends a copy of the entry.
    pub fn new(stream: impl Into<String>) -> Self {
        Stream::with_kind(stream, Kind::New)
    }

    /// Entries pending for at least `min_idle` (a stopped worker's, or
    /// retried ones), then new entries, in one read. A retry leaves the
    /// entry pending under its own id until it has been idle `min_idle`.
    /// On Redis this needs 8.4 or later.
    pub fn claiming(stream: impl Into<String>, min_idle: Duration) -> Self {
        Stream::with_kind(stream, Kind::Claiming { min_idle })
    }

    /// Entries pending for at least `min_idle` only (Redis `XAUTOCLAIM`):
    /// recovery beside a [`Stream::new`] subscription on the same group.
    pub fn reclaim(stream: impl Into<String>, min_idle: Duration) -> Self {
        Stream::with_kind(stream, Kind::Reclaim { min_idle })
    }

    /// The consumer group (required).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// A stable consumer name; by default consumers are named
    /// `ruststream-0`, `ruststream-1`, ... in each process.
    pub fn consumer(mut self, consumer: impl Into<String>) -> Self {
        self.consumer = Some(consumer.into());
        self
    }

    /// Where the group starts if it does not exist yet (default
    /// [`StreamStart::New`]). An existing group keeps its cursor.
    pub fn start_id(mut self, start: StreamStart) -> Self {
        self.start_id = start;
        self
    }

    /// Moves the group's cursor to `start` when the app starts, whether the
    /// group exists or not.
    pub fn start_at(mut self, start: StreamStart) -> Self {
        self.start_at = Some(start);
        self
    }

    /// The stream's name.
    pub fn stream_name(&self) -> &str {
        &self.stream
    }

    /// The group's name, if set.
    pub fn group_name(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// The stable consumer name, if set.
    pub fn consumer_name(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// Which entries the subscription takes.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where a new group starts.
    pub fn start(&self) -> StreamStart {
        self.start_id
    }

    /// Where the cursor is moved at start-up, if anywhere.
    pub fn moved_to(&self) -> Option<StreamStart> {
        self.start_at
    }

    /// Whether a retry leaves the entry pending (claiming, reclaim) rather
    /// than appending a copy (new).
    pub fn retries_in_place(&self) -> bool {
        !matches!(self.kind, Kind::New)
    }

    /// The broker read mode for this subscription.
    pub fn read_mode(&self) -> ReadMode {
        match self.kind {
            Kind::New => ReadMode::New,
            Kind::Claiming { min_idle } => ReadMode::Claiming { min_idle },
            Kind::Reclaim { min_idle } => ReadMode::Reclaim { min_idle },
        }
    }
}

/// A subscriber's whole configuration: its descriptor and the options of
/// `#[subscriber(...)]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// What it reads.
    pub stream: Stream,
    /// Lanes: at most this many handlers run at once.
    pub workers: usize,
    /// Whether entries with the same partition key share a lane.
    pub by_key: bool,
    /// Dead-letter an entry delivered this many times; `None`: unbounded.
    pub max_deliveries: Option<u32>,
    /// Entries read and not yet settled at most: a hard cap on the
    /// adaptive read-ahead (default [`DEFAULT_READ_AHEAD`]).
    pub prefetch: Option<usize>,
    /// How long a failed delivery waits before its retry; `None`: it is
    /// retried at once (see `docs/semantics.md`, Outcomes).
    pub backoff: Option<BackoffPolicy>,
    /// `batch(max = n, wait = d)`: the handler takes entries in batches
    /// (see `docs/batches.md`); `None`: one entry at a time.
    pub batch: Option<Batch>,
}

/// How a batch subscriber gathers its batches: `batch(max = n, wait = d)`.
/// A batch runs once it holds `max` entries, or `wait` after its first
/// entry arrived, whichever comes first (see `docs/batches.md`).
///
/// ```
/// use std::time::Duration;
/// use ruststream::{Batch, RedisStream, Subscription};
///
/// let sub = Subscription::new(RedisStream::new("payments").group("ledger"))
///     .batch(Batch::new(500, Duration::from_millis(10)));
/// assert_eq!(sub.lanes(), 500);
/// assert_eq!(sub.read_ahead(), 1000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Entries in one batch at most (at least 1).
    pub max: usize,
    /// How long a batch waits for more entries after its first one.
    pub wait: Duration,
}

impl Batch {
    /// At most `max` entries, gathered for at most `wait`.
    pub fn new(max: usize, wait: Duration) -> Self {
        Batch { max, wait }
    }
}

impl Subscription {
    /// One worker, no attempt bound.
    pub fn new(stream: Stream) -> Self {
        Subscription {
            stream,
            workers: 1,
            by_key: false,
            max_deliveries: None,
            prefetch: None,
            backoff: None,
            batch: None,
        }
    }

    /// `workers(n)`.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// `workers(n, by_key)`.
    pub fn by_key(mut self) -> Self {
        self.by_key = true;
        self
    }

    /// `max_deliveries(n)`.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = Some(n);
        self
    }

    /// `prefetch(n)`: read at most `n` entries ahead of the handlers.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = Some(n);
        self
    }

    /// `backoff(..)`: `retry()`, an `Err`, a panic and a reply that could
    /// not be published become a retry after `policy.delay(id,
    /// delivery_count)`; an explicit `retry_after(d)` still waits `d`.
    pub fn backoff(mut self, policy: BackoffPolicy) -> Self {
        self.backoff = Some(policy);
        self
    }

    /// `batch(max = n, wait = d)`: the handler takes up to `n` entries at
    /// once, gathered for at most `d`.
    pub fn batch(mut self, batch: Batch) -> Self {
        self.batch = Some(batch);
        self
    }

    /// How many entries can be in the handlers' hands at once: `workers`,
    /// or `workers` whole batches for a batch subscriber.
    pub fn lanes(&self) -> usize {
        let per_worker = self.batch.map_or(1, |batch| batch.max.max(1));
        self.workers.max(1).saturating_mul(per_worker)
    }

    /// The read-ahead bound in force, in entries read and not yet settled:
    /// `prefetch(n)` if given, else [`DEFAULT_READ_AHEAD`] (for a batch
    /// subscriber, two batches per worker if that is more), and never under
    /// `workers`. The runtime reads less while the backlog is short (see
    /// [`Subscription::first_read`]); a crash redelivers at most this many.
    pub fn read_ahead(&self) -> usize {
        let default = match self.batch {
            None => DEFAULT_READ_AHEAD.max(self.workers.saturating_mul(4)),
            Some(_) => DEFAULT_READ_AHEAD.max(self.lanes().saturating_mul(2)),
        };
        self.prefetch.unwrap_or(default).max(self.workers).max(1)
    }

    /// How many entries the first read asks for: 4 per worker (a batch
    /// subscriber: a batch per worker), within the bound. Reads that come
    /// back full double the next one, up to the bound; short ones halve
    /// it, down to this.
    pub fn first_read(&self) -> usize {
        let first = match self.batch {
            None => self.workers.saturating_mul(4),
            Some(_) => self.lanes(),
        };
        first.clamp(1, self.read_ahead())
    }
}

/// The read-ahead bound of a subscription without `prefetch(n)`: entries
/// read and not yet settled at most (see `docs/semantics.md`, Reading).
pub const DEFAULT_READ_AHEAD: usize = 512;

/// The policy of a `backoff(..)` option, which `#[subscriber]` has checked
/// at compile time against the same rules: an error here is a bug in the
/// macro.
#[doc(hidden)]
pub fn checked_backoff(policy: Result<BackoffPolicy, String>, jitter: bool) -> BackoffPolicy {
    match policy {
        Ok(policy) if jitter => policy.with_jitter(),
        Ok(policy) => policy,
        Err(error) => panic!("#[subscriber] passed a backoff it should have refused: {error}"),
    }
}
