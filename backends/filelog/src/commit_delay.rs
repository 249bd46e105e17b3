//! The adaptive commit delay of group commit: how many waiters the leader
//! of the next sync should expect, and how long it may wait for them.
//!
//! Without a delay, group commit splits concurrent publishers into two
//! groups that take turns: the waiters that arrived while a sync ran start
//! the next one the moment it ends, before the publishers that sync has
//! just released are back, so each sync covers about half of them. With
//! it, the leader of a sync first waits until as many waiters have joined
//! as were around the last sync (those it covered and those that arrived
//! while it ran), and at most a fraction of what a sync takes. A lone
//! publisher is never delayed: it expects no one else.

use std::time::Duration;

/// Of a sync's usual duration, the longest a leader waits for waiters to
/// join (the rest of a delay costs more than the syncs it shares).
const MAX_DELAY_SHARE: u32 = 2;

/// The longest delay whatever the syncs take (a slow disk does not make
/// an acknowledgement wait longer than this for company).
const MAX_DELAY: Duration = Duration::from_millis(2);

/// Weight of the newest sample in the average sync duration, as `1 / n`.
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
    /// joined while it ran. The next leader expects this many.
    expected: usize,
    /// Average duration of a sync.
    sync_time: Duration,
}

impl CommitDelay {
    /// A waiter for `ticket` has started to wait.
    pub(crate) fn join(&mut self, ticket: u64) {
        if ticket > self.started_target {
            self.joined += 1;
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

    /// How long the leader of the next sync may wait for the waiters it
    /// expects, if it should wait at all.
    pub(crate) fn delay(&self) -> Option<Duration> {
        if self.gathered() {
            return None;
        }
        Some((self.sync_time / MAX_DELAY_SHARE).min(MAX_DELAY)).filter(|d| !d.is_zero())
    }

    /// A sync covering every write up to `target` starts.
    pub(crate) fn start(&mut self, target: u64) {
        self.started_target = self.started_target.max(target);
        self.group = std::mem::take(&mut self.joined);
    }

    /// The sync started last has finished after `took`.
    pub(crate) fn finish(&mut self, took: Duration) {
        self.expected = self.group + self.joined;
        self.sync_time = if self.sync_time.is_zero() {
            took
        } else {
            (self.sync_time * (AVERAGE_OVER - 1) + took) / AVERAGE_OVER
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: Duration = Duration::from_micros(400);

    /// A sync of everything written up to `target`, `joined` waiters
    /// arriving while it runs (tickets after `target`).
    fn sync(delay: &mut CommitDelay, target: u64, joined: u64) {
        delay.start(target);
        for ticket in target + 1..=target + joined {
            delay.join(ticket);
        }
        delay.finish(SYNC);
    }

    #[test]
    fn a_lone_waiter_is_never_delayed() {
        let mut delay = CommitDelay::default();
        for ticket in 1..10 {
            delay.join(ticket);
            assert_eq!(delay.delay(), None, "ticket {ticket}");
            delay.start(ticket);
            delay.finish(SYNC);
        }
    }

    #[test]
    fn the_next_leader_waits_for_the_waiters_the_last_sync_released() {
        let mut delay = CommitDelay::default();
        // Two groups of 8 taking turns: 8 in the sync, 8 joining during it.
        delay.join(1);
        sync(&mut delay, 1, 8);
        // The 8 that joined lead the next sync: they expect the 1 released
        // as well, and wait at most half a sync for it.
        assert_eq!(delay.joined(), 8);
        assert_eq!(delay.delay(), Some(SYNC / 2));
        delay.join(10);
        assert!(delay.gathered());
        assert_eq!(delay.delay(), None);
    }

    #[test]
    fn the_expectation_follows_the_waiters_that_come() {
        let mut delay = CommitDelay::default();
        for ticket in 1..=16 {
            delay.join(ticket);
        }
        sync(&mut delay, 16, 0);
        // Only 4 come back: the leader waits (the delay runs out), and the
        // sync after expects 4.
        for ticket in 17..=20 {
            delay.join(ticket);
        }
        assert!(delay.delay().is_some());
        sync(&mut delay, 20, 0);
        for ticket in 21..=24 {
            delay.join(ticket);
        }
        assert_eq!(delay.delay(), None);
    }

    #[test]
    fn a_waiter_that_leaves_is_not_counted() {
        let mut delay = CommitDelay::default();
        sync(&mut delay, 0, 2);
        delay.start(2);
        delay.join(3);
        delay.leave(3);
        // Covered by a started sync: neither joins nor leaves the next.
        delay.join(1);
        delay.leave(1);
        assert_eq!(delay.joined(), 0);
    }

    #[test]
    fn the_delay_is_a_share_of_the_average_sync_and_bounded() {
        let mut delay = CommitDelay::default();
        delay.start(0);
        delay.finish(Duration::from_millis(100));
        delay.join(1);
        delay.join(2);
        delay.start(2);
        delay.finish(Duration::from_millis(100));
        delay.join(3);
        assert_eq!(delay.delay(), Some(MAX_DELAY));
    }
}
