//! [`IdMap`]: an ordered map keyed by entry id, made for a pending list.
//!
//! A group's pending list is written in a pattern a tree serves poorly:
//! new deliveries arrive in increasing id order (the cursor only moves
//! forward, except after a `set_id` back), and acks mostly leave from the
//! front. `IdMap` keeps `(id, slot)` pairs sorted by id in a ring buffer:
//! an insert past the last id is a push at the back, a lookup is a binary
//! search over contiguous memory, and a removal empties the slot in place
//! (a tombstone) and pops tombstones off both ends. Tombstones left in the
//! middle (behind an entry held for a long time) are swept out once they
//! outnumber the live entries, so every operation stays amortised cheap.
//! Inserting below the last id either revives a tombstone (a redelivery
//! takes an entry out and puts it back under the same id) or shifts the
//! tail, which is linear, but only a cursor moved back or a journal replay
//! in an odd order does that.

use std::collections::VecDeque;
use std::ops::Bound;

use ruststream_core::EntryId;

/// Tombstones tolerated beyond the live count before a sweep.
const SLACK: usize = 64;

/// An ordered map from [`EntryId`] to `V` (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct IdMap<V> {
    /// Sorted by id; `None` marks a removed entry. Neither end is `None`.
    pub(crate) slots: VecDeque<(EntryId, Option<V>)>,
    live: usize,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            slots: VecDeque::new(),
            live: 0,
        }
    }
}

impl<V> IdMap<V> {
    /// Where `id` is (`Ok`) or would go (`Err`). Acks mostly take the
    /// oldest entry, and stale lookups mostly ask for ids already gone from
    /// the front, so the front is checked before searching.
    #[inline]
    fn position(&self, id: &EntryId) -> Result<usize, usize> {
        match self.slots.front() {
            None => Err(0),
            Some((first, _)) if first >= id => {
                if first == id {
                    Ok(0)
                } else {
                    Err(0)
                }
            }
            Some(_) => self.slots.binary_search_by(|(k, _)| k.cmp(id)),
        }
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The value under `id`.
    #[inline]
    pub(crate) fn get(&self, id: &EntryId) -> Option<&V> {
        let at = self.position(id).ok()?;
        self.slots[at].1.as_ref()
    }

    /// Whether `id` is in the map.
    pub(crate) fn contains_key(&self, id: &EntryId) -> bool {
        self.get(id).is_some()
    }

    /// Puts `value` under `id`, returning the value it replaced.
    #[inline]
    pub(crate) fn insert(&mut self, id: EntryId, value: V) -> Option<V> {
        if self.slots.back().is_none_or(|(last, _)| *last < id) {
            self.slots.push_back((id, Some(value)));
            self.live += 1;
            return None;
        }
        match self.position(&id) {
            Ok(at) => {
                let old = self.slots[at].1.replace(value);
                if old.is_none() {
                    self.live += 1;
                }
                old
            }
            Err(at) => {
                self.slots.insert(at, (id, Some(value)));
                self.live += 1;
                None
            }
        }
    }

    /// Takes the value under `id` out of the map.
    #[inline]
    pub(crate) fn remove(&mut self, id: &EntryId) -> Option<V> {
        let at = self.position(id).ok()?;
        let old = self.slots[at].1.take()?;
        self.live -= 1;
        self.tidy();
        Some(old)
    }

    /// Takes every id of `ids` out of the map, calling `removed` with each
    /// id found and its value. A batch in id order (what acks of entries
    /// handled in read order look like) costs one search and one walk; any
    /// other order falls back to one removal per id.
    pub(crate) fn remove_all(&mut self, ids: &[EntryId], mut removed: impl FnMut(EntryId, V)) {
        // The common case: the batch starts with the oldest entries. Pop
        // them off the front while they match (an id below the front is
        // not in the map, whatever the batch's order).
        let mut rest = ids;
        while let Some((id, tail)) = rest.split_first() {
            match self.slots.front() {
                Some((first, _)) if first == id => {
                    if let Some((_, Some(value))) = self.slots.pop_front() {
                        self.live -= 1;
                        removed(*id, value);
                    }
                    while self.slots.front().is_some_and(|(_, v)| v.is_none()) {
                        self.slots.pop_front();
                    }
                }
                Some((first, _)) if first > id => {}
                _ => break,
            }
            rest = tail;
        }
        if rest.is_empty() {
            // Front pops leave no tombstone at either end and only lower the
            // tombstone count, so there is nothing to tidy but the size.
            crate::shrink_if_oversized(&mut self.slots);
            return;
        }
        if !rest.is_sorted() {
            for id in rest {
                if let Some(value) = self.remove(id) {
                    removed(*id, value);
                }
            }
            return;
        }
        let (Ok(mut at) | Err(mut at)) = self.position(&rest[0]);
        for id in rest {
            // Walk a few slots; search when the next id is further away.
            let mut steps = 0;
            while at < self.slots.len() && self.slots[at].0 < *id {
                at += 1;
                steps += 1;
                if steps == 8 {
                    let (Ok(found) | Err(found)) = self.position(id);
                    at = found.max(at);
                    break;
                }
            }
            let Some(slot) = self.slots.get_mut(at) else {
                break;
            };
            if slot.0 == *id
                && let Some(value) = slot.1.take()
            {
                self.live -= 1;
                removed(*id, value);
            }
        }
        self.tidy();
    }

    /// Pops tombstones off both ends, and sweeps them out once they
    /// outnumber the live entries. A buffer left much larger than what it
    /// holds (after a burst) is shrunk, so memory follows the working set.
    fn tidy(&mut self) {
        while self.slots.front().is_some_and(|(_, v)| v.is_none()) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|(_, v)| v.is_none()) {
            self.slots.pop_back();
        }
        if self.slots.len() > 2 * self.live + SLACK {
            self.slots.retain(|(_, v)| v.is_some());
        }
        crate::shrink_if_oversized(&mut self.slots);
    }

