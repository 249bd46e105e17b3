//! A long-running service on the memory broker stays within its retention:
//! 1,000,000 entries go through a subscriber, and the stream never holds
//! more than the bound (plus the eighth a trim waits for, and what the
//! group has not settled yet).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};

use ruststream::prelude::*;
use ruststream::{MemoryRetention, Message};

static HANDLED: AtomicU64 = AtomicU64::new(0);

#[subscriber(RedisStream::new("steady").group("g"), workers(8))]
async fn count(_payload: &[u8]) {
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

const BOUND: u64 = 10_000;
const TOTAL: u64 = 1_000_000;
const CHUNK: u64 = 20_000;

#[tokio::test(start_paused = true)]
async fn a_million_entries_through_a_service_keep_the_stream_within_the_bound() {
    let broker = ruststream::memory::with_retention(MemoryRetention {
        max_len: Some(BOUND),
        max_age: None,
    });
    let app = support::start_one_named("steady", broker.clone(), count).await;
    let mut most = 0;
    let mut sent = 0;
    while sent < TOTAL {
        let batch: Vec<Message> = (0..CHUNK)
            .map(|i| Message::new((sent + i).to_le_bytes().to_vec()))
            .collect();
        broker.publish_batch("steady", batch).await.unwrap();
        sent += CHUNK;
        // Let the service catch up, then look at what the stream holds.
        while HANDLED.load(Ordering::Relaxed) < sent {
            tokio::task::yield_now().await;
        }
        let held = broker.stream_info("steady").await.unwrap().unwrap().length;
        let group = broker.group_info("steady", "g").await.unwrap();
        assert!(
            held <= BOUND + BOUND / 8 + group.lag + group.pending + CHUNK,
            "{held} entries held after {sent}"
        );
        most = most.max(held);
    }
    assert!(most <= BOUND + BOUND / 8 + CHUNK, "at most {most}");
    let held = broker.stream_info("steady").await.unwrap().unwrap().length;
    assert!(held <= BOUND + BOUND / 8, "{held} held at the end");
    app.shutdown().await;
}
