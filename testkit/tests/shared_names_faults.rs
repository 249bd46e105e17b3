//! A subscription that shares its consumer name with a live process keeps
//! reading through a read outage: the re-check after the failed read and
//! the look at the twin's entries both run, reads resume, and the twin's
//! entries are left to it. (A look
//! that fell due while a re-check waited once stopped reading for good.)

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Message, ReadMode, ReadRequest};
use ruststream_testkit::{CallKind, FaultyBroker};

static HANDLED: AtomicU64 = AtomicU64::new(0);
static TWINS: AtomicU64 = AtomicU64::new(0);

#[subscriber(RedisStream::new("twin-outage").group("g").consumer("shared"))]
async fn work(payload: &[u8]) {
    if payload.first().is_some_and(|n| *n >= 10) {
        HANDLED.fetch_add(1, Ordering::Relaxed);
    } else {
        TWINS.fetch_add(1, Ordering::Relaxed);
    }
}

#[tokio::test(start_paused = true)]
async fn reads_resume_after_an_outage_while_a_twin_holds_entries() {
    let inner = MemoryBroker::new();
    inner
        .ensure_group("twin-outage", "g", StreamStart::Beginning)
        .await
        .unwrap();
    for n in 0..3u8 {
        inner
            .publish("twin-outage", Message::new(vec![n]))
            .await
            .unwrap();
    }
    // The twin holds all three and keeps them fresh.
    let held = inner
        .read(ReadRequest::new(
            "twin-outage",
            "g",
            "shared",
            ReadMode::New,
            3,
        ))
        .await
        .unwrap();
    let ids: Vec<_> = held.deliveries.iter().map(|d| d.id()).collect();
    let twin = {
        let inner = inner.clone();
        tokio::spawn(async move {
            loop {
                inner
                    .extend_claim("twin-outage", "g", "shared", &ids)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };
    let faulty = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 7));
    let app = support::start_shared("twin-outage", faulty.clone(), work).await;
    // The look at the twin's entries falls due at 15 s, inside the outage.
    tokio::time::sleep(Duration::from_secs(12)).await;
    faulty.outage(&[CallKind::Read], Duration::from_secs(8));
    tokio::time::sleep(Duration::from_secs(18)).await;
    for n in 10..15u8 {
        inner
            .publish("twin-outage", Message::new(vec![n]))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(HANDLED.load(Ordering::Relaxed), 5, "the new entries");
    // The re-check after the failed read leaves the twin's fresh entries
    // alone: it knows another process uses the name.
    assert_eq!(TWINS.load(Ordering::Relaxed), 0, "the twin's entries");
    twin.abort();
    app.shutdown().await;
}
