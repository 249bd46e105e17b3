//! Streams: entries in id order (held by [`crate::entries`]), the side
//! table of entries trimmed while a group still needed them, publishing,
//! trimming and reading ranges.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use ruststream_core::{
    BrokerError, BrokerResult, Entry, EntryId, Message, StreamInfo, StreamStart, Trim,
};

use crate::entries::{Entries, Stored, View, is_unloaded};
use crate::group::Group;
use crate::{Change, Engine};

/// What a retry copy carries over from its original.
#[derive(Debug, PartialEq, Eq)]
pub struct CopyOf {
    /// The group that retried the original; the only one the copy is for.
    pub group: String,
    /// How many times the original had been delivered to that group.
    pub times_delivered: u32,
}

/// A stream: its entries and its groups.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// Entries in id order.
    pub(crate) entries: Entries,
    /// Entries trimmed from `entries` while some group still needed them.
    /// All their ids are below the first id in `entries`.
    pub(crate) retained: BTreeMap<EntryId, Stored>,
    /// The last id ever appended.
    pub(crate) last_id: EntryId,
    pub(crate) groups: BTreeMap<String, Group>,
    /// Changes not yet taken, when recording (see [`crate::journal`]).
    pub(crate) log: Option<Vec<StreamChange>>,
    /// Payload bytes held in memory (`None`: every payload).
    pub(crate) cache: Option<usize>,
    /// While a rebuild runs (see [`crate::journal`]): entries a replayed
    /// trim or release let go of, in case a retry copy of one turns out to
    /// be missing (the original then comes back). Emptied when the rebuild
    /// ends.
    pub(crate) set_aside: BTreeMap<EntryId, Stored>,
}

/// A change to a stream itself, before it is named in a [`Change`].
#[derive(Debug)]
pub(crate) enum StreamChange {
    Appended {
        id: EntryId,
        message: Arc<Message>,
        copy: Option<Arc<CopyOf>>,
    },
    GroupCreated {
        group: String,
        cursor: EntryId,
    },
    Trimmed {
        below: EntryId,
        keep: Vec<EntryId>,
    },
    Released {
        ids: Vec<EntryId>,
    },
}

