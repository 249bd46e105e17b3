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
//!
//! The on-disk format is described in `FORMAT.md` beside this crate.

#![forbid(unsafe_code)]

mod format;
mod lock;
mod options;
mod recover;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ruststream_core::{
    Broker, BrokerFuture, BrokerResult, Clock, EntryId, Message, ReadBatch, ReadRequest, Retry,
    StreamStart, Trim, forward_broker,
};
use ruststream_memory::{Durability, LocalBroker};
use store::Store;

pub use options::{FileLogOptions, Retention, SyncPolicy};

/// A durable broker on a local directory. Cheap to clone: clones share the
/// same open log.
#[derive(Clone, Debug)]
pub struct FileLogBroker {
    inner: LocalBroker<Store>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    wants_compaction: Arc<AtomicBool>,
    retention: bool,
    _lock: lock::DirLock,
}

impl FileLogBroker {
    /// Opens the file log in `dir` (created if missing) with default
    /// options: see [`FileLogBroker::open_with`].
    pub fn open(dir: impl AsRef<Path>) -> BrokerResult<Self> {
        FileLogBroker::open_with(dir, FileLogOptions::default())
    }

    /// Opens the file log in `dir` (created if missing), taking its lock,
    /// reading it back and repairing a torn tail.
    ///
    /// Fails with [`BrokerError::InUse`](ruststream_core::BrokerError::InUse)
    /// if another process has it open, and with
    /// [`BrokerError::Corrupt`](ruststream_core::BrokerError::Corrupt)
    /// naming the file and offset if a file is damaged anywhere but at its
    /// very end.
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
        let durability: Arc<dyn Durability> = opened.store.syncer.clone();
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
        let now = self.inner.clock().now_ms();
        let targets = self
            .inner
            .with_persistence_mut(|store, _| store.retention_targets(now));
        for (stream, below) in targets {
            self.inner.trim(&stream, Trim::MinId(below)).await?;
        }
        Ok(())
    }

    /// Upkeep after a call: compaction when the journal has grown.
    fn upkeep(&self) {
        if self.shared.wants_compaction.swap(false, Ordering::Relaxed)
            && let Err(error) = self.compact()
        {
            tracing::error!(%error, "compacting the group-state journal failed");
        }
    }

    async fn after_publish(&self) {
        self.upkeep();
        if self.shared.retention
            && let Err(error) = self.enforce_retention().await
        {
            tracing::error!(%error, "applying retention failed");
        }
    }
}

/// Runs a delegated call, then the broker's upkeep.
macro_rules! delegate {
    ($self:ident . $call:ident ( $($arg:expr),* )) => {{
        let call = $self.inner.$call($($arg),*);
        Box::pin(async move {
            let out = call.await;
            $self.upkeep();
            out
        })
    }};
}

impl Broker for FileLogBroker {
    fn name(&self) -> &'static str {
        "filelog"
    }

    fn publish<'a>(&'a self, stream: &'a str, message: Message) -> BrokerFuture<'a, EntryId> {
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
        delegate!(self.ensure_group(stream, group, start))
    }

    fn set_group_position<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        delegate!(self.set_group_position(stream, group, start))
    }

    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        delegate!(self.read(request))
    }

    fn ack<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.ack(stream, group, ids))
    }

    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.retry(stream, group, ids, how))
    }

    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.dead_letter(stream, group, ids, reason))
    }

    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.redrive(stream, group, ids))
    }

    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        delegate!(self.discard(stream, group, ids))
    }

    fn trim<'a>(&'a self, stream: &'a str, trim: Trim) -> BrokerFuture<'a, u64> {
        delegate!(self.trim(stream, trim))
    }

    // Everything else passes through unchanged.
    forward_broker!(
        inner: check_mode, group_info, consumers, pending, dead_letters, range, stream_info,
    );
}
