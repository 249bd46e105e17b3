//! Writing the engine's changes to disk: stream segments, the group-state
//! journal and its snapshots, and group commit.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ruststream_core::{BrokerError, BrokerFuture, BrokerResult, EntryId};
use ruststream_engine::{Change, Engine};
use ruststream_memory::{Durability, Persistence};
use tokio::sync::Notify;

use crate::format;
use crate::options::{FileLogOptions, SyncPolicy};

/// One segment file of a stream.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    /// The id in the file name (entries in it are at or after it).
    pub(crate) first: EntryId,
    /// The last entry written to it, if any.
    pub(crate) last: Option<EntryId>,
    pub(crate) bytes: u64,
}

/// A stream's files.
pub(crate) struct StreamFiles {
    pub(crate) dir: PathBuf,
    /// Oldest first; the last one is the one written to.
    pub(crate) segments: Vec<Segment>,
    pub(crate) active: Option<Arc<File>>,
    /// Entries below this were trimmed (those in `kept` aside).
    pub(crate) trimmed_below: EntryId,
    /// Entries a trim kept because a group still needed them.
    pub(crate) kept: BTreeSet<EntryId>,
}

/// The journal being written.
pub(crate) struct Journal {
    pub(crate) path: PathBuf,
    pub(crate) file: Arc<File>,
    pub(crate) generation: u64,
    pub(crate) bytes: u64,
}

/// The file log's [`Persistence`].
pub(crate) struct Store {
    pub(crate) dir: PathBuf,
    pub(crate) options: FileLogOptions,
    pub(crate) streams: HashMap<String, StreamFiles>,
    pub(crate) journal: Journal,
    /// Size of the last snapshot, to decide when the journal is worth
    /// compacting.
    pub(crate) snapshot_bytes: u64,
    pub(crate) syncer: Arc<Syncer>,
    pub(crate) wants_compaction: Arc<AtomicBool>,
    /// Set after a write failed: the store takes no more writes.
    pub(crate) failed: Option<String>,
    /// Reused buffers.
    pub(crate) entry_buf: Vec<u8>,
    pub(crate) journal_buf: Vec<u8>,
    pub(crate) touched: Vec<Arc<File>>,
}

