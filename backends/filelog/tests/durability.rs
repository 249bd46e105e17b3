//! The file log keeps everything across reopen, repairs torn tails, refuses
//! damaged files and second owners, compacts its journal and applies
//! retention.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    TempDir, dead_letter_jobs, ensure_g1, journal, observe_with, read_jobs, retry_jobs,
    with_jobs_group,
};
use ruststream_core::{
    Broker, BrokerError, EntryId, Message, PendingEntry, ReadMode, ReadRequest, Retry, StreamStart,
    Trim,
};
use ruststream_filelog::{FileLogBroker, FileLogOptions, Retention, SyncPolicy};

fn msg(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec()).with_header("k", text)
}

/// Everything a group shows, without idle times or when owed entries fall
/// due (the clock restarts).
async fn observe(b: &FileLogBroker) -> Vec<String> {
    observe_with(b, false).await
}

/// A workout touching every kind of state.
async fn workout(b: &FileLogBroker) {
    ensure_g1(b, "jobs", StreamStart::Beginning).await;
    ensure_g1(b, "other", StreamStart::New).await;
    let ids = b
        .publish_batch("jobs", (0..20).map(|i| msg(&format!("job-{i}"))).collect())
        .await
        .unwrap();
    b.ensure_group("jobs", "g2", StreamStart::New)
        .await
        .unwrap();
    b.publish("other", msg("x")).await.unwrap();
    let read = |consumer, mode, count| ReadRequest::new("jobs", "g1", consumer, mode, count);
    let got = b.read(read("c1", ReadMode::New, 8)).await.unwrap();
    assert_eq!(got.deliveries.len(), 8);
    b.ack("jobs", "g1", &ids[0..3]).await.unwrap();
    retry_jobs(b, &ids[3..4], Retry::After(Duration::from_secs(3600))).await;
    retry_jobs(b, &ids[4..5], Retry::Copy).await;
    dead_letter_jobs(b, &ids[5..6], "bad payload").await;
    dead_letter_jobs(b, &ids[6..7], "to redrive").await;
    b.redrive("jobs", "g1", &ids[6..7]).await.unwrap();
    b.read(read("c2", ReadMode::New, 4)).await.unwrap();
    let g2 = b
        .read(ReadRequest::new("jobs", "g2", "c9", ReadMode::New, 5))
        .await
        .unwrap();
    assert!(g2.deliveries.is_empty(), "g2 started at New");
    b.publish("jobs", msg("late")).await.unwrap();
    b.read(ReadRequest::new("jobs", "g2", "c9", ReadMode::New, 5))
        .await
        .unwrap();
    b.trim("jobs", Trim::MaxLen(6)).await.unwrap();
}

/// A broker opened on `dir` after [`workout`].
async fn worked_out(dir: &Path) -> FileLogBroker {
    let b = FileLogBroker::open(dir).unwrap();
    workout(&b).await;
    b
}

#[tokio::test]
async fn everything_survives_a_reopen() {
    let dir = TempDir::new();
    let before = {
        let b = worked_out(&dir.0).await;
        observe(&b).await
    };
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(observe(&b).await, before);
    // And it goes on from there: new ids after the old ones.
    let id = b.publish("jobs", msg("after")).await.unwrap();
    let info = b.stream_info("jobs").await.unwrap().unwrap();
    assert_eq!(info.last_id, id);
}

