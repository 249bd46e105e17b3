//! ruststream's durable file-log broker: streams and consumer groups in a
//! directory on local disk, for one machine and no server, surviving
//! `kill -9`.
//!
//! ```
//! use ruststream_core::{Broker, Message, ReadMode, ReadRequest, StreamStart};
//! use ruststream_filelog::FileLogBroker;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ruststream_core::BrokerError> {
//! # let dir = std::env::temp_dir().join(format!("ruststream-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let broker = FileLogBroker::open(&dir)?;
//! broker.ensure_group("jobs", "workers", StreamStart::New).await?;
//! // Returns once the entry is on disk.
//! let id = broker.publish("jobs", Message::new(b"job-1".to_vec())).await?;
//! let batch = broker.read(ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 16)).await?;
//! broker.ack("jobs", "workers", &[id]).await?;
//! # drop(broker); let _ = std::fs::remove_dir_all(&dir);
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! The broker is the memory broker's local broker
//! ([`ruststream_local::LocalBroker`], the same consumer-group engine) with
//! a persistence that writes every state change to disk before the call
//! returns: entries to per-stream segment files, group state (deliveries,
//! acks, retries, dead letters, cursors, trims) to a journal that is
//! compacted into snapshots. Opening the directory replays both. Memory
//! holds group state, each retained entry's id (a few bytes) and a
//! sparse index of the segments, and the payloads of each stream's newest
//! entries ([`FileLogOptions::cache_bytes`]); older payloads are read from
//! the segments when handed out. Retention bounds the disk.
//!
//! - **Durability.** With [`SyncPolicy::EveryPublish`] (the default) a
//!   publish returns only after `fsync`; concurrent publishes share one
//!   (group commit, run by a thread of the broker's own, which waits a
//!   little for the publishers the last sync released: see
//!   [`SyncPolicy::EveryPublish`]).
//!   [`SyncPolicy::Interval`] acknowledges after the write
//!   and syncs periodically: nothing is lost to a process crash, but a
//!   power failure can lose that interval. Group state is written before
//!   each call returns, so a process crash loses none of it; it is synced
//!   with the next publish or within 100 ms. A power failure in that window
//!   can lose group changes, never an entry a producer was told is
//!   published: a retry with a copy whose copy did not reach the disk
//!   comes back as the original, owed again (the journal names the copy it
//!   settled the original for), and compaction makes the entries a
//!   snapshot describes durable before it writes the snapshot. Journals
//!   with such records cannot be opened by versions before this one.
//! - **Publishes written together.** Concurrent single publishes are
//!   combined: one pass through the broker's lock and one `write` for
//!   many, ids in call order. A publish that finds no one else writing
//!   yields to the scheduler once before it writes, so the publishers
//!   ready to run on the same thread join it; a publisher that keeps
//!   finding itself alone (8 times in a row) writes at once, and checks
//!   again once every 1,024 publishes. A single publish is ordered against
//!   later calls once its future has been polled to the end.
//! - **Recovery.** Every record is framed with its length and a CRC-32. A
//!   record cut short at the end of a file (a crash mid-write) is truncated
//!   on open and logged; damage inside a file is an error naming the file
//!   and offset, never a silent skip. What tells them apart is a valid
//!   record after the bad one: in a segment, an entry whose id could come
//!   next (a torn message may carry records of its own in its payload).
//!   A segment left holding no entry by a crash (created, its first
//!   record never on disk) is removed at open, so that entries published
//!   after the clock stepped back never land in a segment named after
//!   them.
//! - **One owner.** An exclusive lock on the directory: a second process
//!   gets [`ruststream_core::BrokerError::InUse`] with the holder's pid.
//! - **Retention** deletes whole segments by size or age, never one holding
//!   an entry a group still has pending or dead-lettered.
//! - **Private.** The directory is created `0700` and its files `0600` (on
//!   unix), and opening a directory other users can enter logs a warning.
//!
//! # Failures
//!
//! - **Checked first.** A stream name must meet the common rules
//!   ([`ruststream_core::check_name`]) and fit a directory name (255 bytes
//!   once escaped), and a message must fit a record
//!   ([`MAX_MESSAGE_BYTES`]); anything else is refused with
//!   [`BrokerError::InvalidArgument`] before anything changes.
//! - **An I/O error fails its own call.** The call gets
//!   [`BrokerError::Io`], what it wrote is cut back off the files, and it
//!   is taken back out of memory: no reader sees it, and other calls and
//!   streams go on. Only a write of nothing but consumers' seen times (a
//!   read that found nothing) is best-effort: cut back and logged, it
//!   fails nothing (`FORMAT.md`).
//! - **A failed fsync stops the broker** (fail-stop): after one, the kernel
//!   may have dropped the unwritten pages, so nothing since the last good
//!   sync can be trusted. Publishes waiting for that sync, and every call
//!   after it, fail with [`BrokerError::Failed`], and [`Broker::failure`]
//!   says why, until the process restarts and reads back what is on disk.
//!   Until a publish's fsync completes, its entry is already readable
//!   (group commit): a consumer may have read an entry whose publish then
//!   failed, and that entry may or may not be there after the restart.
//!
//! The on-disk format is described in `FORMAT.md` beside this crate.

