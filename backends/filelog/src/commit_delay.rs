//! The adaptive commit delay of group commit: how many waiters the next
//! sync should expect, and how long the syncer (the sync thread of
//! [`crate::sync`]) may wait for them.
//!
//! Without a delay, group commit splits concurrent publishers into two
//! groups that take turns: the waiters that arrived while a sync ran start
//! the next one the moment it ends, before the publishers that sync has
//! just released are back, so each sync covers about half of them. With
//! it, the syncer first waits until as many waiters have joined
//! as were around the last sync (those it covered and those that arrived
//! while it ran), and at most what a sync takes. A lone publisher is never
//! delayed: it expects no one else.
//!
//! Waiting pays only when the waiters come back faster than a sync runs.
//! With `n` waiters that come back `δ` apart and syncs of `T`, syncing all
//! of them together gives `n / (T + (n - 1)·δ)`, two groups taking turns
//! `n / 2T`: the wait is worth it while `(n - 1)·δ < T`. So the syncer
//! measures `δ` between the waiters that join the same sync, and does
//! not wait when the missing ones would take longer than a
//! sync to come back.

use std::time::{Duration, Instant};

/// Until the interval between waiters is known, the longest the syncer
/// waits, as a share of a sync (`1 / n`).
const FIRST_DELAY_SHARE: u32 = 2;

/// Slack on the predicted wait: the syncer waits up to this many times
/// what the missing waiters should take (and never longer than a sync).
const SLACK: u32 = 2;

/// The longest delay whatever the syncs take (a slow disk does not make
/// an acknowledgement wait longer than this for company).
const MAX_DELAY: Duration = Duration::from_millis(2);

/// Weight of the newest sample in the running averages (a sync's
/// duration, the interval between waiters), as `1 / n`.
const AVERAGE_OVER: u32 = 8;

/// What group commit knows of its waiters and syncs (kept under the
/// syncer's lock).
#[derive(Debug, Default)]
pub(crate) struct CommitDelay {
    /// Target of the last sync started: a waiter for a later ticket needs
    /// the next one.
    started_target: u64,
    /// Waiters that need the next sync (joined since the last one started).
    joined: usize,
    /// Waiters the running sync covers.
    group: usize,
    /// Waiters around the last sync: the ones it covered and the ones that
    /// joined while it ran. The next sync expects this many.
    expected: usize,
    /// Average duration of a sync.
    sync_time: Duration,
    /// Average interval between two waiters joining the same sync (zero
    /// until measured).
    join_interval: Duration,
    /// When the last waiter joined, if it joined the next sync.
    last_join: Option<Instant>,
}

impl CommitDelay {
    /// A waiter for `ticket` has started to wait, `now`.
    pub(crate) fn join(&mut self, ticket: u64, now: Instant) {
        if ticket > self.started_target {
            self.joined += 1;
            if let Some(last) = self.last_join {
                let interval = now.saturating_duration_since(last);
                self.join_interval = average(self.join_interval, interval);
            }
            self.last_join = Some(now);
        }
    }

    /// A waiter for `ticket` stopped waiting before its sync started (its
    /// future was dropped).
    pub(crate) fn leave(&mut self, ticket: u64) {
        if ticket > self.started_target {
            self.joined = self.joined.saturating_sub(1);
        }
    }

    /// Whether enough waiters have joined for the next sync to start.
    pub(crate) fn gathered(&self) -> bool {
        self.joined >= self.expected
    }

    /// How many have joined the next sync so far.
    pub(crate) fn joined(&self) -> usize {
        self.joined
    }

    /// How long the syncer, before the next sync, may wait for the waiters it
    /// expects, if it should wait at all: not when they would take longer
    /// than a sync to come back.
    pub(crate) fn delay(&self) -> Option<Duration> {
        if self.gathered() {
            return None;
        }
        let budget = if self.join_interval.is_zero() {
            self.sync_time / FIRST_DELAY_SHARE
        } else {
            let missing = u32::try_from(self.expected - self.joined).unwrap_or(u32::MAX);
            let predicted = self.join_interval.saturating_mul(missing);
            if predicted > self.sync_time {
                return None;
            }
            predicted.saturating_mul(SLACK).min(self.sync_time)
        };
        Some(budget.min(MAX_DELAY)).filter(|d| !d.is_zero())
    }

    /// How long the syncer may wait, right after a sync that released
    /// waiters, for the next sync's waiters to come back, before any has
    /// (the sync thread then sleeps until the last one is back, rather than
    /// being woken by the first): not at all when it expects fewer than
    /// two, before the interval between waiters was measured, or when they
    /// would take longer than a sync to come back; at most one sync.
    pub(crate) fn after_sync(&self) -> Option<Duration> {
        if self.expected < 2 || self.gathered() || self.join_interval.is_zero() {
            return None;
        }
        let missing = u32::try_from(self.expected - self.joined).unwrap_or(u32::MAX);
        if self.join_interval.saturating_mul(missing) > self.sync_time {
            return None;
        }
        Some(self.sync_time.min(MAX_DELAY)).filter(|d| !d.is_zero())
    }

    /// A sync covering every write up to `target` starts.
    pub(crate) fn start(&mut self, target: u64) {
        self.started_target = self.started_target.max(target);
        self.group = std::mem::take(&mut self.joined);
        // The interval is measured between waiters of the same sync.
        self.last_join = None;
    }

    /// The sync started last has finished after `took`.
    pub(crate) fn finish(&mut self, took: Duration) {
        self.expected = self.group + self.joined;
        self.sync_time = average(self.sync_time, took);
    }
}

