//! Recording the engine's state changes, and rebuilding an engine from
//! them: what the file-log broker journals.
//!
//! With recording on ([`Engine::record_changes`]), every call that changes
//! state leaves [`Change`]s behind, which [`Engine::take_changes`] hands
//! over. Entries ([`Change::Appended`]) are what a durable broker writes to
//! its stream segments; the rest is group state for its journal. Group
//! changes are upserts of one entry's state (or the cursor's), so applying
//! the same sequence again gives the same state, and a snapshot is just the
//! changes that recreate the current state ([`Engine::snapshot`]).
//!
//! Rebuilding: [`Engine::restore`] every change in the order recorded
//! (entries first, from the segments, then the journal; changes of one
//! call must not be reordered), then [`Engine::finish_restore`], which
//! drops references to entries that never became durable. Trims carry the
//! entries they kept, so a rebuild keeps exactly what the live engine kept.

use std::sync::Arc;

use ruststream_core::{EntryId, Message};

use crate::Engine;
use crate::dead::Dead;
use crate::group::{Claim, Consumer, Group, Pending};
use crate::stream::{CopyOf, EntryRef};

/// One change to the engine's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An entry was appended to a stream.
    Appended {
        /// The stream.
        stream: String,
        /// The entry's id.
        id: EntryId,
        /// Headers and payload.
        message: Arc<Message>,
        /// For a retry copy: its group and carried delivery count.
        copy: Option<Arc<CopyOf>>,
    },
    /// A consumer group was created at `cursor`.
    GroupCreated {
        /// The stream.
        stream: String,
        /// The group.
        group: String,
        /// Its cursor at creation.
        cursor: EntryId,
    },
    /// A group's state changed (the changes of one call, in order).
    Group {
        /// The stream.
        stream: String,
        /// The group.
        group: String,
        /// What changed, in order.
        changes: Vec<GroupChange>,
    },
    /// Entries below `below` were trimmed, except `keep`: entries a group
    /// still needed, which stay until settled.
    Trimmed {
        /// The stream.
        stream: String,
        /// Entries with smaller ids are gone...
        below: EntryId,
        /// ...except these (sorted).
        keep: Vec<EntryId>,
    },
    /// Entries kept by a trim were dropped once no group needed them.
    Released {
        /// The stream.
        stream: String,
        /// The entries dropped.
        ids: Vec<EntryId>,
    },
    /// The stream's last id (in snapshots: ids never go back, even when
    /// every entry is gone).
    LastId {
        /// The stream.
        stream: String,
        /// Its last id ever.
        id: EntryId,
    },
}

/// A change to one group's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupChange {
    /// A consumer joined; it gets the next consumer number.
    Consumer {
        /// Its name.
        name: String,
    },
    /// Consumer number `consumer` was seen (read, or refreshed a claim) at
    /// `at_ms`: recorded when it joins, then at most once per
    /// [`crate::SEEN_EVERY_MS`] while it keeps reading, and for every
    /// consumer in a snapshot. Replayed, the newest one counts (and a
    /// [`GroupChange::Held`] delivery time past it). A consumer with none
    /// (a log written before these were) is taken as seen when the rebuild
    /// ends (see [`Engine::finish_restore`]).
    Seen {
        /// The consumer's number.
        consumer: u32,
        /// When.
        at_ms: u64,
    },
    /// Consumer number `consumer` was deleted (it held nothing); its name
    /// may join again as a new consumer.
    ConsumerGone {
        /// The consumer's number.
        consumer: u32,
    },
    /// `id` is pending, held by consumer number `consumer` since `since_ms`.
    Held {
        /// The entry.
        id: EntryId,
        /// The consumer's number (order of [`GroupChange::Consumer`]).
        consumer: u32,
        /// Deliveries so far.
        times_delivered: u32,
        /// Last delivery time.
        since_ms: u64,
    },
    /// `id` is pending, held by nobody, owed from `due_ms`.
    Owed {
        /// The entry.
        id: EntryId,
        /// When it is owed.
        due_ms: u64,
        /// Deliveries so far.
        times_delivered: u32,
        /// When it became owed.
        since_ms: u64,
    },
    /// `id` left the pending list.
    Settled {
        /// The entry.
        id: EntryId,
    },
    /// `id` left the pending list for a retry copy, `copy`, appended in
    /// the same call. Restored as [`GroupChange::Settled`], unless the copy
    /// is not on disk at the end of the rebuild: the power failed after
    /// this record reached the disk and before the copy did. `id` is then
    /// owed again (see [`Engine::finish_restore`]), so a retry never loses
    /// the entry it retries.
    Copied {
        /// The entry retried.
        id: EntryId,
        /// Its copy.
        copy: EntryId,
    },
    /// `id` became a dead letter.
    Dead {
        /// The entry.
        id: EntryId,
        /// Why.
        reason: String,
        /// Deliveries so far.
        times_delivered: u32,
        /// When.
        dead_at_ms: u64,
    },
    /// `id` is no longer a dead letter (redriven or discarded).
    Undead {
        /// The entry.
        id: EntryId,
    },
    /// The group's cursor moved.
    Cursor {
        /// The new cursor.
        cursor: EntryId,
    },
}

