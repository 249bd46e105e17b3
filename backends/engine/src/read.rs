//! Reads: a read hands out, in order, what it may of the group's pending
//! list (its own held entries for an own-pending read; otherwise owed
//! entries that fell due, then, for claiming and reclaim reads, entries
//! idle for `min_idle`), then new entries past the cursor.

use std::ops::Bound;
use std::time::Duration;

use ruststream_core::{
    BrokerError, BrokerResult, Delivery, EntryId, ReadBatch, ReadMode, ReadRequest,
};

use crate::Engine;
use crate::dead::{Dead, max_deliveries_reason};
use crate::group::{Claim, Group, Pending};
use crate::stream::StreamState;

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Group {
    /// Held entries idle since `threshold` or earlier, longest idle first,
    /// at most `room`, leaving out `skip`.
    fn idle_since(
        &self,
        threshold: u64,
        room: usize,
        skip: &[(EntryId, u32, u64)],
    ) -> Vec<EntryId> {
        let mut out: Vec<EntryId> = Vec::new();
        for &(since, id) in &self.held_by_time {
            if out.len() >= room || since > threshold {
                break;
            }
            if self.is_current(since, id) && !out.contains(&id) && !skip.iter().any(|h| h.0 == id) {
                out.push(id);
            }
        }
        out
    }
}

/// What one read hands out to one consumer, phase by phase.
struct Handout {
    consumer: u32,
    max: Option<u32>,
    now_ms: u64,
    /// Entries of the pending list handed out again, as (id, deliveries
    /// before this one, idle time).
    handed: Vec<(EntryId, u32, u64)>,
    /// Entries dead-lettered instead, having reached `max`.
    dead_lettered: Vec<EntryId>,
}

impl Handout {
    /// Dead-letters `id` instead of handing it out if its `times`
    /// deliveries reached `max_deliveries`; returns whether it did.
    fn reached_max(&mut self, g: &mut Group, id: EntryId, times: u32) -> bool {
        let Some(max) = self.max.filter(|&m| times >= m) else {
            return false;
        };
        g.kill(
            id,
            Dead {
                reason: max_deliveries_reason(times, max),
                times_delivered: times,
                dead_at_ms: self.now_ms,
            },
        );
        self.dead_lettered.push(id);
        true
    }

    /// Hands out an entry already in the pending list to the consumer, or
    /// dead-letters it if it reached `max`.
    fn redeliver(&mut self, g: &mut Group, id: EntryId) {
        let Some(p) = g.take_pending(id) else {
            return;
        };
        if self.reached_max(g, id, p.times_delivered) {
            return;
        }
        let idle = self.now_ms.saturating_sub(p.since_ms);
        g.insert_pending(
            id,
            Pending {
                claim: Claim::Held {
                    consumer: self.consumer,
                },
                times_delivered: p.times_delivered.saturating_add(1),
                since_ms: self.now_ms,
            },
        );
        self.handed.push((id, p.times_delivered, idle));
    }

    /// An own-pending read: the consumer's own held entries after `after`,
    /// in id order.
    fn own(&mut self, g: &mut Group, after: EntryId, min_idle: Duration, count: usize) {
        let consumer = self.consumer;
        // Delivered (or refreshed) at or before this time.
        let Some(latest) = self.now_ms.checked_sub(ms(min_idle)) else {
            return;
        };
        let own: Vec<EntryId> = g
            .pending
            .range_from(Bound::Excluded(after))
            .filter(|(_, p)| p.claim == Claim::Held { consumer } && p.since_ms <= latest)
            .map(|(id, _)| *id)
            .take(count)
            .collect();
        for id in own {
            self.redeliver(g, id);
        }
    }

    /// Owed entries that fell due, in the order they became due.
    fn owed(&mut self, g: &mut Group, count: usize) {
        while self.handed.len() < count {
            let Some(&(due, id)) = g.owed_by_time.first() else {
                break;
            };
            if due > self.now_ms {
                break;
            }
            self.redeliver(g, id);
        }
    }

    /// Held entries idle for `min_idle` or longer, longest idle first.
    fn idle(&mut self, g: &mut Group, min_idle: Duration, count: usize) {
        let Some(threshold) = self.now_ms.checked_sub(ms(min_idle)) else {
            return;
        };
        let room = count - self.handed.len();
        for id in g.idle_since(threshold, room, &self.handed) {
            self.redeliver(g, id);
        }
    }

