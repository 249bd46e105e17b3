//! The consumer-group state machine of ruststream's local brokers.
//!
//! [`Engine`] holds streams and their consumer groups and implements every
//! rule of SPEC section 3 once, for the memory broker and the file-log
//! broker alike. It is pure: synchronous, no I/O, no async runtime, and the
//! time is an argument (`now_ms`, wall-clock milliseconds) of every call
//! that needs one. The same calls with the same times always produce the
//! same state, which is what lets the file log rebuild a group by replaying
//! its journal.
//!
//! ```
//! use ruststream_core::{Message, ReadMode, ReadRequest, StreamStart};
//! use ruststream_engine::Engine;
//!
//! let mut engine = Engine::new();
//! engine.ensure_group("jobs", "workers", StreamStart::New, 1_000);
//! let id = engine.publish("jobs", [Message::new(b"job-1".to_vec())], 1_000)[0];
//! let read = ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 10);
//! let batch = engine.read(&read, 1_001).unwrap();
//! assert_eq!(batch.deliveries[0].entry.id, id);
//! assert_eq!(engine.ack("jobs", "workers", &[id]).unwrap(), 1);
//! ```
//!
//! # Model
//!
//! A stream is a run of entries with strictly increasing ids. Trimming
//! removes old entries, except those a group still has pending or
//! dead-lettered: those move to a side table and stay readable (a dead
//! letter is a pointer, so the entry must outlive it).
//!
//! A group has a cursor (the last id handed out as new), a pending list and
//! a dead-letter list. A pending entry is either *held* by a consumer (since
//! its last delivery) or *owed* (held by nobody, due at a time: after a
//! retry with a delay, a nack or a redrive). Two indexes keep reads cheap
//! however long the pending list grows: held entries by last-delivery time
//! (for idle claims) and owed entries by due time.

#![forbid(unsafe_code)]

mod idmap;
mod journal;

pub use journal::{Change, GroupChange, RestoreReport};

use idmap::IdMap;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use ruststream_core::{
    BrokerError, BrokerResult, ConsumerInfo, DeadLetter, Delivery, Entry, EntryId, GroupInfo,
    Message, PendingEntry, ReadBatch, ReadMode, ReadRequest, StreamInfo, StreamStart, Trim,
};

/// Streams and their consumer groups, in memory.
#[derive(Debug, Default)]
pub struct Engine {
    streams: HashMap<String, StreamState>,
    /// Whether new streams and groups record their changes.
    recording: bool,
}

/// An entry as the engine stores it.
#[derive(Debug, Clone)]
struct Stored {
    id: EntryId,
    message: Arc<Message>,
    /// Set on a retry copy: the group it is for and the deliveries of the
    /// original it carries. Other groups pass over the copy.
    copy: Option<Arc<CopyOf>>,
}

/// What a retry copy carries over from its original.
#[derive(Debug, PartialEq, Eq)]
pub struct CopyOf {
    /// The group that retried the original; the only one the copy is for.
    pub group: String,
    /// How many times the original had been delivered to that group.
    pub times_delivered: u32,
}

impl Stored {
    fn entry(&self) -> Entry {
        Entry {
            id: self.id,
            message: Arc::clone(&self.message),
        }
    }

    fn is_for(&self, group: &str) -> bool {
        self.copy.as_ref().is_none_or(|c| c.group == group)
    }

    fn carried(&self) -> u32 {
        self.copy.as_ref().map_or(0, |c| c.times_delivered)
    }
}

#[derive(Debug, Default)]
struct StreamState {
    /// Entries in id order.
    entries: VecDeque<Stored>,
    /// Entries trimmed from `entries` while some group still needed them.
    /// All their ids are below the first id in `entries`.
    retained: BTreeMap<EntryId, Stored>,
    /// The last id ever appended.
    last_id: EntryId,
    groups: BTreeMap<String, Group>,
    /// Changes not yet taken, when recording (see [`journal`]).
    log: Option<Vec<StreamChange>>,
}

