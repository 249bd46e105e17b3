//! Consumer groups: a group's cursor, pending list (with its indexes by
//! time) and consumers; creating groups and moving their cursors.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;

use ruststream_core::{BrokerResult, EntryId, StreamStart};

use crate::dead::Dead;
use crate::idmap::IdMap;
use crate::stream::StreamChange;
use crate::{Engine, GroupChange};

/// How often, at most, a consumer's seen time is recorded
/// ([`GroupChange::Seen`]) while it keeps reading: a poll that finds
/// nothing changes nothing else, and recording each one would make a
/// durable broker write to disk on every empty poll. So a rebuild (a
/// reopened file log) knows each consumer's seen time to within this much
/// (or less: deliveries and claims record their own times), and reports
/// idle times at most this much too long, never too short; a snapshot
/// records each one exactly. (The file log writes such a record, when it
/// is all a call changed, without asking for a sync of its own.)
pub const SEEN_EVERY_MS: u64 = 1_000;

/// A consumer group: its cursor, pending list and dead letters.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) cursor: EntryId,
    pub(crate) pending: IdMap<Pending>,
    /// Held entries as (last delivery time, id), in time order: in delivery
    /// order, but for a record with a time before the last one's (after a
    /// reopen whose wall clock is behind the times the log holds), which
    /// goes in its place. Kept lazily: acks and
    /// redeliveries leave stale records behind, which reads drop from the
    /// front (and compact when they pile up), so the hot path pays one
    /// push per delivery instead of two tree updates.
    pub(crate) held_by_time: VecDeque<(u64, EntryId)>,
    /// Owed entries by (due time, id).
    pub(crate) owed_by_time: BTreeSet<(u64, EntryId)>,
    pub(crate) consumers: Vec<Consumer>,
    pub(crate) consumer_index: HashMap<String, u32>,
    pub(crate) dead: BTreeMap<EntryId, Dead>,
    /// Changes not yet taken, when recording (see [`crate::journal`]).
    pub(crate) log: Option<Vec<GroupChange>>,
    /// While rebuilding only: retry copies restored so far, each with the
    /// entries it stands for (the one it was made from, then, for a copy
    /// of a copy, that one's original, and so on) and their pending
    /// records, until the copy is settled (see [`GroupChange::Copied`]).
    /// Empty otherwise.
    pub(crate) copies: BTreeMap<EntryId, Vec<(EntryId, Pending)>>,
}

/// A consumer of a group, numbered in the order it joined.
#[derive(Debug)]
pub(crate) struct Consumer {
    pub(crate) name: String,
    /// When it last read (or refreshed a claim): its idle time counts from
    /// here.
    pub(crate) seen_ms: u64,
    /// The newest seen time recorded for it ([`GroupChange::Seen`], see
    /// [`SEEN_EVERY_MS`]); `None` while none is (only after a rebuild from
    /// a log written before seen times were recorded).
    pub(crate) seen_recorded_ms: Option<u64>,
    /// Deleted: its number stays taken (held records name consumers by
    /// number), but it is no longer listed, and its name, read under again,
    /// joins as a new consumer.
    pub(crate) gone: bool,
}

/// An entry of a group's pending list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) claim: Claim,
    pub(crate) times_delivered: u32,
    /// Last delivery time for a held entry; when it became owed for an
    /// owed one. Idle time is measured from here.
    pub(crate) since_ms: u64,
}

/// Who a pending entry waits on: the consumer holding it, or nobody until
/// it falls due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    Held { consumer: u32 },
    Owed { due_ms: u64 },
}

impl Group {
    pub(crate) fn new(cursor: EntryId, recording: bool) -> Self {
        Group {
            log: recording.then(Vec::new),
            cursor,
            pending: IdMap::default(),
            held_by_time: VecDeque::new(),
            owed_by_time: BTreeSet::new(),
            consumers: Vec::new(),
            consumer_index: HashMap::new(),
            dead: BTreeMap::new(),
            copies: BTreeMap::new(),
        }
    }

    /// The number of consumer `name`, which joins if it is new; either way
    /// it is seen at `now_ms`. The seen time is recorded on joining and then
    /// at most once per [`SEEN_EVERY_MS`] (see there).
    pub(crate) fn consumer(&mut self, name: &str, now_ms: u64) -> u32 {
        if let Some(&ix) = self.consumer_index.get(name) {
            self.seen(ix, now_ms);
            return ix;
        }
        let ix = u32::try_from(self.consumers.len()).unwrap_or(u32::MAX);
        self.consumers.push(Consumer {
            name: name.to_owned(),
            seen_ms: now_ms,
            seen_recorded_ms: None,
            gone: false,
        });
        self.consumer_index.insert(name.to_owned(), ix);
        self.record(|| GroupChange::Consumer {
            name: name.to_owned(),
        });
        self.seen(ix, now_ms);
        ix
    }

