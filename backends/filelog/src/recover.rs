//! Opening a file log: taking the lock, reading segments, snapshot and
//! journal into the engine, and repairing a torn tail; or, for a
//! directory another process holds, reading it without the lock and
//! without writing anything ([`Access::ReadOnly`]).

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ruststream_core::{BrokerError, BrokerResult, EntryId};
use ruststream_engine::{Change, Engine};
use ruststream_local::Persistence;

use crate::format::{self, Frame};
use crate::lock::{DirLock, holder, lock_dir};
use crate::options::FileLogOptions;
use crate::payloads::{Payloads, index_entry};
use crate::store::{
    Journal, Segment, Store, StreamFiles, StreamFilesMap, create_private_dir, create_with_header,
    io_error, journal_path, others_can_enter, segment_first_id, snapshot_path,
    stream_from_dir_name, sync_dir,
};
use crate::sync::Syncer;
use crate::trims::Trims;

/// A file log read back from disk.
pub(crate) struct Opened {
    pub(crate) engine: Engine,
    pub(crate) store: Store,
    /// `None` for a read-only view.
    pub(crate) lock: Option<DirLock>,
    pub(crate) entries: u64,
}

/// How a file log is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// With its lock: torn tails are repaired, missing files created.
    Own,
    /// Without the lock, while another process may be writing: nothing is
    /// written, and a torn tail (a write in progress) ends what is read.
    ReadOnly,
}

fn corrupt(path: &Path, offset: u64, detail: impl Into<String>) -> BrokerError {
    BrokerError::Corrupt {
        path: path.to_owned(),
        offset,
        detail: detail.into(),
    }
}

/// Reads a whole file and checks its header. A file shorter than its
/// header (a crash while it was being created) gets a fresh header.
fn read_file(path: &Path, tag: &[u8; 6], access: Access) -> BrokerResult<Vec<u8>> {
    let mut bytes = Vec::new();
    read_file_into(path, tag, access, &mut bytes)?;
    Ok(bytes)
}

/// [`read_file`] into `bytes` (a buffer reused from file to file).
fn read_file_into(
    path: &Path,
    tag: &[u8; 6],
    access: Access,
    bytes: &mut Vec<u8>,
) -> BrokerResult<()> {
    bytes.clear();
    fs::File::open(path)
        .and_then(|mut file| file.read_to_end(bytes))
        .map_err(|e| io_error(path, e))?;
    if bytes.len() < format::FILE_HEADER_LEN
        && tag[..bytes.len().min(6)] == bytes[..bytes.len().min(6)]
    {
        bytes.clear();
        bytes.extend_from_slice(&format::file_header(tag));
        if access == Access::ReadOnly {
            // Being created right now: empty so far.
            return Ok(());
        }
        tracing::warn!(path = %path.display(), "file cut short in its header (crash while it was created): header rewritten");
        fs::write(path, format::file_header(tag)).map_err(|e| io_error(path, e))?;
        return Ok(());
    }
    format::check_file_header(bytes, tag).map_err(|detail| corrupt(path, 0, detail))
}

/// Walks the frames of a file after its header. A bad frame followed by
/// nothing valid is a torn tail: the file is truncated there (logged). A bad
/// frame followed by a valid one that `follows` accepts (see
/// [`format::valid_frame_after`]) is corruption: an error naming the file
/// and offset. `tail` says what a torn tail does. Returns the file's length
/// once repaired (or, read-only, the length of what was read).
fn walk_frames(
    path: &Path,
    bytes: &[u8],
    tail: Tail,
    mut on_frame: impl FnMut(u8, &[u8], u64) -> Result<(), String>,
    follows: impl Fn(u8, &[u8]) -> bool,
) -> BrokerResult<u64> {
    let mut at = format::FILE_HEADER_LEN;
    loop {
        match format::read_frame(&bytes[at..]) {
            Frame::End => return Ok(at as u64),
            Frame::Ok { kind, body, len } => {
                on_frame(kind, body, at as u64)
                    .map_err(|detail| corrupt(path, at as u64, detail))?;
                at += len;
            }
            Frame::Bad(reason) => {
                if let Some(next) = format::valid_frame_after(&bytes[at..], &follows) {
                    return Err(corrupt(
                        path,
                        at as u64,
                        format!(
                            "{reason}, and a valid record follows at offset {}: this is damage inside the file, not a torn write; restore the file from a backup or move it aside",
                            at + next
                        ),
                    ));
                }
                match tail {
                    Tail::Refuse => return Err(corrupt(path, at as u64, reason)),
                    Tail::Stop => return Ok(at as u64),
                    Tail::Truncate => {}
                }
                tracing::warn!(
                    path = %path.display(),
                    offset = at,
                    dropped_bytes = bytes.len() - at,
                    %reason,
                    "torn record at the end of the file (a write cut short by a crash): truncated"
                );
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| io_error(path, e))?;
                file.set_len(at as u64).map_err(|e| io_error(path, e))?;
                file.sync_all().map_err(|e| io_error(path, e))?;
                return Ok(at as u64);
            }
        }
    }
}