#[tokio::test]
async fn a_compacted_journal_reopens_to_the_same_state() {
    let dir = TempDir::new();
    let before = {
        let b = worked_out(&dir.0).await;
        b.compact().unwrap();
        b.ack("jobs", "g1", &[EntryId::new(1, 0)]).await.unwrap();
        let state: Vec<_> = fs::read_dir(dir.0.join("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(state.len(), 2, "one snapshot and one journal: {state:?}");
        observe(&b).await
    };
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(observe(&b).await, before);
}

#[tokio::test]
async fn a_second_owner_is_refused_with_the_holders_pid() {
    let dir = TempDir::new();
    let _first = FileLogBroker::open(&dir.0).unwrap();
    let err = FileLogBroker::open(&dir.0).unwrap_err();
    assert!(matches!(err, BrokerError::InUse { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&std::process::id().to_string()), "{text}");
    assert!(text.contains(&dir.0.display().to_string()), "{text}");
}

fn segments(dir: &Path, stream: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir.join("streams").join(stream))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

async fn three_entries(dir: &Path) -> Vec<EntryId> {
    let b = common::open_with_jobs_group(dir).await;
    let ids = b
        .publish_batch("jobs", vec![msg("a"), msg("b"), msg("c")])
        .await
        .unwrap();
    read_jobs(&b, 2).await;
    ids
}

#[tokio::test]
async fn a_torn_tail_is_truncated_and_nothing_before_it_is_lost() {
    let dir = TempDir::new();
    let ids = three_entries(&dir.0).await;
    for file in [segments(&dir.0, "jobs")[0].clone(), journal(&dir.0)] {
        let len = fs::metadata(&file).unwrap().len();
        // Half a record: the start of a frame, cut short.
        let mut f = OpenOptions::new().append(true).open(&file).unwrap();
        f.write_all(&[0xA5, 1, 200, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let b = FileLogBroker::open(&dir.0).unwrap();
        assert_eq!(
            fs::metadata(&file).unwrap().len(),
            len,
            "{} truncated",
            file.display()
        );
        let all = b
            .range("jobs", EntryId::ZERO, EntryId::MAX, 10)
            .await
            .unwrap();
        assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
        assert_eq!(b.group_info("jobs", "g1").await.unwrap().pending, 2);
    }
}

#[tokio::test]
async fn every_truncation_of_the_last_record_reopens_cleanly() {
    let dir = TempDir::new();
    let ids = three_entries(&dir.0).await;
    let segment = segments(&dir.0, "jobs")[0].clone();
    let whole = fs::read(&segment).unwrap();
    // The last entry's record starts where a two-entry file would end.
    let two = {
        let other = TempDir::new();
        let b = FileLogBroker::open(&other.0).unwrap();
        b.publish_batch("jobs", vec![msg("a"), msg("b")])
            .await
            .unwrap();
        drop(b);
        fs::metadata(&segments(&other.0, "jobs")[0]).unwrap().len() as usize
    };
    for cut in two..whole.len() {
        fs::write(&segment, &whole[..cut]).unwrap();
        let b = FileLogBroker::open(&dir.0).unwrap();
        let all = b
            .range("jobs", EntryId::ZERO, EntryId::MAX, 10)
            .await
            .unwrap();
        assert_eq!(all.len(), 2, "cut at {cut}");
        assert_eq!(all[1].id, ids[1]);
        drop(b);
        fs::write(&segment, &whole).unwrap();
    }
}

/// A retry with a copy settles the original in the journal and appends the
/// copy to the segment; the disk may keep the first write and not the
/// second (a power failure, with the journal's page written back first).
/// The original then comes back owed, rather than being lost with its
/// copy.
#[tokio::test]
async fn a_retry_copy_lost_to_a_power_failure_leaves_its_original_owed() {
    let dir = TempDir::new();
    let b = common::open_with_jobs_group(&dir.0).await;
    let id = publish_and_read_one(&b).await;
    let segment = segments(&dir.0, "jobs")[0].clone();
    let durable = fs::metadata(&segment).unwrap().len();
    assert_eq!(b.retry("jobs", "g1", &[id], Retry::Copy).await.unwrap(), 1);
    drop(b);
    // The journal's record reached the disk; the copy did not.
    let b = reopen_after_losing_the_copy(&dir.0, &segment, durable);
    let pending = pending_jobs(&b).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        (
            pending[0].id,
            pending[0].consumer.clone(),
            pending[0].times_delivered
        ),
        (id, None, 1),
        "owed again, its delivery counted"
    );
    let again = read_jobs(&b, 10).await;
    assert_eq!(again.deliveries.len(), 1);
    assert_eq!(again.deliveries[0].id(), id);
}

/// The first ten pending entries of group `g1` on `jobs`.
async fn pending_jobs(b: &FileLogBroker) -> Vec<PendingEntry> {
    b.pending("jobs", "g1", EntryId::ZERO, 10, None)
        .await
        .unwrap()
}

/// Publishes one entry to `jobs` and has consumer `c` of `g1` read it.
async fn publish_and_read_one(b: &FileLogBroker) -> EntryId {
    let id = b.publish("jobs", msg("job")).await.unwrap();
    assert_eq!(read_jobs(b, 1).await.deliveries.len(), 1);
    id
}

/// A copy that did reach the disk was all the retry needed: the original
/// stays settled, and the copy is what the group reads.
#[tokio::test]
async fn a_retry_copy_on_disk_keeps_its_original_settled() {
    let dir = TempDir::new();
    let b = common::open_with_jobs_group(&dir.0).await;
    let id = publish_and_read_one(&b).await;
    b.retry("jobs", "g1", &[id], Retry::Copy).await.unwrap();
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    let again = read_jobs(&b, 10).await;
    assert_eq!(again.deliveries.len(), 1);
    assert!(again.deliveries[0].id() > id, "the copy, not the original");
    assert_eq!(again.deliveries[0].delivery_count, 1);
}

/// A snapshot holds no record of which copy stands for which entry, so
/// compaction makes what it describes durable before writing it: with a
/// sync far off and every fsync failing, it fails (and the store stops)
/// rather than write a snapshot ahead of its entries.
#[tokio::test]
async fn compaction_syncs_the_entries_it_describes_before_its_snapshot() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        sync: ruststream_filelog::SyncPolicy::Interval(Duration::from_secs(3600)),
        ..FileLogOptions::default()
    };
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, options).unwrap()).await;
    let id = publish_and_read_one(&b).await;
    b.retry("jobs", "g1", &[id], Retry::Copy).await.unwrap();
    b.inject_fsync_failure();
    let error = b.compact().unwrap_err();
    assert!(error.to_string().contains("fsync"), "{error}");
    assert!(b.failure().is_some(), "the store stopped");
}

