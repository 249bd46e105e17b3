//! What a [`LocalBroker`](crate::LocalBroker) asks of where it keeps its
//! changes: [`Persistence`] under the broker's lock, [`Durability`]
//! outside it.

use std::sync::Arc;

use ruststream_core::{
    BrokerError, BrokerFuture, BrokerResult, Entry, EntryId, Message, NameKind, check_name,
};
use ruststream_engine::{Change, Engine, is_unloaded, unloaded};

/// Where a local broker keeps its changes: nowhere (the memory broker's
/// `Volatile`) or on disk (the file-log broker's store).
///
/// The broker calls [`Persistence::persist`] under its lock after every
/// call that changed state, with the engine's recorded changes, in order,
/// then [`Persistence::upkeep`]. The `check_*` hooks and
/// [`Persistence::MAX_READ_COUNT`] are the persistence's limits: the broker
/// applies them before a call changes anything, so a call the persistence
/// could not store fails whole, with nothing applied.
pub trait Persistence: Send + 'static {
    /// The most entries one read hands out: a read asking for more gets
    /// this many (a read may always return fewer than asked). The file log
    /// journals a read's deliveries as one record, which must fit.
    const MAX_READ_COUNT: usize = usize::MAX;

    /// The broker's name in messages: `"memory"`, `"filelog"`.
    fn name(&self) -> &'static str;

    /// Whether the engine should record changes for [`Persistence::persist`].
    fn records(&self) -> bool;

    /// Why this persistence takes no changes at all (a read-only view of
    /// files another process writes), or `None`. Asked before every call
    /// that may change the engine, so a refused call changes nothing;
    /// calls that only look go ahead. The default takes changes.
    fn refuses_changes(&self) -> Option<BrokerError> {
        None
    }

    /// Persists (and drains) the changes of one call. Returns a ticket that
    /// [`Durability::wait`] resolves once those changes are durable.
    fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64>;

    /// Called under the lock right after [`Persistence::persist`] failed,
    /// with the engine that already holds the failed call's changes, so
    /// that a persistence able to can put the engine back to what it has
    /// stored: what readers see must never run ahead of the disk. The
    /// default leaves the engine as it is.
    fn undo(&mut self, engine: &mut Engine) {
        let _ = engine;
    }

    /// Gives each of `entries` of `stream` whose payload the engine does
    /// not hold in memory (its message is the engine's
    /// [`ruststream_engine::unloaded`] placeholder) its payload from
    /// storage. Called under the lock on what reads, ranges and dead-letter
    /// listings hand out, before anyone sees it. A persistence that bounds
    /// the payloads its engine holds ([`Engine::cache_payloads`]) reads
    /// them back here; the default, for one that does not, fails on a
    /// placeholder (there is none).
    fn load<'e>(
        &mut self,
        stream: &str,
        entries: impl Iterator<Item = &'e mut Entry>,
    ) -> BrokerResult<()> {
        for entry in entries {
            if is_unloaded(&entry.message) {
                return Err(BrokerError::InvalidArgument(format!(
                    "the payload of entry {} of stream {stream:?} is not in memory, and the {} \
                     broker stores none",
                    entry.id,
                    self.name()
                )));
            }
        }
        Ok(())
    }

    /// The payload of entry `id` of `stream` from storage
    /// ([`Persistence::load`] of one entry): what a retry with copy copies
    /// when the engine does not hold the original's payload.
    fn load_one(&mut self, stream: &str, id: EntryId) -> BrokerResult<Arc<Message>> {
        let mut entry = Entry {
            id,
            message: unloaded(),
        };
        self.load(stream, std::iter::once(&mut entry))?;
        Ok(entry.message)
    }

    /// Checks a stream name before a call that may create the stream (a
    /// publish, `ensure_group`). The default is the common rules; a
    /// persistence that names files after streams adds its own.
    fn check_stream(stream: &str) -> BrokerResult<()> {
        check_name(NameKind::Stream, stream)
    }

    /// Checks that `messages` can be stored, before a publish to `stream`
    /// appends any of them.
    fn check_messages(stream: &str, messages: &[Message]) -> BrokerResult<()> {
        let _ = (stream, messages);
        Ok(())
    }

    /// Checks that a call changing the group state of `ids` entries of
    /// `stream` (an ack, a retry, a dead letter, a redrive, a discard) can
    /// be stored, `extra` being what each entry adds of its own (a dead
    /// letter's reason, in bytes). `call` names the call in messages:
    /// `"an ack"`.
    fn check_group_change(call: &str, stream: &str, ids: usize, extra: usize) -> BrokerResult<()> {
        let _ = (call, stream, ids, extra);
        Ok(())
    }

    /// Upkeep under the lock after every call that went through the engine
    /// (publishes, group calls, reads, settles, trims; not the inspecting
    /// calls), once its changes were handed to [`Persistence::persist`],
    /// whether the call succeeded or not. `stream` is the stream the call
    /// named, and `published` is set after a publish to it. The file log
    /// compacts its journal here and, after a publish, applies retention;
    /// the memory broker applies its retention to `stream`. What upkeep
    /// changes in the engine it persists itself
    /// ([`Persistence::persist_recorded`]). The default does nothing.
    fn upkeep(&mut self, engine: &mut Engine, stream: &str, now_ms: u64, published: bool) {
        let _ = (engine, stream, now_ms, published);
    }

    /// Takes what `engine` recorded since it was last taken and persists it
    /// through `changes` (a buffer the caller reuses), putting the engine
    /// back ([`Persistence::undo`]) if that fails. What the broker does
    /// after every call, and what upkeep that changes the engine does too.
    fn persist_recorded(
        &mut self,
        engine: &mut Engine,
        changes: &mut Vec<Change>,
    ) -> BrokerResult<u64> {
        if !self.records() {
            return Ok(0);
        }
        engine.take_changes_into(changes);
        if changes.is_empty() {
            return Ok(0);
        }
        let persisted = self.persist(changes);
        if persisted.is_err() {
            self.undo(engine);
        }
        persisted
    }
}

/// Waiting for persisted changes to become durable (group commit), and
/// knowing when they no longer can: the part of a persistence the broker
/// consults outside its lock.
pub trait Durability: Send + Sync + 'static {
    /// Resolves once everything persisted up to `ticket` is durable.
    fn wait(&self, ticket: u64) -> BrokerFuture<'_, ()>;

    /// Why changes can no longer be made durable, once that is so (a failed
    /// fsync: the kernel may have dropped what it could not write). The
    /// broker then stops for good (fail-stop): every call but `check_mode`
    /// fails at once with [`ruststream_core::BrokerError::Failed`], and
    /// [`ruststream_core::Broker::failure`] says why. `None` by default.
    fn failure(&self) -> Option<String> {
        None
    }
}