/// `average` moved towards `sample` (the sample itself at first).
fn average(average: Duration, sample: Duration) -> Duration {
    if average.is_zero() {
        sample
    } else {
        (average * (AVERAGE_OVER - 1) + sample) / AVERAGE_OVER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiters that join 10 us apart.
    fn at(ticket: u64) -> Instant {
        start() + Duration::from_micros(10 * ticket)
    }

    fn start() -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *START.get_or_init(Instant::now)
    }

    const SYNC: Duration = Duration::from_micros(400);

    /// Waiters for `tickets` join, 10 us apart.
    fn join_all(delay: &mut CommitDelay, tickets: std::ops::RangeInclusive<u64>) {
        for ticket in tickets {
            delay.join(ticket, at(ticket));
        }
    }

    /// A sync of everything written up to `target`, `joined` waiters
    /// arriving while it runs (tickets after `target`).
    fn sync(delay: &mut CommitDelay, target: u64, joined: u64) {
        delay.start(target);
        join_all(delay, target + 1..=target + joined);
        delay.finish(SYNC);
    }

    #[test]
    fn a_lone_waiter_is_never_delayed() {
        let mut delay = CommitDelay::default();
        for ticket in 1..10 {
            delay.join(ticket, at(ticket));
            assert_eq!(delay.delay(), None, "ticket {ticket}");
            delay.start(ticket);
            delay.finish(SYNC);
        }
    }

    #[test]
    fn the_next_leader_waits_for_the_waiters_the_last_sync_released() {
        let mut delay = CommitDelay::default();
        // Two groups of 8 taking turns: 8 in the sync, 8 joining during it.
        delay.join(1, at(1));
        sync(&mut delay, 1, 8);
        // The 8 that joined lead the next sync: they expect the 1 released
        // as well, and wait for it at most twice the 10 us between two
        // waiters.
        assert_eq!(delay.joined(), 8);
        assert_eq!(delay.delay(), Some(Duration::from_micros(20)));
        delay.join(10, at(10));
        assert!(delay.gathered());
        assert_eq!(delay.delay(), None);
    }

    #[test]
    fn the_expectation_follows_the_waiters_that_come() {
        let mut delay = CommitDelay::default();
        join_all(&mut delay, 1..=16);
        sync(&mut delay, 16, 0);
        // Only 4 come back: the leader waits (the delay runs out), and the
        // sync after expects 4.
        join_all(&mut delay, 17..=20);
        assert!(delay.delay().is_some());
        sync(&mut delay, 20, 0);
        join_all(&mut delay, 21..=24);
        assert_eq!(delay.delay(), None);
    }

    #[test]
    fn a_waiter_that_leaves_is_not_counted() {
        let mut delay = CommitDelay::default();
        sync(&mut delay, 0, 2);
        delay.start(2);
        delay.join(3, at(3));
        delay.leave(3);
        // Covered by a started sync: neither joins nor leaves the next.
        delay.join(1, at(1));
        delay.leave(1);
        assert_eq!(delay.joined(), 0);
    }

    #[test]
    fn the_leader_waits_only_for_waiters_that_come_back_within_a_sync() {
        let mut delay = CommitDelay::default();
        join_all(&mut delay, 1..=16);
        sync(&mut delay, 16, 0);
        delay.join(17, at(17));
        // 15 missing, 10 us apart: 150 us, under a sync of 400 us. The
        // leader waits up to twice that.
        assert_eq!(delay.delay(), Some(Duration::from_micros(300)));
        // Then 40 us apart: the 43 missing would take far longer than a
        // sync to come back, and the leader does not wait.
        let slow = |ticket: u64| start() + Duration::from_micros(40 * ticket);
        for ticket in 18..=60 {
            delay.join(ticket, slow(ticket));
        }
        delay.start(60);
        delay.finish(SYNC);
        delay.join(61, slow(61));
        assert!(!delay.gathered());
        assert_eq!(delay.delay(), None);
    }

    #[test]
    fn right_after_a_sync_the_syncer_waits_for_the_waiters_it_released_only_when_they_come_back_fast()
     {
        let mut delay = CommitDelay::default();
        // Nothing known yet, or a lone waiter: no wait.
        assert_eq!(delay.after_sync(), None);
        delay.join(1, at(1));
        sync(&mut delay, 1, 0);
        assert_eq!(delay.after_sync(), None);
        // 16 waiters 10 us apart: back within a sync of 400 us, so it
        // waits, up to one sync.
        join_all(&mut delay, 2..=17);
        sync(&mut delay, 17, 0);
        assert_eq!(delay.after_sync(), Some(SYNC));
        // Once they have all joined, it does not.
        join_all(&mut delay, 18..=33);
        assert_eq!(delay.after_sync(), None);
        // 43 waiters 40 us apart would take longer than a sync.
        delay.start(33);
        delay.finish(SYNC);
        let slow = |ticket: u64| start() + Duration::from_micros(40 * ticket);
        for ticket in 34..=76 {
            delay.join(ticket, slow(ticket));
        }
        delay.start(76);
        delay.finish(SYNC);
        assert_eq!(delay.after_sync(), None);
    }

    #[test]
    fn the_delay_is_half_a_sync_until_waiters_were_timed_and_always_bounded() {
        let mut delay = CommitDelay {
            expected: 2,
            sync_time: Duration::from_millis(1),
            ..CommitDelay::default()
        };
        delay.join(1, at(1));
        assert_eq!(delay.delay(), Some(Duration::from_micros(500)));
        delay.sync_time = Duration::from_millis(100);
        assert_eq!(delay.delay(), Some(MAX_DELAY));
        delay.join_interval = Duration::from_millis(5);
        assert_eq!(delay.delay(), Some(MAX_DELAY));
    }
}