/// A message may carry records of its own: here the bytes of the stream's
/// own segment, forwarded as a payload. A crash that tears that message
/// leaves valid records inside the torn tail; they are the payload's, not
/// entries that follow (their ids do not come after the last entry), so
/// the tail is truncated rather than refused as damage.
#[tokio::test]
async fn a_torn_message_carrying_records_of_its_own_is_truncated() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    let first = b.publish("jobs", msg("first")).await.unwrap();
    let segment = segments(&dir.0, "jobs")[0].clone();
    let mut payload = fs::read(&segment).unwrap();
    payload.extend_from_slice(&[0; 200]);
    b.publish("jobs", Message::new(payload)).await.unwrap();
    drop(b);
    let len = fs::metadata(&segment).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let b = FileLogBroker::open(&dir.0).unwrap_or_else(|e| panic!("a torn tail reopens: {e}"));
    let all = b
        .range("jobs", EntryId::ZERO, EntryId::MAX, 10)
        .await
        .unwrap();
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), [first]);
}

#[tokio::test]
async fn damage_inside_a_file_is_an_error_naming_the_file_and_offset() {
    let dir = TempDir::new();
    three_entries(&dir.0).await;
    for file in [segments(&dir.0, "jobs")[0].clone(), journal(&dir.0)] {
        let whole = fs::read(&file).unwrap();
        // Flip one bit in the first record's body: valid records follow.
        let mut damaged = whole.clone();
        damaged[8 + 12] ^= 0x10;
        fs::write(&file, &damaged).unwrap();
        let err = FileLogBroker::open(&dir.0).unwrap_err();
        match &err {
            BrokerError::Corrupt {
                path,
                offset,
                detail,
            } => {
                assert_eq!(path, &file);
                assert_eq!(*offset, 8, "the first record starts after the header");
                assert!(detail.contains("checksum"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&file.display().to_string()) && text.contains("offset 8"),
            "{text}"
        );
        fs::write(&file, &whole).unwrap();
        FileLogBroker::open(&dir.0).unwrap();
    }
}

#[tokio::test]
async fn every_single_bit_flip_is_caught() {
    let dir = TempDir::new();
    three_entries(&dir.0).await;
    let file = segments(&dir.0, "jobs")[0].clone();
    let whole = fs::read(&file).unwrap();
    for bit in 0..whole.len() * 8 {
        let mut damaged = whole.clone();
        damaged[bit / 8] ^= 1 << (bit % 8);
        fs::write(&file, &damaged).unwrap();
        match FileLogBroker::open(&dir.0) {
            // A flip in the last record can look like a torn tail, which is
            // truncated: then that entry is gone, never altered.
            Ok(b) => {
                let all = b
                    .range("jobs", EntryId::ZERO, EntryId::MAX, 10)
                    .await
                    .unwrap();
                assert!(all.len() < 3, "bit {bit} flipped went unnoticed");
                for e in &all {
                    assert_eq!(e.headers().get_str("k").unwrap().as_bytes(), e.payload());
                }
            }
            Err(BrokerError::Corrupt { .. }) => {}
            Err(other) => panic!("bit {bit}: unexpected {other:?}"),
        }
        fs::write(&file, &whole).unwrap();
    }
}

#[tokio::test]
async fn retention_deletes_whole_segments_but_never_pending_or_dead_entries() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        segment_bytes: 1024,
        retention: Retention {
            max_bytes: Some(4096),
            max_age: None,
        },
        ..FileLogOptions::default()
    };
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, options).unwrap()).await;
    let first = b.publish("jobs", msg(&"held".repeat(20))).await.unwrap();
    let second = b.publish("jobs", msg(&"dead".repeat(20))).await.unwrap();
    let got = read_jobs(&b, 2).await;
    assert_eq!(got.deliveries.len(), 2);
    b.dead_letter("jobs", "g1", &[second], "kept for inspection")
        .await
        .unwrap();
    for i in 0..200 {
        b.publish("jobs", msg(&format!("filler-{i:04}-{}", "x".repeat(40))))
            .await
            .unwrap();
    }
    let files = segments(&dir.0, "jobs");
    let total: u64 = files.iter().map(|f| fs::metadata(f).unwrap().len()).sum();
    assert!(files.len() >= 2);
    // The segment holding the pending and dead entries stays, whatever its age.
    assert!(
        files[0]
            .to_string_lossy()
            .contains(&format!("{:020}", first.ms)),
        "{files:?}"
    );
    // Everything else is within the limit (plus the pinned segment and
    // the active one).
    assert!(
        total < 4096 + 3 * 1024 + 1024,
        "{total} bytes in {} segments",
        files.len()
    );
    let info = b.stream_info("jobs").await.unwrap().unwrap();
    assert!(
        info.length < 202,
        "old entries were trimmed: {}",
        info.length
    );
    assert_eq!(
        b.dead_letters("jobs", "g1", EntryId::ZERO, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Once settled, the pinned segment goes too.
    b.ack("jobs", "g1", &[first]).await.unwrap();
    b.discard("jobs", "g1", &[second]).await.unwrap();
    b.enforce_retention().await.unwrap();
    let after = segments(&dir.0, "jobs");
    assert!(!after.contains(&files[0]), "{after:?}");
    // And it all reopens.
    let before = observe(&b).await;
    drop(b);
    let b = FileLogBroker::open_with(&dir.0, options).unwrap();
    assert_eq!(observe(&b).await, before);
}

#[tokio::test]
async fn the_journal_is_compacted_on_its_own_as_it_grows() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        compact_journal_bytes: 4096,
        ..FileLogOptions::default()
    };
    let before = {
        let b = FileLogBroker::open_with(&dir.0, options).unwrap();
        b.ensure_group("jobs", "g1", StreamStart::New)
            .await
            .unwrap();
        for i in 0..200 {
            let id = b.publish("jobs", msg(&format!("m{i}"))).await.unwrap();
            read_jobs(&b, 1).await;
            if i % 3 != 0 {
                b.ack("jobs", "g1", &[id]).await.unwrap();
            }
        }
        let journal_len = fs::metadata(journal(&dir.0)).unwrap().len();
        assert!(
            journal_len < 3 * 4096,
            "journal not compacted: {journal_len} bytes"
        );
        let snapshots = fs::read_dir(dir.0.join("state"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("snapshot-")
            })
            .count();
        assert_eq!(snapshots, 1);
        observe(&b).await
    };
    let b = FileLogBroker::open_with(&dir.0, options).unwrap();
    assert_eq!(observe(&b).await, before);
    assert_eq!(b.group_info("jobs", "g1").await.unwrap().pending, 67);
}