/// A change to a stream itself, before it is named in a [`Change`].
#[derive(Debug)]
enum StreamChange {
    Appended(Stored),
    GroupCreated { group: String, cursor: EntryId },
    Trimmed { below: EntryId, keep: Vec<EntryId> },
    Released { ids: Vec<EntryId> },
}

impl StreamChange {
    fn named(self, stream: &str) -> Change {
        let stream = stream.to_owned();
        match self {
            StreamChange::Appended(stored) => Change::Appended {
                stream,
                id: stored.id,
                message: stored.message,
                copy: stored.copy,
            },
            StreamChange::GroupCreated { group, cursor } => Change::GroupCreated {
                stream,
                group,
                cursor,
            },
            StreamChange::Released { ids } => Change::Released { stream, ids },
            StreamChange::Trimmed { below, keep } => Change::Trimmed {
                stream,
                below,
                keep,
            },
        }
    }
}

#[derive(Debug)]
struct Group {
    cursor: EntryId,
    pending: IdMap<Pending>,
    /// Held entries as (last delivery time, id), in delivery order, which is
    /// time order while the clock does not step back. Kept lazily: acks and
    /// redeliveries leave stale records behind, which reads drop from the
    /// front (and compact when they pile up), so the hot path pays one
    /// push per delivery instead of two tree updates.
    held_by_time: VecDeque<(u64, EntryId)>,
    /// Owed entries by (due time, id).
    owed_by_time: BTreeSet<(u64, EntryId)>,
    consumers: Vec<Consumer>,
    consumer_index: HashMap<String, u32>,
    dead: BTreeMap<EntryId, Dead>,
    /// Changes not yet taken, when recording (see [`journal`]).
    log: Option<Vec<GroupChange>>,
}

#[derive(Debug)]
struct Consumer {
    name: String,
    seen_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    claim: Claim,
    times_delivered: u32,
    /// Last delivery time for a held entry; when it became owed for an
    /// owed one. Idle time is measured from here.
    since_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Held { consumer: u32 },
    Owed { due_ms: u64 },
}

#[derive(Debug, Clone)]
struct Dead {
    reason: String,
    times_delivered: u32,
    dead_at_ms: u64,
}

/// How a retried entry ended up: its id and, for a copy, the copy's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retried {
    /// The pending entry that was retried.
    pub original: EntryId,
    /// The id of the copy appended for it (only for retry with copy).
    pub copy: Option<EntryId>,
}

fn ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn max_deliveries_reason(times: u32, max: u32) -> String {
    format!("delivered {times} times, reaching max_deliveries({max})")
}

impl Group {
    fn new(cursor: EntryId, recording: bool) -> Self {
        Group {
            log: recording.then(Vec::new),
            cursor,
            pending: IdMap::default(),
            held_by_time: VecDeque::new(),
            owed_by_time: BTreeSet::new(),
            consumers: Vec::new(),
            consumer_index: HashMap::new(),
            dead: BTreeMap::new(),
        }
    }

    fn consumer(&mut self, name: &str, now_ms: u64) -> u32 {
        if let Some(&ix) = self.consumer_index.get(name) {
            self.consumers[ix as usize].seen_ms = now_ms;
            return ix;
        }
        let ix = u32::try_from(self.consumers.len()).unwrap_or(u32::MAX);
        self.consumers.push(Consumer {
            name: name.to_owned(),
            seen_ms: now_ms,
        });
        self.consumer_index.insert(name.to_owned(), ix);
        self.record(|| GroupChange::Consumer {
            name: name.to_owned(),
        });
        ix
    }

    fn record(&mut self, change: impl FnOnce() -> GroupChange) {
        if let Some(log) = &mut self.log {
            log.push(change());
        }
    }