    /// Consumer number `ix` is seen at `now_ms` (read, or refreshed a
    /// claim): recorded as [`GroupChange::Seen`] if none was recorded for
    /// it yet or the last one is [`SEEN_EVERY_MS`] old.
    pub(crate) fn seen(&mut self, ix: u32, now_ms: u64) {
        let Some(c) = self.consumers.get_mut(ix as usize) else {
            return;
        };
        c.seen_ms = now_ms;
        let due = c
            .seen_recorded_ms
            .is_none_or(|at| now_ms >= at.saturating_add(SEEN_EVERY_MS));
        if due {
            c.seen_recorded_ms = Some(now_ms);
            self.record(|| GroupChange::Seen {
                consumer: ix,
                at_ms: now_ms,
            });
        }
    }

    /// Deletes consumer number `ix` (recorded). The caller has checked that
    /// it holds nothing.
    pub(crate) fn delete_consumer(&mut self, ix: u32) {
        let Some(c) = self.consumers.get_mut(ix as usize) else {
            return;
        };
        c.gone = true;
        let name = std::mem::take(&mut c.name);
        self.consumer_index.remove(&name);
        self.record(|| GroupChange::ConsumerGone { consumer: ix });
    }

    /// The consumers not deleted.
    pub(crate) fn live_consumers(&self) -> impl Iterator<Item = (u32, &Consumer)> {
        (0u32..).zip(&self.consumers).filter(|(_, c)| !c.gone)
    }

    pub(crate) fn record(&mut self, change: impl FnOnce() -> GroupChange) {
        if let Some(log) = &mut self.log {
            log.push(change());
        }
    }

    /// Settles `id`: takes it out of the pending list (recorded).
    pub(crate) fn remove_pending(&mut self, id: EntryId) -> Option<Pending> {
        let p = self.take_pending(id)?;
        self.record(|| GroupChange::Settled { id });
        Some(p)
    }

    /// Settles every pending id of `ids` (recorded); returns how many.
    pub(crate) fn settle_all(&mut self, ids: &[EntryId]) -> u64 {
        let Group {
            pending,
            owed_by_time,
            log,
            ..
        } = self;
        let mut n = 0;
        pending.remove_all(ids, |id, p| {
            // Held records go stale and are dropped lazily (`unindex`).
            if let Claim::Owed { due_ms } = p.claim {
                owed_by_time.remove(&(due_ms, id));
            }
            if let Some(log) = log {
                log.push(GroupChange::Settled { id });
            }
            n += 1;
        });
        n
    }

    /// Takes `id` out of the pending list and its index, unrecorded: the
    /// caller records where it goes next.
    pub(crate) fn take_pending(&mut self, id: EntryId) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        self.unindex(id, &p);
        Some(p)
    }

    /// Takes each pending id of `ids` out of the pending list and its
    /// index, unrecorded, and hands it to `then`, which records where it
    /// goes next; ids that are not pending are passed over. Returns how many
    /// were pending.
    pub(crate) fn move_pending(
        &mut self,
        ids: &[EntryId],
        mut then: impl FnMut(&mut Group, EntryId, Pending),
    ) -> u64 {
        let mut n = 0;
        for &id in ids {
            let Some(p) = self.take_pending(id) else {
                continue;
            };
            then(self, id, p);
            n += 1;
        }
        n
    }

    pub(crate) fn set_cursor(&mut self, cursor: EntryId) {
        if self.cursor != cursor {
            self.cursor = cursor;
            self.record(|| GroupChange::Cursor { cursor });
        }
    }

    fn unindex(&mut self, id: EntryId, p: &Pending) {
        // Held records go stale and are dropped lazily (see `held_by_time`).
        if let Claim::Owed { due_ms } = p.claim {
            self.owed_by_time.remove(&(due_ms, id));
        }
    }

    /// Puts `id` in the pending list (recorded).
    pub(crate) fn insert_pending(&mut self, id: EntryId, p: Pending) {
        self.record(|| GroupChange::of_pending(id, &p));
        self.put_pending(id, p);
    }

    /// Changes a pending entry's delivery count alone (recorded); its
    /// claim and time, and so its place in the time indexes, stay.
    pub(crate) fn set_times_delivered(&mut self, id: EntryId, times_delivered: u32) {
        if let Some(p) = self.pending.get(&id).copied() {
            let p = Pending {
                times_delivered,
                ..p
            };
            self.record(|| GroupChange::of_pending(id, &p));
            self.pending.insert(id, p);
        }
    }

    pub(crate) fn put_pending(&mut self, id: EntryId, p: Pending) {
        if let Some(old) = self.pending.insert(id, p) {
            self.unindex(id, &old);
        }
        match p.claim {
            // Kept in (time, id) order, the order a rebuild sorts them in
            // (`reindex_held`): reads stop at the first record not yet
            // idle, so one out of time order would hide idle entries
            // behind it, and entries of one millisecond must be claimed in
            // the same order before and after a reopen.
            Claim::Held { .. } => {
                let record = (p.since_ms, id);
                match self.held_by_time.back() {
                    Some(&last) if last > record => {
                        let at = self.held_by_time.partition_point(|&r| r <= record);
                        self.held_by_time.insert(at, record);
                    }
                    _ => self.held_by_time.push_back(record),
                }
            }
            Claim::Owed { due_ms } => {
                self.owed_by_time.insert((due_ms, id));
            }
        }
    }

    /// Whether a `held_by_time` record still describes the entry's claim.
    pub(crate) fn is_current(&self, since_ms: u64, id: EntryId) -> bool {
        self.pending
            .get(&id)
            .is_some_and(|p| p.since_ms == since_ms && matches!(p.claim, Claim::Held { .. }))
    }

    /// Drops stale records from the front of `held_by_time`, and compacts
    /// it when stale records behind a long-held entry pile up.
    pub(crate) fn prune_held(&mut self) {
        while let Some(&(since, id)) = self.held_by_time.front() {
            if self.is_current(since, id) {
                break;
            }
            self.held_by_time.pop_front();
        }
        if self.held_by_time.len() > 2 * self.pending.len() + 1024 {
            let mut queue = std::mem::take(&mut self.held_by_time);
            queue.retain(|&(since, id)| self.is_current(since, id));
            self.held_by_time = queue;
        }
        crate::shrink_if_oversized(&mut self.held_by_time);
    }

    pub(crate) fn holds(&self, id: &EntryId) -> bool {
        self.pending.contains_key(id) || self.dead.contains_key(id)
    }
}

