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
//! The broker is the same consumer-group engine as the memory broker,
//! with every state change written to disk before the call returns:
//! entries to per-stream segment files, group state (deliveries, acks,
//! retries, dead letters, cursors, trims) to a journal that is compacted
//! into snapshots. Opening the directory replays both. The retained
//! entries of every stream are also kept in memory, as Redis does;
//! retention bounds both.
//!
//! - **Durability.** With [`SyncPolicy::EveryPublish`] (the default) a
//!   publish returns only after `fsync`; concurrent publishes share one
//!   (group commit). [`SyncPolicy::Interval`] acknowledges after the write
//!   and syncs periodically: nothing is lost to a process crash, but a
//!   power failure can lose that interval. Group state is written before
//!   each call returns, so a process crash loses none of it; it is synced
//!   with the next publish or within 100 ms.
//! - **Recovery.** Every record is framed with its length and a CRC-32. A
//!   record cut short at the end of a file (a crash mid-write) is truncated
//!   on open and logged; damage inside a file is an error naming the file
//!   and offset, never a silent skip.
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
//!   streams go on.
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

mod format;
mod lock;
mod options;
mod recover;
mod store;
mod sync;
mod undo;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ruststream_core::{
    Broker, BrokerError, BrokerFuture, BrokerResult, Clock, ConsumerInfo, DeadLetter, Entry,
    EntryId, GroupInfo, Message, NameKind, PendingEntry, ReadBatch, ReadMode, ReadRequest, Retry,
    StreamInfo, StreamStart, Trim, check_name,
};
use ruststream_memory::{Durability, LocalBroker};
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
#[derive(Clone, Debug)]
pub struct FileLogBroker {
    inner: LocalBroker<Store>,
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    wants_compaction: Arc<AtomicBool>,
    retention: bool,
    syncer: Arc<Syncer>,
    _lock: lock::DirLock,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("dir", &self.dir)
            .field("retention", &self.retention)
            .field("failure", &self.syncer.failure())
            .finish_non_exhaustive()
    }
}

/// Checks a stream name: the common rules, and a directory name the file
/// system accepts once escaped.
fn check_stream(stream: &str) -> BrokerResult<()> {
    check_name(NameKind::Stream, stream)?;
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

fn ready<'a, T: Send + 'a>(result: BrokerResult<T>) -> BrokerFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

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
        let opened = recover::open(dir, options)?;
        tracing::info!(
            dir = %dir.display(),
            entries = opened.entries,
            took = ?started.elapsed(),
            "file log opened"
        );
        let wants_compaction = Arc::clone(&opened.store.wants_compaction);
        // A long journal slows every reopen: start from a fresh snapshot.
        if opened.store.journal_outgrew_snapshot() {
            wants_compaction.store(true, Ordering::Relaxed);
        }
        let syncer = Arc::clone(&opened.store.syncer);
        let durability: Arc<dyn Durability> = syncer.clone();
        let inner = LocalBroker::with_persistence(
            opened.engine,
            opened.store,
            Some(durability),
            Clock::new(),
        );
        let broker = FileLogBroker {
            inner,
            shared: Arc::new(Shared {
                dir: dir.to_owned(),
                wants_compaction,
                retention: options.retention != Retention::default(),
                syncer,
                _lock: opened.lock,
            }),
        };
        broker.upkeep();
        Ok(broker)
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
        self.shared.syncer.check()?;
        let now = self.inner.clock().now_ms();
        let targets = self
            .inner
            .with_persistence_mut(|store, _| store.retention_targets(now));
        for (stream, below) in targets {
            self.inner.trim(&stream, Trim::MinId(below)).await?;
        }
        Ok(())
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

    /// Test support: the next fsync of written files fails, as a failing
    /// disk's would.
    #[doc(hidden)]
    pub fn inject_fsync_failure(&self) {
        self.shared.syncer.failpoints.fail_next_fsync();
    }

    /// Test support: the next write to `stream`'s segment (`None`: to the
    /// journal) writes half its bytes, then fails.
    #[doc(hidden)]
    pub fn inject_write_failure(&self, stream: Option<&str>) {
        self.shared.syncer.failpoints.fail_next_write(stream);
    }

    /// Upkeep after a call: compaction when the journal has grown.
    fn upkeep(&self) {
        if self.shared.syncer.stopped() {
            return;
        }
        if self.shared.wants_compaction.swap(false, Ordering::Relaxed)
            && let Err(error) = self.compact()
        {
            tracing::error!(%error, "compacting the group-state journal failed");
        }
    }

    async fn after_publish(&self) {
        self.upkeep();
        if self.shared.retention
            && !self.shared.syncer.stopped()
            && let Err(error) = self.enforce_retention().await
        {
            tracing::error!(%error, "applying retention failed");
        }
    }
}

