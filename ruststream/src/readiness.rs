//! Readiness: whether an app's work is flowing, not just whether its
//! process is up. `docs/operations.md` says what each condition means and
//! how to alert on it.
//!
//! An app is ready when it is healthy ([`crate::Health`]) and every
//! subscription has read successfully, and not ready while any of these
//! holds (each with its reason):
//!
//! - reads of a subscription have failed for longer than
//!   [`ReadinessOptions::read_failure_window`];
//! - a handler has run longer than [`ReadinessOptions::handler_deadline`];
//! - a poison loop: an entry has been delivered more than
//!   [`ReadinessOptions::poison_deliveries`] times and was last delivered
//!   within [`ReadinessOptions::poison_window`] without being acked or
//!   dead-lettered since.
//!
//! The subscription's task records what the checks need in its counters
//! ([`Signals`]): a few atomics written as reads return and handlers
//! start, and a small map touched only for entries past the poison bound.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream_core::EntryId;

/// The bounds readiness is judged by; see [`crate::RustStream::readiness`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadinessOptions {
    /// Not ready once a subscription's reads have failed for this long
    /// (default 30 s). Shorter failures are retried with backoff and do not
    /// count.
    pub read_failure_window: Duration,
    /// Not ready while a handler has run for longer than this (default 5
    /// minutes).
    pub handler_deadline: Duration,
    /// An entry delivered more than this many times without being settled
    /// is a poison loop (default 10).
    pub poison_deliveries: u32,
    /// How long a poison loop keeps the app not ready after the entry's
    /// last delivery (default 5 minutes).
    pub poison_window: Duration,
}

impl Default for ReadinessOptions {
    fn default() -> Self {
        ReadinessOptions {
            read_failure_window: Duration::from_secs(30),
            handler_deadline: Duration::from_secs(300),
            poison_deliveries: 10,
            poison_window: Duration::from_secs(300),
        }
    }
}

/// Whether a running app is ready, as [`crate::Running::readiness`] reports
/// it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Why the app is not ready; empty when it is.
    pub reasons: Vec<String>,
}

impl Readiness {
    /// Whether nothing keeps the app from being ready.
    pub fn is_ready(&self) -> bool {
        self.reasons.is_empty()
    }
}

impl fmt::Display for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            return f.write_str("ready");
        }
        f.write_str(&self.reasons.join("; "))
    }
}

/// No handler is running.
const NONE_RUNNING: u64 = u64::MAX;

/// How many entries the poison map keeps at most between readiness
/// checks (see [`Signals::poison_seen`]).
const POISON_KEPT: usize = 10_000;

/// What one subscription's task records for the readiness checks. Times
/// are nanoseconds since the subscription's epoch (tokio's clock, so a
/// paused test clock drives them).
#[derive(Debug)]
pub(crate) struct Signals {
    epoch: tokio::time::Instant,
    /// Whether a read has succeeded yet.
    read_once: AtomicBool,
    /// Since when reads fail (0: they do not). Stored plus one, so that a
    /// failure at time 0 is not "none".
    failing_since: AtomicU64,
    /// The last read error.
    last_error: Mutex<Option<String>>,
    /// When the longest-running handler started, or `NONE_RUNNING`.
    oldest_running: AtomicU64,
    /// Entries past the poison bound: id to the time of their last
    /// delivery. An id leaves when its entry is acked, dead-lettered or
    /// retried by copy.
    poison: Mutex<HashMap<EntryId, u64>>,
    poison_len: AtomicUsize,
}

impl Signals {
    pub(crate) fn new() -> Self {
        Signals {
            epoch: tokio::time::Instant::now(),
            read_once: AtomicBool::new(false),
            failing_since: AtomicU64::new(0),
            last_error: Mutex::new(None),
            oldest_running: AtomicU64::new(NONE_RUNNING),
            poison: Mutex::new(HashMap::new()),
            poison_len: AtomicUsize::new(0),
        }
    }

    /// The subscription's epoch: the driver measures handlers from it.
    pub(crate) fn epoch(&self) -> tokio::time::Instant {
        self.epoch
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A read succeeded.
    pub(crate) fn read_ok(&self) {
        self.read_once.store(true, Ordering::Relaxed);
        self.failing_since.store(0, Ordering::Relaxed);
    }

    /// A read failed with `error`.
    pub(crate) fn read_failed(&self, error: &dyn fmt::Display) {
        let now = self.now().saturating_add(1);
        let _ = self
            .failing_since
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_string());
    }

    /// The longest-running handler started at `since` (nanoseconds since
    /// the epoch), or none runs.
    #[inline]
    pub(crate) fn set_oldest_running(&self, since: Option<u64>) {
        self.oldest_running
            .store(since.unwrap_or(NONE_RUNNING), Ordering::Relaxed);
    }

    /// An entry past the poison bound was delivered. The map is pruned by
    /// readiness checks (to the poison window); without any (no probe),
    /// entries settled elsewhere would stay, so past [`POISON_KEPT`] the
    /// older half is forgotten (the report only needs the loop's size and
    /// its first entry).
    pub(crate) fn poison_seen(&self, id: EntryId) {
        let now = self.now();
        let mut poison = self
            .poison
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        poison.insert(id, now);
        if poison.len() > POISON_KEPT {
            // The newer half by delivery time, ties (a paused clock, a
            // coarse one) cut by id: a cut by time alone keeps every tie.
            // The entry just seen stays whatever its id: it loops now.
            let mut records: Vec<(u64, EntryId)> = poison
                .iter()
                .filter(|&(kept, _)| *kept != id)
                .map(|(id, t)| (*t, *id))
                .collect();
            let older = records.len().saturating_sub(POISON_KEPT / 2);
            records.select_nth_unstable(older);
            *poison = records[older..].iter().map(|&(t, id)| (id, t)).collect();
            poison.insert(id, now);
        }
        self.poison_len.store(poison.len(), Ordering::Relaxed);
    }

