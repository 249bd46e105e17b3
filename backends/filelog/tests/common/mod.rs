//! Helpers shared by the file log's integration tests.

// Not every test file uses every helper.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ruststream_core::{
    Broker, EntryId, Message, ReadBatch, ReadMode, ReadRequest, Retry, StreamStart,
};
use ruststream_filelog::FileLogBroker;

/// A fresh directory under the system's temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ruststream-filelog-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The journal being written (there is one outside a compaction).
pub(crate) fn journal(dir: &Path) -> PathBuf {
    fs::read_dir(dir.join("state"))
        .expect("state directory")
        .map(|e| e.expect("state entry").path())
        .find(|p| p.to_string_lossy().ends_with(".log"))
        .expect("a journal")
}

/// The journal's length in bytes.
pub(crate) fn journal_len(dir: &Path) -> u64 {
    fs::metadata(journal(dir)).expect("journal metadata").len()
}

/// Creates group `g1` on `stream`, starting at `start`.
pub(crate) async fn ensure_g1(b: &FileLogBroker, stream: &str, start: StreamStart) {
    b.ensure_group(stream, "g1", start).await.unwrap();
}

/// Publishes one entry with the payload `payload` to `stream`; its id.
pub(crate) async fn publish_bytes(b: &FileLogBroker, stream: &str, payload: &[u8]) -> EntryId {
    b.publish(stream, Message::new(payload.to_vec()))
        .await
        .unwrap()
}

/// Reads up to `count` new entries of `jobs` for group `g1` as consumer `c`.
pub(crate) async fn read_jobs(b: &FileLogBroker, count: usize) -> ReadBatch {
    b.read(ReadRequest::new("jobs", "g1", "c", ReadMode::New, count))
        .await
        .unwrap()
}

/// Retries `ids` of group `g1` on `jobs` as `how` says.
pub(crate) async fn retry_jobs(b: &FileLogBroker, ids: &[EntryId], how: Retry) {
    b.retry("jobs", "g1", ids, how).await.unwrap();
}

/// Dead-letters `ids` of group `g1` on `jobs` with `reason`.
pub(crate) async fn dead_letter_jobs(b: &FileLogBroker, ids: &[EntryId], reason: &str) {
    b.dead_letter("jobs", "g1", ids, reason).await.unwrap();
}

/// `b`, once it has group `g1` on `jobs`, reading from the beginning.
pub(crate) async fn with_jobs_group(b: FileLogBroker) -> FileLogBroker {
    ensure_g1(&b, "jobs", StreamStart::Beginning).await;
    b
}

/// A broker opened on `dir` (default options) with group `g1` on `jobs`,
/// reading from the beginning.
pub(crate) async fn open_with_jobs_group(dir: &Path) -> FileLogBroker {
    with_jobs_group(FileLogBroker::open(dir).unwrap()).await
}

/// Everything a reader can see of streams `jobs` and `other` and their
/// groups `g1` to `g3`, without idle times; when owed entries fall due only
/// with `exact_times` (a reopened broker's clock starts anew). Two equal
/// observations mean the same state.
pub(crate) async fn observe_with(b: &FileLogBroker, exact_times: bool) -> Vec<String> {
    let mut out = Vec::new();
    for s in ["jobs", "other"] {
        out.push(format!("{:?}", b.stream_info(s).await.unwrap()));
        out.push(format!(
            "{:?}",
            b.range(s, EntryId::ZERO, EntryId::MAX, 10_000)
                .await
                .unwrap()
        ));
        for g in ["g1", "g2", "g3"] {
            out.push(format!("{:?}", b.group_info(s, g).await.ok()));
            let pending = b
                .pending(s, g, EntryId::ZERO, 10_000, None)
                .await
                .unwrap_or_default();
            out.push(format!(
                "{:?}",
                pending
                    .iter()
                    .map(|p| {
                        let owed = p
                            .owed_in_ms
                            .filter(|_| exact_times)
                            .or(p.owed_in_ms.map(|_| 0));
                        (p.id, p.consumer.clone(), p.times_delivered, owed)
                    })
                    .collect::<Vec<_>>()
            ));
            out.push(format!(
                "{:?}",
                b.dead_letters(s, g, EntryId::ZERO, 10_000).await.ok()
            ));
        }
    }
    out
}
