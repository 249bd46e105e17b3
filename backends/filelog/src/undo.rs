//! Taking a failed call back out of the engine.
//!
//! The engine applies a call before the store writes it, so when the write
//! fails the engine already holds the change. Readers must never see what
//! is not on disk, so the engine is rebuilt as it was before the call:
//! every stream the call did not touch from memory (its entries and the
//! changes that recreate its group state), and the call's streams from
//! memory without the call's entries, reading from disk only what memory
//! no longer has (group state the call changed, entries a failed trim
//! dropped). Costly, but only on a failed write, and it touches no other
//! stream's files, so a failing disk under one stream does not fail the
//! others.

use std::sync::Arc;

use ruststream_core::{BrokerError, BrokerResult, EntryId};
use ruststream_engine::{Change, CopyOf, Engine};

use crate::recover::{Access, cache_limit, load_stream, replay_journal, replay_snapshot};
use crate::store::{Store, change_stream, snapshot_path};

/// What a failed call changed, per stream.
pub(crate) struct UndoPlan {
    streams: Vec<(String, StreamUndo)>,
}

#[derive(Default)]
struct StreamUndo {
    /// Entries the call appended (sorted).
    appended: Vec<EntryId>,
    /// The call changed group state (a journal record).
    journaled: bool,
    /// The call dropped entries from memory (a trim or a release).
    dropped: bool,
    /// The stream had files before the call.
    had_files: bool,
}

impl UndoPlan {
    /// The plan for a call whose `changes` failed to persist.
    pub(crate) fn new(changes: &[Change], had_files: impl Fn(&str) -> bool) -> Self {
        let mut streams: Vec<(String, StreamUndo)> = Vec::new();
        for change in changes {
            let stream = change_stream(change);
            let at = match streams.iter().position(|(s, _)| s == stream) {
                Some(at) => at,
                None => {
                    let undo = StreamUndo {
                        had_files: had_files(stream),
                        ..StreamUndo::default()
                    };
                    streams.push((stream.to_owned(), undo));
                    streams.len() - 1
                }
            };
            let undo = &mut streams[at].1;
            match change {
                Change::Appended { id, .. } => undo.appended.push(*id),
                Change::Trimmed { .. } | Change::Released { .. } => {
                    undo.journaled = true;
                    undo.dropped = true;
                }
                _ => undo.journaled = true,
            }
        }
        for (_, undo) in &mut streams {
            undo.appended.sort_unstable();
        }
        UndoPlan { streams }
    }

    fn get(&self, stream: &str) -> Option<&StreamUndo> {
        self.streams
            .iter()
            .find(|(s, _)| s == stream)
            .map(|(_, undo)| undo)
    }
}