    /// New entries past the group's cursor, until `deliveries` (which holds
    /// what the other phases handed out) reaches the read's count.
    fn new_entries(
        &mut self,
        s: &mut StreamState,
        req: &ReadRequest<'_>,
        deliveries: &mut Vec<Delivery>,
    ) -> BrokerResult<()> {
        let StreamState {
            entries,
            retained,
            groups,
            ..
        } = s;
        let g = groups
            .get_mut(req.group)
            .ok_or_else(|| BrokerError::no_group(req.stream, req.group))?;
        let fresh = retained
            .range((Bound::Excluded(g.cursor), Bound::Unbounded))
            .map(|(_, s)| s.view())
            .chain(entries.iter_from(g.cursor, true));
        // Only a cursor moved back can have pending or dead entries
        // after it; checking that once keeps the common path lookup-free.
        let rewound = g.pending.last_key().is_some_and(|id| id > g.cursor)
            || g.dead
                .last_key_value()
                .is_some_and(|(id, _)| *id > g.cursor);
        let mut cursor = g.cursor;
        let mut taken = deliveries.len();
        for stored in fresh {
            if taken >= req.count {
                break;
            }
            cursor = stored.id;
            // Pass over copies for other groups, and entries the group
            // already has pending or dead-lettered (the cursor was moved
            // back): those are not new, and handing them out again would
            // break a standing claim (docs/semantics.md, rule 3) and reset
            // their counts. (Ids only grow along `fresh`, so what this loop
            // adds to the group never matches a later entry.)
            if !stored.is_for(req.group) || (rewound && g.holds(&stored.id)) {
                continue;
            }
            taken += 1;
            let carried = stored.carried();
            if self.reached_max(g, stored.id, carried) {
                continue;
            }
            g.insert_pending(
                stored.id,
                Pending {
                    claim: Claim::Held {
                        consumer: self.consumer,
                    },
                    times_delivered: carried.saturating_add(1),
                    since_ms: self.now_ms,
                },
            );
            deliveries.push(Delivery {
                entry: stored.entry(),
                delivery_count: carried,
                idle_ms: 0,
            });
        }
        g.set_cursor(cursor);
        Ok(())
    }
}

impl Engine {
    /// Reads from a group; see [`ReadMode`] for what each mode hands out.
    pub fn read(&mut self, req: &ReadRequest<'_>, now_ms: u64) -> BrokerResult<ReadBatch> {
        let mut batch = ReadBatch::default();
        self.read_into(req, now_ms, &mut batch)?;
        Ok(batch)
    }

    /// [`Engine::read`], written into `batch`: its buffers are cleared and
    /// reused, so a caller that reads again and again with the same batch
    /// allocates nothing once they are large enough. On an error the
    /// batch is left empty.
    pub fn read_into(
        &mut self,
        req: &ReadRequest<'_>,
        now_ms: u64,
        batch: &mut ReadBatch,
    ) -> BrokerResult<()> {
        batch.deliveries.clear();
        batch.dead_lettered.clear();
        req.validate()?;
        if !req.held.is_empty() && req.takes_idle() {
            // The reader's own entries in hand are not idle, whatever
            // their last refresh: refreshed first, in the same step, so
            // the idle phase passes them over (`ReadRequest::held`).
            self.extend_claim(req.stream, req.group, req.consumer, req.held, now_ms)?;
        }
        let wants_new = matches!(req.mode, ReadMode::New | ReadMode::Claiming { .. });
        let s = self.stream_mut(req.stream, req.group)?;
        let g = s.group_mut(req.stream, req.group)?;
        let consumer = g.consumer(req.consumer, now_ms);
        g.prune_held();
        let mut out = Handout {
            consumer,
            max: req.max_deliveries,
            now_ms,
            handed: Vec::new(),
            dead_lettered: Vec::new(),
        };
        if let ReadMode::OwnPending { after, min_idle } = req.mode {
            out.own(g, after, min_idle, req.count);
        } else {
            // Owed entries first, then entries idle long enough.
            out.owed(g, req.count);
            if let ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } = req.mode {
                out.idle(g, min_idle, req.count);
            }
        }

        let capacity = if wants_new {
            req.count
        } else {
            out.handed.len()
        };
        let deliveries = &mut batch.deliveries;
        deliveries.reserve(capacity);
        for &(id, delivery_count, idle_ms) in &out.handed {
            if let Some(stored) = s.find(id) {
                deliveries.push(Delivery {
                    entry: stored.entry(),
                    delivery_count,
                    idle_ms,
                });
            }
        }
        if wants_new && let Err(error) = out.new_entries(s, req, deliveries) {
            deliveries.clear();
            return Err(error);
        }
        batch.dead_lettered = out.dead_lettered;
        Ok(())
    }

    /// The earliest time after `now_ms` at which `req` could hand out
    /// something without a publish: an owed entry falling due, or (for
    /// claiming and reclaim reads) a held entry reaching `min_idle`. `None`
    /// if only a publish (or another call) can make the read non-empty.
    pub fn next_due(&self, req: &ReadRequest<'_>, now_ms: u64) -> Option<u64> {
        let (_, g) = self.group_of(req.stream, req.group).ok()?;
        let owed = match req.mode {
            ReadMode::OwnPending { .. } => None,
            _ => g.owed_by_time.first().map(|(due, _)| *due),
        };
        let idle = match req.mode {
            ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } => g
                .held_by_time
                .iter()
                .find(|&&(since, id)| g.is_current(since, id))
                .map(|(since, _)| since.saturating_add(ms(min_idle))),
            _ => None,
        };
        owed.into_iter()
            .chain(idle)
            .min()
            .map(|t| t.max(now_ms.saturating_add(1)))
    }
}