    /// `ids` were acked, dead-lettered or retried by copy (the copy has a
    /// new id, which enters the map when it is delivered past the bound):
    /// no longer in a loop.
    #[inline]
    pub(crate) fn settled(&self, ids: &[EntryId]) {
        if self.poison_len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut poison = self
            .poison
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in ids {
            poison.remove(id);
        }
        self.poison_len.store(poison.len(), Ordering::Relaxed);
    }

    /// Adds to `out` why this subscription keeps the app from being ready.
    pub(crate) fn check(
        &self,
        subscriber: &str,
        options: &ReadinessOptions,
        out: &mut Vec<String>,
    ) {
        let now = self.now();
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let secs = |n: u64| Duration::from_nanos(n).as_secs_f64();
        let failing = self.failing_since.load(Ordering::Relaxed);
        let failing_for = (failing > 0).then(|| now.saturating_sub(failing - 1));
        if let Some(failing_for) = failing_for.filter(|&f| f > nanos(options.read_failure_window)) {
            let error = self
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
                .unwrap_or_default();
            out.push(format!(
                "subscriber `{subscriber}`: reads have failed for {:.0} s: {error}",
                secs(failing_for)
            ));
        } else if !self.read_once.load(Ordering::Relaxed) {
            // Whatever the failure state: failures within the window do
            // not excuse a subscription that has never read.
            out.push(format!("subscriber `{subscriber}` has not read yet"));
        }
        let oldest = self.oldest_running.load(Ordering::Relaxed);
        if oldest != NONE_RUNNING {
            let running_for = now.saturating_sub(oldest);
            if running_for > nanos(options.handler_deadline) {
                out.push(format!(
                    "subscriber `{subscriber}`: a handler has run for {:.0} s (deadline {:.0} s)",
                    secs(running_for),
                    options.handler_deadline.as_secs_f64()
                ));
            }
        }
        if self.poison_len.load(Ordering::Relaxed) > 0 {
            let window = nanos(options.poison_window);
            let mut poison = self
                .poison
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            poison.retain(|_, last| now.saturating_sub(*last) <= window);
            self.poison_len.store(poison.len(), Ordering::Relaxed);
            let mut ids: Vec<&EntryId> = poison.keys().collect();
            ids.sort_unstable();
            if let Some(first) = ids.first() {
                out.push(format!(
                    "subscriber `{subscriber}`: poison loop: {} entr{} delivered more than {} times without being settled (first: {first})",
                    ids.len(),
                    if ids.len() == 1 { "y" } else { "ies" },
                    options.poison_deliveries
                ));
            }
        }
    }
}

#[cfg(test)]
mod memory_bounds {
    use super::*;

    /// The poison map, whatever a panicking holder left it as.
    fn poison(signals: &Signals) -> std::sync::MutexGuard<'_, HashMap<EntryId, u64>> {
        signals
            .poison
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `n` entries delivered past the poison bound, at the same time.
    fn seen_many(signals: &Signals, n: u64) {
        for i in 0..n {
            signals.poison_seen(EntryId::new(1_000 + i, 0));
        }
    }

    /// Entries delivered past the poison bound here, then settled by
    /// another instance (a delayed retry taken by another consumer, a
    /// claiming retry left in place and claimed elsewhere, a dead letter
    /// made by another consumer's read): this subscription never sees
    /// them settled. In a service whose readiness is never asked for (no
    /// admin server, no probe), nothing else prunes the map.
    #[tokio::test(start_paused = true)]
    async fn poison_records_of_entries_settled_elsewhere_are_forgotten() {
        let signals = Signals::new();
        for i in 0..100_000u64 {
            signals.poison_seen(EntryId::new(1_000 + i, 0));
            if i % 1_000 == 0 {
                tokio::time::advance(Duration::from_secs(60)).await;
            }
        }
        // Long past the poison window (5 minutes by default).
        tokio::time::advance(Duration::from_secs(3_600)).await;
        let kept = poison(&signals).len();
        assert!(kept <= 10_000, "poison records kept: {kept}");
    }

    /// The same on a clock that does not move (a paused test clock, a
    /// coarse one): every record has the same time.
    #[tokio::test(start_paused = true)]
    async fn poison_records_are_forgotten_when_their_times_tie() {
        let signals = Signals::new();
        seen_many(&signals, 30_000);
        let kept = poison(&signals).len();
        assert!(kept <= 10_000, "poison records kept: {kept}");
    }

    /// The entry just delivered past the bound is kept by the cut, though
    /// its id is older than all the others and their times tie: it is the
    /// one looping now.
    #[tokio::test(start_paused = true)]
    async fn the_cut_keeps_the_entry_just_seen() {
        let signals = Signals::new();
        seen_many(&signals, 10_000);
        let looping = EntryId::new(5, 0);
        signals.poison_seen(looping);
        let poison = poison(&signals);
        assert!(
            poison.contains_key(&looping),
            "kept {} records",
            poison.len()
        );
    }
}
