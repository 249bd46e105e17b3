//! A stream's entries in id order, held compactly: ids delta-encoded in
//! blocks of 64 (one or two bytes an entry while ids come in order, and
//! about a byte more for the block), retry-copy markers in a side table,
//! and the payloads of the newest entries.
//!
//! The memory broker keeps every payload. The file log keeps those of a
//! bounded tail ([`crate::Engine::cache_payloads`]) and reads older ones
//! from its segments: an entry whose payload is not held comes out of the
//! engine with the [`unloaded`] message, which the broker replaces with the
//! payload read from disk before anyone sees it.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};

use ruststream_core::{Entry, EntryId, Message};

use crate::stream::CopyOf;

/// Entries per block: a lookup by id (a read after the group's cursor,
/// a pending entry handed out again) decodes at most this many ids, and a
/// block costs about 80 bytes besides its deltas (about a byte an entry).
const BLOCK: u32 = 64;

/// The message an entry carries when its payload is not in memory: one
/// shared placeholder, told apart by pointer ([`is_unloaded`]).
pub fn unloaded() -> Arc<Message> {
    static UNLOADED: OnceLock<Arc<Message>> = OnceLock::new();
    Arc::clone(UNLOADED.get_or_init(|| Arc::new(Message::new(Vec::new()))))
}

/// Whether `message` is the [`unloaded`] placeholder: the entry's payload
/// is not in memory and must be read from where the broker stores it.
pub fn is_unloaded(message: &Arc<Message>) -> bool {
    static UNLOADED: OnceLock<usize> = OnceLock::new();
    let placeholder = *UNLOADED.get_or_init(|| Arc::as_ptr(&unloaded()) as usize);
    Arc::as_ptr(message) as usize == placeholder
}

/// The bytes a payload takes in the cache: payload and headers.
fn weight(message: &Message) -> usize {
    message.payload.len()
        + message
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

/// An entry as the engine hands it around: its id, its copy marker and its
/// payload if in memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    pub(crate) id: EntryId,
    pub(crate) copy: Option<&'a Arc<CopyOf>>,
    pub(crate) message: Option<&'a Arc<Message>>,
}

impl View<'_> {
    pub(crate) fn entry(&self) -> Entry {
        Entry {
            id: self.id,
            message: self.message.map_or_else(unloaded, Arc::clone),
        }
    }

    pub(crate) fn is_for(&self, group: &str) -> bool {
        self.copy.is_none_or(|c| c.group == group)
    }

    pub(crate) fn carried(&self) -> u32 {
        self.copy.map_or(0, |c| c.times_delivered)
    }
}

/// An entry taken out of [`Entries`] (a trim keeps it aside while a group
/// needs it).
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) id: EntryId,
    /// `None` when the payload is not in memory.
    pub(crate) message: Option<Arc<Message>>,
    pub(crate) copy: Option<Arc<CopyOf>>,
}

impl Stored {
    pub(crate) fn view(&self) -> View<'_> {
        View {
            id: self.id,
            copy: self.copy.as_ref(),
            message: self.message.as_ref(),
        }
    }
}

/// A run of up to [`BLOCK`] ids: the first in full, the rest as deltas.
#[derive(Debug)]
struct Block {
    /// Position (counted from the stream's first entry ever held) of its
    /// first id.
    start: u64,
    first: EntryId,
    last: EntryId,
    count: u32,
    deltas: Vec<u8>,
}

impl Block {
    fn end(&self) -> u64 {
        self.start + u64::from(self.count)
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*at) {
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    v
}

/// Encodes `id` after `prev` (smaller), or `None` if the gap is too large
/// for a delta (the id then starts a block).
fn encode(out: &mut Vec<u8>, prev: EntryId, id: EntryId) -> Option<()> {
    const MAX: u64 = u64::MAX >> 1;
    if id.ms == prev.ms {
        let d = id.seq.checked_sub(prev.seq)?.checked_sub(1)?;
        (d <= MAX).then(|| put_varint(out, d << 1))
    } else {
        let d = id.ms.checked_sub(prev.ms)?.checked_sub(1)?;
        (d <= MAX).then(|| {
            put_varint(out, (d << 1) | 1);
            put_varint(out, id.seq);
        })
    }
}

fn decode(bytes: &[u8], at: &mut usize, prev: EntryId) -> EntryId {
    let x = get_varint(bytes, at);
    if x & 1 == 0 {
        EntryId::new(prev.ms, prev.seq.wrapping_add((x >> 1) + 1))
    } else {
        let ms = prev.ms.wrapping_add((x >> 1) + 1);
        EntryId::new(ms, get_varint(bytes, at))
    }
}

/// A stream's entries in id order.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    blocks: VecDeque<Block>,
    /// Position of the first entry held (earlier ones were popped).
    front: u64,
    /// The first entry's id and where its successor's delta starts in the
    /// first block.
    head: Option<(EntryId, usize)>,
    /// Position after the last entry.
    end: u64,
    /// Retry-copy markers of the entries held.
    copies: BTreeMap<EntryId, Arc<CopyOf>>,
    /// Payloads of the last `bodies.len()` entries.
    bodies: VecDeque<Arc<Message>>,
    body_bytes: usize,
    /// Where the last walk over the ids got to, so that the next one from
    /// there (a group reading on after its cursor) starts without a search.
    finger: Cell<Option<Finger>>,
}

