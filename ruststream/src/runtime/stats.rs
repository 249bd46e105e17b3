//! A subscription's counters, and the stats an app reports from them. Each
//! count also goes to the exported metrics (`crate::metrics`), so the two
//! never disagree.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::metrics::{ErrorKind, Outcome, SubscriptionMetrics};
use crate::readiness::Signals;

/// Counters of one subscription.
#[derive(Debug)]
pub(crate) struct Counters {
    /// The same counts, exported.
    pub(super) metrics: SubscriptionMetrics,
    /// What the readiness checks need.
    pub(crate) signals: Signals,
    /// Entries received from the broker.
    pub(super) read: AtomicU64,
    /// Entries whose settle decision has been applied (or given up on).
    pub(super) settled: AtomicU64,
    pub(super) delivered: AtomicU64,
    pub(super) acked: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) panicked: AtomicU64,
    pub(super) handed_back: AtomicU64,
    pub(super) handler_nanos: AtomicU64,
    pub(super) handler_max_nanos: AtomicU64,
    /// Why the subscription stopped before shutdown, if it did.
    failure: std::sync::Mutex<Option<String>>,
    /// Entries held on `by_key` lanes after a retry, waiting for their
    /// delay (part of what is in flight, but waiting on the clock).
    held: AtomicU64,
    /// Whether the last look found entries under this consumer's name
    /// that another live process works on.
    name_shared: AtomicBool,
}

impl Counters {
    /// Counters that also report to `metrics`.
    pub(crate) fn new(metrics: SubscriptionMetrics) -> Self {
        Counters {
            metrics,
            signals: Signals::new(),
            read: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            handed_back: AtomicU64::new(0),
            handler_nanos: AtomicU64::new(0),
            handler_max_nanos: AtomicU64::new(0),
            failure: std::sync::Mutex::new(None),
            held: AtomicU64::new(0),
            name_shared: AtomicBool::new(false),
        }
    }

    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` entries were settled at the broker with `outcome` (or, for
    /// `HandedBack`, handed back unstarted).
    pub(super) fn settled_as(&self, outcome: Outcome, n: u64) {
        match outcome {
            Outcome::Ack => Self::add(&self.acked, n),
            Outcome::DeadLetter => Self::add(&self.dead_lettered, n),
            Outcome::HandedBack => Self::add(&self.handed_back, n),
            // Retries count when decided (`retried`), as the stats always
            // have.
            Outcome::Retry | Outcome::RetryAfter => {}
        }
        self.metrics.settled(outcome, n);
    }

    /// A handler failed this way.
    pub(super) fn handler_failed(&self, kind: ErrorKind) {
        match kind {
            ErrorKind::Error => Self::add(&self.failed, 1),
            ErrorKind::Panic => Self::add(&self.panicked, 1),
            ErrorKind::Decode => {}
        }
        self.metrics.handler_error(kind);
    }

    /// Adds handler calls that took `total` nanoseconds together, the
    /// longest `longest`.
    pub(super) fn add_handler_time(&self, total: u64, longest: u64) {
        Self::add(&self.handler_nanos, total);
        // A load first: the maximum rarely moves, and a plain load is far
        // cheaper than the compare-and-swap loop of fetch_max.
        if longest > self.handler_max_nanos.load(Ordering::Relaxed) {
            self.handler_max_nanos.fetch_max(longest, Ordering::Relaxed);
        }
    }

    /// Sets how many entries wait on the clock: on `by_key` lanes for a
    /// retry's delay, or in a batch still gathering (`batch.rs`).
    pub(super) fn set_held(&self, n: u64) {
        self.held.store(n, Ordering::SeqCst);
    }

    /// Entries waiting on the clock: held on `by_key` lanes for a retry's
    /// delay, or in a batch still gathering.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// Records whether another live process seems to share the consumer
    /// name.
    pub(super) fn set_name_shared(&self, shared: bool) {
        self.name_shared.store(shared, Ordering::Relaxed);
    }

    /// Whether another live process seems to share the consumer name.
    pub(crate) fn name_shared(&self) -> bool {
        self.name_shared.load(Ordering::Relaxed)
    }

    /// Records why the subscription stopped before shutdown.
    pub(super) fn set_failure(&self, detail: String) {
        *self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(detail);
    }

    /// Why the subscription stopped before shutdown, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Counts entries received from the broker.
    pub(super) fn add_read(&self, n: u64) {
        self.read.fetch_add(n, Ordering::SeqCst);
        self.metrics.received(n);
    }

    /// Counts entries whose decisions the broker has confirmed (or that
    /// were given up on at shutdown).
    pub(super) fn add_settled(&self, n: u64) {
        self.settled.fetch_add(n, Ordering::SeqCst);
    }

    /// Entries read and not yet settled.
    pub(crate) fn in_flight(&self) -> u64 {
        // `settled` first: it only grows after `read` has, so a reader on
        // another thread never sees more settled than read.
        let settled = self.settled.load(Ordering::SeqCst);
        self.read.load(Ordering::SeqCst).saturating_sub(settled)
    }

    /// Entries read so far (a progress counter for quiescence checks).
    pub(crate) fn read_so_far(&self) -> u64 {
        self.read.load(Ordering::SeqCst)
    }

    pub(crate) fn snapshot(&self, subscriber: &'static str, consumer: &str) -> SubscriptionStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SubscriptionStats {
            subscriber,
            consumer: consumer.to_owned(),
            delivered: get(&self.delivered),
            acked: get(&self.acked),
            retried: get(&self.retried),
            dead_lettered: get(&self.dead_lettered),
            failed: get(&self.failed),
            panicked: get(&self.panicked),
            handed_back: get(&self.handed_back),
            handler_time: Duration::from_nanos(get(&self.handler_nanos)),
            handler_max: Duration::from_nanos(get(&self.handler_max_nanos)),
            consumer_name_shared: self.name_shared(),
            lag: None,
            pending: None,
            oldest_pending_ms: None,
        }
    }
}

/// What one subscription has done so far, and its group's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionStats {
    /// The subscriber's name.
    pub subscriber: &'static str,
    /// The consumer it reads as.
    pub consumer: String,
    /// Entries handed to the handler.
    pub delivered: u64,
    /// Entries acked.
    pub acked: u64,
    /// Entries retried (by outcome, error or panic).
    pub retried: u64,
    /// Entries dead-lettered (by outcome, decode failure or attempt bound).
    pub dead_lettered: u64,
    /// Handler calls that returned an error.
    pub failed: u64,
    /// Handler calls that panicked.
    pub panicked: u64,
    /// Entries read but handed back unstarted at shutdown.
    pub handed_back: u64,
    /// Total time spent in the handler: for each call, from the runtime
    /// starting it to the runtime seeing it finish. The runtime reads the
    /// clock once each time it polls its handlers, not per call, so the
    /// figure is exact (to within one such poll) for handlers that wait on
    /// I/O or a timer, and a call that finishes without ever waiting counts
    /// as taking no time.
    pub handler_time: Duration,
    /// Longest single handler call, measured the same way.
    pub handler_max: Duration,
    /// Whether entries pending under this consumer's name were last seen
    /// worked on by another live process: two processes share the name
    /// (see `docs/guarantees.md`, "Shared consumer names").
    pub consumer_name_shared: bool,
    /// The group's lag (entries not yet delivered), if the broker answered.
    pub lag: Option<u64>,
    /// The group's pending count, if the broker answered.
    pub pending: Option<u64>,
    /// Idle time of the oldest pending entry, in milliseconds.
    pub oldest_pending_ms: Option<u64>,
}