impl StreamChange {
    pub(crate) fn named(self, stream: &str) -> Change {
        let stream = stream.to_owned();
        match self {
            StreamChange::Appended { id, message, copy } => Change::Appended {
                stream,
                id,
                message,
                copy,
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

impl StreamState {
    pub(crate) fn find(&self, id: EntryId) -> Option<View<'_>> {
        match self.retained.get(&id) {
            Some(s) => Some(s.view()),
            None => self.entries.find(id),
        }
    }

    pub(crate) fn group(&self, stream: &str, group: &str) -> BrokerResult<&Group> {
        self.groups
            .get(group)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    pub(crate) fn group_mut(&mut self, stream: &str, group: &str) -> BrokerResult<&mut Group> {
        self.groups
            .get_mut(group)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    fn pinned(&self, id: &EntryId) -> bool {
        self.groups.values().any(|g| g.holds(id))
    }

    /// Whether a group has yet to read `stored`: its cursor is before it,
    /// and the entry is for that group (a retry copy is for its own group
    /// only). A retry copy's original is already acked, so the unread copy
    /// is the only record of work still owed; an entry kept past a trim
    /// for one group's sake is still in the stream for a group made or
    /// moved behind it since.
    fn unread(&self, stored: &Stored) -> bool {
        self.groups
            .iter()
            .any(|(name, g)| g.cursor < stored.id && stored.view().is_for(name))
    }

    /// Whether `stored` is a retry copy its group has yet to read: an
    /// explicit trim keeps those (and pending and dead entries), not other
    /// unread entries.
    fn unread_copy(&self, stored: &Stored) -> bool {
        stored.copy.is_some() && self.unread(stored)
    }

    /// Drops retained entries that no group needs any more: not pending
    /// or dead in any group, and not yet read by a group it is for (the ids
    /// come from callers, which may name any id).
    pub(crate) fn release(&mut self, ids: impl IntoIterator<Item = EntryId>) {
        if self.retained.is_empty() {
            return;
        }
        let mut released = Vec::new();
        for id in ids {
            let needed = match self.retained.get(&id) {
                None => continue,
                Some(stored) => self.pinned(&id) || self.unread(stored),
            };
            if !needed {
                self.retained.remove(&id);
                released.push(id);
            }
        }
        if let Some(log) = self.log.as_mut().filter(|_| !released.is_empty()) {
            log.push(StreamChange::Released { ids: released });
        }
    }

    /// How many entries after `g`'s cursor are for `group` and not held
    /// by it (pending or dead-lettered): without walking the entries,
    /// since every entry a group holds is for that group, and a copy is
    /// for one group only.
    pub(crate) fn lag(&self, g: &Group, group: &str) -> u64 {
        let cursor = g.cursor;
        let after = (Bound::Excluded(cursor), Bound::Unbounded);
        let retained = self
            .retained
            .range(after)
            .filter(|(id, s)| s.view().is_for(group) && !g.holds(id))
            .count() as u64;
        let others = self
            .entries
            .copies()
            .range(after)
            .filter(|(_, c)| c.group != group)
            .count() as u64;
        let first = self.entries.first_id().unwrap_or(EntryId::MAX);
        let in_entries = |id: &EntryId| *id >= first && !self.retained.contains_key(id);
        let held = g
            .pending
            .range_from(Bound::Excluded(cursor))
            .filter(|(id, _)| in_entries(id))
            .count()
            + g.dead.range(after).filter(|(id, _)| in_entries(id)).count();
        let fresh = self.entries.count_after(cursor);
        retained + fresh.saturating_sub(others + held as u64)
    }

    fn len(&self) -> u64 {
        self.entries.len() + self.retained.len() as u64
    }

    pub(crate) fn start_position(&self, start: StreamStart) -> EntryId {
        match start {
            StreamStart::New => self.last_id,
            StreamStart::Beginning => EntryId::ZERO,
            StreamStart::Id(id) => id,
        }
    }

    /// Takes an entry back in while rebuilding (see [`Engine::restore`]).
    pub(crate) fn restore_entry(
        &mut self,
        id: EntryId,
        copy: Option<Arc<CopyOf>>,
        message: Option<Arc<Message>>,
    ) {
        if id > self.last_id {
            self.last_id = id;
            let message = message.filter(|m| !is_unloaded(m));
            self.entries.push(id, copy, message, self.cache);
        }
    }

    pub(crate) fn append(
        &mut self,
        message: Arc<Message>,
        copy: Option<Arc<CopyOf>>,
        now_ms: u64,
    ) -> EntryId {
        let id = self.last_id.successor_at(now_ms);
        self.last_id = id;
        if let Some(log) = &mut self.log {
            log.push(StreamChange::Appended {
                id,
                message: Arc::clone(&message),
                copy: copy.clone(),
            });
        }
        self.entries.push(id, copy, Some(message), self.cache);
        id
    }
}

impl Engine {
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

    /// Entries with ids in `from..=to`, in id order (replay).
    pub fn range(&self, stream: &str, from: EntryId, to: EntryId, count: usize) -> Vec<Entry> {
        let Some(s) = self.streams.get(stream) else {
            return Vec::new();
        };
        if from > to {
            return Vec::new();
        }
        s.retained
            .range(from..=to)
            .map(|(_, st)| st.view())
            .chain(s.entries.iter_from(from, false).take_while(|e| e.id <= to))
            .take(count)
            .map(|v| v.entry())
            .collect()
    }

    /// What a retry copy carries, if `id` is one.
    pub fn copy_of(&self, stream: &str, id: EntryId) -> Option<&CopyOf> {
        self.streams.get(stream)?.find(id)?.copy.map(|c| &**c)
    }

    /// How many entries `stream` holds (those trimmed but kept for a group
    /// included), or `None` if there is no such stream.
    pub fn stream_len(&self, stream: &str) -> Option<u64> {
        self.streams.get(stream).map(StreamState::len)
    }

    /// The names of every stream, sorted.
    pub fn stream_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.streams.keys().cloned().collect();
        names.sort_unstable();
        names
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
                .or_else(|| s.entries.first_id()),
            last_id: s.last_id,
            groups: s.groups.keys().cloned().collect(),
        })
    }

    /// The id below which `stream` may be trimmed to keep at most
    /// `max_len` entries and none published before `min_ms`, but never past
    /// an entry some group has not read yet (after its cursor): `None` when
    /// nothing is to go. Entries pending or dead-lettered below it are kept
    /// by [`Engine::trim`] itself.
    pub fn retention_cutoff(
        &self,
        stream: &str,
        max_len: Option<u64>,
        min_ms: Option<u64>,
    ) -> Option<EntryId> {
        let s = self.streams.get(stream)?;
        let len = s.entries.len();
        let by_len = max_len
            .filter(|max| len > *max)
            .and_then(|max| s.entries.id_at(len - max));
        let by_age = min_ms.and_then(|min| {
            let first_kept = s.entries.count_below(EntryId::new(min, 0));
            (first_kept > 0).then(|| s.entries.id_at(first_kept).unwrap_or(s.last_id.next()))
        });
        let cutoff = by_len.into_iter().chain(by_age).max()?;
        let unread = s.groups.values().map(|g| g.cursor.next()).min();
        let cutoff = unread.map_or(cutoff, |u| cutoff.min(u));
        let first = s.entries.first_id()?;
        (cutoff > first).then_some(cutoff)
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
        while let Some(front) = s.entries.first_id() {
            let goes = match trim {
                Trim::MaxLen(n) => s.entries.len() > n,
                Trim::MinId(min) => front < min,
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
            let below = s.entries.first_id().unwrap_or(s.last_id.next());
            if let Some(log) = &mut s.log {
                log.push(StreamChange::Trimmed { below, keep });
            }
        }
        Ok(removed)
    }

    /// Bounds the payloads held in memory to the newest `bytes` of each
    /// stream (payload and headers), dropping older ones now and as
    /// entries are appended; `None` (the default) holds every payload. An
    /// entry whose payload is not held comes out of the engine with the
    /// [`crate::unloaded`] message: the broker reads it from where it
    /// stores entries (the file log's segments).
    pub fn cache_payloads(&mut self, bytes: Option<usize>) {
        self.cache = bytes;
        for s in self.streams.values_mut() {
            s.cache = bytes;
            s.entries.shrink_cache(bytes);
        }
    }

    /// Restores entries read back from storage, in id order, whose
    /// payloads stay where they are (not held in memory): what
    /// [`Engine::restore`] does with an [`Change::Appended`] of the
    /// [`crate::unloaded`] message, for a run of one stream's entries at
    /// once. Entries at or below the stream's last id are passed over.
    pub fn restore_entries(
        &mut self,
        stream: &str,
        entries: impl IntoIterator<Item = (EntryId, Option<Arc<CopyOf>>)>,
    ) {
        let cache = self.cache;
        let s = self.streams.entry_ref(stream);
        s.cache = cache;
        for (id, copy) in entries {
            s.restore_entry(id, copy, None);
        }
    }

    /// Whether the stream exists.
    #[cfg(test)]
    pub(crate) fn has_stream(&self, stream: &str) -> bool {
        self.streams.contains_key(stream)
    }
}

/// `HashMap::entry` without allocating a key when it exists.
pub(crate) trait EntryRef {
    fn entry_ref(&mut self, key: &str) -> &mut StreamState;
}

impl EntryRef for crate::StreamMap {
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