/// Copies the tree at `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for item in fs::read_dir(from).unwrap() {
        let path = item.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

/// A retry with a copy of a pending entry that a trim kept releases it, and
/// that lets its segment go. The removal must not reach the disk before the
/// journal record and the copy do: a power failure right after an early
/// removal would leave the segment gone, the journal still saying the entry
/// is pending, and no copy, so the entry (synced long before) would be
/// dropped on reopen as never written.
///
/// `SyncPolicy::Interval(1 h)` keeps the sync thread out of the way, and an
/// fsync failure is armed before the retry: a retry that syncs before the
/// removal fails (and stops the log). One that removed the segment without
/// syncing leaves a disk that may hold exactly "the files as of the last
/// sync, minus that segment", which the test then opens.
#[tokio::test]
async fn a_segment_a_retry_copy_lets_go_is_removed_only_once_the_copy_is_durable() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        segment_bytes: 256,
        sync: ruststream_filelog::SyncPolicy::Interval(Duration::from_secs(3_600)),
        ..FileLogOptions::default()
    };
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, options).unwrap()).await;
    let id = b.publish("jobs", msg("the job")).await.unwrap();
    let read = read_jobs(&b, 1).await;
    assert_eq!(read.deliveries.len(), 1);
    let mut last = id;
    for i in 0..20 {
        let filler = format!("filler-{i}-{}", "x".repeat(100));
        last = b.publish("jobs", msg(&filler)).await.unwrap();
    }
    // Everything but the newest filler trimmed: the pending entry is kept,
    // and so is its segment.
    b.trim("jobs", Trim::MinId(last)).await.unwrap();
    let first_segment = segments(&dir.0, "jobs")[0].clone();
    let name = format!("{:020}-{:020}", id.ms, id.seq);
    assert!(
        first_segment.to_string_lossy().contains(&name),
        "{first_segment:?}"
    );
    b.sync().await.unwrap();
    let durable = TempDir::new();
    copy_dir(&dir.0, &durable.0);

    b.inject_fsync_failure();
    let retried = b.retry("jobs", "g1", &[id], Retry::Copy).await;
    assert!(
        retried.is_err() && first_segment.exists(),
        "the segment was removed before the retry that let it go was durable: {retried:?}"
    );
}

