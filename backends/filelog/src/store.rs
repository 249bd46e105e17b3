//! Writing the engine's changes to disk: stream segments, the group-state
//! journal and its snapshots, and taking a failed call's writes back.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ruststream_core::{BrokerError, BrokerResult, Entry, EntryId, Message, Trim};
use ruststream_engine::{Change, Engine, GroupChange, is_unloaded};
use ruststream_local::Persistence;

use crate::format;
use crate::options::{FileLogOptions, Retention};
use crate::payloads::{self, Payloads};
use crate::sync::{Syncer, write_or_inject};
use crate::trims::Trims;
use crate::undo::{self, UndoPlan};

/// One segment file of a stream.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    /// The id in the file name (entries in it are at or after it).
    pub(crate) first: EntryId,
    /// The last entry written to it, if any.
    pub(crate) last: Option<EntryId>,
    pub(crate) bytes: u64,
    /// Sparse index: an entry id and its record's offset about every
    /// [`payloads::INDEX_SPACING`] bytes, in order.
    pub(crate) index: Vec<(EntryId, u64)>,
    /// Tells this segment apart from every other one of the process
    /// ([`Segment::new`]) more cheaply than its path.
    pub(crate) serial: u64,
}

impl Segment {
    /// A segment of `path`, its first id `first`, with a new serial.
    pub(crate) fn new(path: PathBuf, first: EntryId) -> Self {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        Segment {
            path,
            first,
            last: None,
            bytes: format::FILE_HEADER_LEN as u64,
            index: Vec::new(),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// A stream's files.
pub(crate) struct StreamFiles {
    pub(crate) dir: PathBuf,
    /// Oldest first; the last one is the one written to.
    pub(crate) segments: Vec<Segment>,
    pub(crate) active: Option<Arc<File>>,
    /// What trims took from the stream.
    pub(crate) trims: Trims,
}

/// The journal being written.
pub(crate) struct Journal {
    pub(crate) path: PathBuf,
    pub(crate) file: Arc<File>,
    pub(crate) generation: u64,
    pub(crate) bytes: u64,
}

/// One stream's run of new entries, encoded in `Store::entry_buf`.
pub(crate) struct Run {
    /// Index of its first change (which names the stream).
    change: usize,
    first: EntryId,
    last: EntryId,
    bytes: Range<usize>,
    /// Its entries in `Store::entry_starts`.
    entries: Range<usize>,
}

/// Where a file ended before a call wrote to it, to take the call's
/// writes back if a later one fails.
pub(crate) struct Mark {
    file: Arc<File>,
    len: u64,
    kind: MarkKind,
}

enum MarkKind {
    Journal,
    /// A segment of the stream named by `changes[change]`, and that
    /// stream's bookkeeping before the call.
    Segment {
        change: usize,
        segments: usize,
        /// Bytes and last entry of the last segment.
        last_segment: Option<(u64, Option<EntryId>)>,
        active: Option<Arc<File>>,
        /// The segment was created by this call (and is removed).
        created: bool,
    },
}

/// Each stream's files by stream name, looked up on every write: hashed
/// with foldhash, as the engine's streams are (SipHash cost more than the
/// rest of the lookup).
pub(crate) type StreamFilesMap = HashMap<String, StreamFiles, foldhash::fast::RandomState>;

/// The file log's [`Persistence`].
pub(crate) struct Store {
    pub(crate) dir: PathBuf,
    pub(crate) options: FileLogOptions,
    pub(crate) streams: StreamFilesMap,
    pub(crate) journal: Journal,
    /// Size of the last snapshot, to decide when the journal is worth
    /// compacting.
    pub(crate) snapshot_bytes: u64,
    pub(crate) syncer: Arc<Syncer>,
    /// The journal has grown enough to be compacted: done by the upkeep
    /// after the call that grew it.
    pub(crate) wants_compaction: bool,
    /// After a failed compaction, the journal size at which to try again
    /// (not on every call while the disk is full).
    pub(crate) compaction_retry_at: u64,
    /// What to take back from the engine after the last call failed.
    pub(crate) undo: Option<UndoPlan>,
    /// A write of only seen times failed and no write has succeeded since:
    /// the failure was logged once (see [`Store::seen_times_unwritten`]).
    pub(crate) seen_unwritten: bool,
    /// Streams whose directory the current call created.
    pub(crate) created_streams: Vec<String>,
    /// Reused buffers.
    pub(crate) entry_buf: Vec<u8>,
    pub(crate) runs: Vec<Run>,
    pub(crate) journal_buf: Vec<u8>,
    /// Each encoded entry's id and where it starts in `entry_buf`.
    pub(crate) entry_starts: Vec<(EntryId, usize)>,
    pub(crate) marks: Vec<Mark>,
    /// Reads payloads the engine does not hold back from the segments.
    pub(crate) payloads: Payloads,
    pub(crate) touched: Vec<Arc<File>>,
    /// Set for a read-only view of a directory another process holds (who
    /// holds it): every change is refused, and upkeep does nothing.
    pub(crate) read_only: Option<String>,
}

pub(crate) fn io_error(path: &Path, source: std::io::Error) -> BrokerError {
    BrokerError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Makes a directory's entries (new or removed files) durable, while
/// opening (a failure fails the open).
pub(crate) fn sync_dir(dir: &Path) -> BrokerResult<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// [`sync_dir`] on a working store: an fsync failure stops it.
pub(crate) fn fsync_dir(syncer: &Syncer, dir: &Path) -> BrokerResult<()> {
    let handle = File::open(dir).map_err(|e| io_error(dir, e))?;
    handle
        .sync_all()
        .map_err(|e| syncer.fail_stop(format!("fsync of directory {} failed: {e}", dir.display())))
}

/// Creates `dir` and any missing parent, open to the owner only (0700 on
/// unix, as etcd and PostgreSQL do): streams hold payloads such as
/// payment data, which no other user of the machine should read.
pub(crate) fn create_private_dir(dir: &Path) -> BrokerResult<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|e| io_error(dir, e))
}

/// Open options whose `create` makes a file only its owner can read or
/// write (0600 on unix).
pub(crate) fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Whether a directory with these permission bits lets users other than
/// its owner in (any group or other bit).
#[cfg_attr(not(unix), allow(dead_code))]
pub(crate) fn others_can_enter(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// Whether a stream name's byte stays as it is in its directory name
/// (`.` only after the first byte, so no name is hidden or `..`).
fn stays(b: u8, first: bool) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-') || (b == b'.' && !first)
}

/// A stream name as a directory name: letters, digits, `.`, `_` and `-`
/// stay; every other byte is written `%XX`.
pub(crate) fn stream_dir_name(stream: &str) -> String {
    let mut out = String::with_capacity(stream.len());
    for (i, b) in stream.bytes().enumerate() {
        if stays(b, i == 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push('%');
    }
    out
}

/// The length of [`stream_dir_name`], without building it.
pub(crate) fn stream_dir_name_len(stream: &str) -> usize {
    let escaped = stream
        .bytes()
        .enumerate()
        .map(|(i, b)| if stays(b, i == 0) { 1 } else { 3 })
        .sum();
    if stream.is_empty() { 1 } else { escaped }
}

/// The stream name a directory name stands for.
pub(crate) fn stream_from_dir_name(name: &str) -> Option<String> {
    if name == "%" {
        return Some(String::new());
    }
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A segment's file name: its first id, zero-padded so names sort in id
/// order.
pub(crate) fn segment_file_name(first: EntryId) -> String {
    format!("{:020}-{:020}.seg", first.ms, first.seq)
}

/// The id a segment file name stands for.
pub(crate) fn segment_first_id(name: &str) -> Option<EntryId> {
    let stem = name.strip_suffix(".seg")?;
    let (ms, seq) = stem.split_once('-')?;
    Some(EntryId::new(ms.parse().ok()?, seq.parse().ok()?))
}

pub(crate) fn journal_path(state_dir: &Path, generation: u64) -> PathBuf {
    state_dir.join(format!("journal-{generation:020}.log"))
}

pub(crate) fn snapshot_path(state_dir: &Path, generation: u64) -> PathBuf {
    state_dir.join(format!("snapshot-{generation:020}.bin"))
}

/// The stream a change is about.
pub(crate) fn change_stream(change: &Change) -> &str {
    match change {
        Change::Appended { stream, .. }
        | Change::GroupCreated { stream, .. }
        | Change::Group { stream, .. }
        | Change::Trimmed { stream, .. }
        | Change::Released { stream, .. }
        | Change::LastId { stream, .. } => stream,
    }
}

/// Creates a private file with `header`, durable (file and directory). A
/// file that cannot get its header is removed; a failed fsync stops the
/// store.
pub(crate) fn create_with_header(
    syncer: &Syncer,
    path: &Path,
    header: &[u8],
) -> BrokerResult<File> {
    let mut file = private_file()
        .create_new(true)
        .append(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    if let Err(e) = file.write_all(header) {
        let _ = fs::remove_file(path);
        return Err(io_error(path, e));
    }
    file.sync_all()
        .map_err(|e| syncer.fail_stop(format!("fsync of {} failed: {e}", path.display())))?;
    if let Some(dir) = path.parent() {
        fsync_dir(syncer, dir)?;
    }
    Ok(file)
}

/// Whether `changes` are consumers' seen times and nothing else: a call
/// that only read and found nothing (`GroupChange::Seen`).
fn only_seen_times(changes: &[Change]) -> bool {
    changes.iter().all(|c| {
        matches!(c, Change::Group { changes, .. }
            if changes.iter().all(|g| matches!(g, GroupChange::Seen { .. })))
    })
}

fn touch(touched: &mut Vec<Arc<File>>, file: &Arc<File>) {
    if !touched.iter().any(|f| Arc::ptr_eq(f, file)) {
        touched.push(Arc::clone(file));
    }
}

impl Store {
    pub(crate) fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Encodes a call's changes: its entries into `entry_buf` (as `runs`),
    /// its group changes into `journal_buf`, so that a record that cannot
    /// be stored fails the call before any byte is written.
    fn encode(&mut self, changes: &[Change]) -> BrokerResult<()> {
        self.entry_buf.clear();
        self.entry_starts.clear();
        self.runs.clear();
        self.journal_buf.clear();
        let mut journaled = None;
        for (i, change) in changes.iter().enumerate() {
            let Change::Appended {
                stream,
                id,
                message,
                copy,
            } = change
            else {
                journaled.get_or_insert(change_stream(change));
                continue;
            };
            let start = self.entry_buf.len();
            format::write_entry(&mut self.entry_buf, *id, message, copy.as_deref()).map_err(
                |detail| {
                    BrokerError::InvalidArgument(format!(
                        "cannot store entry {id} of stream {stream:?}: {detail}"
                    ))
                },
            )?;
            let end = self.entry_buf.len();
            self.entry_starts.push((*id, start));
            let n = self.entry_starts.len();
            match self.runs.last_mut() {
                Some(run) if change_stream(&changes[run.change]) == stream.as_str() => {
                    run.last = *id;
                    run.bytes.end = end;
                    run.entries.end = n;
                }
                _ => self.runs.push(Run {
                    change: i,
                    first: *id,
                    last: *id,
                    bytes: start..end,
                    entries: n - 1..n,
                }),
            }
        }
        if let Some(stream) = journaled {
            let group_changes = changes
                .iter()
                .filter(|c| !matches!(c, Change::Appended { .. }));
            format::write_changes(&mut self.journal_buf, group_changes).map_err(|detail| {
                BrokerError::InvalidArgument(format!(
                    "cannot journal the changes of this call on stream {stream:?}: {detail}"
                ))
            })?;
        }
        Ok(())
    }

    /// Creates a new stream's directory and its (empty) files.
    fn create_stream_files(
        streams: &mut StreamFilesMap,
        dir: &Path,
        syncer: &Syncer,
        created: &mut Vec<String>,
        stream: &str,
    ) -> BrokerResult<()> {
        let streams_dir = dir.join("streams");
        let dir = streams_dir.join(stream_dir_name(stream));
        create_private_dir(&dir)?;
        fsync_dir(syncer, &streams_dir)?;
        created.push(stream.to_owned());
        streams.insert(
            stream.to_owned(),
            StreamFiles {
                dir,
                segments: Vec::new(),
                active: None,
                trims: Trims::default(),
            },
        );
        Ok(())
    }

    /// Writes one run of a stream's entries, rolling to a new segment when
    /// the active one is full.
    fn append_run(&mut self, changes: &[Change], run: &Run) -> BrokerResult<()> {
        let stream = change_stream(&changes[run.change]);
        let limit = self.options.segment_bytes;
        // One lookup for a stream that has files (the usual case).
        let files = match self.streams.get_mut(stream) {
            Some(files) => files,
            None => {
                Self::create_stream_files(
                    &mut self.streams,
                    &self.dir,
                    &self.syncer,
                    &mut self.created_streams,
                    stream,
                )?;
                self.streams.get_mut(stream).ok_or_else(|| {
                    BrokerError::InvalidArgument(format!("stream {stream:?} vanished"))
                })?
            }
        };
        let segments = files.segments.len();
        let last_segment = files.segments.last().map(|s| (s.bytes, s.last));
        let active = files.active.clone();
        let full = files
            .segments
            .last()
            .is_none_or(|s| s.bytes >= limit && s.last.is_some());
        let mut created = false;
        if full || files.active.is_none() {
            let path = files.dir.join(segment_file_name(run.first));
            let header = format::file_header(format::SEGMENT_TAG);
            let file = create_with_header(&self.syncer, &path, &header)?;
            files.segments.push(Segment::new(path, run.first));
            files.active = Some(Arc::new(file));
            created = true;
        }
        let (Some(file), Some(segment)) = (files.active.clone(), files.segments.last_mut()) else {
            return Err(BrokerError::InvalidArgument("no active segment".into()));
        };
        self.marks.push(Mark {
            file: Arc::clone(&file),
            len: segment.bytes,
            kind: MarkKind::Segment {
                change: run.change,
                segments,
                last_segment,
                active,
                created,
            },
        });
        let bytes = &self.entry_buf[run.bytes.clone()];
        write_or_inject(
            self.syncer.failpoints(),
            Some(stream),
            &file,
            bytes,
            &segment.path,
        )?;
        for &(id, start) in &self.entry_starts[run.entries.clone()] {
            let offset = segment.bytes + (start - run.bytes.start) as u64;
            payloads::index_entry(&mut segment.index, id, offset);
        }
        segment.bytes += bytes.len() as u64;
        segment.last = Some(run.last);
        touch(&mut self.touched, &file);
        Ok(())
    }

    /// Writes the group changes of one call as one journal record.
    fn append_journal(&mut self) -> BrokerResult<()> {
        let journal = &mut self.journal;
        self.marks.push(Mark {
            file: Arc::clone(&journal.file),
            len: journal.bytes,
            kind: MarkKind::Journal,
        });
        write_or_inject(
            self.syncer.failpoints(),
            None,
            &journal.file,
            &self.journal_buf,
            &journal.path,
        )?;
        journal.bytes += self.journal_buf.len() as u64;
        touch(&mut self.touched, &journal.file);
        let threshold = self
            .options
            .compact_journal_bytes
            .max(self.snapshot_bytes.saturating_mul(4))
            .max(self.compaction_retry_at);
        if journal.bytes > threshold {
            self.wants_compaction = true;
        }
        Ok(())
    }

    /// Writes a call's changes: entries first, per stream in order, then
    /// the journal record, so a journal record never refers to an entry
    /// written after it. If any write fails, the call's earlier writes are
    /// taken back.
    fn write_changes(&mut self, changes: &[Change]) -> BrokerResult<()> {
        self.created_streams.clear();
        self.encode(changes)?;
        self.marks.clear();
        let runs = std::mem::take(&mut self.runs);
        let mut written = runs
            .iter()
            .try_for_each(|run| self.append_run(changes, run));
        self.runs = runs;
        if written.is_ok() && !self.journal_buf.is_empty() {
            written = self.append_journal();
        }
        if let Err(error) = written {
            self.unwrite(changes);
            return Err(error);
        }
        for change in changes {
            match change {
                Change::Trimmed { stream, .. } | Change::Released { stream, .. } => {
                    if let Some(files) = self.streams.get_mut(stream) {
                        files.trims.apply(change);
                    }
                    self.delete_dead_segments(stream)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Takes back what a failed call wrote: each file is cut back to where
    /// it ended before (a record cut short in the middle of a file would
    /// read as damage after the next write), a segment the call created is
    /// removed, and the bookkeeping goes back with them. If a file cannot
    /// be cut back the store stops: it may now end in a partial record.
    fn unwrite(&mut self, changes: &[Change]) {
        let marks = std::mem::take(&mut self.marks);
        self.payloads.forget();
        for mark in marks.into_iter().rev() {
            match mark.kind {
                MarkKind::Journal => {
                    if let Err(e) = mark.file.set_len(mark.len) {
                        self.syncer.fail_stop(format!(
                            "a failed write to {} could not be taken back: {e}",
                            self.journal.path.display()
                        ));
                    }
                    self.journal.bytes = mark.len;
                    // The shorter length must reach the disk too.
                    self.syncer.register([mark.file]);
                }
                MarkKind::Segment {
                    change,
                    segments,
                    last_segment,
                    active,
                    created,
                } => {
                    let stream = change_stream(&changes[change]);
                    let Some(files) = self.streams.get_mut(stream) else {
                        continue;
                    };
                    if created {
                        if let Some(new) = files.segments.get(segments)
                            && let Err(e) = fs::remove_file(&new.path)
                        {
                            // Harmless: a segment holding only its header
                            // is removed at the next open.
                            tracing::warn!(path = %new.path.display(), error = %e, "cannot remove the segment of a failed write");
                        }
                    } else if let Err(e) = mark.file.set_len(mark.len) {
                        let path = files.segments.last().map(|s| s.path.display().to_string());
                        self.syncer.fail_stop(format!(
                            "a failed write to {} could not be taken back: {e}",
                            path.unwrap_or_default()
                        ));
                    } else {
                        self.syncer.register([mark.file]);
                    }
                    files.segments.truncate(segments);
                    if let (Some(segment), Some((bytes, last))) =
                        (files.segments.last_mut(), last_segment)
                    {
                        segment.bytes = bytes;
                        segment.last = last;
                        segment.index.retain(|(_, offset)| *offset < bytes);
                    }
                    files.active = active;
                }
            }
        }
    }

    /// Deletes the stream's segments whose entries are all trimmed and none
    /// still needed by a group. The active (last) segment is never deleted.
    /// A segment that cannot be deleted is kept and tried again after the
    /// next trim; the error is an fsync failure of the directory, which
    /// stops the store.
    pub(crate) fn delete_dead_segments(&mut self, stream: &str) -> BrokerResult<()> {
        let Some(files) = self.streams.get_mut(stream) else {
            return Ok(());
        };
        let sealed = files.segments.len().saturating_sub(1);
        let mut doomed = Vec::new();
        for (i, segment) in files.segments[..sealed].iter().enumerate() {
            let Some(last) = segment.last else {
                doomed.push(i);
                continue;
            };
            if last >= files.trims.below {
                break;
            }
            if files
                .trims
                .kept
                .range(segment.first..=last)
                .next()
                .is_none()
            {
                doomed.push(i);
            }
        }
        // The journal record that lets these segments go (a trim, a
        // release) and what was written with it (a retry copy of an entry
        // in them) must be durable before the removal is: else a power
        // failure could keep the removal and lose the copy, and the entry
        // with it. The current call's files are registered by `persist`
        // only after this, so they are registered here for the sync.
        // Removals are rare: one sync more now and then.
        if !doomed.is_empty() {
            self.syncer.register(self.touched.iter().cloned());
            self.syncer.sync_written_now()?;
        }
        let mut deleted = false;
        for &i in doomed.iter().rev() {
            let path = &files.segments[i].path;
            match fs::remove_file(path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "segment deleted by retention");
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete a trimmed segment: kept for now");
                    continue;
                }
            }
            files.segments.remove(i);
            deleted = true;
        }
        if deleted {
            self.payloads.forget();
            let dir = files.dir.clone();
            fsync_dir(&self.syncer, &dir)?;
        }
        Ok(())
    }

    /// Writes a snapshot of the engine's group state, starts a new journal
    /// after it, and removes the older snapshot and journal. A failure
    /// before the new snapshot is in place leaves everything as it was, and
    /// the next try waits until the journal has grown by another
    /// `compact_journal_bytes`.
    /// Fails on a read-only view: it must never write to the holder's
    /// files (compaction and retention are the holder's to do).
    fn refuse_if_read_only(&self) -> BrokerResult<()> {
        match self.refuses_changes() {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    pub(crate) fn compact(&mut self, engine: &Engine) -> BrokerResult<()> {
        self.refuse_if_read_only()?;
        self.syncer.check()?;
        self.wants_compaction = false;
        let result = self.write_snapshot(engine);
        if result.is_err() && !self.syncer.stopped() {
            self.compaction_retry_at = self
                .journal
                .bytes
                .saturating_add(self.options.compact_journal_bytes);
        }
        result
    }

    /// Compacts if the journal has grown enough. A failure is logged, not
    /// returned: the call that grew the journal went through, and the next
    /// try waits for more growth (see [`Store::compact`]).
    pub(crate) fn compact_if_wanted(&mut self, engine: &Engine) {
        if std::mem::take(&mut self.wants_compaction)
            && let Err(error) = self.compact(engine)
        {
            tracing::error!(%error, "compacting the group-state journal failed");
        }
    }

    fn write_snapshot(&mut self, engine: &Engine) -> BrokerResult<()> {
        // The snapshot describes every entry written so far (a retry copy,
        // say, in place of the entry it retried): those entries reach the
        // disk first, or a power failure could leave the snapshot without
        // them (`GroupChange::Copied` covers the journal, not snapshots).
        self.syncer.sync_written_now()?;
        let state_dir = self.state_dir();
        let generation = self.journal.generation + 1;
        let changes = engine.snapshot();
        let mut buf = Vec::new();
        buf.extend_from_slice(&format::file_header(format::SNAPSHOT_TAG));
        let written = format::write_snapshot_changes(&mut buf, &changes, format::MAX_FRAME_BODY)
            .map_err(|detail| {
                BrokerError::InvalidArgument(format!(
                    "cannot write the snapshot of the group state: {detail}"
                ))
            })?;
        format::write_snapshot_end(&mut buf, written).map_err(BrokerError::InvalidArgument)?;
        let tmp = state_dir.join(format!("snapshot-{generation:020}.tmp"));
        let path = snapshot_path(&state_dir, generation);
        // Until the rename nothing refers to the new snapshot: a failure
        // (its fsync's included, as nothing acknowledged depends on it)
        // only removes the temporary file.
        let staged = private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .and_then(|mut file| {
                file.write_all(&buf)?;
                file.sync_all()
            })
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = staged {
            let _ = fs::remove_file(&tmp);
            return Err(io_error(&tmp, e));
        }
        // Opening now reads the new snapshot: it must get its journal, or
        // go, or the journal written after this would be missed.
        let journal = journal_path(&state_dir, generation);
        let file = match create_with_header(
            &self.syncer,
            &journal,
            &format::file_header(format::JOURNAL_TAG),
        ) {
            Ok(file) => file,
            Err(error) => {
                if !self.syncer.stopped() {
                    if let Err(e) = fs::remove_file(&path) {
                        return Err(self.syncer.fail_stop(format!(
                            "compaction failed ({error}) and its snapshot {} could not be removed: {e}",
                            path.display()
                        )));
                    }
                    fsync_dir(&self.syncer, &state_dir)?;
                }
                return Err(error);
            }
        };
        let old = std::mem::replace(
            &mut self.journal,
            Journal {
                path: journal,
                file: Arc::new(file),
                generation,
                bytes: format::FILE_HEADER_LEN as u64,
            },
        );
        self.compaction_retry_at = 0;
        // The new snapshot is durable: the old generation can go (opening
        // removes whatever is left of it).
        let _ = fs::remove_file(&old.path);
        let _ = fs::remove_file(snapshot_path(&state_dir, old.generation));
        fsync_dir(&self.syncer, &state_dir)?;
        self.snapshot_bytes = buf.len() as u64;
        tracing::debug!(
            generation,
            bytes = buf.len(),
            "group state compacted into a snapshot"
        );
        Ok(())
    }

    /// A write of only consumers' seen times (`GroupChange::Seen`) failed
    /// and was cut back off the journal. Seen times are best-effort: the
    /// call that saw the consumer (a poll that found nothing) does not
    /// fail and the engine is not taken back. It still counts the time as
    /// recorded, so the next record is tried [`SEEN_EVERY_MS`] later, and
    /// until one lands a reopen may report the consumer idle for longer
    /// than that bound. Logged once per run of failures.
    ///
    /// [`SEEN_EVERY_MS`]: ruststream_engine::SEEN_EVERY_MS
    fn seen_times_unwritten(&mut self, error: &BrokerError) {
        if self.seen_unwritten {
            tracing::debug!(%error, "a consumer's seen time could not be written");
        } else {
            self.seen_unwritten = true;
            tracing::warn!(%error, "consumers' seen times cannot be written (their polls go on; reopened, they may look idle for longer)");
        }
    }

    /// Whether replaying the journal costs enough, next to the snapshot, to
    /// be worth a compaction now.
    pub(crate) fn journal_outgrew_snapshot(&self) -> bool {
        self.journal.bytes > (1 << 20).max(self.snapshot_bytes.saturating_mul(4))
    }

    /// For each stream over its retention limits, the id to trim below:
    /// whole sealed segments that are too old or beyond the size limit.
    pub(crate) fn retention_targets(&self, now_ms: u64) -> Vec<(String, EntryId)> {
        let retention = self.options.retention;
        if retention.max_bytes.is_none() && retention.max_age.is_none() {
            return Vec::new();
        }
        let oldest_allowed = retention
            .max_age
            .map(|age| now_ms.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)));
        let mut out = Vec::new();
        for (stream, files) in &self.streams {
            let mut total: u64 = files.segments.iter().map(|s| s.bytes).sum();
            let mut below = None;
            // Never the active (last) segment.
            for segment in files
                .segments
                .iter()
                .take(files.segments.len().saturating_sub(1))
            {
                let Some(last) = segment.last else { continue };
                let too_big = retention.max_bytes.is_some_and(|max| total > max);
                let too_old = oldest_allowed.is_some_and(|t| last.ms < t);
                if !(too_big || too_old) {
                    break;
                }
                total -= segment.bytes;
                below = Some(last.next());
            }
            if let Some(below) = below.filter(|b| *b > files.trims.below) {
                out.push((stream.clone(), below));
            }
        }
        out
    }

    /// Trims every stream over its retention limits ([`Store::retention_targets`]),
    /// each trim persisted as a call of its own would be.
    pub(crate) fn enforce_retention(
        &mut self,
        engine: &mut Engine,
        now_ms: u64,
    ) -> BrokerResult<()> {
        self.refuse_if_read_only()?;
        self.syncer.check()?;
        let mut changes = Vec::new();
        for (stream, below) in self.retention_targets(now_ms) {
            engine.trim(&stream, Trim::MinId(below))?;
            self.persist_recorded(engine, &mut changes)?;
        }
        Ok(())
    }
}

impl Persistence for Store {
    const MAX_READ_COUNT: usize = crate::MAX_READ_COUNT;

    fn name(&self) -> &'static str {
        "filelog"
    }

    fn records(&self) -> bool {
        true
    }

    fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
        let written = self
            .syncer
            .check()
            .and_then(|()| self.write_changes(changes));
        if written.is_ok() && self.seen_unwritten {
            self.seen_unwritten = false;
            tracing::info!("the journal takes writes again: consumers' seen times are recorded");
        }
        let result = match written {
            // Drained, not taken: the buffer is reused by the next call.
            // Only seen times (a poll that found nothing): written, and
            // synced with the next sync rather than asking for one.
            Ok(()) if only_seen_times(changes) => {
                Ok(self.syncer.register_lazy(self.touched.drain(..)))
            }
            Ok(()) => Ok(self.syncer.register(self.touched.drain(..))),
            // Only seen times, cut back off the journal again
            // (`Store::write_changes`): best-effort, the call stands.
            Err(error) if only_seen_times(changes) && !self.syncer.stopped() => {
                self.touched.clear();
                self.seen_times_unwritten(&error);
                Ok(self.syncer.register_lazy([]))
            }
            Err(error) => {
                self.touched.clear();
                // A stopped store takes no more calls: nothing to take back
                // (and after a failed fsync the disk cannot be trusted).
                if !self.syncer.stopped() {
                    let plan = UndoPlan::new(changes, |stream| {
                        self.streams.contains_key(stream)
                            && !self.created_streams.iter().any(|s| s == stream)
                    });
                    self.undo = Some(plan);
                }
                Err(error)
            }
        };
        changes.clear();
        result
    }

    fn load<'e>(
        &mut self,
        stream: &str,
        entries: impl Iterator<Item = &'e mut Entry>,
    ) -> BrokerResult<()> {
        let files = self.streams.get(stream);
        for entry in entries.filter(|e| is_unloaded(&e.message)) {
            let Some(files) = files else {
                return Err(BrokerError::InvalidArgument(format!(
                    "stream {stream:?} has no files to read entry {} from",
                    entry.id
                )));
            };
            entry.message = self.payloads.load(files, entry.id)?;
        }
        Ok(())
    }

    fn undo(&mut self, engine: &mut Engine) {
        let Some(plan) = self.undo.take() else {
            return;
        };
        if let Err(error) = undo::rebuild(self, engine, &plan) {
            self.syncer.fail_stop(format!(
                "a failed write could not be taken back from memory: {error}"
            ));
        }
    }

    fn check_stream(stream: &str) -> BrokerResult<()> {
        crate::check_stream(stream)
    }

    fn check_messages(stream: &str, messages: &[Message]) -> BrokerResult<()> {
        crate::check_messages(stream, messages.iter())
    }

    fn check_group_change(call: &str, stream: &str, ids: usize, extra: usize) -> BrokerResult<()> {
        crate::check_journal_record(call, stream, ids, extra)
    }

    /// Compaction when the journal has grown, and retention after a
    /// publish. A stopped store does neither: it takes no more writes.
    fn refuses_changes(&self) -> Option<BrokerError> {
        let holder = self.read_only.as_ref()?;
        Some(BrokerError::InUse {
            path: self.dir.clone(),
            holder: format!(
                "{holder}; this view of it is read-only: make changes through that process"
            ),
        })
    }

    fn upkeep(&mut self, engine: &mut Engine, _stream: &str, now_ms: u64, published: bool) {
        if self.syncer.stopped() || self.read_only.is_some() {
            return;
        }
        self.compact_if_wanted(engine);
        if published
            && self.options.retention != Retention::default()
            && !self.syncer.stopped()
            && let Err(error) = self.enforce_retention(engine, now_ms)
        {
            tracing::error!(%error, "applying retention failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_map_to_safe_directory_names_and_back() {
        for name in [
            "payments",
            "payments.screened",
            "a/b",
            "..",
            ".hidden",
            "",
            "ünï",
            "%",
        ] {
            let dir = stream_dir_name(name);
            assert!(
                dir.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-%".contains(&b)),
                "{dir}"
            );
            assert!(!dir.starts_with('.'), "{dir}");
            assert_eq!(stream_from_dir_name(&dir).as_deref(), Some(name), "{dir}");
            assert_eq!(stream_dir_name_len(name), dir.len(), "{dir}");
        }
    }

    #[test]
    fn segment_names_sort_by_id() {
        let a = segment_file_name(EntryId::new(9, 10));
        let b = segment_file_name(EntryId::new(10, 0));
        assert!(a < b);
        assert_eq!(segment_first_id(&a), Some(EntryId::new(9, 10)));
        assert_eq!(segment_first_id("x.seg"), None);
    }

    #[test]
    fn a_directory_others_can_enter_is_recognised() {
        assert!(!others_can_enter(0o700));
        assert!(!others_can_enter(0o500));
        for open in [0o755, 0o750, 0o701, 0o710, 0o770, 0o707] {
            assert!(others_can_enter(open), "{open:o}");
        }
    }
}