impl GroupChange {
    pub(crate) fn of_pending(id: EntryId, p: &Pending) -> Self {
        match p.claim {
            Claim::Held { consumer } => GroupChange::Held {
                id,
                consumer,
                times_delivered: p.times_delivered,
                since_ms: p.since_ms,
            },
            Claim::Owed { due_ms } => GroupChange::Owed {
                id,
                due_ms,
                times_delivered: p.times_delivered,
                since_ms: p.since_ms,
            },
        }
    }
}

/// Group changes per [`Change::Group`] in a snapshot.
const SNAPSHOT_PIECE: usize = 4096;

/// What [`Engine::finish_restore`] had to drop or put back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Pending entries or dead letters whose entry was not found (it never
    /// became durable before a crash); each as (stream, group, id).
    pub dangling: Vec<(String, String, EntryId)>,
    /// Entries retried with a copy that is not on disk
    /// ([`GroupChange::Copied`]): owed again; each as (stream, group, id).
    pub uncopied: Vec<(String, String, EntryId)>,
}

impl Engine {
    /// Turns change recording on or off. While on, every state change is
    /// kept until [`Engine::take_changes`].
    pub fn record_changes(&mut self, on: bool) {
        self.recording = on;
        for s in self.streams.values_mut() {
            s.log = on.then(Vec::new);
            for g in s.groups.values_mut() {
                g.log = on.then(Vec::new);
            }
        }
    }

    /// The changes recorded since the last call, in an order that
    /// [`Engine::restore`] can replay: per stream, its own changes
    /// (appends, group creation, trims), then each group's.
    pub fn take_changes(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        self.take_changes_into(&mut out);
        out
    }

    /// [`Engine::take_changes`] into a buffer the caller reuses.
    pub fn take_changes_into(&mut self, out: &mut Vec<Change>) {
        for (name, s) in &mut self.streams {
            if let Some(log) = &mut s.log {
                out.extend(log.drain(..).map(|c| c.named(name)));
            }
            for (group, g) in &mut s.groups {
                if let Some(log) = g.log.as_mut().filter(|log| !log.is_empty()) {
                    out.push(Change::Group {
                        stream: name.clone(),
                        group: group.clone(),
                        changes: std::mem::take(log),
                    });
                }
            }
        }
    }