/// Reopens `dir` after a power failure that kept the journal but cut
/// `segment` back to `durable` bytes: the retry's copy never reached the
/// disk.
fn reopen_after_losing_the_copy(dir: &Path, segment: &Path, durable: u64) -> FileLogBroker {
    OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap()
        .set_len(durable)
        .unwrap();
    FileLogBroker::open(dir).unwrap()
}

/// Reopens `dir` after a power failure that lost the retry's copy
/// ([`reopen_after_losing_the_copy`]), and checks that `id` is owed again.
async fn owed_again_after_losing_the_copy(dir: &Path, segment: &Path, durable: u64, id: EntryId) {
    let b = reopen_after_losing_the_copy(dir, segment, durable);
    let pending = pending_jobs(&b).await;
    let owed: Vec<EntryId> = pending.iter().map(|p| p.id).collect();
    assert_eq!(owed, [id], "the original comes back owed: {pending:?}");
    let again = read_jobs(&b, 10).await;
    assert_eq!(again.deliveries[0].id(), id);
    assert_eq!(again.deliveries[0].entry.payload(), b"job");
}

/// An entry a trim kept (pending) and then retried with a copy is let go
/// of by the retry (its release); if the copy does not reach the disk, the
/// original is owed again all the same.
#[tokio::test]
async fn a_kept_entry_retried_with_a_copy_lost_to_a_power_failure_comes_back_owed() {
    let dir = TempDir::new();
    let b = common::open_with_jobs_group(&dir.0).await;
    let id = publish_and_read_one(&b).await;
    let later = b.publish("jobs", msg("later")).await.unwrap();
    b.trim("jobs", Trim::MinId(later)).await.unwrap();
    b.sync().await.unwrap();
    let segment = segments(&dir.0, "jobs")[0].clone();
    let durable = fs::metadata(&segment).unwrap().len();
    assert_eq!(b.retry("jobs", "g1", &[id], Retry::Copy).await.unwrap(), 1);
    drop(b);
    owed_again_after_losing_the_copy(&dir.0, &segment, durable, id).await;
}