/// A position in the ids: entry `pos` is `id`, the one before it `prev`
/// (if known), and `at` is where the delta after `id` starts in its block.
#[derive(Debug, Clone, Copy)]
struct Finger {
    prev: Option<EntryId>,
    pos: u64,
    id: EntryId,
    at: usize,
}

impl Entries {
    /// How many entries are held.
    pub(crate) fn len(&self) -> u64 {
        self.end - self.front
    }

    /// The first entry's id.
    pub(crate) fn first_id(&self) -> Option<EntryId> {
        self.head.map(|(id, _)| id)
    }

    /// Appends an entry with a larger id than any held, with its payload
    /// if given (an entry without one drops the payloads of those before
    /// it: payloads are held for a run at the end). Payloads beyond
    /// `cache` bytes are dropped, oldest first (`None`: all are kept).
    pub(crate) fn push(
        &mut self,
        id: EntryId,
        copy: Option<Arc<CopyOf>>,
        message: Option<Arc<Message>>,
        cache: Option<usize>,
    ) {
        let appended = match self.blocks.back_mut() {
            Some(block) if block.count < BLOCK && self.end > self.front => {
                let prev = block.last;
                encode(&mut block.deltas, prev, id)
                    .map(|()| {
                        block.count += 1;
                        block.last = id;
                    })
                    .is_some()
            }
            _ => false,
        };
        if !appended {
            if let Some(full) = self.blocks.back_mut() {
                full.deltas.shrink_to_fit();
            }
            self.blocks.push_back(Block {
                start: self.end,
                first: id,
                last: id,
                count: 1,
                deltas: Vec::with_capacity(2 * BLOCK as usize),
            });
        }
        if self.head.is_none() {
            self.head = Some((id, 0));
        }
        self.end += 1;
        if let Some(copy) = copy {
            self.copies.insert(id, copy);
        }
        match message {
            Some(message) => {
                self.body_bytes += weight(&message);
                self.bodies.push_back(message);
                self.shrink_cache(cache);
            }
            None => {
                self.bodies.clear();
                self.body_bytes = 0;
            }
        }
    }

    /// Drops payloads, oldest first, until those held fit `cache` bytes.
    pub(crate) fn shrink_cache(&mut self, cache: Option<usize>) {
        let Some(limit) = cache else { return };
        while self.body_bytes > limit {
            let Some(old) = self.bodies.pop_front() else {
                break;
            };
            self.body_bytes -= weight(&old);
        }
    }

    /// Takes the first entry out.
    pub(crate) fn pop_front(&mut self) -> Option<Stored> {
        let (id, at) = self.head?;
        let message = if self.bodies.len() as u64 == self.len() {
            let message = self.bodies.pop_front();
            if let Some(m) = &message {
                self.body_bytes -= weight(m);
            }
            message
        } else {
            None
        };
        let copy = if self.copies.is_empty() {
            None
        } else {
            self.copies.remove(&id)
        };
        self.front += 1;
        let first = self.blocks.front()?;
        self.head = if self.front < first.end() {
            let mut at = at;
            let next = decode(&first.deltas, &mut at, id);
            Some((next, at))
        } else {
            self.blocks.pop_front();
            self.blocks.front().map(|b| (b.first, 0))
        };
        Some(Stored { id, message, copy })
    }

