//! Payloads not held in memory: with `cache_bytes` small (or 0) the
//! engine keeps ids and group state only, and every payload handed out
//! (reads, redeliveries, ranges, dead letters, retry copies) is read back
//! from the segment files, across segments, retention, failed writes and
//! reopens.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::time::Duration;

use common::{TempDir, with_jobs_group};
use ruststream_core::{Broker, BrokerError, EntryId, Message, ReadMode, ReadRequest, Retry};
use ruststream_filelog::{FileLogBroker, FileLogOptions, Retention};

/// Small segments (many of them), and no payload held in memory.
fn uncached() -> FileLogOptions {
    FileLogOptions {
        segment_bytes: 4 << 10,
        cache_bytes: 0,
        ..FileLogOptions::default()
    }
}

fn message(i: usize) -> Message {
    let m = Message::new(format!("payload-{i}-{}", "x".repeat(i % 50)).into_bytes());
    if i.is_multiple_of(3) {
        m.with_header("n", i.to_string())
    } else {
        m
    }
}

fn text(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload).into_owned()
}

async fn publish(b: &FileLogBroker, range: std::ops::Range<usize>) -> Vec<EntryId> {
    let mut ids = Vec::new();
    for chunk in range.collect::<Vec<_>>().chunks(37) {
        let batch = chunk.iter().map(|&i| message(i)).collect();
        ids.extend(b.publish_batch("jobs", batch).await.unwrap());
    }
    ids
}

/// Every entry of `jobs`, as (payload, header `n`), a few at a time.
async fn replay(b: &FileLogBroker) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut from = EntryId::ZERO;
    loop {
        let entries = b.range("jobs", from, EntryId::MAX, 100).await.unwrap();
        let Some(last) = entries.last() else {
            return out;
        };
        from = last.id.next();
        out.extend(entries.iter().map(|e| {
            let n = e.message.headers.get_str("n").map(str::to_owned);
            (text(e.payload()), n)
        }));
    }
}

fn expected(range: std::ops::Range<usize>) -> Vec<(String, Option<String>)> {
    range
        .map(|i| {
            let m = message(i);
            (text(&m.payload), m.headers.get_str("n").map(str::to_owned))
        })
        .collect()
}

fn read(consumer: &str, mode: ReadMode, count: usize) -> ReadRequest<'_> {
    ReadRequest::new("jobs", "g1", consumer, mode, count)
}

