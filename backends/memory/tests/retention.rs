//! The memory broker's retention: streams are trimmed to the bound after
//! publishes, but never past what a group has not read, and pending and
//! dead-lettered entries stay readable until settled.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ruststream_core::{Broker, EntryId, Message, ReadMode, ReadRequest, StreamStart};
use ruststream_memory::{MemoryBroker, MemoryRetention, with_retention};

async fn publish(b: &MemoryBroker, stream: &str, n: usize) {
    for i in 0..n {
        b.publish(stream, Message::new(format!("{i}").into_bytes()))
            .await
            .unwrap();
    }
}

async fn length(b: &MemoryBroker, stream: &str) -> u64 {
    b.stream_info(stream).await.unwrap().unwrap().length
}

/// A memory broker keeping streams near `max_len` entries, with no age limit.
fn bounded(max_len: u64) -> MemoryBroker {
    with_retention(MemoryRetention {
        max_len: Some(max_len),
        max_age: None,
    })
}

/// Makes `group` on stream "s" from its beginning.
async fn group_from_start(b: &MemoryBroker, group: &str) {
    b.ensure_group("s", group, StreamStart::Beginning)
        .await
        .unwrap();
}

/// Reads up to `count` new entries of stream "s" for `group` (consumer "c"),
/// returning their ids.
async fn read_new(b: &MemoryBroker, group: &str, count: usize) -> Vec<EntryId> {
    let request = ReadRequest::new("s", group, "c", ReadMode::New, count);
    let batch = b.read(request).await.unwrap();
    batch.deliveries.iter().map(|d| d.id()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_stream_without_groups_is_kept_near_the_bound() {
    let b = bounded(100);
    publish(&b, "s", 1_000).await;
    let len = length(&b, "s").await;
    assert!((100..=112).contains(&len), "{len}");
}

#[tokio::test(start_paused = true)]
async fn what_a_group_has_not_read_pending_or_dead_lettered_is_kept() {
    let b = bounded(10);
    group_from_start(&b, "g").await;
    publish(&b, "s", 30).await;
    assert_eq!(length(&b, "s").await, 30, "nothing read yet: all kept");
    let ids = read_new(&b, "g", 25).await;
    b.ack("s", "g", &ids[2..20]).await.unwrap();
    b.dead_letter("s", "g", &ids[1..2], "bad").await.unwrap();
    publish(&b, "s", 1).await;
    // 31 entries, 25 read: the bound keeps the last 10 (6 of them unread),
    // and below the cut, pending 0 and 20 and dead-lettered 1 stay.
    let len = length(&b, "s").await;
    assert_eq!(len, 13, "{len}");
    // Entry 0 and 20..25 are pending, entry 1 dead-lettered: all still
    // readable though trimmed.
    let kept = b.range("s", ids[0], ids[0], 1).await.unwrap();
    assert_eq!(kept.len(), 1, "pending entry 0 readable");
    let dead = b.dead_letters("s", "g", EntryId::ZERO, 10).await.unwrap();
    assert_eq!(dead[0].entry.payload(), b"1");
    let pending = b.pending("s", "g", EntryId::ZERO, 100, None).await.unwrap();
    assert_eq!(pending.len(), 6, "0 and 20..25");
}

#[tokio::test(start_paused = true)]
async fn entries_older_than_the_age_limit_go() {
    let b = with_retention(MemoryRetention {
        max_len: None,
        max_age: Some(Duration::from_secs(60)),
    });
    publish(&b, "s", 5).await;
    tokio::time::advance(Duration::from_secs(61)).await;
    publish(&b, "s", 2).await;
    assert_eq!(length(&b, "s").await, 2);
}

#[tokio::test(start_paused = true)]
async fn the_default_bounds_a_stream_and_unbounded_keeps_all() {
    let b = MemoryBroker::new();
    publish(&b, "s", 120_000).await;
    let len = length(&b, "s").await;
    assert!(len <= 112_500, "{len}");
    let all = with_retention(MemoryRetention::UNBOUNDED);
    publish(&all, "s", 1_000).await;
    assert_eq!(length(&all, "s").await, 1_000);
}

/// An entry kept past the bound because one group had it pending stays in
/// the stream for a group made behind it since: when the first group acks
/// it, the later group still reads it (its lag counted it).
#[tokio::test(start_paused = true)]
async fn a_kept_entry_a_later_group_has_not_read_stays_when_another_acks_it() {
    let b = bounded(10);
    group_from_start(&b, "first").await;
    publish(&b, "s", 1).await;
    let x = read_new(&b, "first", 1).await[0];
    publish(&b, "s", 30).await;
    let rest = read_new(&b, "first", 100).await;
    b.ack("s", "first", &rest).await.unwrap();
    publish(&b, "s", 1).await;
    let range = b
        .range("s", EntryId::ZERO, EntryId::MAX, 100)
        .await
        .unwrap();
    assert_eq!(range[0].id, x, "kept while pending");

    group_from_start(&b, "later").await;
    let lag = b.group_info("s", "later").await.unwrap().lag;
    b.ack("s", "first", &[x]).await.unwrap();
    let got = read_new(&b, "later", 100).await;
    assert_eq!(got.len() as u64, lag, "`later` was told of {lag} entries");
    assert_eq!(got[0], x);
}
