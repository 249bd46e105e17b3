//! `FileLogBroker::open_read_only`: a view of a directory another handle
//! holds, for tools. It takes no lock, writes nothing (not even a repair
//! of a write in progress), answers what the holder wrote, and refuses
//! every change naming the holder.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use common::{TempDir, dead_letter_jobs, open_with_jobs_group, publish_bytes};
use ruststream_core::{Broker, BrokerError, EntryId, Message, ReadMode, ReadRequest, StreamStart};
use ruststream_filelog::FileLogBroker;

/// Every file under `dir` with its length and contents.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for item in fs::read_dir(&d).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.display().to_string(), fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// A held log with stream `jobs` (3 entries), group `g1` with one entry
/// pending under `c1` and one dead letter.
async fn held(dir: &Path) -> FileLogBroker {
    let b = open_with_jobs_group(dir).await;
    for text in ["a", "b", "c"] {
        b.publish("jobs", Message::new(text.as_bytes().to_vec()))
            .await
            .unwrap();
    }
    let batch = b
        .read(ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 2))
        .await
        .unwrap();
    dead_letter_jobs(&b, &[batch.deliveries[0].id()], "bad").await;
    b.sync().await.unwrap();
    b
}

#[tokio::test]
async fn a_held_log_reads_the_same_and_refuses_changes_naming_the_holder() {
    let dir = TempDir::new();
    let holder = held(&dir.0).await;
    let before = files(&dir.0);
    let view = FileLogBroker::open_read_only(&dir.0).unwrap();

    assert_eq!(view.streams().await.unwrap(), ["jobs"]);
    assert_eq!(
        view.stream_info("jobs").await.unwrap(),
        holder.stream_info("jobs").await.unwrap()
    );
    assert_eq!(
        view.group_info("jobs", "g1").await.unwrap(),
        holder.group_info("jobs", "g1").await.unwrap()
    );
    let pending = |b: &FileLogBroker| {
        let b = b.clone();
        async move {
            let p = b
                .pending("jobs", "g1", EntryId::ZERO, 10, None)
                .await
                .unwrap();
            p.into_iter()
                .map(|p| (p.id, p.consumer, p.times_delivered))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(pending(&view).await, pending(&holder).await);
    let dead = view
        .dead_letters("jobs", "g1", EntryId::ZERO, 10)
        .await
        .unwrap();
    assert_eq!((dead.len(), dead[0].reason.as_str()), (1, "bad"));

    let pid = std::process::id().to_string();
    let refusals: Vec<BrokerError> = vec![
        view.publish("jobs", Message::new(b"x".to_vec()))
            .await
            .unwrap_err(),
        view.ack("jobs", "g1", &[dead[0].id()]).await.unwrap_err(),
        view.redrive("jobs", "g1", &[dead[0].id()])
            .await
            .unwrap_err(),
        view.ensure_group("jobs", "g2", StreamStart::New)
            .await
            .unwrap_err(),
        view.read(ReadRequest::new("jobs", "g1", "c2", ReadMode::New, 1))
            .await
            .unwrap_err(),
    ];
    for refused in refusals {
        let text = refused.to_string();
        assert!(matches!(refused, BrokerError::InUse { .. }), "{refused:?}");
        assert!(
            text.contains(&format!("pid {pid}")) && text.contains("read-only"),
            "{text}"
        );
    }
    assert_eq!(
        view.group_info("jobs", "g1").await.unwrap(),
        holder.group_info("jobs", "g1").await.unwrap(),
        "a refused call changed nothing in the view"
    );
    // Compaction and retention are the holder's: a view refuses them.
    assert!(matches!(view.compact(), Err(BrokerError::InUse { .. })));
    assert!(matches!(
        view.enforce_retention().await,
        Err(BrokerError::InUse { .. })
    ));
    drop(view);
    assert_eq!(files(&dir.0), before, "the view wrote nothing");

    // The holder goes on; a new view sees it.
    publish_bytes(&holder, "jobs", b"d").await;
    let later = FileLogBroker::open_read_only(&dir.0).unwrap();
    assert_eq!(later.stream_info("jobs").await.unwrap().unwrap().length, 4);
}

#[tokio::test]
async fn a_write_in_progress_ends_what_is_read_and_is_left_alone() {
    let dir = TempDir::new();
    let holder = held(&dir.0).await;
    // The holder is half-way through appending a record.
    let segment = fs::read_dir(dir.0.join("streams"))
        .unwrap()
        .flat_map(|d| fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .next()
        .unwrap();
    let mut file = fs::OpenOptions::new().append(true).open(&segment).unwrap();
    file.write_all(&[0x5a; 7]).unwrap();
    let len = fs::metadata(&segment).unwrap().len();

    let view = FileLogBroker::open_read_only(&dir.0).unwrap();
    assert_eq!(view.stream_info("jobs").await.unwrap().unwrap().length, 3);
    assert_eq!(fs::metadata(&segment).unwrap().len(), len, "not truncated");
    drop((view, holder));
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let dir = TempDir::new();
    let err = FileLogBroker::open_read_only(&dir.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&dir.0.display().to_string()), "{err}");
    assert!(!dir.0.exists(), "nothing created");
}

/// A holder killed between a compaction's snapshot and its new journal
/// leaves `snapshot-N` without `journal-N`: the snapshot is the whole group
/// state, and a view opens from it, as a writer's open does. (A journal
/// missing because the holder's compaction replaced the generation the
/// view listed, a newer snapshot beside it, makes the view list again.)
#[tokio::test]
async fn a_view_of_a_log_killed_between_snapshot_and_journal_opens() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    publish_bytes(&b, "jobs", b"x").await;
    let read = ReadRequest::new("jobs", "g1", "c", ReadMode::New, 1);
    assert_eq!(b.read(read).await.unwrap().deliveries.len(), 1);
    b.compact().unwrap();
    b.sync().await.unwrap();
    drop(b);
    let state = dir.0.join("state");
    let mut journals: Vec<_> = fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("journal-")
        })
        .collect();
    journals.sort();
    fs::remove_file(journals.last().unwrap()).unwrap();

    let view = FileLogBroker::open_read_only(&dir.0).unwrap();
    let pending = view.pending("jobs", "g1", EntryId::ZERO, 10, None).await;
    assert_eq!(pending.unwrap().len(), 1);
    drop(view);
    let writer = FileLogBroker::open(&dir.0).unwrap();
    let pending = writer.pending("jobs", "g1", EntryId::ZERO, 10, None).await;
    assert_eq!(pending.unwrap().len(), 1);
}