/// What a bad record at the very end of a file means.
#[derive(Clone, Copy)]
enum Tail {
    /// A write cut short by a crash: cut it off.
    Truncate,
    /// Damage: the file is never written in place (snapshots).
    Refuse,
    /// A write in progress by the process that holds the log (read-only
    /// access): what is read ends there.
    Stop,
}

impl Access {
    /// How a file that is appended to treats a torn tail.
    fn appended_tail(self) -> Tail {
        match self {
            Access::Own => Tail::Truncate,
            Access::ReadOnly => Tail::Stop,
        }
    }
}

/// Takes in a change of the journal: the trims of each stream rebuilt.
fn track_trims(trims: &mut HashMap<String, Trims>, change: &Change) {
    match change {
        Change::Trimmed { stream, .. } => trims.entry(stream.clone()).or_default().apply(change),
        Change::Released { stream, .. } => {
            if let Some(t) = trims.get_mut(stream) {
                t.apply(change);
            }
        }
        _ => {}
    }
}

/// One stream's segments as [`load_stream`] read them.
pub(crate) struct LoadedStream {
    /// The segments holding entries, oldest first.
    pub(crate) segments: Vec<Segment>,
    /// How many entries they hold.
    pub(crate) entries: u64,
    /// Segments holding only their header: a crash between creating a
    /// segment and its first record reaching the disk (or a failed write
    /// whose new segment could not be removed). Nothing refers to them,
    /// and left as the active segment one would take entries with ids
    /// before its name (the clock may have stepped back since), which no
    /// later open accepts: [`open`] removes them (a read-only view passes
    /// them over).
    pub(crate) empty: Vec<PathBuf>,
}