pub(crate) fn io_error(path: &Path, source: std::io::Error) -> BrokerError {
    BrokerError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Makes a directory's entries (new or removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> BrokerResult<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// A stream name as a directory name: letters, digits, `.`, `_` and `-`
/// stay; every other byte is written `%XX`.
pub(crate) fn stream_dir_name(stream: &str) -> String {
    let mut out = String::with_capacity(stream.len());
    for b in stream.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-') || (b == b'.' && !out.is_empty()) {
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

/// Creates a file with `header`, durable (file and directory).
pub(crate) fn create_with_header(path: &Path, header: &[u8]) -> BrokerResult<File> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    file.write_all(header).map_err(|e| io_error(path, e))?;
    file.sync_all().map_err(|e| io_error(path, e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(file)
}

impl Store {
    pub(crate) fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    fn fail(&mut self, error: BrokerError) -> BrokerError {
        if self.failed.is_none() {
            tracing::error!(dir = %self.dir.display(), %error, "file log write failed; no more writes will be taken");
            self.failed = Some(error.to_string());
        }
        error
    }

    fn touch(&mut self, file: &Arc<File>) {
        if !self.touched.iter().any(|f| Arc::ptr_eq(f, file)) {
            self.touched.push(Arc::clone(file));
        }
    }

    /// The stream's files, created if new.
    fn stream_files(&mut self, stream: &str) -> BrokerResult<&mut StreamFiles> {
        if !self.streams.contains_key(stream) {
            let dir = self.dir.join("streams").join(stream_dir_name(stream));
            fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
            sync_dir(&self.dir.join("streams"))?;
            self.streams.insert(
                stream.to_owned(),
                StreamFiles {
                    dir,
                    segments: Vec::new(),
                    active: None,
                    trimmed_below: EntryId::ZERO,
                    kept: BTreeSet::new(),
                },
            );
        }
        self.streams
            .get_mut(stream)
            .ok_or_else(|| BrokerError::InvalidArgument(format!("stream {stream:?} vanished")))
    }

    /// Writes a stream's encoded entries (first id `first`, last `last`),
    /// rolling to a new segment when the active one is full.
    fn append_entries(&mut self, stream: &str, first: EntryId, last: EntryId) -> BrokerResult<()> {
        let limit = self.options.segment_bytes;
        let bytes = std::mem::take(&mut self.entry_buf);
        let result = (|| {
            let files = self.stream_files(stream)?;
            let full = files
                .segments
                .last()
                .is_none_or(|s| s.bytes >= limit && s.last.is_some());
            if full || files.active.is_none() {
                let path = files.dir.join(segment_file_name(first));
                let file = create_with_header(&path, &format::file_header(format::SEGMENT_TAG))?;
                files.segments.push(Segment {
                    path,
                    first,
                    last: None,
                    bytes: format::FILE_HEADER_LEN as u64,
                });
                files.active = Some(Arc::new(file));
            }
            let (Some(active), Some(segment)) = (files.active.clone(), files.segments.last_mut())
            else {
                return Err(BrokerError::InvalidArgument("no active segment".into()));
            };
            (&*active)
                .write_all(&bytes)
                .map_err(|e| io_error(&segment.path, e))?;
            segment.bytes += bytes.len() as u64;
            segment.last = Some(last);
            Ok(active)
        })();
        self.entry_buf = bytes;
        self.entry_buf.clear();
        let active = result?;
        self.touch(&active);
        Ok(())
    }

    /// Writes the group changes of one call as one journal record.
    fn append_journal(&mut self, changes: &[Change]) -> BrokerResult<()> {
        let group_changes = changes
            .iter()
            .filter(|c| !matches!(c, Change::Appended { .. }));
        if group_changes.clone().next().is_none() {
            return Ok(());
        }
        self.journal_buf.clear();
        format::write_changes(&mut self.journal_buf, group_changes)
            .map_err(BrokerError::InvalidArgument)?;
        (&*self.journal.file)
            .write_all(&self.journal_buf)
            .map_err(|e| io_error(&self.journal.path, e))?;
        self.journal.bytes += self.journal_buf.len() as u64;
        let file = Arc::clone(&self.journal.file);
        self.touch(&file);
        if self.journal.bytes
            > self
                .options
                .compact_journal_bytes
                .max(self.snapshot_bytes.saturating_mul(4))
        {
            self.wants_compaction.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn write_changes(&mut self, changes: &mut Vec<Change>) -> BrokerResult<()> {
        // Entries first, per stream in order, then the journal record: a
        // journal record never refers to an entry written after it.
        let mut i = 0;
        while i < changes.len() {
            let Change::Appended { stream, .. } = &changes[i] else {
                i += 1;
                continue;
            };
            let stream = stream.clone();
            let (mut first, mut last) = (None, EntryId::ZERO);
            while let Some(Change::Appended {
                stream: s,
                id,
                message,
                copy,
            }) = changes.get(i)
            {
                if *s != stream {
                    break;
                }
                format::write_entry(&mut self.entry_buf, *id, message, copy.as_deref()).map_err(
                    |detail| {
                        BrokerError::InvalidArgument(format!(
                            "cannot store an entry of stream {stream:?}: {detail}"
                        ))
                    },
                )?;
                first.get_or_insert(*id);
                last = *id;
                i += 1;
            }
            if let Some(first) = first {
                self.append_entries(&stream, first, last)?;
            }
        }
        self.append_journal(changes)?;
        for change in changes.iter() {
            match change {
                Change::Trimmed {
                    stream,
                    below,
                    keep,
                } => {
                    if let Some(files) = self.streams.get_mut(stream) {
                        files.trimmed_below = files.trimmed_below.max(*below);
                        files.kept.extend(keep.iter().copied());
                    }
                    self.delete_dead_segments(stream)?;
                }
                Change::Released { stream, ids } => {
                    if let Some(files) = self.streams.get_mut(stream) {
                        for id in ids {
                            files.kept.remove(id);
                        }
                    }
                    self.delete_dead_segments(stream)?;
                }
                _ => {}
            }
        }
        changes.clear();
        Ok(())
    }

    /// Deletes the stream's segments whose entries are all trimmed and none
    /// still needed by a group. The active (last) segment is never deleted.
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
            if last >= files.trimmed_below {
                break;
            }
            if files.kept.range(segment.first..=last).next().is_none() {
                doomed.push(i);
            }
        }
        for &i in doomed.iter().rev() {
            let segment = files.segments.remove(i);
            fs::remove_file(&segment.path).map_err(|e| io_error(&segment.path, e))?;
            tracing::debug!(path = %segment.path.display(), "segment deleted by retention");
        }
        if !doomed.is_empty() {
            let dir = files.dir.clone();
            sync_dir(&dir)?;
        }
        Ok(())
    }

    /// Writes a snapshot of the engine's group state, starts a new journal
    /// after it, and removes the older snapshot and journal.
    pub(crate) fn compact(&mut self, engine: &Engine) -> BrokerResult<()> {
        if let Some(failed) = &self.failed {
            return Err(BrokerError::Failed {
                broker: "filelog",
                detail: failed.clone(),
            });
        }
        let state_dir = self.state_dir();
        let generation = self.journal.generation + 1;
        let changes = engine.snapshot();
        let mut buf = Vec::new();
        buf.extend_from_slice(&format::file_header(format::SNAPSHOT_TAG));
        for chunk in changes.chunks(4096) {
            format::write_changes(&mut buf, chunk.iter()).map_err(BrokerError::InvalidArgument)?;
        }
        format::write_snapshot_end(&mut buf, changes.len() as u64)
            .map_err(BrokerError::InvalidArgument)?;
        let tmp = state_dir.join(format!("snapshot-{generation:020}.tmp"));
        let result = (|| {
            let mut file = File::create(&tmp).map_err(|e| io_error(&tmp, e))?;
            file.write_all(&buf).map_err(|e| io_error(&tmp, e))?;
            file.sync_all().map_err(|e| io_error(&tmp, e))?;
            let path = snapshot_path(&state_dir, generation);
            fs::rename(&tmp, &path).map_err(|e| io_error(&path, e))?;
            let journal = journal_path(&state_dir, generation);
            let file = create_with_header(&journal, &format::file_header(format::JOURNAL_TAG))?;
            sync_dir(&state_dir)?;
            let old = std::mem::replace(
                &mut self.journal,
                Journal {
                    path: journal,
                    file: Arc::new(file),
                    generation,
                    bytes: format::FILE_HEADER_LEN as u64,
                },
            );
            // The new snapshot is durable: the old generation can go.
            let _ = fs::remove_file(&old.path);
            let _ = fs::remove_file(snapshot_path(&state_dir, old.generation));
            sync_dir(&state_dir)?;
            self.snapshot_bytes = buf.len() as u64;
            tracing::debug!(
                generation,
                bytes = buf.len(),
                "group state compacted into a snapshot"
            );
            Ok(())
        })();
        self.wants_compaction.store(false, Ordering::Relaxed);
        result.map_err(|e| self.fail(e))
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
            if let Some(below) = below.filter(|b| *b > files.trimmed_below) {
                out.push((stream.clone(), below));
            }
        }
        out
    }
}

impl Persistence for Store {
    fn name(&self) -> &'static str {
        "filelog"
    }

    fn records(&self) -> bool {
        true
    }

    fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
        if let Some(failed) = &self.failed {
            changes.clear();
            return Err(BrokerError::Failed {
                broker: "filelog",
                detail: failed.clone(),
            });
        }
        if let Err(e) = self.write_changes(changes) {
            changes.clear();
            return Err(self.fail(e));
        }
        let touched = std::mem::take(&mut self.touched);
        Ok(self.syncer.register(touched))
    }
}