#![forbid(unsafe_code)]

mod commit_delay;
mod format;
mod lock;
mod options;
mod payloads;
mod recover;
mod store;
mod sync;
mod trims;
mod undo;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ruststream_core::{
    Broker, BrokerError, BrokerResult, Clock, Message, NameKind, check_name, forward_broker,
};
use ruststream_local::{Durability, LocalBroker};
use store::Store;
use sync::Syncer;

pub use options::{FileLogOptions, Retention, SyncPolicy};

/// The largest message the file log stores, in bytes as stored: the
/// payload, plus 8 bytes and the name and value of each header, plus 8.
/// Just under 64 MiB, the limit of one record (leaving room for what a
/// retry copy adds). A larger payload belongs in a blob store, with a
/// reference in the message.
pub const MAX_MESSAGE_BYTES: usize = format::MAX_FRAME_BODY - format::ENTRY_OVERHEAD;

/// The most entries one read hands out: a read's deliveries are journaled
/// as one record, which must stay under the record limit. A read asking for
/// more gets at most this many (a read may always return fewer than asked).
pub const MAX_READ_COUNT: usize = 100_000;

/// The longest file name the file systems in use accept (`NAME_MAX`).
const MAX_DIR_NAME: usize = 255;

/// The most a group change for one entry adds to a journal record (a
/// redrive: no longer dead, and owed), besides a reason.
const JOURNAL_BYTES_PER_ID: usize = 64;

/// Room in a journal record for the names and counts around its changes.
const JOURNAL_OVERHEAD: usize = 4096;

/// A durable broker on a local directory. Cheap to clone: clones share the
/// same open log.
///
/// A [`LocalBroker`] over the file store: every [`Broker`] call is the local
/// broker's, and the file log's limits, upkeep and fail-stop reach it
/// through the store's [`ruststream_local::Persistence`] hooks. What the
/// file log adds is its own: opening, its directory, compaction, retention
/// and syncing on demand.
#[derive(Clone, Debug)]
pub struct FileLogBroker {
    inner: LocalBroker<Store>,
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    syncer: Arc<Syncer>,
    /// `None` for a read-only view ([`FileLogBroker::open_read_only`]).
    _lock: Option<lock::DirLock>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("dir", &self.dir)
            .field("failure", &self.syncer.failure())
            .finish_non_exhaustive()
    }
}

/// Checks a stream name: the common rules, and a directory name the file
/// system accepts once escaped.
fn check_stream(stream: &str) -> BrokerResult<()> {
    check_name(NameKind::Stream, stream)?;
    // Escaping at most triples a name: a short one always fits (and is
    // not walked again on every publish).
    if stream.len() <= MAX_DIR_NAME / 3 {
        return Ok(());
    }
    let len = store::stream_dir_name_len(stream);
    if len > MAX_DIR_NAME {
        let shown: String = stream.chars().take(40).collect();
        return Err(BrokerError::InvalidArgument(format!(
            "stream name {shown:?}... cannot be stored by the file log: its directory name \
             would be {len} bytes (every byte other than an ASCII letter, digit, '_', '-' or \
             '.' is written as %XX), over the file system's limit of {MAX_DIR_NAME}; \
             use a shorter name or fewer such characters"
        )));
    }
    Ok(())
}