    /// Settles `id`: takes it out of the pending list (recorded).
    fn remove_pending(&mut self, id: EntryId) -> Option<Pending> {
        let p = self.take_pending(id)?;
        self.record(|| GroupChange::Settled { id });
        Some(p)
    }

    /// Settles every pending id of `ids` (recorded); returns how many.
    fn settle_all(&mut self, ids: &[EntryId]) -> u64 {
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
    fn take_pending(&mut self, id: EntryId) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        self.unindex(id, &p);
        Some(p)
    }

    /// Records `id` as a dead letter.
    fn kill(&mut self, id: EntryId, dead: Dead) {
        self.record(|| GroupChange::Dead {
            id,
            reason: dead.reason.clone(),
            times_delivered: dead.times_delivered,
            dead_at_ms: dead.dead_at_ms,
        });
        self.dead.insert(id, dead);
    }

    /// Removes the dead letter `id`, if there is one.
    fn revive(&mut self, id: EntryId) -> bool {
        let found = self.dead.remove(&id).is_some();
        if found {
            self.record(|| GroupChange::Undead { id });
        }
        found
    }

    fn set_cursor(&mut self, cursor: EntryId) {
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
    fn insert_pending(&mut self, id: EntryId, p: Pending) {
        self.record(|| GroupChange::of_pending(id, &p));
        self.put_pending(id, p);
    }

    fn put_pending(&mut self, id: EntryId, p: Pending) {
        if let Some(old) = self.pending.insert(id, p) {
            self.unindex(id, &old);
        }
        match p.claim {
            Claim::Held { .. } => self.held_by_time.push_back((p.since_ms, id)),
            Claim::Owed { due_ms } => {
                self.owed_by_time.insert((due_ms, id));
            }
        }
    }

    /// Whether a `held_by_time` record still describes the entry's claim.
    fn is_current(&self, since_ms: u64, id: EntryId) -> bool {
        self.pending
            .get(&id)
            .is_some_and(|p| p.since_ms == since_ms && matches!(p.claim, Claim::Held { .. }))
    }

    /// Drops stale records from the front of `held_by_time`, and compacts
    /// it when stale records behind a long-held entry pile up.
    fn prune_held(&mut self) {
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
    }

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

    fn holds(&self, id: &EntryId) -> bool {
        self.pending.contains_key(id) || self.dead.contains_key(id)
    }

    /// Hands out an entry already in the pending list to `consumer`, or
    /// dead-letters it if it reached `max`. Returns the delivery if handed.
    fn redeliver(
        &mut self,
        id: EntryId,
        consumer: u32,
        max: Option<u32>,
        now_ms: u64,
        dead_lettered: &mut Vec<EntryId>,
    ) -> Option<(u32, u64)> {
        let p = self.take_pending(id)?;
        if let Some(max) = max.filter(|&m| p.times_delivered >= m) {
            self.kill(
                id,
                Dead {
                    reason: max_deliveries_reason(p.times_delivered, max),
                    times_delivered: p.times_delivered,
                    dead_at_ms: now_ms,
                },
            );
            dead_lettered.push(id);
            return None;
        }
        let idle = now_ms.saturating_sub(p.since_ms);
        self.insert_pending(
            id,
            Pending {
                claim: Claim::Held { consumer },
                times_delivered: p.times_delivered.saturating_add(1),
                since_ms: now_ms,
            },
        );
        Some((p.times_delivered, idle))
    }
}

impl StreamState {
    fn find(&self, id: EntryId) -> Option<&Stored> {
        if let Some(s) = self.retained.get(&id) {
            return Some(s);
        }
        let at = self.entries.partition_point(|e| e.id < id);
        self.entries.get(at).filter(|e| e.id == id)
    }

