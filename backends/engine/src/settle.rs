//! Settling what a group has pending: acks, and retries (with a copy, or
//! after a delay); and refreshing the claim on held entries, which keeps
//! them pending.

use std::sync::Arc;

use ruststream_core::{BrokerError, BrokerResult, EntryId, Message};

use crate::group::{Claim, Pending};
use crate::stream::CopyOf;
use crate::{Engine, GroupChange};

/// How a retried entry ended up: its id and, for a copy, the copy's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retried {
    /// The pending entry that was retried.
    pub original: EntryId,
    /// The id of the copy appended for it (only for retry with copy).
    pub copy: Option<EntryId>,
}

impl Engine {
    /// Acknowledges entries (`docs/semantics.md`, rule 6: idempotent).
    /// Returns how many left the pending list.
    pub fn ack(&mut self, stream: &str, group: &str, ids: &[EntryId]) -> BrokerResult<u64> {
        let s = self.stream_mut(stream, group)?;
        let g = s.group_mut(stream, group)?;
        let n = g.settle_all(ids);
        s.release(ids.iter().copied());
        Ok(n)
    }

    /// Retry with copy: for each pending id, appends a copy for this group
    /// carrying the original's delivery count, and acknowledges the
    /// original, in one step. Every payload must be in memory (see
    /// [`Engine::retry_copy_loading`]).
    pub fn retry_copy(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        now_ms: u64,
    ) -> BrokerResult<Vec<Retried>> {
        self.retry_copy_loading(stream, group, ids, now_ms, |id| {
            Err(BrokerError::InvalidArgument(format!(
                "the payload of entry {id} of stream {stream:?} is not in memory"
            )))
        })
    }

    /// [`Engine::retry_copy`], with `load` reading the payload of an
    /// original the engine does not hold in memory
    /// ([`Engine::cache_payloads`]). Every payload is loaded before
    /// anything changes, so a failed load fails the call whole.
    pub fn retry_copy_loading(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        now_ms: u64,
        mut load: impl FnMut(EntryId) -> BrokerResult<Arc<Message>>,
    ) -> BrokerResult<Vec<Retried>> {
        let s = self.stream_mut(stream, group)?;
        let g = s.group(stream, group)?;
        let mut messages = Vec::with_capacity(ids.len());
        for &id in ids {
            let message = match s.find(id).filter(|_| g.pending.contains_key(&id)) {
                None => None,
                Some(view) => Some(match view.message {
                    Some(message) => Arc::clone(message),
                    None => load(id)?,
                }),
            };
            messages.push(message);
        }
        let mut out = Vec::new();
        for (&id, message) in ids.iter().zip(messages) {
            let g = s.group_mut(stream, group)?;
            let Some(message) = message else {
                g.remove_pending(id);
                continue;
            };
            let Some(p) = g.take_pending(id) else {
                continue;
            };
            let copy = Arc::new(CopyOf {
                group: group.to_owned(),
                times_delivered: p.times_delivered,
            });
            let copy_id = s.append(message, Some(copy), now_ms);
            s.group_mut(stream, group)?
                .record(|| GroupChange::Copied { id, copy: copy_id });
            out.push(Retried {
                original: id,
                copy: Some(copy_id),
            });
        }
        s.release(ids.iter().copied());
        Ok(out)
    }

    /// Retry after a delay: each pending id is held by nobody and owed again
    /// at `now_ms + delay_ms` (`docs/semantics.md`, rule 7; 0 is an
    /// immediate nack).
    pub fn retry_after(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        delay_ms: u64,
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        Ok(g.move_pending(ids, |g, id, p| {
            g.insert_pending(
                id,
                Pending {
                    claim: Claim::Owed {
                        due_ms: now_ms.saturating_add(delay_ms),
                    },
                    times_delivered: p.times_delivered,
                    since_ms: now_ms,
                },
            );
        }))
    }

    /// Deletes `consumer` from the group if it holds no pending entry and
    /// has been idle (no read, no settle of its own, no claim refresh) for
    /// at least `min_idle`. Returns whether it was deleted; an unknown
    /// consumer is not.
    pub fn delete_consumer(
        &mut self,
        stream: &str,
        group: &str,
        consumer: &str,
        min_idle: std::time::Duration,
        now_ms: u64,
    ) -> BrokerResult<bool> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        let Some(&ix) = g.consumer_index.get(consumer) else {
            return Ok(false);
        };
        let idle = now_ms.saturating_sub(g.consumers[ix as usize].seen_ms);
        let holds = g
            .pending
            .values()
            .any(|p| p.claim == Claim::Held { consumer: ix });
        if holds || u128::from(idle) < min_idle.as_millis() {
            return Ok(false);
        }
        g.delete_consumer(ix);
        Ok(true)
    }

    /// Refreshes `consumer`'s claim on the ids it holds: each one's last
    /// delivery time becomes `now_ms`, so it is not idle enough to be
    /// claimed until `min_idle` after now (`docs/semantics.md`, rules 3 and
    /// 4); its delivery count stays, since nothing was delivered. Ids not
    /// pending, held by another consumer or owed are passed over, as is a
    /// consumer the group does not know (it holds nothing, and is not
    /// created). Returns how many distinct ids were refreshed.
    ///
    /// Recorded as a `Held` change with the new time, the same upsert a
    /// delivery records, so a rebuilt group has the refreshed time.
    pub fn extend_claim(
        &mut self,
        stream: &str,
        group: &str,
        consumer: &str,
        ids: &[EntryId],
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let counts: Vec<(EntryId, u32)> = ids.iter().map(|&id| (id, 0)).collect();
        self.count_deliveries(stream, group, consumer, &counts, now_ms)
    }

    /// Counts deliveries made without a read (a `by_key` lane running a
    /// held entry again): each `(id, times)` held by `consumer` gets its
    /// delivery count raised to `times` (never lowered) and its last
    /// delivery time set to `now_ms`. Passed over as in
    /// [`Engine::extend_claim`], which is this with every count 0. Returns
    /// how many distinct ids were counted.
    pub fn count_deliveries(
        &mut self,
        stream: &str,
        group: &str,
        consumer: &str,
        counts: &[(EntryId, u32)],
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        let Some(&ix) = g.consumer_index.get(consumer) else {
            return Ok(0);
        };
        let held = Claim::Held { consumer: ix };
        // Each id counted once, however often the call names it, with the
        // highest count it is named with; in id order.
        let mut distinct = counts.to_vec();
        distinct.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        distinct.dedup_by_key(|(id, _)| *id);
        let mut n = 0;
        for (id, times) in distinct {
            let Some(&p) = g.pending.get(&id).filter(|p| p.claim == held) else {
                continue;
            };
            n += 1;
            let times_delivered = p.times_delivered.max(times);
            if p.since_ms != now_ms {
                g.insert_pending(
                    id,
                    Pending {
                        since_ms: now_ms,
                        times_delivered,
                        ..p
                    },
                );
            } else if times_delivered != p.times_delivered {
                // Refreshed this millisecond (or delivered in it) already:
                // no record to add to the time index.
                g.set_times_delivered(id, times_delivered);
            }
        }
        // Each refresh leaves the entry's old record in the idle index
        // stale: dropped here too, not only by reads, so a subscription
        // whose handlers are stuck (it refreshes, and nobody reads) does
        // not grow it without end.
        g.prune_held();
        if n > 0 {
            // A consumer refreshing its claims is alive (as Redis's XCLAIM
            // marks it seen).
            g.seen(ix, now_ms);
        }
        Ok(n)
    }
}
