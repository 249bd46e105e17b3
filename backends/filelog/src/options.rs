//! How a file log is opened.

use std::time::Duration;

/// When a publish is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Only once the entry is on disk (`fsync`). Concurrent publishes share
    /// one fsync (group commit), run by a thread of the broker's own (no
    /// runtime worker blocks on the disk): before a sync it waits for the
    /// publishers the previous sync released, as many as were around it,
    /// when they come back faster than a sync runs, and for no longer than
    /// one sync (an adaptive commit delay; a lone publisher never waits). Group state (deliveries, acks, dead
    /// letters) is written before each call returns and synced with the
    /// next publish's fsync or within 100 ms.
    EveryPublish,
    /// As soon as the entry is written to the operating system; everything
    /// is synced every `Duration`. A process crash (`kill -9`) loses
    /// nothing; a power failure or kernel crash can lose up to that long of
    /// acknowledged publishes and group changes.
    Interval(Duration),
}

/// Retention: old entries are deleted in whole segments, and never while a
/// group still has one of them pending or dead-lettered, or a retry copy
/// its group has not read (such a segment stays until they are settled).
/// Unlike the memory broker's and Redis's retention, it does not wait for
/// groups to read plain entries: a segment past the size or age bound goes
/// even if a group lags behind it (the group then reads on from the
/// oldest entry kept). Size the bounds for the slowest group's lag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep each stream's segments under this many bytes (the active
    /// segment is never deleted).
    pub max_bytes: Option<u64>,
    /// Delete segments whose newest entry is older than this.
    pub max_age: Option<Duration>,
}

/// Options of [`FileLogBroker::open_with`](crate::FileLogBroker::open_with).
///
/// ```
/// use std::time::Duration;
/// use ruststream_filelog::{FileLogOptions, Retention, SyncPolicy};
///
/// let options = FileLogOptions {
///     sync: SyncPolicy::Interval(Duration::from_millis(50)),
///     retention: Retention { max_bytes: Some(1 << 30), max_age: Some(Duration::from_secs(7 * 86_400)) },
///     ..FileLogOptions::default()
/// };
/// # let _ = options;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLogOptions {
    /// When publishes are acknowledged (default: once durable).
    pub sync: SyncPolicy,
    /// Segment files are rolled once they reach this size (default 64 MiB).
    pub segment_bytes: u64,
    /// Retention (default: keep everything).
    pub retention: Retention,
    /// The group-state journal is compacted into a snapshot once it is
    /// larger than this and four times the last snapshot (default 64 MiB).
    pub compact_journal_bytes: u64,
    /// Payload bytes (payloads and headers) of each stream's newest
    /// entries held in memory, so that consumers keeping up read them
    /// without touching the disk (default 16 MiB). Older payloads are read
    /// from the segment files (through the page cache) when handed out;
    /// memory holds their ids, a sparse index and group state only.
    pub cache_bytes: u64,
}

impl Default for FileLogOptions {
    fn default() -> Self {
        FileLogOptions {
            sync: SyncPolicy::EveryPublish,
            segment_bytes: 64 << 20,
            retention: Retention::default(),
            compact_journal_bytes: 64 << 20,
            cache_bytes: 16 << 20,
        }
    }
}