    fn group(&self, stream: &str, group: &str) -> BrokerResult<&Group> {
        self.groups
            .get(group)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    fn group_mut(&mut self, stream: &str, group: &str) -> BrokerResult<&mut Group> {
        self.groups
            .get_mut(group)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    fn pinned(&self, id: &EntryId) -> bool {
        self.groups.values().any(|g| g.holds(id))
    }

    /// Whether `stored` is a retry copy its group has not read yet: the
    /// original is already acked, so the copy is the only record of work
    /// still owed and must survive trimming like a pending entry.
    fn unread_copy(&self, stored: &Stored) -> bool {
        stored.copy.as_ref().is_some_and(|c| {
            self.groups
                .get(&c.group)
                .is_some_and(|g| g.cursor < stored.id)
        })
    }

    /// Drops retained entries that no group needs any more.
    fn release(&mut self, ids: impl IntoIterator<Item = EntryId>) {
        if self.retained.is_empty() {
            return;
        }
        let mut released = Vec::new();
        for id in ids {
            if self.retained.contains_key(&id) && !self.pinned(&id) {
                self.retained.remove(&id);
                released.push(id);
            }
        }
        if let Some(log) = self.log.as_mut().filter(|_| !released.is_empty()) {
            log.push(StreamChange::Released { ids: released });
        }
    }

    /// Entries after `after`, retained ones first, in id order.
    fn after(&self, after: EntryId) -> impl Iterator<Item = &Stored> + '_ {
        let start = self.entries.partition_point(|e| e.id <= after);
        self.retained
            .range((Bound::Excluded(after), Bound::Unbounded))
            .map(|(_, s)| s)
            .chain(self.entries.range(start..))
    }

    fn len(&self) -> u64 {
        (self.entries.len() + self.retained.len()) as u64
    }

    fn start_position(&self, start: StreamStart) -> EntryId {
        match start {
            StreamStart::New => self.last_id,
            StreamStart::Beginning => EntryId::ZERO,
            StreamStart::Id(id) => id,
        }
    }

    fn append(&mut self, message: Arc<Message>, copy: Option<Arc<CopyOf>>, now_ms: u64) -> EntryId {
        let id = self.last_id.successor_at(now_ms);
        self.last_id = id;
        let stored = Stored { id, message, copy };
        if let Some(log) = &mut self.log {
            log.push(StreamChange::Appended(stored.clone()));
        }
        self.entries.push_back(stored);
        id
    }
}

impl Engine {
    /// An engine with no streams.
    pub fn new() -> Self {
        Engine::default()
    }

    fn stream(&self, stream: &str) -> BrokerResult<&StreamState> {
        self.streams
            .get(stream)
            .ok_or_else(|| BrokerError::InvalidArgument(format!("no stream named {stream:?}")))
    }

    fn group_of(&self, stream: &str, group: &str) -> BrokerResult<(&StreamState, &Group)> {
        let s = self
            .streams
            .get(stream)
            .ok_or_else(|| BrokerError::no_group(stream, group))?;
        Ok((s, s.group(stream, group)?))
    }

