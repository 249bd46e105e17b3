//! The adaptive read-ahead: how many entries a subscription reads at
//! once. It follows the backlog: a read that comes back full doubles the
//! next, up to the read-ahead bound (`prefetch(n)`, or
//! `DEFAULT_READ_AHEAD`) and a memory bound in bytes; a short read halves
//! it, down to the first read's size (4 per worker), so that a lone entry
//! is handled at once and a backlog is read in large batches.
//!
//! Reading overlaps handling and settling: a read asks for a quarter of
//! the window, and the reader asks again as soon as a quarter is free, so
//! the broker reads the next batch while the handlers work on the last one
//! and the acks of the one before are on their way (where reads come back
//! at once, the next asks for all that is free once half the window is).
//! Entries read and not yet settled never pass the bound (a crash
//! redelivers at most that many, `docs/guarantees.md`). Entries parked on
//! `by_key` lanes for a retry's delay count against the bound, not against
//! the window.

/// The most bytes (payloads and headers) of entries read and not yet
/// settled, as far as the window can tell from the entries' average size.
pub(super) const MAX_READ_AHEAD_BYTES: usize = 16 << 20;

/// The window of one subscription.
#[derive(Debug)]
pub(super) struct ReadWindow {
    /// The first read's size and the smallest window.
    first: usize,
    /// The read-ahead bound, in entries.
    cap: usize,
    /// The window now.
    size: usize,
    /// The average size of an entry read, in bytes (0 until one is read).
    avg_bytes: usize,
    /// Whether reads take a while to come back (a broker across a
    /// network), so that reading in quarters overlaps it with handling.
    /// A broker whose reads come back at once (in memory, a file log with
    /// the entries cached) gains nothing from that and reads larger.
    overlap: bool,
}

impl ReadWindow {
    pub(super) fn new(first: usize, cap: usize) -> Self {
        let cap = cap.max(1);
        let first = first.clamp(1, cap);
        ReadWindow {
            first,
            cap,
            size: first,
            avg_bytes: 0,
            overlap: true,
        }
    }

    /// The window now.
    #[cfg(test)]
    fn size(&self) -> usize {
        self.size
    }

    /// How many entries to read with `unsettled` entries read and not yet
    /// settled, `parked` of them held on `by_key` lanes for a retry's
    /// delay; `None` while less than a read's worth of the window is free,
    /// or the bound is reached. Parked entries count against the bound but not
    /// against the window, so keys waiting for a retry do not stop the
    /// others.
    #[inline]
    pub(super) fn ask(&self, unsettled: usize, parked: usize) -> Option<usize> {
        let working = unsettled.saturating_sub(parked);
        // Reads of a quarter of the window (or the first read's size, if
        // larger), asked for once a quarter is free: one can be in flight
        // at the broker while the handlers work on the last one and the
        // acks of the one before are on their way, rather than each waiting
        // for the other.
        // Where reads come back at once, read what is free once half the
        // window is.
        let free = self.size.saturating_sub(working);
        let (least, most) = if self.overlap {
            let quarter = (self.size / 4).max(1);
            (quarter, quarter.max(self.first))
        } else {
            (self.size - self.size / 2, self.size)
        };
        if free < least {
            return None;
        }
        let count = free.min(most).min(self.cap.saturating_sub(unsettled));
        (count > 0).then_some(count)
    }

    /// Whether the last read came back at once, on its first poll.
    #[inline]
    pub(super) fn answered(&mut self, at_once: bool) {
        self.overlap = !at_once;
    }

    /// A read that asked for `asked` entries got `got` of them, `bytes`
    /// long together.
    #[inline]
    pub(super) fn took(&mut self, asked: usize, got: usize, bytes: usize) {
        if let Some(per_entry) = bytes.checked_div(got) {
            self.avg_bytes = if self.avg_bytes == 0 {
                per_entry
            } else {
                (self.avg_bytes * 7 + per_entry) / 8
            };
        }
        let by_bytes = MAX_READ_AHEAD_BYTES / self.avg_bytes.max(1);
        let limit = self.cap.min(by_bytes).max(self.first);
        if got >= asked {
            self.size = self.size.saturating_mul(2).min(limit);
        } else if got.saturating_mul(4) < asked {
            self.size = (self.size / 2).max(self.first);
        }
        self.size = self.size.min(limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_reads_grow_the_window_to_the_bound_and_short_ones_shrink_it() {
        let mut w = ReadWindow::new(32, 512);
        assert_eq!(w.ask(0, 0), Some(32));
        assert_eq!(
            w.ask(1, 0),
            Some(31),
            "one long handler does not stop reading"
        );
        assert_eq!(w.ask(25, 0), None, "less than a quarter free: wait");
        assert_eq!(w.ask(40, 30), Some(22), "parked entries do not count");
        assert_eq!(w.ask(512, 500), None, "the bound is reached");
        w.took(32, 32, 3200);
        w.took(64, 64, 6400);
        assert_eq!(w.size(), 128);
        assert_eq!(w.ask(0, 0), Some(32), "a quarter of the window");
        assert_eq!(w.ask(96, 0), Some(32), "a quarter is free: read on");
        assert_eq!(w.ask(97, 0), None, "less than a quarter free: wait");
        for _ in 0..10 {
            let asked = w.ask(0, 0).unwrap_or(0);
            w.took(asked, asked, asked * 100);
        }
        assert_eq!(w.size(), 512, "capped at the bound");
        w.took(512, 3, 300);
        assert_eq!(w.size(), 256);
        for _ in 0..10 {
            w.took(256, 1, 100);
        }
        assert_eq!(w.size(), 32, "never under the first read");
    }

    #[test]
    fn reads_that_come_back_at_once_are_not_split_in_quarters() {
        let mut w = ReadWindow::new(32, 512);
        w.took(32, 32, 3200);
        w.took(64, 64, 6400);
        assert_eq!(w.size(), 128);
        w.answered(true);
        assert_eq!(w.ask(0, 0), Some(128), "the whole window");
        assert_eq!(w.ask(64, 0), Some(64), "half of it is free");
        assert_eq!(w.ask(65, 0), None, "less than half is free");
        w.answered(false);
        assert_eq!(w.ask(0, 0), Some(32), "a quarter again");
    }

    #[test]
    fn large_entries_keep_the_window_within_the_byte_bound() {
        let mut w = ReadWindow::new(4, 512);
        for _ in 0..20 {
            let asked = w.size();
            w.took(asked, asked, asked * (1 << 20));
        }
        assert_eq!(w.size(), 16, "16 MiB of 1 MiB entries");
    }

    #[test]
    fn a_window_of_one_reads_one_at_a_time() {
        let w = ReadWindow::new(1, 1);
        assert_eq!((w.ask(0, 0), w.ask(1, 0)), (Some(1), None));
    }
}
