//! Streams: entries in id order, the side table of entries trimmed while a
//! group still needed them, publishing, trimming and reading ranges.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use ruststream_core::{
    BrokerError, BrokerResult, Entry, EntryId, Message, StreamInfo, StreamStart, Trim,
};

use crate::group::Group;
use crate::{Change, Engine};

/// An entry as the engine stores it.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) id: EntryId,
    pub(crate) message: Arc<Message>,
    /// Set on a retry copy: the group it is for and the deliveries of the
    /// original it carries. Other groups pass over the copy.
    pub(crate) copy: Option<Arc<CopyOf>>,
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
    pub(crate) fn entry(&self) -> Entry {
        Entry {
            id: self.id,
            message: Arc::clone(&self.message),
        }
    }

    pub(crate) fn is_for(&self, group: &str) -> bool {
        self.copy.as_ref().is_none_or(|c| c.group == group)
    }

    pub(crate) fn carried(&self) -> u32 {
        self.copy.as_ref().map_or(0, |c| c.times_delivered)
    }
}

/// A stream: its entries and its groups.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// Entries in id order.
    pub(crate) entries: VecDeque<Stored>,
    /// Entries trimmed from `entries` while some group still needed them.
    /// All their ids are below the first id in `entries`.
    pub(crate) retained: BTreeMap<EntryId, Stored>,
    /// The last id ever appended.
    pub(crate) last_id: EntryId,
    pub(crate) groups: BTreeMap<String, Group>,
    /// Changes not yet taken, when recording (see [`crate::journal`]).
    pub(crate) log: Option<Vec<StreamChange>>,
}

/// A change to a stream itself, before it is named in a [`Change`].
#[derive(Debug)]
pub(crate) enum StreamChange {
    Appended(Stored),
    GroupCreated { group: String, cursor: EntryId },
    Trimmed { below: EntryId, keep: Vec<EntryId> },
    Released { ids: Vec<EntryId> },
}

impl StreamChange {
    pub(crate) fn named(self, stream: &str) -> Change {
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

impl StreamState {
    pub(crate) fn find(&self, id: EntryId) -> Option<&Stored> {
        if let Some(s) = self.retained.get(&id) {
            return Some(s);
        }
        let at = self.entries.partition_point(|e| e.id < id);
        self.entries.get(at).filter(|e| e.id == id)
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
    pub(crate) fn release(&mut self, ids: impl IntoIterator<Item = EntryId>) {
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
    pub(crate) fn after(&self, after: EntryId) -> impl Iterator<Item = &Stored> + '_ {
        let start = self.entries.partition_point(|e| e.id <= after);
        self.retained
            .range((Bound::Excluded(after), Bound::Unbounded))
            .map(|(_, s)| s)
            .chain(self.entries.range(start..))
    }

    fn len(&self) -> u64 {
        (self.entries.len() + self.retained.len()) as u64
    }

    pub(crate) fn start_position(&self, start: StreamStart) -> EntryId {
        match start {
            StreamStart::New => self.last_id,
            StreamStart::Beginning => EntryId::ZERO,
            StreamStart::Id(id) => id,
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
        let stored = Stored { id, message, copy };
        if let Some(log) = &mut self.log {
            log.push(StreamChange::Appended(stored.clone()));
        }
        self.entries.push_back(stored);
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
                .or_else(|| s.entries.front().map(|e| e.id)),
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
        let len = s.entries.len() as u64;
        let by_len = max_len
            .filter(|max| len > *max)
            .and_then(|max| s.entries.get(usize::try_from(len - max).ok()?))
            .map(|e| e.id);
        let by_age = min_ms.and_then(|min| {
            let first_kept = s.entries.partition_point(|e| e.id.ms < min);
            (first_kept > 0).then(|| s.entries.get(first_kept).map_or(s.last_id.next(), |e| e.id))
        });
        let cutoff = by_len.into_iter().chain(by_age).max()?;
        let unread = s.groups.values().map(|g| g.cursor.next()).min();
        let cutoff = unread.map_or(cutoff, |u| cutoff.min(u));
        let first = s.entries.front()?.id;
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
    #[cfg(test)]
    pub(crate) fn has_stream(&self, stream: &str) -> bool {
        self.streams.contains_key(stream)
    }
}

/// `HashMap::entry` without allocating a key when it exists.
pub(crate) trait EntryRef {
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