/// Group commit: writers register the files they wrote; whoever waits for
/// durability first syncs every file written so far, and everyone whose
/// writes that covered is released by the same sync.
pub(crate) struct Syncer {
    state: Mutex<SyncState>,
    synced_now: Notify,
    policy: SyncPolicy,
}

#[derive(Default)]
struct SyncState {
    /// Ticket of the last registered write.
    written: u64,
    /// Every write up to this ticket is durable.
    synced: u64,
    /// A sync is running.
    syncing: bool,
    /// Files written since the last sync started.
    dirty: Vec<Arc<File>>,
    /// The first sync failure: durability can no longer be promised.
    error: Option<String>,
}

impl Syncer {
    pub(crate) fn new(policy: SyncPolicy) -> Arc<Self> {
        let syncer = Arc::new(Syncer {
            state: Mutex::new(SyncState::default()),
            synced_now: Notify::new(),
            policy,
        });
        let period = match policy {
            SyncPolicy::EveryPublish => Duration::from_millis(100),
            SyncPolicy::Interval(period) => period,
        };
        let weak = Arc::downgrade(&syncer);
        let spawned = std::thread::Builder::new()
            .name("ruststream-filelog-sync".into())
            .spawn(move || background_sync(weak, period));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the file log's background sync thread");
        }
        syncer
    }

    fn lock(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, files: Vec<Arc<File>>) -> u64 {
        let mut state = self.lock();
        state.written += 1;
        for file in files {
            if !state.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
                state.dirty.push(file);
            }
        }
        state.written
    }

    /// Takes the files to sync and the ticket that sync will cover.
    fn start_sync(state: &mut SyncState) -> (Vec<Arc<File>>, u64) {
        state.syncing = true;
        (std::mem::take(&mut state.dirty), state.written)
    }

    fn finish_sync(&self, target: u64, result: std::io::Result<()>) {
        let mut state = self.lock();
        state.syncing = false;
        match result {
            Ok(()) => state.synced = state.synced.max(target),
            Err(e) => {
                tracing::error!(error = %e, "fsync failed; the file log takes no more writes");
                state
                    .error
                    .get_or_insert_with(|| format!("fsync failed: {e}"));
            }
        }
        drop(state);
        self.synced_now.notify_waiters();
    }

    /// Syncs every dirty file now (blocking), unless a sync is running.
    pub(crate) fn sync_blocking(&self) {
        let (files, target) = {
            let mut state = self.lock();
            if state.syncing || state.dirty.is_empty() {
                return;
            }
            Self::start_sync(&mut state)
        };
        let result = sync_files(&files);
        self.finish_sync(target, result);
    }

    async fn wait_for(&self, ticket: u64) -> BrokerResult<()> {
        loop {
            let notified = self.synced_now.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let job = {
                let mut state = self.lock();
                if let Some(error) = &state.error {
                    return Err(BrokerError::Failed {
                        broker: "filelog",
                        detail: error.clone(),
                    });
                }
                if state.synced >= ticket {
                    return Ok(());
                }
                if state.syncing {
                    None
                } else {
                    Some(Self::start_sync(&mut state))
                }
            };
            match job {
                Some((files, target)) => {
                    let result = sync_off_the_executor(files).await;
                    self.finish_sync(target, result);
                }
                None => notified.await,
            }
        }
    }
}

/// Runs the fsyncs without stalling other tasks: in place on a
/// multi-thread runtime (measured faster than a hop to the blocking pool),
/// on the blocking pool on a current-thread one.
async fn sync_off_the_executor(files: Vec<Arc<File>>) -> std::io::Result<()> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        return tokio::task::block_in_place(|| sync_files(&files));
    }
    match tokio::task::spawn_blocking(move || sync_files(&files)).await {
        Ok(result) => result,
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

fn sync_files(files: &[Arc<File>]) -> std::io::Result<()> {
    for file in files {
        file.sync_data()?;
    }
    Ok(())
}

fn background_sync(syncer: Weak<Syncer>, period: Duration) {
    loop {
        std::thread::sleep(period);
        let Some(syncer) = syncer.upgrade() else {
            return;
        };
        syncer.sync_blocking();
    }
}

impl Durability for Syncer {
    fn wait(&self, ticket: u64) -> BrokerFuture<'_, ()> {
        match self.policy {
            SyncPolicy::EveryPublish => Box::pin(self.wait_for(ticket)),
            SyncPolicy::Interval(_) => Box::pin(std::future::ready(Ok(()))),
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
}