/// Checks that each message fits a record.
fn check_messages<'m>(
    stream: &str,
    messages: impl ExactSizeIterator<Item = &'m Message>,
) -> BrokerResult<()> {
    let count = messages.len();
    for (i, message) in messages.enumerate() {
        let len = format::message_len(message);
        if len > MAX_MESSAGE_BYTES {
            let which = if count == 1 {
                "the message".to_owned()
            } else {
                format!("message {} of {count} (none was published)", i + 1)
            };
            return Err(BrokerError::InvalidArgument(format!(
                "{which} for stream {stream:?} is {len} bytes as stored (payload {} bytes, \
                 plus headers); the file log's limit is {MAX_MESSAGE_BYTES} bytes \
                 (MAX_MESSAGE_BYTES): keep large payloads elsewhere and publish a reference",
                message.payload.len()
            )));
        }
    }
    Ok(())
}

/// Checks that a call on `ids` entries (each with `extra` bytes of its own,
/// a dead letter's reason) fits one journal record.
fn check_journal_record(call: &str, stream: &str, ids: usize, extra: usize) -> BrokerResult<()> {
    let bytes = ids
        .saturating_mul(JOURNAL_BYTES_PER_ID.saturating_add(extra))
        .saturating_add(extra)
        .saturating_add(JOURNAL_OVERHEAD);
    if bytes > format::MAX_FRAME_BODY {
        return Err(BrokerError::InvalidArgument(format!(
            "{call} of {ids} entries of stream {stream:?} would be a journal record of about \
             {bytes} bytes, over the file log's limit of {} bytes: split it into smaller \
             batches{}",
            format::MAX_FRAME_BODY,
            if extra > 0 {
                " or shorten the reason"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

/// How often [`FileLogBroker::open_read_only`] tries again when the
/// holder's compaction replaced a file under it.
const READ_ONLY_ATTEMPTS: u32 = 5;

impl FileLogBroker {
    /// Opens the file log in `dir` (created if missing) with default
    /// options: see [`FileLogBroker::open_with`].
    pub fn open(dir: impl AsRef<Path>) -> BrokerResult<Self> {
        FileLogBroker::open_with(dir, FileLogOptions::default())
    }

    /// Opens the file log in `dir` (created if missing, open to its owner
    /// only), taking its lock, reading it back and repairing a torn tail.
    ///
    /// Fails with [`BrokerError::InUse`] if another process has it open,
    /// and with [`BrokerError::Corrupt`] naming the file and offset if a
    /// file is damaged anywhere but at its very end.
    pub fn open_with(dir: impl AsRef<Path>, options: FileLogOptions) -> BrokerResult<Self> {
        let dir = dir.as_ref();
        let started = std::time::Instant::now();
        let mut opened = recover::open(dir, options, recover::Access::Own)?;
        tracing::info!(
            dir = %dir.display(),
            entries = opened.entries,
            took = ?started.elapsed(),
            "file log opened"
        );
        // A long journal slows every reopen: start from a fresh snapshot.
        if opened.store.journal_outgrew_snapshot() {
            opened.store.wants_compaction = true;
            opened.store.compact_if_wanted(&opened.engine);
        }
        Ok(FileLogBroker::from_opened(dir, opened))
    }

    /// Opens a view of the file log in `dir` that another process may hold
    /// open and be writing: without taking the lock, and writing nothing
    /// (no repair, no compaction). It holds what the files held as they
    /// were read: everything the holder had written, a write still in
    /// progress left out. Calls that only look (stream and group info,
    /// pending lists, dead letters, ranges) work; every call that would
    /// change something fails with [`BrokerError::InUse`] naming the
    /// holder. For tools: open it again to see later changes.
    ///
    /// A compaction by the holder can replace the state files while they
    /// are read; the open is then tried again, a few times.
    pub fn open_read_only(dir: impl AsRef<Path>) -> BrokerResult<Self> {
        let dir = dir.as_ref();
        let mut attempt = 0;
        let opened = loop {
            match recover::open(dir, FileLogOptions::default(), recover::Access::ReadOnly) {
                Ok(opened) => break opened,
                Err(BrokerError::Io { ref source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && attempt < READ_ONLY_ATTEMPTS
                        && dir.join("LOCK").exists() =>
                {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(error) => return Err(error),
            }
        };
        Ok(FileLogBroker::from_opened(dir, opened))
    }

    fn from_opened(dir: &Path, opened: recover::Opened) -> Self {
        let syncer = Arc::clone(&opened.store.syncer);
        let durability: Arc<dyn Durability> = syncer.clone();
        let inner = LocalBroker::with_persistence(
            opened.engine,
            opened.store,
            Some(durability),
            Clock::new(),
        );
        FileLogBroker {
            inner,
            shared: Arc::new(Shared {
                dir: dir.to_owned(),
                syncer,
                _lock: opened.lock,
            }),
        }
    }

    /// The directory it lives in.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Writes a snapshot of the group state now and starts a fresh journal
    /// (this also happens on its own as the journal grows).
    pub fn compact(&self) -> BrokerResult<()> {
        self.inner
            .with_persistence_mut(|store, engine| store.compact(engine))
    }

    /// Applies the retention policy now (it also runs after publishes).
    pub async fn enforce_retention(&self) -> BrokerResult<()> {
        let now = self.inner.clock().now_ms();
        self.inner
            .with_persistence_mut(|store, engine| store.enforce_retention(engine, now))
    }

    /// Makes everything written so far durable now, whatever the
    /// [`SyncPolicy`] (with [`SyncPolicy::Interval`], before a planned
    /// shutdown, say). A failed fsync stops the broker: this then fails
    /// with [`BrokerError::Failed`], as does every call after it.
    pub async fn sync(&self) -> BrokerResult<()> {
        let syncer = &self.shared.syncer;
        syncer.check()?;
        syncer.wait_for(syncer.written()).await
    }

    /// Test support: how many group-commit syncs have finished.
    #[doc(hidden)]
    pub fn syncs(&self) -> u64 {
        self.shared.syncer.syncs()
    }

    /// Test support: the next fsync of written files fails, as a failing
    /// disk's would.
    #[doc(hidden)]
    pub fn inject_fsync_failure(&self) {
        self.shared.syncer.failpoints().fail_next_fsync();
    }

    /// Test support: the next write to `stream`'s segment (`None`: to the
    /// journal) writes half its bytes, then fails.
    #[doc(hidden)]
    pub fn inject_write_failure(&self, stream: Option<&str>) {
        self.shared.syncer.failpoints().fail_next_write(stream);
    }
}

impl Broker for FileLogBroker {
    forward_broker!(inner: name, failure, check_mode, publish, publish_batch, ensure_group,
        set_group_position, read, read_now, ack, ack_now, retry, dead_letter, extend_claim, count_deliveries, delete_consumer, redrive,
        discard, group_info, consumers, pending, dead_letters, range, stream_info, streams, trim);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal record whose checksum holds but whose contents cannot be
    /// (an entry held by a consumer number the group never had: a bug, or a
    /// crafted file) is refused on open with the file and offset, not
    /// accepted to panic later, when the pending list is listed.
    #[tokio::test]
    async fn a_journal_record_naming_an_unknown_consumer_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!(
            "ruststream-unknown-consumer-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let b = FileLogBroker::open(&dir).unwrap();
        b.ensure_group("jobs", "g1", ruststream_core::StreamStart::Beginning)
            .await
            .unwrap();
        let id = b
            .publish("jobs", Message::new(b"x".to_vec()))
            .await
            .unwrap();
        drop(b);
        let journal = journal_of(&dir);
        let offset = std::fs::metadata(&journal).unwrap().len();
        let bad = ruststream_engine::Change::Group {
            stream: "jobs".into(),
            group: "g1".into(),
            changes: vec![ruststream_engine::GroupChange::Held {
                id,
                consumer: 7,
                times_delivered: 1,
                since_ms: 0,
            }],
        };
        let mut frame = Vec::new();
        format::write_changes(&mut frame, std::iter::once(&bad)).unwrap();
        std::io::Write::write_all(
            &mut std::fs::OpenOptions::new()
                .append(true)
                .open(&journal)
                .unwrap(),
            &frame,
        )
        .unwrap();
        let error = FileLogBroker::open(&dir).err().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = error.to_string();
        assert!(
            text.contains("consumer number 7") && text.contains("g1"),
            "{text}"
        );
        assert!(
            matches!(&error, BrokerError::Corrupt { path, offset: at, .. } if *path == journal && *at == offset),
            "{error:?}"
        );
    }

    /// A fresh directory for a test (removed by the test at its end).
    fn temp_dir(what: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "ruststream-{what}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ))
    }

    /// How long `consumer` of `jobs`/`g` has been idle.
    async fn idle_ms(b: &FileLogBroker, consumer: &str) -> u64 {
        let consumers = b.consumers("jobs", "g").await.unwrap();
        let found = consumers.iter().find(|c| c.name == consumer);
        found
            .map(|c| c.idle_ms)
            .unwrap_or_else(|| panic!("{consumers:?}"))
    }

    /// A consumer that polled a moment ago is idle for a moment after a
    /// reopen, whether its seen time comes from the journal or from a
    /// snapshot: not since the epoch. (Its last read found nothing, so no
    /// delivery carries the time.) Times across a reopen are wall-clock
    /// times; the bound is loose for a slow machine, far below the 57 years
    /// the epoch would give.
    #[tokio::test(start_paused = true)]
    async fn a_reopened_file_log_keeps_each_consumers_seen_time() {
        use ruststream_core::{ReadMode, ReadRequest};
        let dir = temp_dir("seen");
        let b = with_group_g(&dir).await;
        b.read(ReadRequest::new("jobs", "g", "c", ReadMode::New, 10))
            .await
            .unwrap();
        drop(b);
        let reopened = async || {
            let b = FileLogBroker::open(&dir).unwrap();
            let idle = idle_ms(&b, "c").await;
            assert!(idle < 60_000, "{idle}");
            b
        };
        // The journal alone.
        let b = reopened().await;
        // A snapshot, then an empty poll the journal after it holds.
        b.compact().unwrap();
        b.read(ReadRequest::new("jobs", "g", "c", ReadMode::New, 10))
            .await
            .unwrap();
        drop(b);
        let b = reopened().await;
        // A snapshot alone.
        b.compact().unwrap();
        drop(b);
        drop(reopened().await);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The file log in `dir`, opened, with group `g` on stream `jobs` from
    /// its beginning.
    async fn with_group_g(dir: &std::path::Path) -> FileLogBroker {
        let b = FileLogBroker::open(dir).unwrap();
        b.ensure_group("jobs", "g", ruststream_core::StreamStart::Beginning)
            .await
            .unwrap();
        b
    }

    /// The group state's journal file in `dir`.
    fn journal_of(dir: &std::path::Path) -> std::path::PathBuf {
        std::fs::read_dir(dir.join("state"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".log"))
            .unwrap()
    }

    /// A log in `dir` as the code before seen records wrote it: stream
    /// `jobs`, group `g`, consumer `c` that read and acked one entry (held
    /// since 1 s after the epoch), and no seen record.
    async fn write_an_old_style_log(dir: &std::path::Path) {
        use ruststream_engine::{Change, GroupChange};
        let b = with_group_g(dir).await;
        let id = b
            .publish("jobs", Message::new(b"x".to_vec()))
            .await
            .unwrap();
        drop(b);
        let old = Change::Group {
            stream: "jobs".into(),
            group: "g".into(),
            changes: vec![
                GroupChange::Consumer { name: "c".into() },
                GroupChange::Held {
                    id,
                    consumer: 0,
                    times_delivered: 1,
                    since_ms: 1_000,
                },
                GroupChange::Cursor { cursor: id },
                GroupChange::Settled { id },
            ],
        };
        let mut frame = Vec::new();
        format::write_changes(&mut frame, std::iter::once(&old)).unwrap();
        std::io::Write::write_all(
            &mut std::fs::OpenOptions::new()
                .append(true)
                .open(journal_of(dir))
                .unwrap(),
            &frame,
        )
        .unwrap();
    }

    /// A log written before seen times were journaled (a consumer joined
    /// and held an entry long ago, no seen record) opens, and its consumer
    /// counts as seen at the open: not idle since the epoch, nor since its
    /// last delivery, so a prune by idle time does not delete it at once.
    #[tokio::test(start_paused = true)]
    async fn a_log_without_seen_times_opens_with_its_consumers_seen_at_the_open() {
        let dir = temp_dir("no-seen");
        write_an_old_style_log(&dir).await;
        let b = FileLogBroker::open(&dir).unwrap();
        let idle = idle_ms(&b, "c").await;
        let deleted = b
            .delete_consumer("jobs", "g", "c", std::time::Duration::from_secs(60))
            .await;
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(idle < 60_000, "{idle}");
        assert!(matches!(deleted, Ok(false)), "{deleted:?}");
    }

    /// A read that finds nothing writes nothing, but for its consumer's
    /// seen time once `SEEN_EVERY_MS` passed since the last one written;
    /// that write starts no sync (the next one covers it, as
    /// `FileLogBroker::sync` does).
    #[tokio::test(start_paused = true)]
    async fn an_empty_poll_writes_its_seen_time_at_most_once_a_second_and_starts_no_sync() {
        use ruststream_core::{ReadMode, ReadRequest};
        let dir = temp_dir("lazy-seen");
        let b = with_group_g(&dir).await;
        let poll = || b.read(ReadRequest::new("jobs", "g", "c", ReadMode::New, 10));
        poll().await.unwrap();
        b.sync().await.unwrap();
        let journal = journal_of(&dir);
        let len = || std::fs::metadata(&journal).unwrap().len();
        let (syncs, size) = (b.syncs(), len());
        tokio::time::advance(std::time::Duration::from_millis(500)).await;
        poll().await.unwrap();
        assert_eq!(len(), size, "an empty poll within a second wrote");
        let every = ruststream_engine::SEEN_EVERY_MS;
        tokio::time::advance(std::time::Duration::from_millis(every)).await;
        poll().await.unwrap();
        assert!(len() > size, "the seen time was not written");
        // Past the group state's sync period (the sync thread's clock is
        // real time): no sync.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = b.syncs();
        b.sync().await.unwrap();
        let synced = b.syncs();
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(after, syncs, "a seen time alone started a sync");
        assert!(synced > syncs, "sync() left the seen time unsynced");
    }

    /// A log written before seen times: its holder counts a consumer as
    /// seen at the holder's open, and a read-only view of the held log (the
    /// CLI's `--dir`: `describe`, `consumers prune --dry-run`) must report
    /// the same idle time, not restart it at the view's own open.
    #[tokio::test]
    async fn a_read_only_view_of_an_old_log_reports_the_holders_idle_time() {
        let dir = temp_dir("old-view");
        write_an_old_style_log(&dir).await;
        let holder = FileLogBroker::open(&dir).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        let held = idle_ms(&holder, "c").await;
        let view = FileLogBroker::open_read_only(&dir).unwrap();
        let viewed = idle_ms(&view, "c").await;
        drop((view, holder));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(held >= 1_500, "{held}");
        assert!(
            viewed + 1_000 >= held,
            "the holder says idle {held} ms, its read-only view {viewed} ms"
        );
    }

    /// After a reopen (a process crash) a consumer's idle time is at most
    /// `SEEN_EVERY_MS` longer than it was (FORMAT.md, docs/semantics.md),
    /// also when a failed write in another stream was taken back meanwhile
    /// (the take-back rebuilds the engine from its own snapshot).
    #[tokio::test]
    async fn a_taken_back_write_keeps_the_seen_time_bound_across_a_reopen() {
        use ruststream_core::{ReadMode, ReadRequest};
        let dir = temp_dir("seen-undo");
        let b = with_group_g(&dir).await;
        b.publish("other", Message::new(b"x".to_vec()))
            .await
            .unwrap();
        let poll = || b.read(ReadRequest::new("jobs", "g", "c", ReadMode::New, 10));
        poll().await.unwrap(); // recorded
        std::thread::sleep(std::time::Duration::from_millis(900));
        poll().await.unwrap(); // within the second: not recorded
        b.inject_write_failure(Some("other"));
        b.publish("other", Message::new(b"y".to_vec()))
            .await
            .unwrap_err();
        std::thread::sleep(std::time::Duration::from_millis(900));
        poll().await.unwrap(); // 1.8 s after the last record
        drop(b);
        let b = FileLogBroker::open(&dir).unwrap();
        let idle = idle_ms(&b, "c").await;
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            idle <= ruststream_engine::SEEN_EVERY_MS + 300,
            "idle {idle} ms right after a read and a reopen"
        );
    }

    #[test]
    fn a_message_at_the_limit_is_accepted_and_one_byte_more_is_not() {
        let at_limit = Message::new(vec![0; MAX_MESSAGE_BYTES - 8]);
        assert_eq!(format::message_len(&at_limit), MAX_MESSAGE_BYTES);
        assert!(check_messages("s", std::iter::once(&at_limit)).is_ok());
        let over = Message::new(vec![0; MAX_MESSAGE_BYTES - 8 - 3]).with_header("k", "vvv");
        let err = check_messages("s", [&at_limit, &over].into_iter()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("message 2 of 2"), "{text}");
        assert!(text.contains(&MAX_MESSAGE_BYTES.to_string()), "{text}");
    }

    #[test]
    fn a_journal_record_over_the_limit_is_refused() {
        assert!(check_journal_record("an ack", "s", 10_000, 0).is_ok());
        assert!(check_journal_record("an ack", "s", 2_000_000, 0).is_err());
        let err = check_journal_record("a dead letter", "s", 100, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("shorten the reason"), "{err}");
    }
}
