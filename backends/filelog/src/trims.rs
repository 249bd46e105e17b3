//! What trims took from a stream, as the store keeps it and recovery
//! rebuilds it from the journal.

use std::collections::BTreeSet;

use ruststream_core::EntryId;
use ruststream_engine::Change;

/// What trims took from a stream: the entries below `below`, except those
/// in `kept`.
#[derive(Default)]
pub(crate) struct Trims {
    /// Entries below this were trimmed (those in `kept` aside).
    pub(crate) below: EntryId,
    /// Entries a trim kept because a group still needed them.
    pub(crate) kept: BTreeSet<EntryId>,
}

impl Trims {
    /// Takes in a `Trimmed` or `Released` change of the stream (any other
    /// change leaves it as it is).
    pub(crate) fn apply(&mut self, change: &Change) {
        match change {
            Change::Trimmed { below, keep, .. } => {
                self.below = self.below.max(*below);
                self.kept.extend(keep.iter().copied());
            }
            Change::Released { ids, .. } => {
                for id in ids {
                    self.kept.remove(id);
                }
            }
            _ => {}
        }
    }
}