    fn stream_mut(&mut self, stream: &str, group: &str) -> BrokerResult<&mut StreamState> {
        self.streams
            .get_mut(stream)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    /// `stream`'s state, created (recording if the engine records) if new.
    fn stream_entry(&mut self, stream: &str) -> &mut StreamState {
        let recording = self.recording;
        let s = self.streams.entry_ref(stream);
        if recording && s.log.is_none() {
            s.log = Some(Vec::new());
        }
        s
    }

    /// Appends messages to `stream`, creating it if needed, and returns
    /// their ids: `now_ms-seq`, strictly increasing even if `now_ms` goes
    /// back.
    pub fn publish(
        &mut self,
        stream: &str,
        messages: impl IntoIterator<Item = Message>,
        now_ms: u64,
    ) -> Vec<EntryId> {
        let s = self.stream_entry(stream);
        messages
            .into_iter()
            .map(|m| s.append(Arc::new(m), None, now_ms))
            .collect()
    }

    /// Appends an already shared message (no copy of the payload).
    pub fn publish_shared(&mut self, stream: &str, message: Arc<Message>, now_ms: u64) -> EntryId {
        self.stream_entry(stream).append(message, None, now_ms)
    }

    /// Creates `group` at `start` (and the stream if needed). Returns
    /// `false`, changing nothing, if the group exists (rule 1).
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
    /// passed over by new reads.
    pub fn set_group_position(
        &mut self,
        stream: &str,
        group: &str,
        start: StreamStart,
    ) -> BrokerResult<()> {
        self.check_start(stream, start)?;
        let s = self.stream_mut(stream, group)?;
        let cursor = s.start_position(start);
        s.group_mut(stream, group)?.set_cursor(cursor);
        Ok(())
    }

    /// Reads from a group; see [`ReadMode`] for what each mode hands out.
    pub fn read(&mut self, req: &ReadRequest<'_>, now_ms: u64) -> BrokerResult<ReadBatch> {
        if req.count == 0 {
            return Err(BrokerError::InvalidArgument(format!(
                "read from group {:?} on stream {:?} asked for 0 entries; count must be at least 1",
                req.group, req.stream
            )));
        }
        let wants_new = matches!(req.mode, ReadMode::New | ReadMode::Claiming { .. });
        let s = self.stream_mut(req.stream, req.group)?;
        let g = s.group_mut(req.stream, req.group)?;
        let consumer = g.consumer(req.consumer, now_ms);
        g.prune_held();
        let max = req.max_deliveries;
        let mut handed: Vec<(EntryId, u32, u64)> = Vec::new();
        let mut dead_lettered = Vec::new();

        if let ReadMode::OwnPending { after } = req.mode {
            let own: Vec<EntryId> = g
                .pending
                .range_from(Bound::Excluded(after))
                .filter(|(_, p)| p.claim == Claim::Held { consumer })
                .map(|(id, _)| *id)
                .take(req.count)
                .collect();
            for id in own {
                if let Some((count, idle)) =
                    g.redeliver(id, consumer, max, now_ms, &mut dead_lettered)
                {
                    handed.push((id, count, idle));
                }
            }
        } else {
            // Owed entries first, in the order they became due.
            while handed.len() < req.count {
                let Some(&(due, id)) = g.owed_by_time.first() else {
                    break;
                };
                if due > now_ms {
                    break;
                }
                if let Some((count, idle)) =
                    g.redeliver(id, consumer, max, now_ms, &mut dead_lettered)
                {
                    handed.push((id, count, idle));
                }
            }
            // Then entries idle long enough, longest idle first.
            if let ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } = req.mode {
                let threshold = now_ms.checked_sub(ms(min_idle));
                if let Some(threshold) = threshold {
                    let room = req.count - handed.len();
                    let idle = g.idle_since(threshold, room, &handed);
                    for id in idle {
                        if let Some((count, idle)) =
                            g.redeliver(id, consumer, max, now_ms, &mut dead_lettered)
                        {
                            handed.push((id, count, idle));
                        }
                    }
                }
            }
        }

        let capacity = if wants_new { req.count } else { handed.len() };
        let mut deliveries = Vec::with_capacity(capacity);
        for (id, delivery_count, idle_ms) in handed {
            if let Some(stored) = s.find(id) {
                deliveries.push(Delivery {
                    entry: stored.entry(),
                    delivery_count,
                    idle_ms,
                });
            }
        }

        if wants_new {
            let StreamState {
                entries,
                retained,
                groups,
                ..
            } = s;
            let g = groups
                .get_mut(req.group)
                .ok_or_else(|| BrokerError::no_group(req.stream, req.group))?;
            let start = entries.partition_point(|e| e.id <= g.cursor);
            let fresh = retained
                .range((Bound::Excluded(g.cursor), Bound::Unbounded))
                .map(|(_, s)| s)
                .chain(entries.range(start..));
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
                // break a standing claim (rule 3) and reset their counts.
                // (Ids only grow along `fresh`, so what this loop adds to the
                // group never matches a later entry.)
                if !stored.is_for(req.group) || (rewound && g.holds(&stored.id)) {
                    continue;
                }
                taken += 1;
                let carried = stored.carried();
                if let Some(max) = max.filter(|&m| carried >= m) {
                    g.kill(
                        stored.id,
                        Dead {
                            reason: max_deliveries_reason(carried, max),
                            times_delivered: carried,
                            dead_at_ms: now_ms,
                        },
                    );
                    dead_lettered.push(stored.id);
                    continue;
                }
                g.insert_pending(
                    stored.id,
                    Pending {
                        claim: Claim::Held { consumer },
                        times_delivered: carried.saturating_add(1),
                        since_ms: now_ms,
                    },
                );
                deliveries.push(Delivery {
                    entry: stored.entry(),
                    delivery_count: carried,
                    idle_ms: 0,
                });
            }
            g.set_cursor(cursor);
        }
        Ok(ReadBatch {
            deliveries,
            dead_lettered,
        })
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