#[tokio::test]
async fn every_payload_handed_out_comes_back_from_the_segments() {
    let dir = TempDir::new();
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, uncached()).unwrap()).await;
    let ids = publish(&b, 0..600).await;
    assert!(fs::read_dir(dir.0.join("streams/jobs")).unwrap().count() > 5);
    assert_eq!(replay(&b).await, expected(0..600));

    // New entries, in batches that cross segments.
    let mut seen = Vec::new();
    loop {
        let batch = b.read(read("c1", ReadMode::New, 70)).await.unwrap();
        if batch.is_empty() {
            break;
        }
        seen.extend(batch.deliveries.iter().map(|d| text(d.entry.payload())));
    }
    let all: Vec<String> = expected(0..600).into_iter().map(|(p, _)| p).collect();
    assert_eq!(seen, all);

    // Pending entries handed out again, out of order.
    let own = ReadMode::OwnPending {
        after: EntryId::ZERO,
        min_idle: Duration::ZERO,
    };
    let again = b.read(read("c1", own, 5)).await.unwrap();
    assert_eq!(again.deliveries[4].entry.payload(), message(4).payload);
    b.ack("jobs", "g1", &ids[..550]).await.unwrap();
    let again = b.read(read("c1", own, 5)).await.unwrap();
    assert_eq!(again.deliveries[0].entry.payload(), message(550).payload);

    // A retry copy of an original whose payload is on disk only, and a
    // dead letter.
    b.retry("jobs", "g1", &ids[550..552], Retry::Copy)
        .await
        .unwrap();
    b.dead_letter("jobs", "g1", &ids[552..553], "bad")
        .await
        .unwrap();
    let copies = b.read(read("c2", ReadMode::New, 10)).await.unwrap();
    let texts: Vec<String> = copies
        .deliveries
        .iter()
        .map(|d| text(d.entry.payload()))
        .collect();
    assert_eq!(
        texts,
        [text(&message(550).payload), text(&message(551).payload)]
    );
    assert_eq!(
        copies.deliveries[0].entry.message.headers.get_str("n"),
        None
    );
    let dead = b
        .dead_letters("jobs", "g1", EntryId::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(dead[0].entry.payload(), message(552).payload);

    // The same after a reopen, which reads ids and no payload.
    drop(b);
    let b = FileLogBroker::open_with(&dir.0, uncached()).unwrap();
    let mut all = expected(0..600);
    all.extend(expected(550..552).into_iter().map(|(p, _)| (p, None)));
    assert_eq!(replay(&b).await, all);
    let dead = b
        .dead_letters("jobs", "g1", EntryId::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(dead[0].entry.payload(), message(552).payload);
    let again = b.read(read("c2", own, 100)).await.unwrap();
    assert_eq!(again.deliveries.len(), 2);
    assert_eq!(again.deliveries[1].entry.payload(), message(551).payload);
}

#[tokio::test]
async fn retention_keeps_what_a_group_needs_readable_from_disk() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        retention: Retention {
            max_bytes: Some(8 << 10),
            max_age: None,
        },
        ..uncached()
    };
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, options).unwrap()).await;
    let ids = publish(&b, 0..50).await;
    let batch = b.read(read("c1", ReadMode::New, 50)).await.unwrap();
    assert_eq!(batch.deliveries.len(), 50);
    b.ack("jobs", "g1", &ids[1..40]).await.unwrap();
    b.dead_letter("jobs", "g1", &ids[40..41], "bad")
        .await
        .unwrap();
    b.ack("jobs", "g1", &ids[41..]).await.unwrap();
    publish(&b, 50..400).await;
    b.enforce_retention().await.unwrap();
    let info = b.stream_info("jobs").await.unwrap().unwrap();
    assert!(info.length < 200, "{info:?}");
    assert_eq!(info.first_id, Some(ids[0]));

    for b in [b, FileLogBroker::open_read_only(&dir.0).unwrap()] {
        let own = ReadMode::OwnPending {
            after: EntryId::ZERO,
            min_idle: Duration::ZERO,
        };
        if b.ack("jobs", "g1", &[]).await.is_ok() {
            let kept = b.read(read("c1", own, 10)).await.unwrap();
            assert_eq!(kept.deliveries[0].entry.payload(), message(0).payload);
        }
        let range = b.range("jobs", EntryId::ZERO, ids[40], 10).await.unwrap();
        let texts: Vec<String> = range.iter().map(|e| text(e.payload())).collect();
        assert_eq!(
            texts,
            [text(&message(0).payload), text(&message(40).payload)]
        );
        let dead = b
            .dead_letters("jobs", "g1", EntryId::ZERO, 10)
            .await
            .unwrap();
        assert_eq!(dead[0].entry.payload(), message(40).payload);
    }
}

#[tokio::test]
async fn a_failed_write_is_taken_back_and_payloads_still_read() {
    let dir = TempDir::new();
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, uncached()).unwrap()).await;
    publish(&b, 0..100).await;
    b.inject_write_failure(Some("jobs"));
    let err = b.publish("jobs", message(100)).await.unwrap_err();
    assert!(matches!(err, BrokerError::Io { .. }), "{err:?}");
    assert_eq!(replay(&b).await, expected(0..100));
    publish(&b, 100..110).await;
    assert_eq!(replay(&b).await, expected(0..110));
    let batch = b.read(read("c1", ReadMode::New, 200)).await.unwrap();
    assert_eq!(batch.deliveries[109].entry.payload(), message(109).payload);
}

#[tokio::test]
async fn a_record_damaged_after_opening_is_an_error_naming_the_file_and_offset() {
    let dir = TempDir::new();
    let b = FileLogBroker::open_with(&dir.0, uncached()).unwrap();
    let ids = publish(&b, 0..3).await;
    let segment = fs::read_dir(dir.0.join("streams/jobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    let mut bytes = fs::read(&segment).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&segment, bytes).unwrap();
    let err = b.range("jobs", ids[2], ids[2], 1).await.unwrap_err();
    match err {
        BrokerError::Corrupt { path, offset, .. } => {
            assert_eq!(path, segment);
            assert!(offset > 8, "{offset}");
        }
        other => panic!("{other:?}"),
    }
    // Entries before it read as before.
    let first = b.range("jobs", ids[0], ids[0], 1).await.unwrap();
    assert_eq!(first[0].payload(), message(0).payload);
}