    /// The position of the first entry whose id is at least `id` (or, with
    /// `after`, larger than `id`): `end` if none.
    fn position(&self, id: EntryId, after: bool) -> u64 {
        let past = |e: EntryId| if after { e > id } else { e >= id };
        let k = self.blocks.partition_point(|b| !past(b.last));
        let Some(block) = self.blocks.get(k) else {
            return self.end;
        };
        let mut ids = self.ids_in(k);
        ids.find(|&(_, e)| past(e))
            .map_or(block.end(), |(pos, _)| pos)
    }

    /// The ids of block `k` from its first live one, with their positions.
    fn ids_in(&self, k: usize) -> Ids<'_> {
        let (pos, next, at) = match (k, self.head) {
            (0, Some((id, at))) => (self.front, Some(id), at),
            _ => match self.blocks.get(k) {
                Some(b) => (b.start, Some(b.first), 0),
                None => (self.end, None, 0),
            },
        };
        Ids {
            blocks: &self.blocks,
            block: k,
            at,
            next,
            pos,
            end: self.end,
            prev: None,
        }
    }

    /// The ids from position `pos` on.
    fn ids_from(&self, pos: u64) -> Ids<'_> {
        let pos = pos.max(self.front);
        let k = self.blocks.partition_point(|b| b.end() <= pos);
        let mut ids = self.ids_in(k);
        while ids.pos < pos && ids.next().is_some() {}
        ids
    }

    /// The id of the entry at `index` (0 is the first held).
    pub(crate) fn id_at(&self, index: u64) -> Option<EntryId> {
        let pos = self.front.checked_add(index)?;
        (pos < self.end).then(|| self.ids_from(pos).next().map(|(_, id)| id))?
    }

    /// How many entries have ids below `id`.
    pub(crate) fn count_below(&self, id: EntryId) -> u64 {
        self.position(id, false).max(self.front) - self.front
    }

    /// How many entries have ids above `id`.
    pub(crate) fn count_after(&self, id: EntryId) -> u64 {
        self.end - self.position(id, true).max(self.front)
    }

    /// The entry `id`, if held.
    pub(crate) fn find(&self, id: EntryId) -> Option<View<'_>> {
        let mut it = self.iter_from(id, false);
        it.next().filter(|v| v.id == id)
    }

    /// Entries from `id` on (after it, with `after`), in id order.
    pub(crate) fn iter_from(&self, id: EntryId, after: bool) -> Iter<'_> {
        let ids = self.ids_at_finger(id, after).unwrap_or_else(|| {
            let pos = self.position(id, after).max(self.front);
            self.ids_from(pos)
        });
        Iter { ids, entries: self }
    }

    /// The ids from the first at or after `id` (after it, with `after`),
    /// if the last walk ended there or one entry before.
    fn ids_at_finger(&self, id: EntryId, after: bool) -> Option<Ids<'_>> {
        let f = self.finger.get()?;
        let past = |e: EntryId| if after { e > id } else { e >= id };
        if f.pos < self.front || f.pos >= self.end {
            return None;
        }
        // An entry before the finger could be the first one wanted only if
        // the finger's own entry is, and the one before it too.
        if past(f.id) && f.prev.is_none_or(past) {
            return None;
        }
        let k = self.blocks.partition_point(|b| b.end() <= f.pos);
        let mut ids = Ids {
            blocks: &self.blocks,
            block: k,
            at: f.at,
            next: Some(f.id),
            pos: f.pos,
            end: self.end,
            prev: f.prev,
        };
        for _ in 0..2 {
            match ids.next {
                Some(next) if ids.pos < self.end && !past(next) => {
                    ids.next();
                }
                _ => return Some(ids),
            }
        }
        None
    }

    /// The retry copies held, by id.
    pub(crate) fn copies(&self) -> &BTreeMap<EntryId, Arc<CopyOf>> {
        &self.copies
    }

    fn view(&self, pos: u64, id: EntryId) -> View<'_> {
        let with_body = self.end - self.bodies.len() as u64;
        View {
            id,
            copy: if self.copies.is_empty() {
                None
            } else {
                self.copies.get(&id)
            },
            message: pos
                .checked_sub(with_body)
                .and_then(|i| self.bodies.get(i as usize)),
        }
    }
}

/// Ids in order from some position, with their positions.
#[derive(Clone)]
struct Ids<'a> {
    blocks: &'a VecDeque<Block>,
    block: usize,
    at: usize,
    next: Option<EntryId>,
    pos: u64,
    end: u64,
    /// The id handed out last, if known.
    prev: Option<EntryId>,
}