/// Fails the call at once if the broker has stopped, or if the check given
/// fails; then runs the delegated call and the broker's upkeep.
macro_rules! delegate {
    ($self:ident . $call:ident ( $($arg:expr),* ) $(, check $check:expr)?) => {{
        if let Err(error) = $self.shared.syncer.check() $(.and_then(|()| $check))? {
            return ready(Err(error));
        }
        let call = $self.inner.$call($($arg),*);
        Box::pin(async move {
            let out = call.await;
            $self.upkeep();
            out
        })
    }};
}

/// Fails the call at once if the broker has stopped (what is in memory may
/// not be on disk), else passes it on.
macro_rules! inspect {
    ($self:ident . $call:ident ( $($arg:expr),* )) => {{
        if let Err(error) = $self.shared.syncer.check() {
            return ready(Err(error));
        }
        $self.inner.$call($($arg),*)
    }};
}

impl Broker for FileLogBroker {
    fn name(&self) -> &'static str {
        "filelog"
    }

    fn failure(&self) -> Option<String> {
        self.shared.syncer.failure()
    }

    fn check_mode(&self, mode: ReadMode) -> BrokerFuture<'_, ()> {
        self.inner.check_mode(mode)
    }

    fn publish<'a>(&'a self, stream: &'a str, message: Message) -> BrokerFuture<'a, EntryId> {
        let checked = self
            .shared
            .syncer
            .check()
            .and_then(|()| check_stream(stream))
            .and_then(|()| check_messages(stream, std::iter::once(&message)));
        if let Err(error) = checked {
            return ready(Err(error));
        }
        let call = self.inner.publish(stream, message);
        Box::pin(async move {
            let out = call.await;
            self.after_publish().await;
            out
        })
    }

    fn publish_batch<'a>(
        &'a self,
        stream: &'a str,
        messages: Vec<Message>,
    ) -> BrokerFuture<'a, Vec<EntryId>> {
        let checked = self
            .shared
            .syncer
            .check()
            .and_then(|()| check_stream(stream))
            .and_then(|()| check_messages(stream, messages.iter()));
        if let Err(error) = checked {
            return ready(Err(error));
        }
        let call = self.inner.publish_batch(stream, messages);
        Box::pin(async move {
            let out = call.await;
            self.after_publish().await;
            out
        })
    }

    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        delegate!(self.ensure_group(stream, group, start), check
            check_stream(stream).and_then(|()| check_name(NameKind::Group, group)))
    }

    fn set_group_position<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        delegate!(self.set_group_position(stream, group, start))
    }

    fn read<'a>(&'a self, mut request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        request.count = request.count.min(MAX_READ_COUNT);
        delegate!(self.read(request))
    }

    fn ack<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.ack(stream, group, ids), check
            check_journal_record("an ack", stream, ids.len(), 0))
    }

    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.retry(stream, group, ids, how), check
            check_journal_record("a retry", stream, ids.len(), 0))
    }

    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.dead_letter(stream, group, ids, reason), check
            check_journal_record("a dead letter", stream, ids.len(), reason.len()))
    }

    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.redrive(stream, group, ids), check
            check_journal_record("a redrive", stream, ids.len(), 0))
    }

    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.discard(stream, group, ids), check
            check_journal_record("a discard", stream, ids.len(), 0))
    }

    fn trim<'a>(&'a self, stream: &'a str, trim: Trim) -> BrokerFuture<'a, u64> {
        delegate!(self.trim(stream, trim))
    }

    fn group_info<'a>(&'a self, stream: &'a str, group: &'a str) -> BrokerFuture<'a, GroupInfo> {
        inspect!(self.group_info(stream, group))
    }

    fn consumers<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
    ) -> BrokerFuture<'a, Vec<ConsumerInfo>> {
        inspect!(self.consumers(stream, group))
    }

    fn pending<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
        consumer: Option<&'a str>,
    ) -> BrokerFuture<'a, Vec<PendingEntry>> {
        inspect!(self.pending(stream, group, from, count, consumer))
    }

    fn dead_letters<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<DeadLetter>> {
        inspect!(self.dead_letters(stream, group, from, count))
    }

    fn range<'a>(
        &'a self,
        stream: &'a str,
        from: EntryId,
        to: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<Entry>> {
        inspect!(self.range(stream, from, to, count))
    }

    fn stream_info<'a>(&'a self, stream: &'a str) -> BrokerFuture<'a, Option<StreamInfo>> {
        inspect!(self.stream_info(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