/// A trim right after a retry with a copy drops the original (settled by
/// the retry); if the copy does not reach the disk, the original is owed
/// again all the same.
#[tokio::test]
async fn a_trim_after_a_retry_copy_lost_to_a_power_failure_leaves_the_original_owed() {
    let dir = TempDir::new();
    let b = common::open_with_jobs_group(&dir.0).await;
    let id = publish_and_read_one(&b).await;
    b.sync().await.unwrap();
    let segment = segments(&dir.0, "jobs")[0].clone();
    let durable = fs::metadata(&segment).unwrap().len();
    assert_eq!(b.retry("jobs", "g1", &[id], Retry::Copy).await.unwrap(), 1);
    b.trim("jobs", Trim::MaxLen(1)).await.unwrap();
    drop(b);
    owed_again_after_losing_the_copy(&dir.0, &segment, durable, id).await;
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The log's times are wall-clock milliseconds. A run whose clock was an
/// hour ahead (then set right) leaves delivery times in the future; after
/// the reopen, an entry delivered and left idle for `min_idle` by the
/// broker's clock is claimed all the same, not held up behind the older
/// records until the clock catches up.
#[test]
fn an_idle_entry_is_claimed_after_a_reopen_whose_clock_stepped_back() {
    let dir = TempDir::new();
    let min_idle = Duration::from_secs(30);
    paused_runtime().block_on(async {
        let b = FileLogBroker::open(&dir.0).unwrap();
        ensure_g1(&b, "jobs", StreamStart::Beginning).await;
        tokio::time::advance(Duration::from_secs(3_600)).await;
        b.publish("jobs", msg("a")).await.unwrap();
        let read = ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 1);
        assert_eq!(b.read(read).await.unwrap().deliveries.len(), 1);
        b.sync().await.unwrap();
    });
    paused_runtime().block_on(async {
        let b = FileLogBroker::open(&dir.0).unwrap();
        b.publish("jobs", msg("b")).await.unwrap();
        let read = ReadRequest::new("jobs", "g1", "c2", ReadMode::New, 1);
        let got = b.read(read).await.unwrap();
        let idle = got.deliveries[0].id();
        tokio::time::advance(min_idle + Duration::from_secs(1)).await;
        let claiming = ReadMode::Claiming { min_idle };
        let claimed = b
            .read(ReadRequest::new("jobs", "g1", "c3", claiming, 10))
            .await
            .unwrap();
        let ids: Vec<EntryId> = claimed.deliveries.iter().map(|d| d.id()).collect();
        assert_eq!(ids, [idle], "idle for {min_idle:?} by the broker's clock");
    });
}

/// A crash can leave a new segment holding only its header (created and
/// synced, its first entry never on disk: `SyncPolicy::Interval`), named by
/// an id from a clock that ran ahead. After the clock is set right and the
/// log reopened, new entries get ids before that name. The empty segment
/// is removed at open, so they go to a segment named by their own id: the
/// log keeps opening, and the user never has to throw away synced,
/// acknowledged entries to get it back.
#[test]
fn an_empty_last_segment_named_ahead_of_the_clock_does_not_brick_the_log() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        sync: SyncPolicy::Interval(Duration::from_secs(3600)),
        segment_bytes: 1,
        ..FileLogOptions::default()
    };
    let a = paused_runtime().block_on(async {
        let b = FileLogBroker::open_with(&dir.0, options).unwrap();
        let a = b.publish("jobs", msg("a")).await.unwrap();
        b.sync().await.unwrap();
        // The clock runs an hour ahead; "b" rolls to a new segment.
        tokio::time::advance(Duration::from_secs(3_600)).await;
        b.publish("jobs", msg("b")).await.unwrap();
        a
    });
    let segs = segments(&dir.0, "jobs");
    assert_eq!(segs.len(), 2);
    // Power failure: the new segment's creation was synced, its entry not.
    let header = fs::read(&segs[1]).unwrap()[..8].to_vec();
    fs::write(&segs[1], header).unwrap();
    // A read-only view writes nothing: it passes the empty segment over.
    let view = FileLogBroker::open_read_only(&dir.0).unwrap();
    assert_eq!(segments(&dir.0, "jobs"), segs);
    drop(view);
    // Clock set right: after the reopen, "c" gets an id before the empty
    // segment's name.
    paused_runtime().block_on(async {
        let b = FileLogBroker::open_with(&dir.0, options).unwrap();
        assert_eq!(segments(&dir.0, "jobs"), segs[..1], "empty segment removed");
        let c = b.publish("jobs", msg("c")).await.unwrap();
        assert!(
            c < segment_id(&segs[1]),
            "{c} is before the empty segment's name"
        );
        b.sync().await.unwrap();
        drop(b);
        let b = FileLogBroker::open_with(&dir.0, options)
            .expect("the log reopens after an acknowledged, synced publish");
        let all = b
            .range("jobs", EntryId::ZERO, EntryId::MAX, 10)
            .await
            .unwrap();
        assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), [a, c]);
    });
}

