//! A read whose reply is lost on a Redis Cluster. The cluster client sends
//! a command again by itself when its connection drops before the reply
//! came, whether or not the server ran it. A read run twice must not come
//! back as a success holding only the second attempt's entries while the
//! first attempt's sit pending under the consumer, handed to no one: with
//! its read mark (`docs/guarantees.md`, "Redis Cluster") it fails as a lost
//! read does, and what both attempts claimed is pending under the consumer
//! for the caller's re-check to hand back.
//!
//! A look at the consumer's own pending list with an idle bound (the
//! recovery read after a restart) claims what it hands out; found again,
//! it reads every own entry instead, so none is left behind.
//!
//! The reply is lost for real: the stream's master runs a busy script for
//! half a second while the read and a `CLIENT KILL` of every other client
//! queue behind it; when the script ends the master runs the read, then
//! the kill, which drops the read's answer with its connection. The test
//! starts its own cluster (six private `redis-server` processes), never the
//! shared one, and runs in real time.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use redis::Value;
use ruststream_core::{
    Broker, BrokerResult, EntryId, Message, ReadBatch, ReadMode, ReadRequest, StreamStart,
};
use ruststream_redis::RedisBroker;
use support::redis_cluster::RedisCluster;

/// Tries per read mode: the reply is lost only when the master runs the
/// read before the kill, which it does nearly always.
const TRIES: usize = 5;