    /// Changes that recreate every group's state, every stream's trim
    /// point and last id (not the entries themselves).
    pub fn snapshot(&self) -> Vec<Change> {
        let mut out = Vec::new();
        let mut names: Vec<&String> = self.streams.keys().collect();
        names.sort();
        for name in names {
            let s = &self.streams[name];
            out.push(Change::LastId {
                stream: name.clone(),
                id: s.last_id,
            });
            for (group, g) in &s.groups {
                out.push(Change::GroupCreated {
                    stream: name.clone(),
                    group: group.clone(),
                    cursor: g.cursor,
                });
                // Deleted consumers keep their numbers: held records name
                // consumers by number.
                let consumers = g.consumers.iter().map(|c| GroupChange::Consumer {
                    name: c.name.clone(),
                });
                let gone = (0u32..)
                    .zip(&g.consumers)
                    .filter(|(_, c)| c.gone)
                    .map(|(consumer, _)| GroupChange::ConsumerGone { consumer });
                // Each live consumer's seen time, exactly.
                let seen = g.live_consumers().map(|(consumer, c)| GroupChange::Seen {
                    consumer,
                    at_ms: c.seen_ms,
                });
                let pending = g
                    .pending
                    .iter()
                    .map(|(id, p)| GroupChange::of_pending(*id, p));
                let dead = g.dead.iter().map(|(id, d)| GroupChange::Dead {
                    id: *id,
                    reason: d.reason.clone(),
                    times_delivered: d.times_delivered,
                    dead_at_ms: d.dead_at_ms,
                });
                let all: Vec<GroupChange> = consumers
                    .chain(gone)
                    .chain(seen)
                    .chain(pending)
                    .chain(dead)
                    .collect();
                // In pieces, so that no one record grows without bound.
                for piece in all.chunks(SNAPSHOT_PIECE) {
                    out.push(Change::Group {
                        stream: name.clone(),
                        group: group.clone(),
                        changes: piece.to_vec(),
                    });
                }
            }
            out.push(Change::Trimmed {
                stream: name.clone(),
                below: s.entries.first_id().unwrap_or(s.last_id.next()),
                keep: s.retained.keys().copied().collect(),
            });
        }
        out
    }