/// The id a segment file is named by.
fn segment_id(path: &Path) -> EntryId {
    let name = path.file_stem().unwrap().to_str().unwrap();
    let (ms, seq) = name.split_once('-').unwrap();
    EntryId::new(ms.parse().unwrap(), seq.parse().unwrap())
}

/// Dead letters with long reasons (a stack trace, say): each call's
/// journal record fits the 64 MiB record limit, but 4,200 reasons of
/// 17 KiB do not fit one snapshot record. Compaction splits the group
/// state over records by size, so it goes through (rather than failing
/// every time, leaving the journal to grow without end), and the state
/// comes back whole from the snapshot.
#[tokio::test]
async fn compaction_survives_many_dead_letters_with_long_reasons() {
    let dir = TempDir::new();
    let b = common::open_with_jobs_group(&dir.0).await;
    let reason = "x".repeat(17 * 1024);
    for _ in 0..2 {
        let ids = b
            .publish_batch("jobs", (0..2100).map(|i| msg(&format!("m{i}"))).collect())
            .await
            .unwrap();
        let read = ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 2100);
        assert_eq!(b.read(read).await.unwrap().deliveries.len(), 2100);
        assert_eq!(
            b.dead_letter("jobs", "g1", &ids, &reason).await.unwrap(),
            2100
        );
    }
    b.compact()
        .expect("compaction of a group with 4,200 long dead letters");
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    let dead = b
        .dead_letters("jobs", "g1", EntryId::ZERO, 10_000)
        .await
        .unwrap();
    assert_eq!(dead.len(), 4200);
    assert!(dead.iter().all(|d| d.reason == reason));
}

/// An entry retried with a delay keeps its due time across a compaction
/// and a reopen: it is not handed out again before then.
#[tokio::test]
async fn a_delayed_retry_keeps_its_due_time_across_a_reopen() {
    let dir = TempDir::new();
    let b = common::open_with_jobs_group(&dir.0).await;
    let id = publish_and_read_one(&b).await;
    retry_jobs(&b, &[id], Retry::After(Duration::from_secs(3600))).await;
    b.compact().unwrap();
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    let p = pending_jobs(&b).await;
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].times_delivered, 1);
    let owed = p[0].owed_in_ms.expect("owed");
    assert!(owed > 3_500_000, "owed in {owed} ms");
    for mode in [
        ReadMode::New,
        ReadMode::Claiming {
            min_idle: Duration::ZERO,
        },
    ] {
        let got = b
            .read(ReadRequest::new("jobs", "g1", "c2", mode, 10))
            .await
            .unwrap();
        assert!(
            got.deliveries.is_empty(),
            "{mode:?} handed out an entry due in an hour"
        );
    }
}

/// The first publish to a new stream fails (an I/O error): the call is
/// taken back and the stream does not exist, nor does it after a reopen
/// (its directory, left without a segment, does not bring it back).
#[tokio::test]
async fn a_stream_whose_first_publish_failed_does_not_appear_after_a_reopen() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    b.inject_write_failure(Some("fresh"));
    assert!(b.publish("fresh", msg("x")).await.is_err());
    let live = (
        b.streams().await.unwrap(),
        b.stream_info("fresh").await.unwrap(),
    );
    assert_eq!(live, (vec![], None));
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    let reopened = (
        b.streams().await.unwrap(),
        b.stream_info("fresh").await.unwrap(),
    );
    assert_eq!(live, reopened);
}
