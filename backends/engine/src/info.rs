//! Reports on a group: its summary, its consumers and its pending list.

use std::ops::Bound;

use ruststream_core::{BrokerResult, ConsumerInfo, EntryId, GroupInfo, PendingEntry};

use crate::Engine;
use crate::group::Claim;

impl Engine {
    /// A group's summary (`docs/semantics.md`, rule 9).
    pub fn group_info(&self, stream: &str, group: &str) -> BrokerResult<GroupInfo> {
        let (s, g) = self.group_of(stream, group)?;
        Ok(GroupInfo {
            stream: stream.to_owned(),
            name: group.to_owned(),
            last_delivered: g.cursor,
            lag: s.lag(g, group),
            pending: g.pending.len() as u64,
            dead_letters: g.dead.len() as u64,
            consumers: g.live_consumers().count() as u64,
        })
    }

    /// A group's consumers, by name.
    pub fn consumers(
        &self,
        stream: &str,
        group: &str,
        now_ms: u64,
    ) -> BrokerResult<Vec<ConsumerInfo>> {
        let (_, g) = self.group_of(stream, group)?;
        let mut counts = vec![0u64; g.consumers.len()];
        for p in g.pending.values() {
            if let Claim::Held { consumer } = p.claim {
                counts[consumer as usize] += 1;
            }
        }
        let mut out: Vec<ConsumerInfo> = g
            .live_consumers()
            .map(|(ix, c)| ConsumerInfo {
                name: c.name.clone(),
                pending: counts[ix as usize],
                idle_ms: now_ms.saturating_sub(c.seen_ms),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Part of a group's pending list, in id order.
    pub fn pending(
        &self,
        stream: &str,
        group: &str,
        from: EntryId,
        count: usize,
        consumer: Option<&str>,
        now_ms: u64,
    ) -> BrokerResult<Vec<PendingEntry>> {
        let (_, g) = self.group_of(stream, group)?;
        let only = match consumer {
            Some(name) => match g.consumer_index.get(name) {
                Some(&ix) => Some(ix),
                None => return Ok(Vec::new()),
            },
            None => None,
        };
        Ok(g.pending
            .range_from(Bound::Included(from))
            .filter(|(_, p)| only.is_none_or(|ix| p.claim == Claim::Held { consumer: ix }))
            .take(count)
            .map(|(id, p)| PendingEntry {
                id: *id,
                consumer: match p.claim {
                    Claim::Held { consumer } => Some(g.consumers[consumer as usize].name.clone()),
                    Claim::Owed { .. } => None,
                },
                idle_ms: now_ms.saturating_sub(p.since_ms),
                times_delivered: p.times_delivered,
                owed_in_ms: match p.claim {
                    Claim::Held { .. } => None,
                    Claim::Owed { due_ms } => Some(due_ms.saturating_sub(now_ms)),
                },
            })
            .collect())
    }
}