    /// Acknowledges entries (rule 6: idempotent). Returns how many left the
    /// pending list.
    pub fn ack(&mut self, stream: &str, group: &str, ids: &[EntryId]) -> BrokerResult<u64> {
        let s = self.stream_mut(stream, group)?;
        let g = s.group_mut(stream, group)?;
        let n = g.settle_all(ids);
        s.release(ids.iter().copied());
        Ok(n)
    }

    /// Retry with copy: for each pending id, appends a copy for this group
    /// carrying the original's delivery count, and acknowledges the
    /// original, in one step.
    pub fn retry_copy(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        now_ms: u64,
    ) -> BrokerResult<Vec<Retried>> {
        let s = self.stream_mut(stream, group)?;
        s.group(stream, group)?;
        let mut out = Vec::new();
        for &id in ids {
            let g = s.group_mut(stream, group)?;
            let Some(p) = g.remove_pending(id) else {
                continue;
            };
            let Some(message) = s.find(id).map(|st| Arc::clone(&st.message)) else {
                continue;
            };
            let copy = Arc::new(CopyOf {
                group: group.to_owned(),
                times_delivered: p.times_delivered,
            });
            let copy_id = s.append(message, Some(copy), now_ms);
            out.push(Retried {
                original: id,
                copy: Some(copy_id),
            });
        }
        s.release(ids.iter().copied());
        Ok(out)
    }

    /// Retry after a delay: each pending id is held by nobody and owed again
    /// at `now_ms + delay_ms` (rule 7; 0 is an immediate nack).
    pub fn retry_after(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        delay_ms: u64,
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        let mut n = 0;
        for &id in ids {
            let Some(p) = g.take_pending(id) else {
                continue;
            };
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
            n += 1;
        }
        Ok(n)
    }

    /// Dead-letters pending entries with `reason` (rule 8).
    pub fn dead_letter(
        &mut self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        reason: &str,
        now_ms: u64,
    ) -> BrokerResult<u64> {
        let g = self.stream_mut(stream, group)?.group_mut(stream, group)?;
        let mut n = 0;
        for &id in ids {
            let Some(p) = g.take_pending(id) else {
                continue;
            };
            g.kill(
                id,
                Dead {
                    reason: reason.to_owned(),
                    times_delivered: p.times_delivered,
                    dead_at_ms: now_ms,
                },
            );
            n += 1;
        }
        Ok(n)
    }

    /// Makes dead letters owed again at once with their delivery counts
    /// reset; the cursor does not move (rule 8).
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

    /// Drops dead letters (rule 8).
    pub fn discard(&mut self, stream: &str, group: &str, ids: &[EntryId]) -> BrokerResult<u64> {
        let s = self.stream_mut(stream, group)?;
        let g = s.group_mut(stream, group)?;
        let n = ids.iter().filter(|id| g.revive(**id)).count() as u64;
        s.release(ids.iter().copied());
        Ok(n)
    }

