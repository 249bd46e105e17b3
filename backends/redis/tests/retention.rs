//! Retention on Redis (`RedisConfig::retention`): streams are trimmed by a
//! length or an age, never past what a group still needs: entries it has
//! not read, its pending and owed entries, and its dead letters.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use ruststream_core::{Broker, EntryId, Message, ReadMode, ReadRequest, Retry, StreamStart};
use ruststream_redis::{RedisBroker, RedisConfig, RedisRetention};
use support::{unique, url};

fn keeping(rule: RedisRetention) -> RedisBroker {
    RedisBroker::standalone_with(
        url(),
        RedisConfig {
            retention: Some(rule),
            ..RedisConfig::default()
        },
    )
}

async fn publish(broker: &RedisBroker, stream: &str, n: usize) -> Vec<EntryId> {
    let messages = (0..n)
        .map(|i| Message::new(format!("{i}").into_bytes()))
        .collect();
    broker.publish_batch(stream, messages).await.unwrap()
}

async fn read(broker: &RedisBroker, stream: &str, group: &str, n: usize) -> Vec<EntryId> {
    let request = ReadRequest::new(stream, group, "c", ReadMode::New, n);
    let batch = broker.read(request).await.unwrap();
    batch.deliveries.iter().map(|d| d.id()).collect()
}

async fn left(broker: &RedisBroker, stream: &str) -> Vec<EntryId> {
    let entries = broker
        .range(stream, EntryId::ZERO, EntryId::MAX, usize::MAX)
        .await
        .unwrap();
    entries.iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn retention_never_trims_what_a_group_still_needs() {
    let plain = RedisBroker::standalone(url());
    let stream = unique("retain");
    support::ensure_groups(&plain, &stream, &["reader", "slow"], StreamStart::Beginning).await;
    let ids = publish(&plain, &stream, 30).await;

    // `reader` reads 10: e3 stays pending, e5 is dead-lettered, e7 is owed
    // in an hour, the rest acked. `slow` reads and acks 20.
    assert_eq!(read(&plain, &stream, "reader", 10).await, ids[..10]);
    let acked: Vec<EntryId> = [0, 1, 2, 4, 6, 8, 9].iter().map(|&i| ids[i]).collect();
    plain.ack(&stream, "reader", &acked).await.unwrap();
    plain
        .dead_letter(&stream, "reader", &[ids[5]], "bad")
        .await
        .unwrap();
    let hour = Retry::After(Duration::from_secs(3600));
    plain
        .retry(&stream, "reader", &[ids[7]], hour)
        .await
        .unwrap();
    let slow = read(&plain, &stream, "slow", 20).await;
    plain.ack(&stream, "slow", &slow).await.unwrap();

    // Keep 5: the rule alone would cut at e25, but e3 is still pending.
    let broker = keeping(RedisRetention {
        max_len: Some(5),
        max_age: None,
    });
    assert_eq!(broker.apply_retention(&stream).await.unwrap(), 3);
    assert_eq!(left(&broker, &stream).await, ids[3..]);

    // Settle the pending one: now the oldest need is the dead letter (e5).
    plain.ack(&stream, "reader", &[ids[3]]).await.unwrap();
    assert_eq!(broker.apply_retention(&stream).await.unwrap(), 2);
    assert_eq!(left(&broker, &stream).await, ids[5..]);

    // Discard the dead letter and ack the owed entry: the oldest need is
    // now what `reader` has not read (after e9).
    plain.discard(&stream, "reader", &[ids[5]]).await.unwrap();
    plain.ack(&stream, "reader", &[ids[7]]).await.unwrap();
    broker.apply_retention(&stream).await.unwrap();
    assert_eq!(left(&broker, &stream).await, ids[9..]);

    // Everything read and acked everywhere: the rule alone decides.
    let rest = read(&plain, &stream, "reader", 100).await;
    plain.ack(&stream, "reader", &rest).await.unwrap();
    let rest = read(&plain, &stream, "slow", 100).await;
    plain.ack(&stream, "slow", &rest).await.unwrap();
    broker.apply_retention(&stream).await.unwrap();
    assert_eq!(left(&broker, &stream).await, ids[25..]);

    // An age rule keeps what is younger than the age.
    let by_age = keeping(RedisRetention {
        max_len: None,
        max_age: Some(Duration::from_secs(3600)),
    });
    assert_eq!(by_age.apply_retention(&stream).await.unwrap(), 0);
    assert_eq!(left(&broker, &stream).await.len(), 5);
}

#[tokio::test]
async fn publishing_applies_the_rule_and_a_stream_without_groups_is_bounded() {
    let stream = unique("retain-publish");
    let broker = keeping(RedisRetention {
        max_len: Some(10),
        max_age: None,
    });
    // The first publish of a stream makes a pass (then at most one per
    // RETENTION_EVERY): 50 entries, no group, so 10 stay.
    publish(&broker, &stream, 50).await;
    assert_eq!(left(&broker, &stream).await.len(), 10);
    // Without a rule nothing is trimmed.
    let plain = RedisBroker::standalone(url());
    assert_eq!(plain.apply_retention(&stream).await.unwrap(), 0);
    // A missing stream is nothing to trim.
    assert_eq!(broker.apply_retention(&unique("none")).await.unwrap(), 0);
}

/// The length rule keeps exactly the newest `max_len` entries, whether the
/// stream is a little over its bound (the cut found from the oldest end,
/// as at steady state) or far over it (from the newest end).
#[tokio::test]
async fn the_length_rule_keeps_the_newest_entries_a_little_or_far_over_the_bound() {
    let plain = RedisBroker::standalone(url());
    let broker = keeping(RedisRetention {
        max_len: Some(10),
        max_age: None,
    });
    for (total, what) in [(13, "little"), (40, "far")] {
        let stream = unique(&format!("retain-{what}"));
        let ids = publish(&plain, &stream, total).await;
        let removed = broker.apply_retention(&stream).await.unwrap();
        assert_eq!(removed, total as u64 - 10, "{what} over");
        assert_eq!(
            left(&plain, &stream).await,
            ids[total - 10..],
            "{what} over"
        );
    }
}