impl Engine {
    /// Creates `group` at `start` (and the stream if needed). Returns
    /// `false`, changing nothing, if the group exists (`docs/semantics.md`,
    /// rule 1).
    pub fn ensure_group(
        &mut self,
        stream: &str,
        group: &str,
        start: StreamStart,
        now_ms: u64,
    ) -> bool {
        let _ = now_ms;
        let recording = self.recording;
        let s = self.stream_entry(stream);
        if s.groups.contains_key(group) {
            return false;
        }
        let cursor = s.start_position(start);
        s.groups
            .insert(group.to_owned(), Group::new(cursor, recording));
        if let Some(log) = &mut s.log {
            log.push(StreamChange::GroupCreated {
                group: group.to_owned(),
                cursor,
            });
        }
        true
    }

    /// Checks that a group of `stream` may start at (or move its cursor to)
    /// `start`: never past the last id the stream ever had, where it would
    /// pass over what is appended until the clock reaches that id.
    pub fn check_start(&self, stream: &str, start: StreamStart) -> BrokerResult<()> {
        let last = self
            .streams
            .get(stream)
            .map_or(EntryId::ZERO, |s| s.last_id);
        start.check_within(stream, last)
    }

    /// Moves an existing group's cursor; pending entries and dead letters
    /// stay as they are. Moving it back re-delivers settled (acked or
    /// discarded) entries as new; entries still pending or dead-lettered are
    /// passed over by new reads. Moving it forward passes over the entries
    /// behind the new cursor, but not the group's retry copies among them:
    /// a copy is the only record of a retry still to run, so each becomes
    /// owed at `now_ms`, with the count it carries (`docs/semantics.md`,
    /// "Where the rules leave a choice").
    pub fn set_group_position(
        &mut self,
        stream: &str,
        group: &str,
        start: StreamStart,
        now_ms: u64,
    ) -> BrokerResult<()> {
        self.check_start(stream, start)?;
        let s = self.stream_mut(stream, group)?;
        let cursor = s.start_position(start);
        let old = s.group_mut(stream, group)?.cursor;
        let passed: Vec<(EntryId, u32)> = if cursor > old {
            s.entries
                .copies()
                .range((Bound::Excluded(old), Bound::Included(cursor)))
                .filter(|(_, copy)| copy.group == group)
                .map(|(id, copy)| (*id, copy.times_delivered))
                .collect()
        } else {
            Vec::new()
        };
        let g = s.group_mut(stream, group)?;
        for (id, times_delivered) in passed {
            if !g.pending.contains_key(&id) {
                let owed = Pending {
                    claim: Claim::Owed { due_ms: now_ms },
                    times_delivered,
                    since_ms: now_ms,
                };
                g.insert_pending(id, owed);
            }
        }
        g.set_cursor(cursor);
        Ok(())
    }
}
