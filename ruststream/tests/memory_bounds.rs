//! Memory follows the working set: a subscription whose handlers are stuck
//! keeps refreshing the claims on its read-ahead while no read runs, for
//! hours, and the process does not grow.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use support::{advance, group_info, start_fresh};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "jobs")]
struct Job {
    n: u64,
}

static STUCK: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static STARTED: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::claiming("wedged", Duration::from_secs(30)).group("g"), workers(2000), prefetch(2000))]
async fn wedged(_job: &Job) {
    STARTED.fetch_add(1, Ordering::SeqCst);
    let _ = STUCK.acquire().await.map(|p| p.forget());
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::test(start_paused = true)]
async fn a_wedged_subscription_does_not_grow_while_it_refreshes_its_claims() {
    let (broker, app) = start_fresh(wedged).await;
    let publisher = Publisher::new(Arc::new(broker.clone()));
    for n in 0..2_000 {
        publisher.publish(&Job { n }).to("wedged").await.unwrap();
    }
    advance(Duration::from_millis(10), 1_000).await;
    assert!(STARTED.load(Ordering::SeqCst) >= 1_000, "handlers run");
    advance(Duration::from_secs(5), 10).await;
    let held = group_info(&broker, "wedged", "g").await.pending;
    assert!(held >= 1_000, "{held} held");
    let before = rss_bytes();
    // About 3.5 hours of keep-alive ticks (every 5 s).
    advance(Duration::from_secs(5), 2_500).await;
    let after = rss_bytes();
    assert_eq!(group_info(&broker, "wedged", "g").await.pending, held);
    let grown = after.saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "RSS grew by {} MB while {held} entries were held and nothing else happened",
        grown >> 20
    );
    drop(app);
}