    /// The largest id in the map.
    #[inline]
    pub(crate) fn last_key(&self) -> Option<EntryId> {
        // Neither end is ever a tombstone.
        self.slots.back().map(|(id, _)| *id)
    }

    /// Entries in id order.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (&EntryId, &V)> + '_ {
        self.iter_from(0)
    }

    /// Ids in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &EntryId> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// Values in id order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Entries with ids past `from`, in id order.
    pub(crate) fn range_from(
        &self,
        from: Bound<EntryId>,
    ) -> impl DoubleEndedIterator<Item = (&EntryId, &V)> + '_ {
        let start = match from {
            Bound::Included(id) => self.slots.partition_point(|(k, _)| *k < id),
            Bound::Excluded(id) => self.slots.partition_point(|(k, _)| *k <= id),
            Bound::Unbounded => 0,
        };
        self.iter_from(start)
    }

    fn iter_from(&self, start: usize) -> impl DoubleEndedIterator<Item = (&EntryId, &V)> + '_ {
        self.slots
            .range(start..)
            .filter_map(|(id, v)| v.as_ref().map(|v| (id, v)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn id(n: u64) -> EntryId {
        EntryId::new(n, 0)
    }

    /// Random inserts and removals, in the delivery-like pattern and out of
    /// it, agree with a `BTreeMap` at every step.
    #[test]
    fn agrees_with_a_btreemap() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut map = IdMap::default();
        let mut model = BTreeMap::new();
        let mut top = 0u64;
        for step in 0..20_000u64 {
            match next(10) {
                // Mostly appends past the end, like new deliveries.
                0..=3 => {
                    top += 1 + next(3);
                    assert_eq!(map.insert(id(top), step), model.insert(id(top), step));
                }
                // Sometimes anywhere, like a cursor moved back.
                4 => {
                    let k = id(next(top + 2));
                    assert_eq!(map.insert(k, step), model.insert(k, step));
                }
                // Removals, mostly of the oldest, like in-order acks.
                5..=6 => {
                    let k = model.keys().next().copied().unwrap_or(id(0));
                    assert_eq!(map.remove(&k), model.remove(&k));
                }
                // Batches: sorted (mostly from the front, with gaps and
                // ids that are not there) or shuffled.
                7 => {
                    // From every key to one in 30: long gaps make the
                    // walk fall back to a search.
                    let len = next(40) as usize;
                    let sparse = 1 + next(30);
                    let mut batch: Vec<EntryId> = model
                        .keys()
                        .copied()
                        .filter(|_| next(sparse) == 0)
                        .take(len)
                        .collect();
                    batch.push(id(next(top + 2)));
                    batch.push(id(top + 1));
                    if next(4) == 0 {
                        batch.reverse();
                    } else {
                        batch.sort();
                    }
                    let mut got = Vec::new();
                    map.remove_all(&batch, |k, v| got.push((k, v)));
                    let mut want = Vec::new();
                    for k in &batch {
                        if let Some(v) = model.remove(k) {
                            want.push((*k, v));
                        }
                    }
                    got.sort();
                    want.sort();
                    assert_eq!(got, want);
                }
                _ => {
                    let k = id(next(top + 2));
                    assert_eq!(map.remove(&k), model.remove(&k));
                }
            }
            assert_eq!(map.len(), model.len());
            assert_eq!(map.last_key(), model.keys().next_back().copied());
            let probe = id(next(top + 2));
            assert_eq!(map.get(&probe), model.get(&probe));
            if step % 97 == 0 {
                assert!(map.iter().eq(model.iter()));
                assert!(
                    map.range_from(Bound::Excluded(probe))
                        .eq(model.range((Bound::Excluded(probe), Bound::Unbounded)))
                );
                assert!(
                    map.range_from(Bound::Included(probe))
                        .eq(model.range(probe..))
                );
            }
        }
    }

    /// An entry held at the front while everything behind it is acked
    /// leaves a bounded number of tombstones.
    #[test]
    fn tombstones_behind_a_stuck_entry_are_swept() {
        let mut map = IdMap::default();
        map.insert(id(0), ());
        for n in 1..10_000 {
            map.insert(id(n), ());
            if n > 1 {
                map.remove(&id(n - 1));
            }
        }
        assert!(map.slots.len() <= 2 * map.len() + SLACK + 1);
        assert!(map.contains_key(&id(0)));
    }
}