/// Loads one stream's segments into the engine: the entries' ids and
/// retry-copy markers (their payloads stay on disk), and each segment's
/// sparse index. Segments holding no entries are left out of the list
/// (see [`LoadedStream::empty`]).
pub(crate) fn load_stream(
    dir: &Path,
    stream: &str,
    engine: &mut Engine,
    access: Access,
) -> BrokerResult<LoadedStream> {
    let mut names: Vec<(EntryId, PathBuf)> = Vec::new();
    for item in fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let item = item.map_err(|e| io_error(dir, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        match segment_first_id(&name) {
            Some(first) => names.push((first, item.path())),
            None => tracing::warn!(path = %item.path().display(), "not a segment file: ignored"),
        }
    }
    names.sort();
    let mut loaded = LoadedStream {
        segments: Vec::with_capacity(names.len()),
        entries: 0,
        empty: Vec::new(),
    };
    let last_id = std::cell::Cell::new(EntryId::ZERO);
    let mut keys = Vec::new();
    let mut bytes = Vec::new();
    for (first, path) in names {
        read_file_into(&path, format::SEGMENT_TAG, access, &mut bytes)?;
        let (mut last, mut index) = (None, Vec::new());
        keys.clear();
        let len = walk_frames(
            &path,
            &bytes,
            access.appended_tail(),
            |kind, body, offset| {
                if kind != format::KIND_ENTRY {
                    return Err(format!("record kind {kind} in a segment, expected entries"));
                }
                let (id, copy) = format::read_entry_key(body)?;
                if id <= last_id.get() || id < first {
                    return Err(format!(
                        "entry id {id} does not follow {} (segment starts at {first})",
                        last_id.get()
                    ));
                }
                last_id.set(id);
                last = Some(id);
                index_entry(&mut index, id, offset);
                keys.push((id, copy));
                Ok(())
            },
            // Only an entry that could come next shows damage: a torn
            // entry's payload may hold records of its own (a segment's bytes
            // forwarded as a message), with ids of their own.
            |kind, body| {
                kind == format::KIND_ENTRY
                    && format::entry_id(body).is_ok_and(|id| id > last_id.get())
            },
        )?;
        if last.is_none() {
            // Only its header: see `LoadedStream::empty`.
            loaded.empty.push(path);
            continue;
        }
        loaded.entries += keys.len() as u64;
        engine.restore_entries(stream, keys.drain(..));
        let mut segment = Segment::new(path, first);
        segment.last = last;
        segment.bytes = len;
        segment.index = index;
        loaded.segments.push(segment);
    }
    Ok(loaded)
}

/// Replays a snapshot file into `apply`; returns its length. Every record
/// must be valid (snapshots are never written in place) and the end marker
/// must count every change.
pub(crate) fn replay_snapshot(
    path: &Path,
    access: Access,
    mut apply: impl FnMut(Change) -> Result<(), String>,
) -> BrokerResult<u64> {
    let bytes = read_file(path, format::SNAPSHOT_TAG, access)?;
    let mut applied = 0u64;
    let mut ended = None;
    walk_frames(
        path,
        &bytes,
        Tail::Refuse,
        |kind, body, _| {
            match kind {
                format::KIND_CHANGES => {
                    for change in format::read_changes(body)? {
                        apply(change)?;
                        applied += 1;
                    }
                }
                format::KIND_SNAPSHOT_END => ended = Some(format::read_snapshot_end(body)?),
                other => return Err(format!("record kind {other} in a snapshot")),
            }
            Ok(())
        },
        |_, _| true,
    )?;
    if ended != Some(applied) {
        return Err(corrupt(
            path,
            bytes.len() as u64,
            format!("snapshot incomplete: {applied} changes read, end marker says {ended:?}"),
        ));
    }
    Ok(bytes.len() as u64)
}

/// Replays a journal into `apply`, truncating a torn tail; returns its
/// length once repaired.
pub(crate) fn replay_journal(
    path: &Path,
    access: Access,
    mut apply: impl FnMut(Change) -> Result<(), String>,
) -> BrokerResult<u64> {
    let bytes = read_file(path, format::JOURNAL_TAG, access)?;
    walk_frames(
        path,
        &bytes,
        access.appended_tail(),
        |kind, body, _| {
            if kind != format::KIND_CHANGES {
                return Err(format!("record kind {kind} in a journal"));
            }
            for change in format::read_changes(body)? {
                apply(change)?;
            }
            Ok(())
        },
        // Any valid record: a journal holds no messages. (A dead letter's
        // reason is the one thing in it a user writes: a torn record whose
        // reason holds a record is refused as damage.)
        |_, _| true,
    )
}

/// Warns if `dir` exists and lets users other than its owner in. Only the
/// directory matters: nothing inside it can be reached through a directory
/// others cannot enter, whatever the files' own modes (those of an older
/// version were 0644). It is left as it is: permissions are the operator's
/// to change.
#[cfg(unix)]
fn warn_if_others_can_enter(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(metadata) = fs::metadata(dir) else {
        return;
    };
    let mode = metadata.permissions().mode() & 0o777;
    if others_can_enter(mode) {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{mode:o}"),
            "the file log's directory can be entered by other users, who may read its entries; \
             restrict it to its owner (chmod -R go-rwx)"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_others_can_enter(_dir: &Path) {}

/// The payload bytes the engine holds per stream.
pub(crate) fn cache_limit(options: &FileLogOptions) -> usize {
    usize::try_from(options.cache_bytes).unwrap_or(usize::MAX)
}

/// The newest generation of group state in `state_dir`: the highest
/// `snapshot-<g>.bin` (0 with none).
fn newest_generation(state_dir: &Path) -> BrokerResult<u64> {
    let mut generation = 0;
    for item in fs::read_dir(state_dir).map_err(|e| io_error(state_dir, e))? {
        let item = item.map_err(|e| io_error(state_dir, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if let Some(g) = name
            .strip_prefix("snapshot-")
            .and_then(|n| n.strip_suffix(".bin"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            generation = generation.max(g);
        }
    }
    Ok(generation)
}

/// Opens (creating if needed) the file log in `dir`; read-only, it must
/// exist, and nothing is created, repaired or removed.
pub(crate) fn open(dir: &Path, options: FileLogOptions, access: Access) -> BrokerResult<Opened> {
    let own = access == Access::Own;
    let streams_dir = dir.join("streams");
    let state_dir = dir.join("state");
    let lock = if own {
        warn_if_others_can_enter(dir);
        create_private_dir(dir)?;
        let lock = lock_dir(dir)?;
        for d in [&streams_dir, &state_dir] {
            create_private_dir(d)?;
        }
        sync_dir(dir)?;
        Some(lock)
    } else {
        for d in [dir, &streams_dir, &state_dir] {
            fs::metadata(d).map_err(|e| io_error(d, e))?;
        }
        None
    };
    let syncer = Syncer::new(options.sync).map_err(|e| io_error(dir, e))?;

    let mut engine = Engine::new();
    engine.cache_payloads(Some(cache_limit(&options)));
    let mut streams = StreamFilesMap::default();
    let mut entries = 0;
    let mut stream_dirs: Vec<PathBuf> = fs::read_dir(&streams_dir)
        .map_err(|e| io_error(&streams_dir, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    stream_dirs.sort();
    for path in stream_dirs {
        let dir_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(stream) = stream_from_dir_name(&dir_name) else {
            tracing::warn!(path = %path.display(), "not a stream directory: ignored");
            continue;
        };
        let LoadedStream {
            segments,
            entries: count,
            empty,
        } = load_stream(&path, &stream, &mut engine, access)?;
        entries += count;
        if own && !empty.is_empty() {
            for segment in &empty {
                tracing::warn!(path = %segment.display(), "segment holding no entries (a crash while it was created): removed");
                fs::remove_file(segment).map_err(|e| io_error(segment, e))?;
            }
            sync_dir(&path)?;
        }
        let active = match segments.last() {
            Some(last) if own => Some(Arc::new(
                OpenOptions::new()
                    .append(true)
                    .open(&last.path)
                    .map_err(|e| io_error(&last.path, e))?,
            )),
            _ => None,
        };
        streams.insert(
            stream,
            StreamFiles {
                dir: path,
                segments,
                active,
                trims: Trims::default(),
            },
        );
    }

    // Group state: the newest snapshot, then its journal.
    let generation = newest_generation(&state_dir)?;
    let mut old_files = Vec::new();
    for item in fs::read_dir(&state_dir).map_err(|e| io_error(&state_dir, e))? {
        let item = item.map_err(|e| io_error(&state_dir, e))?;
        if item.file_name().to_string_lossy().ends_with(".tmp") {
            old_files.push(item.path());
        }
    }
    let mut trims: HashMap<String, Trims> = HashMap::new();
    let snapshot = snapshot_path(&state_dir, generation);
    let mut snapshot_bytes = 0;
    let mut apply = |change: Change| {
        track_trims(&mut trims, &change);
        engine.restore(change)
    };
    let journal = journal_path(&state_dir, generation);
    // Read-only, the generation listed must still be there: the holder's
    // compaction may have replaced it since. A `NotFound` makes
    // `open_read_only` list the directory again, rather than open a view
    // with none (or only part) of the group state.
    let replaced = |what: &str| {
        io_error(
            &journal,
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("{what} while read")),
        )
    };
    if !own && generation > 0 && !snapshot.exists() {
        return Err(replaced("the snapshot was replaced"));
    }
    if snapshot.exists() {
        snapshot_bytes = replay_snapshot(&snapshot, access, &mut apply)?;
    }
    let journal_bytes = if journal.exists() {
        replay_journal(&journal, access, &mut apply)?
    } else if !own {
        // Either the holder's compaction replaced this generation since it
        // was listed (a newer one is there now: list again), or a
        // compaction stopped between its snapshot and its journal (a crash):
        // the snapshot is then the whole state, as a writer's open finds.
        if newest_generation(&state_dir)? != generation || (generation > 0 && !snapshot.exists()) {
            return Err(replaced("the journal was replaced"));
        }
        0
    } else {
        create_with_header(&syncer, &journal, &format::file_header(format::JOURNAL_TAG))?;
        format::FILE_HEADER_LEN as u64
    };
    // Files of older generations (a compaction that crashed before its
    // clean-up) and unfinished snapshots.
    for item in fs::read_dir(&state_dir).map_err(|e| io_error(&state_dir, e))? {
        let item = item.map_err(|e| io_error(&state_dir, e))?;
        let path = item.path();
        if path != journal && path != snapshot {
            old_files.push(path);
        }
    }
    for path in old_files.into_iter().filter(|_| own) {
        tracing::info!(path = %path.display(), "removing a file left by an earlier compaction");
        let _ = fs::remove_file(&path);
    }

    // Consumers with no seen time on disk (an older log) count as seen now.
    let report = engine.finish_restore(ruststream_core::Clock::new().now_ms());
    for (stream, group, id) in &report.dangling {
        tracing::warn!(
            stream, group, %id,
            "group state refers to an entry that never reached the disk (a publish cut short by a crash, never acknowledged): dropped"
        );
    }
    for (stream, group, id) in &report.uncopied {
        tracing::warn!(
            stream, group, %id,
            "an entry was retried with a copy that never reached the disk (a power failure): owed again"
        );
    }
    // An original owed again may have been let go of by a trim or a release
    // its lost copy allowed: the engine kept it again, and so must its
    // segment be.
    for (stream, _, id) in &report.uncopied {
        if let Some(t) = trims.get_mut(stream).filter(|t| *id < t.below) {
            t.kept.insert(*id);
        }
    }
    for (stream, trim) in trims {
        if let Some(files) = streams.get_mut(&stream) {
            files.trims = trim;
        }
    }

    let journal_file = if own {
        OpenOptions::new().append(true).open(&journal)
    } else {
        // Never written through; the directory's own journal, or any file
        // to stand in for one not made yet.
        fs::File::open(&journal).or_else(|_| fs::File::open(dir.join("LOCK")))
    }
    .map_err(|e| io_error(&journal, e))?;
    let mut store = Store {
        dir: dir.to_owned(),
        options,
        streams,
        journal: Journal {
            path: journal,
            file: Arc::new(journal_file),
            generation,
            bytes: journal_bytes,
        },
        snapshot_bytes,
        syncer,
        wants_compaction: false,
        compaction_retry_at: 0,
        undo: None,
        seen_unwritten: false,
        created_streams: Vec::new(),
        entry_buf: Vec::new(),
        runs: Vec::new(),
        journal_buf: Vec::new(),
        entry_starts: Vec::new(),
        marks: Vec::new(),
        payloads: Payloads::default(),
        touched: Vec::new(),
        read_only: None,
    };
    if !own {
        store.read_only = Some(holder(dir));
    }
    // Consumers of a log written before seen times were recorded, taken as
    // seen now: their holder writes that down, so that a read-only view of
    // the log (or a reopen) counts their idle time from the same moment.
    // One record, synced with the next sync (best-effort, as any write of
    // seen times only).
    let mut seen = if own {
        engine.take_unrecorded_seen()
    } else {
        Vec::new()
    };
    if !seen.is_empty() {
        store.persist(&mut seen)?;
    }
    let names: Vec<String> = store.streams.keys().cloned().collect();
    for stream in names.into_iter().filter(|_| own) {
        store.delete_dead_segments(&stream)?;
    }
    Ok(Opened {
        engine,
        store,
        lock,
        entries,
    })
}