impl Ids<'_> {
    /// Where this walk is now.
    fn finger(&self) -> Option<Finger> {
        Some(Finger {
            prev: self.prev,
            pos: self.pos,
            id: self.next?,
            at: self.at,
        })
    }
}

impl Iterator for Ids<'_> {
    type Item = (u64, EntryId);

    fn next(&mut self) -> Option<(u64, EntryId)> {
        if self.pos >= self.end {
            return None;
        }
        let id = self.next?;
        let out = (self.pos, id);
        self.prev = Some(id);
        self.pos += 1;
        let block = self.blocks.get(self.block)?;
        if self.pos < block.end() {
            self.next = Some(decode(&block.deltas, &mut self.at, id));
        } else {
            self.block += 1;
            self.at = 0;
            self.next = self.blocks.get(self.block).map(|b| b.first);
        }
        Some(out)
    }
}

/// Entries in id order, as [`View`]s.
#[derive(Clone)]
pub(crate) struct Iter<'a> {
    ids: Ids<'a>,
    entries: &'a Entries,
}

impl<'a> Iterator for Iter<'a> {
    type Item = View<'a>;

    fn next(&mut self) -> Option<View<'a>> {
        if let Some(finger) = self.ids.finger() {
            self.entries.finger.set(Some(finger));
        }
        let (pos, id) = self.ids.next()?;
        Some(self.entries.view(pos, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(ids: &[EntryId], cache: Option<usize>) -> Entries {
        let mut e = Entries::default();
        for (i, id) in ids.iter().enumerate() {
            let m = Arc::new(Message::new(vec![i as u8; 10]));
            e.push(*id, None, Some(m), cache);
        }
        e
    }

    fn some_ids(n: u64) -> Vec<EntryId> {
        // Runs in one millisecond, gaps in time and in sequence, and a
        // jump too large for a delta.
        let mut out = Vec::new();
        let mut id = EntryId::new(5, 0);
        for i in 0..n {
            out.push(id);
            id = match i % 7 {
                0 => EntryId::new(id.ms + 1, 0),
                3 => EntryId::new(id.ms, id.seq + 9),
                5 => EntryId::new(id.ms + 70_000, 3),
                _ => id.successor_at(id.ms),
            };
            if i == n / 2 {
                id = EntryId::new(u64::MAX - (1 << 40), 0);
            }
        }
        out
    }

    #[test]
    fn ids_come_back_in_order_and_are_found() {
        let ids = some_ids(3_000);
        let mut e = filled(&ids, None);
        let all: Vec<EntryId> = e.iter_from(EntryId::ZERO, false).map(|v| v.id).collect();
        assert_eq!(all, ids);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(e.find(*id).map(|v| v.id), Some(*id));
            assert_eq!(e.id_at(i as u64), Some(*id));
            assert_eq!(e.count_below(*id), i as u64);
            let after: Vec<EntryId> = e.iter_from(*id, true).take(2).map(|v| v.id).collect();
            assert_eq!(
                after,
                ids[i + 1..].iter().take(2).copied().collect::<Vec<_>>()
            );
        }
        assert!(e.find(EntryId::new(5, 1)).is_none());
        for (i, id) in ids.iter().enumerate().take(1_500) {
            let popped = e.pop_front().map(|s| s.id);
            assert_eq!(popped, Some(*id));
            assert_eq!(e.first_id(), ids.get(i + 1).copied());
        }
        assert_eq!(e.len(), 1_500);
        assert_eq!(e.id_at(0), Some(ids[1_500]));
        assert!(e.find(ids[10]).is_none());
        let rest: Vec<EntryId> = e.iter_from(ids[3], false).map(|v| v.id).collect();
        assert_eq!(rest, ids[1_500..]);
    }

    #[test]
    fn payloads_are_held_for_the_newest_entries_within_the_cache() {
        let ids = some_ids(100);
        let e = filled(&ids, Some(55));
        let held: Vec<bool> = e
            .iter_from(EntryId::ZERO, false)
            .map(|v| v.message.is_some())
            .collect();
        assert_eq!(held.iter().filter(|h| **h).count(), 5);
        assert!(held[95..].iter().all(|h| *h));
        assert_eq!(
            e.find(ids[99])
                .and_then(|v| v.message)
                .map(|m| m.payload[0]),
            Some(99)
        );
        assert!(is_unloaded(
            &e.find(ids[0]).map(|v| v.entry()).unwrap().message
        ));
        assert!(!is_unloaded(
            &e.find(ids[99]).map(|v| v.entry()).unwrap().message
        ));
    }
}