/// Rebuilds `engine` as it was before the failed call of `plan`. The
/// store's files were already cut back to before the call.
pub(crate) fn rebuild(store: &Store, engine: &mut Engine, plan: &UndoPlan) -> BrokerResult<()> {
    let started = std::time::Instant::now();
    let mut rebuilt = Engine::new();
    rebuilt.cache_payloads(Some(cache_limit(&store.options)));
    let snapshot = engine.snapshot();
    let names: Vec<&str> = snapshot
        .iter()
        .filter(|c| matches!(c, Change::LastId { .. }))
        .map(change_stream)
        .collect();

    // Entries from memory, but not the call's own, nor for a stream whose
    // call dropped some (those come from its segments).
    for &name in &names {
        let undo = plan.get(name);
        if undo.is_some_and(|u| u.dropped) {
            continue;
        }
        // A piece at a time: payloads not in memory stay unloaded.
        let mut from = EntryId::ZERO;
        while let Some(piece) = Some(engine.range(name, from, EntryId::MAX, UNDO_PIECE))
            .filter(|piece| !piece.is_empty())
        {
            from = piece.last().map_or(EntryId::MAX, |e| e.id.next());
            restore_piece(&mut rebuilt, engine, name, undo, piece)?;
            if from == EntryId::MAX {
                break;
            }
        }
    }
    for (name, undo) in &plan.streams {
        if let Some(files) = store.streams.get(name).filter(|_| undo.dropped)
            && files.dir.is_dir()
        {
            load_stream(&files.dir, name, &mut rebuilt, Access::Own)?;
        }
    }

    // Group state from memory where the call did not change it. A stream
    // the call brought into being (a first publish) is left out whole.
    let from_disk_or_new: Vec<&str> = plan
        .streams
        .iter()
        .filter(|(name, undo)| {
            let has_groups = || {
                snapshot
                    .iter()
                    .any(|c| matches!(c, Change::GroupCreated { stream, .. } if stream == name))
            };
            undo.journaled || !(undo.had_files || has_groups())
        })
        .map(|(name, _)| name.as_str())
        .collect();
    for change in &snapshot {
        let stream = change_stream(change);
        // The call's streams get their last id below.
        let last_id_of_call = matches!(change, Change::LastId { .. }) && plan.get(stream).is_some();
        if !last_id_of_call && !from_disk_or_new.contains(&stream) {
            restore_own(&mut rebuilt, change.clone())?;
        }
    }

    // Group state from disk where the call changed it.
    let journaled: Vec<&str> = plan
        .streams
        .iter()
        .filter(|(_, undo)| undo.journaled)
        .map(|(name, _)| name.as_str())
        .collect();
    if !journaled.is_empty() {
        let mut apply = |change: Change| {
            if journaled.contains(&change_stream(&change)) {
                rebuilt.restore(change)?;
            }
            Ok(())
        };
        let snapshot_file = snapshot_path(&store.state_dir(), store.journal.generation);
        if snapshot_file.exists() {
            replay_snapshot(&snapshot_file, Access::Own, &mut apply)?;
        }
        replay_journal(&store.journal.path, Access::Own, &mut apply)?;
    }

    // The call's streams go back to the last id on disk (the ids of the
    // call were never shown), never behind a group's cursor
    // (`Engine::finish_restore` sees to that).
    for (name, undo) in &plan.streams {
        if rebuilt.stream_info(name).is_none() && !undo.had_files {
            continue;
        }
        let last = store
            .streams
            .get(name)
            .and_then(|files| files.segments.iter().rev().find_map(|s| s.last))
            .unwrap_or(EntryId::ZERO);
        restore_own(
            &mut rebuilt,
            Change::LastId {
                stream: name.clone(),
                id: last,
            },
        )?;
    }

    // Consumers of groups read back from disk with no seen time there (an
    // older log, not compacted since) count as seen now.
    let report = rebuilt.finish_restore(ruststream_core::Clock::new().now_ms());
    for (stream, group, id) in &report.dangling {
        tracing::warn!(stream, group, %id, "taking back a failed write dropped group state for an entry not on disk");
    }
    for (stream, group, id) in &report.uncopied {
        tracing::warn!(stream, group, %id, "taking back a failed write put back an entry whose retry copy is not on disk: owed again");
    }
    // The snapshot's exact seen times are not all on disk: each consumer
    // restored from memory keeps the recorded time it had.
    rebuilt.keep_seen_recorded(engine, |stream| !from_disk_or_new.contains(&stream));
    rebuilt.record_changes(true);
    *engine = rebuilt;
    tracing::warn!(
        streams = ?plan.streams.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        took = ?started.elapsed(),
        "a call that could not be written was taken back from memory"
    );
    Ok(())
}

/// Entries taken from memory a piece at a time while rebuilding.
const UNDO_PIECE: usize = 65_536;

/// Restores `piece` of `name`'s entries from `engine` into `rebuilt`,
/// leaving out those the failed call appended.
fn restore_piece(
    rebuilt: &mut Engine,
    engine: &Engine,
    name: &str,
    undo: Option<&StreamUndo>,
    piece: Vec<ruststream_core::Entry>,
) -> BrokerResult<()> {
    for entry in piece {
        if undo.is_some_and(|u| u.appended.binary_search(&entry.id).is_ok()) {
            continue;
        }
        let copy = engine.copy_of(name, entry.id).map(|c| {
            Arc::new(CopyOf {
                group: c.group.clone(),
                times_delivered: c.times_delivered,
            })
        });
        restore_own(
            rebuilt,
            Change::Appended {
                stream: name.to_owned(),
                id: entry.id,
                message: entry.message,
                copy,
            },
        )?;
    }
    Ok(())
}

/// Replays a change of the broker's own state (from memory, not a file):
/// one that does not replay is a bug, reported as the broker's error.
fn restore_own(engine: &mut Engine, change: Change) -> BrokerResult<()> {
    engine
        .restore(change)
        .map_err(|detail| BrokerError::Backend {
            broker: "file log",
            detail: format!(
                "taking back a failed write: the broker's own state does not replay: {detail}"
            ),
        })
}