    /// Applies one recorded change while rebuilding (recording should be
    /// off). Changes for unknown groups are ignored.
    ///
    /// # Errors
    ///
    /// A change that cannot be part of any recorded history, such as an
    /// entry held by a consumer number the group never had: the file it
    /// came from is damaged (or written by a bug), and the caller names it.
    pub fn restore(&mut self, change: Change) -> Result<(), String> {
        match change {
            Change::Appended {
                stream,
                id,
                message,
                copy,
            } => {
                let cache = self.cache;
                let s = self.streams.entry_ref(&stream);
                s.cache = cache;
                s.restore_entry(id, copy, Some(message));
            }
            Change::GroupCreated {
                stream,
                group,
                cursor,
            } => {
                let s = self.streams.entry_ref(&stream);
                s.groups
                    .entry(group)
                    .or_insert_with(|| Group::new(cursor, false));
            }
            Change::Trimmed {
                stream,
                below,
                keep,
            } => {
                let s = self.streams.entry_ref(&stream);
                while s.entries.first_id().is_some_and(|id| id < below) {
                    let Some(front) = s.entries.pop_front() else {
                        break;
                    };
                    if keep.binary_search(&front.id).is_ok() {
                        s.retained.insert(front.id, front);
                    } else {
                        s.set_aside.insert(front.id, front);
                    }
                }
            }
            Change::Released { stream, ids } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    for id in ids {
                        if let Some(stored) = s.retained.remove(&id) {
                            s.set_aside.insert(id, stored);
                        }
                    }
                }
            }
            Change::LastId { stream, id } => {
                let s = self.streams.entry_ref(&stream);
                s.last_id = s.last_id.max(id);
            }
            Change::Group {
                stream,
                group,
                changes,
            } => {
                let Some(g) = self
                    .streams
                    .get_mut(&stream)
                    .and_then(|s| s.groups.get_mut(&group))
                else {
                    return Ok(());
                };
                for change in changes {
                    g.apply(change)
                        .map_err(|e| format!("group {group:?} of stream {stream:?}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// For the holder of a durable log, after [`Engine::finish_restore`]:
    /// each live consumer with no recorded seen time (the log was written
    /// before those were, and the rebuild took it as seen at its end) is
    /// marked recorded at that time, and the times are returned as
    /// [`GroupChange::Seen`] records, one [`Change::Group`] per group, for
    /// the caller to write. A later rebuild of the log (a reopen, or a
    /// read-only view of it while held) then counts idle times from the
    /// same moment rather than from its own end. Empty when every consumer
    /// has one.
    pub fn take_unrecorded_seen(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        for (name, s) in &mut self.streams {
            for (group, g) in &mut s.groups {
                let mut changes = Vec::new();
                for (consumer, c) in (0u32..).zip(g.consumers.iter_mut()) {
                    if !c.gone && c.seen_recorded_ms.is_none() {
                        c.seen_recorded_ms = Some(c.seen_ms);
                        changes.push(GroupChange::Seen {
                            consumer,
                            at_ms: c.seen_ms,
                        });
                    }
                }
                if !changes.is_empty() {
                    out.push(Change::Group {
                        stream: name.clone(),
                        group: group.clone(),
                        changes,
                    });
                }
            }
        }
        out
    }

    /// After a rebuild that took the group state of the streams `from_memory`
    /// accepts from `old`'s [`Engine::snapshot`] (taking a failed call
    /// back), puts back each of their consumers' recorded seen time as
    /// `old` had it. A snapshot writes each seen time exactly, and restored
    /// that counts as recorded; in memory it may not be (see
    /// [`crate::SEEN_EVERY_MS`]), and counting it so would put off the next
    /// record past the bound a reopen relies on. A consumer `old` had
    /// recorded nothing for stays so, and its next read records. Call it
    /// after [`Engine::finish_restore`].
    pub fn keep_seen_recorded(&mut self, old: &Engine, from_memory: impl Fn(&str) -> bool) {
        for (name, s) in self.streams.iter_mut().filter(|(n, _)| from_memory(n)) {
            let Some(old_s) = old.streams.get(name) else {
                continue;
            };
            for (group, g) in &mut s.groups {
                let Some(old_g) = old_s.groups.get(group) else {
                    continue;
                };
                let same = g.consumers.iter_mut().zip(&old_g.consumers);
                for (c, old_c) in same.filter(|(c, o)| c.name == o.name) {
                    c.seen_recorded_ms = old_c.seen_recorded_ms;
                }
            }
        }
    }

    /// Ends a rebuild: makes owed again an entry whose retry copy is
    /// missing ([`GroupChange::Copied`]), drops pending entries and dead
    /// letters whose entries are missing (they never became durable),
    /// reporting both, puts each group's index of held entries back in time
    /// order, and keeps each stream's last id at or past every group's
    /// cursor (a group may have read entries a power failure took from the
    /// segments: new ids must not fall behind what it read).
    ///
    /// A consumer no [`GroupChange::Seen`] was restored for (the log was
    /// written before those were recorded) is taken as seen at `now_ms`,
    /// the time of the rebuild: its real seen time is unknown, and the
    /// newest time the log holds for it (its last delivery) may be long
    /// before polls that found nothing, so anything earlier could make a
    /// live consumer look idle and get it deleted. Its idle time is then
    /// short by up to the time it had been idle; its next read records its
    /// seen time, and a durable log's holder records it at once
    /// ([`Engine::take_unrecorded_seen`]).
    pub fn finish_restore(&mut self, now_ms: u64) -> RestoreReport {
        let mut report = RestoreReport::default();
        for (name, s) in &mut self.streams {
            for g in s.groups.values_mut() {
                for c in g.consumers.iter_mut() {
                    if c.seen_recorded_ms.is_none() {
                        c.seen_ms = c.seen_ms.max(now_ms);
                    }
                }
            }
            if let Some(cursor) = s.groups.values().map(|g| g.cursor).max() {
                s.last_id = s.last_id.max(cursor);
            }
            let mut set_aside = std::mem::take(&mut s.set_aside);
            let mut revived = Vec::new();
            for (group, g) in &mut s.groups {
                // A copy not on disk: its original is owed again. The
                // original may have been let go of by a trim or a release
                // the copy allowed (its bytes are still on disk: a segment
                // goes only once what lets it go is durable, the copy
                // included); it is then kept again. (An original missing
                // too is dropped below, as dangling.)
                let present =
                    |id: EntryId| s.retained.contains_key(&id) || s.entries.find(id).is_some();
                for (copy, chain) in std::mem::take(&mut g.copies) {
                    if present(copy) {
                        continue;
                    }
                    let original = chain
                        .iter()
                        .find(|(id, _)| present(*id))
                        .or_else(|| chain.iter().find(|(id, _)| set_aside.contains_key(id)));
                    let Some(&(id, p)) = original else {
                        continue;
                    };
                    if !present(id) {
                        revived.push(id);
                    }
                    g.take_pending(id);
                    g.put_pending(
                        id,
                        Pending {
                            claim: Claim::Owed { due_ms: p.since_ms },
                            ..p
                        },
                    );
                    report.uncopied.push((name.clone(), group.clone(), id));
                }
                g.reindex_held();
            }
            for id in revived {
                if let Some(stored) = set_aside.remove(&id) {
                    s.retained.insert(id, stored);
                }
            }
            let mut missing = Vec::new();
            for (group, g) in &s.groups {
                for id in g.pending.keys().chain(g.dead.keys()) {
                    let present = s.retained.contains_key(id) || s.entries.find(*id).is_some();
                    if !present {
                        missing.push((group.clone(), *id));
                    }
                }
            }
            for (group, id) in missing {
                if let Some(g) = s.groups.get_mut(&group) {
                    g.take_pending(id);
                    g.dead.remove(&id);
                }
                report.dangling.push((name.clone(), group, id));
            }
        }
        report
    }
}

impl Group {
    /// Rebuilds `held_by_time` from the pending list, in (last delivery
    /// time, id) order. Restoring puts entries in the order of their
    /// changes, which for a snapshot is id order: an entry delivered again
    /// (claimed, or its claim extended) has a later time than newer ids, and
    /// left there it would hide idle entries behind it from claiming reads,
    /// which stop at the first record not yet idle.
    fn reindex_held(&mut self) {
        let mut held: Vec<(u64, EntryId)> = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(p.claim, Claim::Held { .. }))
            .map(|(id, p)| (p.since_ms, *id))
            .collect();
        held.sort_unstable();
        self.held_by_time = held.into();
    }

    fn apply(&mut self, change: GroupChange) -> Result<(), String> {
        let known = |consumer: u32, consumers: &[Consumer]| {
            if (consumer as usize) < consumers.len() {
                Ok(())
            } else {
                Err(format!(
                    "consumer number {consumer}, but the group has {} consumers",
                    consumers.len()
                ))
            }
        };
        match change {
            GroupChange::Consumer { name } => {
                let ix = u32::try_from(self.consumers.len()).unwrap_or(u32::MAX);
                self.consumer_index.insert(name.clone(), ix);
                self.consumers.push(Consumer {
                    name,
                    seen_ms: 0,
                    seen_recorded_ms: None,
                    gone: false,
                });
            }
            GroupChange::Seen { consumer, at_ms } => {
                known(consumer, &self.consumers).map_err(|e| format!("seen time of {e}"))?;
                let c = &mut self.consumers[consumer as usize];
                c.seen_ms = c.seen_ms.max(at_ms);
                c.seen_recorded_ms = Some(c.seen_recorded_ms.unwrap_or(0).max(at_ms));
            }
            GroupChange::ConsumerGone { consumer } => {
                known(consumer, &self.consumers)?;
                self.delete_consumer(consumer);
            }
            GroupChange::Held {
                id,
                consumer,
                times_delivered,
                since_ms,
            } => {
                known(consumer, &self.consumers).map_err(|e| format!("entry {id} held by {e}"))?;
                let c = &mut self.consumers[consumer as usize];
                c.seen_ms = c.seen_ms.max(since_ms);
                self.put_pending(
                    id,
                    Pending {
                        claim: Claim::Held { consumer },
                        times_delivered,
                        since_ms,
                    },
                );
            }
            GroupChange::Owed {
                id,
                due_ms,
                times_delivered,
                since_ms,
            } => self.put_pending(
                id,
                Pending {
                    claim: Claim::Owed { due_ms },
                    times_delivered,
                    since_ms,
                },
            ),
            GroupChange::Settled { id } => {
                self.take_pending(id);
                // A copy handled to the end: what it was made for is done.
                self.copies.remove(&id);
            }
            GroupChange::Copied { id, copy } => {
                if let Some(p) = self.take_pending(id) {
                    // A copy of a copy stands for the whole chain: if it is
                    // missing, the newest entry of the chain on disk is owed.
                    let mut chain = self.copies.remove(&id).unwrap_or_default();
                    chain.insert(0, (id, p));
                    self.copies.insert(copy, chain);
                }
            }
            GroupChange::Dead {
                id,
                reason,
                times_delivered,
                dead_at_ms,
            } => {
                self.take_pending(id);
                // A copy dead-lettered: its handler decided (as for `Settled`).
                self.copies.remove(&id);
                self.dead.insert(
                    id,
                    Dead {
                        reason,
                        times_delivered,
                        dead_at_ms,
                    },
                );
            }
            GroupChange::Undead { id } => {
                self.dead.remove(&id);
            }
            GroupChange::Cursor { cursor } => self.cursor = cursor,
        }
        Ok(())
    }
}