/// Reads up to `count` entries of `stream` for group `g` as consumer `c`
/// in `mode` on `broker` while the master of `stream` stalls, and drops
/// every client connection of that master once the stall ends.
async fn with_lost_reply(
    cluster: &RedisCluster,
    broker: &RedisBroker,
    stream: &str,
    mode: ReadMode,
    count: usize,
) -> BrokerResult<ReadBatch> {
    let (reader, s) = (broker.clone(), stream.to_owned());
    let read = async move {
        reader
            .read(ReadRequest::new(&s, "g", "c", mode, count))
            .await
    };
    let master = cluster.master_of(cluster.slot_of(stream));
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", master.port)).unwrap();
    let settings = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut killer = client
        .get_multiplexed_async_connection_with_config(&settings)
        .await
        .unwrap();
    let mut staller = client
        .get_multiplexed_async_connection_with_config(&settings)
        .await
        .unwrap();
    let stall = tokio::spawn(async move {
        let busy = "local t0 = redis.call('TIME') \
                    repeat local t = redis.call('TIME') \
                    until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= 500000 \
                    return 1";
        // Killed with the others once it has run: its answer does not matter.
        let _: redis::RedisResult<Value> = redis::cmd("EVAL")
            .arg(busy)
            .arg(0)
            .query_async(&mut staller)
            .await;
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let read = tokio::spawn(read);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: Value = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query_async(&mut killer)
        .await
        .unwrap();
    stall.await.unwrap();
    read.await.unwrap()
}

/// The ids pending under `consumer`.
async fn pending_under(broker: &RedisBroker, stream: &str, consumer: &str) -> Vec<EntryId> {
    let pending = broker.pending(stream, "g", EntryId::ZERO, 100, None).await;
    pending
        .unwrap()
        .into_iter()
        .filter(|p| p.consumer.as_deref() == Some(consumer))
        .map(|p| p.id)
        .collect()
}

/// A fresh stream with a group and two entries.
async fn two_entries(broker: &RedisBroker, what: &str) -> (String, Vec<EntryId>) {
    let stream = format!("resend-{what}-{}", ruststream_redis::unique_token());
    broker
        .ensure_group(&stream, "g", StreamStart::Beginning)
        .await
        .unwrap();
    let sent = broker
        .publish_batch(
            &stream,
            vec![Message::new(b"a".to_vec()), Message::new(b"b".to_vec())],
        )
        .await
        .unwrap();
    // Connections and the slot map are up before the stall.
    pending_under(broker, &stream, "c").await;
    (stream, sent)
}

/// [`two_entries`], both read by `consumer` and left pending past
/// `min_idle`.
async fn two_idle_entries(
    broker: &RedisBroker,
    what: &str,
    consumer: &str,
    min_idle: Duration,
) -> (String, Vec<EntryId>) {
    let (stream, sent) = two_entries(broker, what).await;
    let read = ReadRequest::new(&stream, "g", consumer, ReadMode::New, 2);
    let read = broker.read(read).await.unwrap();
    assert_eq!(read.deliveries.len(), sent.len());
    tokio::time::sleep(min_idle + Duration::from_millis(100)).await;
    (stream, sent)
}

/// Checks one lost-reply read of `consumer` on `stream`: a read that
/// succeeded holds every entry the consumer now has pending (none is
/// stranded); one that found its mark leaves `marked` entries pending for
/// the re-check (what the attempts claimed). Returns whether the read
/// found its mark.
async fn check(
    broker: &RedisBroker,
    stream: &str,
    consumer: &str,
    read: BrokerResult<ReadBatch>,
    marked: usize,
) -> bool {
    let pending = pending_under(broker, stream, consumer).await;
    match read {
        Ok(batch) => {
            let handed: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
            assert_eq!(
                pending, handed,
                "the read succeeded, yet {consumer} holds entries it was never handed"
            );
            false
        }
        Err(error) => {
            let resent = error.to_string().contains("sent a read again");
            println!("the read failed ({error}); pending under {consumer}: {pending:?}");
            if resent {
                assert_eq!(pending.len(), marked, "{pending:?}");
            }
            resent
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_cluster_client_sends_twice_fails_and_nothing_is_stranded() {
    let cluster = RedisCluster::start("resend");
    let broker = RedisBroker::cluster(cluster.urls());

    // A `new` read: the plain-command pipeline.
    let mut noticed = 0;
    for _ in 0..TRIES {
        let (stream, _) = two_entries(&broker, "new").await;
        let read = with_lost_reply(&cluster, &broker, &stream, ReadMode::New, 1).await;
        // Both attempts' `XREADGROUP` ran: two entries pending.
        if check(&broker, &stream, "c", read, 2).await {
            noticed += 1;
            break;
        }
    }
    assert_eq!(noticed, 1, "no `new` read found its mark in {TRIES} tries");

    // A `reclaim` read: the read script. Both entries are pending under
    // `old`, idle longer than `min_idle`; the first attempt takes one, and
    // a second attempt (within `min_idle` of it) would take the other.
    let min_idle = Duration::from_millis(1_500);
    let mut noticed = 0;
    for _ in 0..TRIES {
        let (stream, _) = two_idle_entries(&broker, "reclaim", "old", min_idle).await;
        let mode = ReadMode::Reclaim { min_idle };
        let read = with_lost_reply(&cluster, &broker, &stream, mode, 1).await;
        // The script is atomic: the second attempt found the mark first
        // and changed nothing, so only the first attempt's entry is
        // pending.
        if check(&broker, &stream, "c", read, 1).await {
            noticed += 1;
            break;
        }
    }
    assert_eq!(
        noticed, 1,
        "no `reclaim` read found its mark in {TRIES} tries"
    );

    // A look at the own pending list with an idle bound (a restarted
    // process's recovery read): the first attempt claims the idle entries,
    // which makes them fresh, so a second attempt would find none idle
    // and hand out nothing. Found again, it reads them all, idle or not.
    let min_idle = Duration::from_millis(1_000);
    let mut sent_twice = 0;
    for _ in 0..TRIES {
        let (stream, sent) = two_idle_entries(&broker, "own", "c", min_idle).await;
        let mode = ReadMode::OwnPending {
            after: EntryId::ZERO,
            min_idle,
        };
        let read = with_lost_reply(&cluster, &broker, &stream, mode, 10).await;
        let Ok(batch) = read else {
            continue; // a failed read: the caller's re-check covers it
        };
        let handed: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
        assert_eq!(handed, sent, "the look handed out every own pending entry");
        // Delivered by the read before the kill, then by both attempts.
        let counts: Vec<u32> = broker
            .pending(&stream, "g", EntryId::ZERO, 10, None)
            .await
            .unwrap()
            .iter()
            .map(|p| p.times_delivered)
            .collect();
        if counts == [3, 3] {
            sent_twice += 1;
            break;
        }
    }
    assert_eq!(sent_twice, 1, "no look was sent twice in {TRIES} tries");
}
