//! Dead letters: entries a group set aside, with why, until redriven or
//! discarded.

use ruststream_core::{BrokerResult, DeadLetter, EntryId};

use crate::group::{Claim, Group, Pending};
use crate::{Engine, GroupChange};

/// A dead letter: why, after how many deliveries, and when.
#[derive(Debug, Clone)]
pub(crate) struct Dead {
    pub(crate) reason: String,
    pub(crate) times_delivered: u32,
    pub(crate) dead_at_ms: u64,
}

/// The reason of an entry dead-lettered by a read for reaching
/// `max_deliveries`.
pub(crate) fn max_deliveries_reason(times: u32, max: u32) -> String {
    format!("delivered {times} times, reaching max_deliveries({max})")
}

impl Group {
    /// Records `id` as a dead letter.
    pub(crate) fn kill(&mut self, id: EntryId, dead: Dead) {
        self.record(|| GroupChange::Dead {
            id,
            reason: dead.reason.clone(),
            times_delivered: dead.times_delivered,
            dead_at_ms: dead.dead_at_ms,
        });
        self.dead.insert(id, dead);
    }

    /// Removes the dead letter `id`, if there is one.
    pub(crate) fn revive(&mut self, id: EntryId) -> bool {
        let found = self.dead.remove(&id).is_some();
        if found {
            self.record(|| GroupChange::Undead { id });
        }
        found
    }
}

impl Engine {
    /// Dead-letters pending entries with `reason` (`docs/semantics.md`,
    /// rule 8).
    pub fn dead_letter(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        reason: &str,
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        Ok(g.move_pending(ids, |g, id, p| {
            g.kill(
                id,
                Dead {
                    reason: reason.to_owned(),
                    times_delivered: p.times_delivered,
                    dead_at_ms: now_ms,
                },
            );
        }))
    }

    /// Makes dead letters owed again at once with their delivery counts
    /// reset; the cursor does not move (`docs/semantics.md`, rule 8).
    pub fn redrive(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        let mut n = 0;
        for &id in ids {
            if !g.revive(id) {
                continue;
            }
            g.insert_pending(
                id,
                Pending {
                    claim: Claim::Owed { due_ms: now_ms },
                    times_delivered: 0,
                    since_ms: now_ms,
                },
            );
            n += 1;
        }
        Ok(n)
    }

    /// Drops dead letters (`docs/semantics.md`, rule 8).
    pub fn discard(&mut self, stream: &str, group: &str, ids: &[EntryId]) -> BrokerResult<u64> {
        let s = self.stream_mut(stream, group)?;
        let g = s.group_mut(stream, group)?;
        let n = ids.iter().filter(|id| g.revive(**id)).count() as u64;
        s.release(ids.iter().copied());
        Ok(n)
    }

    /// Part of a group's dead letters, in id order.
    pub fn dead_letters(
        &self,
        stream: &str,
        group: &str,
        from: EntryId,
        count: usize,
    ) -> BrokerResult<Vec<DeadLetter>> {
        let (s, g) = self.group_of(stream, group)?;
        Ok(g.dead
            .range(from..)
            .filter_map(|(id, d)| {
                let stored = s.find(*id)?;
                Some(DeadLetter {
                    entry: stored.entry(),
                    reason: d.reason.clone(),
                    times_delivered: d.times_delivered,
                    dead_at_ms: d.dead_at_ms,
                })
            })
            .take(count)
            .collect())
    }
}