    /// A group's summary (rule 9).
    pub fn group_info(&self, stream: &str, group: &str) -> BrokerResult<GroupInfo> {
        let (s, g) = self.group_of(stream, group)?;
        Ok(GroupInfo {
            stream: stream.to_owned(),
            name: group.to_owned(),
            last_delivered: g.cursor,
            lag: s
                .after(g.cursor)
                .filter(|e| e.is_for(group) && !g.holds(&e.id))
                .count() as u64,
            pending: g.pending.len() as u64,
            dead_letters: g.dead.len() as u64,
            consumers: g.consumers.len() as u64,
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
            .consumers
            .iter()
            .zip(counts)
            .map(|(c, pending)| ConsumerInfo {
                name: c.name.clone(),
                pending,
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

    /// Entries with ids in `from..=to`, in id order (replay).
    pub fn range(&self, stream: &str, from: EntryId, to: EntryId, count: usize) -> Vec<Entry> {
        let Some(s) = self.streams.get(stream) else {
            return Vec::new();
        };
        if from > to {
            return Vec::new();
        }
        let start = s.entries.partition_point(|e| e.id < from);
        s.retained
            .range(from..=to)
            .map(|(_, st)| st)
            .chain(s.entries.range(start..).take_while(|e| e.id <= to))
            .take(count)
            .map(Stored::entry)
            .collect()
    }

    /// What a retry copy carries, if `id` is one.
    pub fn copy_of(&self, stream: &str, id: EntryId) -> Option<&CopyOf> {
        self.streams.get(stream)?.find(id)?.copy.as_deref()
    }

    /// A stream's summary, or `None` if there is none.
    pub fn stream_info(&self, stream: &str) -> Option<StreamInfo> {
        let s = self.streams.get(stream)?;
        Some(StreamInfo {
            name: stream.to_owned(),
            length: s.len(),
            first_id: s
                .retained
                .keys()
                .next()
                .copied()
                .or_else(|| s.entries.front().map(|e| e.id)),
            last_id: s.last_id,
            groups: s.groups.keys().cloned().collect(),
        })
    }

    /// Trims old entries; entries a group still has pending or
    /// dead-lettered are kept (and stay readable) until settled. Returns
    /// how many entries left the stream.
    pub fn trim(&mut self, stream: &str, trim: Trim) -> BrokerResult<u64> {
        let Some(s) = self.streams.get_mut(stream) else {
            return Ok(0);
        };
        let mut removed = 0;
        let mut keep = Vec::new();
        while let Some(front) = s.entries.front() {
            let goes = match trim {
                Trim::MaxLen(n) => s.entries.len() as u64 > n,
                Trim::MinId(min) => front.id < min,
            };
            if !goes {
                break;
            }
            let Some(front) = s.entries.pop_front() else {
                break;
            };
            if s.pinned(&front.id) || s.unread_copy(&front) {
                keep.push(front.id);
                s.retained.insert(front.id, front);
            } else {
                removed += 1;
            }
        }
        if removed + keep.len() as u64 > 0 {
            let below = s.entries.front().map_or(s.last_id.next(), |e| e.id);
            if let Some(log) = &mut s.log {
                log.push(StreamChange::Trimmed { below, keep });
            }
        }
        Ok(removed)
    }

    /// Whether the stream exists.
    pub fn has_stream(&self, stream: &str) -> bool {
        self.stream(stream).is_ok()
    }
}

/// `HashMap::entry` without allocating a key when it exists.
trait EntryRef {
    fn entry_ref(&mut self, key: &str) -> &mut StreamState;
}

impl EntryRef for HashMap<String, StreamState> {
    fn entry_ref(&mut self, key: &str) -> &mut StreamState {
        if !self.contains_key(key) {
            self.insert(key.to_owned(), StreamState::default());
        }
        match self.get_mut(key) {
            Some(s) => s,
            None => unreachable!("inserted above"),
        }
    }
}

#[cfg(test)]
mod tests;
