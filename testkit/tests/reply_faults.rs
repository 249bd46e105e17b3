//! A `reply` subscriber whose reply publish fails for a transient reason
//! (a failover, a lost connection): the reply is published again in place,
//! with backoff, and the handler does not run again for it; only a failure
//! lasting longer than the reply retry window (30 s) retries the entry. On
//! the memory broker behind a [`FaultyBroker`], on the paused clock.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Message, Running};
use ruststream_core::EntryId;
use ruststream_testkit::{CallKind, Fault, FaultyBroker};

#[derive(Debug, Deserialize)]
struct Job {
    n: u64,
}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "reply-faults-out")]
struct Answer {
    n: u64,
}

static BRIEF_RUNS: AtomicU64 = AtomicU64::new(0);

#[subscriber(RedisStream::new("reply-faults-brief").group("g"), reply)]
async fn brief(job: &Job) -> Answer {
    BRIEF_RUNS.fetch_add(1, Ordering::SeqCst);
    Answer { n: job.n }
}

static LONG_RUNS: AtomicU64 = AtomicU64::new(0);

#[subscriber(RedisStream::new("reply-faults-long").group("g"), reply)]
async fn long(job: &Job) -> Answer {
    LONG_RUNS.fetch_add(1, Ordering::SeqCst);
    Answer { n: job.n }
}

/// An app on `faulty` running `subscriber`, with one job published to
/// `stream` behind the faults' back.
async fn start_with_job(
    faulty: &Arc<FaultyBroker>,
    stream: &str,
    subscriber: impl ruststream::Subscriber,
) -> Running {
    let app = support::start_shared("reply-faults", faulty.clone(), subscriber).await;
    let job = Message::new(br#"{"n":7}"#.to_vec());
    faulty.inner().publish(stream, job).await.unwrap();
    app
}

async fn replies(faulty: &FaultyBroker) -> usize {
    let entries = faulty
        .inner()
        .range("reply-faults-out", EntryId::ZERO, EntryId::MAX, 100)
        .await
        .unwrap();
    entries.len()
}

/// Three failed publishes in a row: the fourth lands, the handler ran once,
/// and the entry is acked on its first delivery.
#[tokio::test(start_paused = true)]
async fn a_reply_failing_for_a_moment_is_published_again_without_running_the_handler_again() {
    let faulty = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 1));
    for nth in 1..=3 {
        faulty.script(CallKind::Publish, nth, Fault::Before);
    }
    let app = start_with_job(&faulty, "reply-faults-brief", brief).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        BRIEF_RUNS.load(Ordering::SeqCst),
        1,
        "the handler ran again"
    );
    assert_eq!(replies(&faulty).await, 1);
    assert_eq!(faulty.calls(CallKind::Publish), 4);
    let info = faulty.group_info("reply-faults-brief", "g").await.unwrap();
    assert_eq!((info.pending, info.lag), (0, 0), "{info:?}");
    app.shutdown().await;
}

/// Publishing fails for a minute: after the reply retry window the entry
/// is retried (the handler runs again), and once publishing works the
/// reply lands and the entry is acked; nothing is dead-lettered.
#[tokio::test(start_paused = true)]
async fn a_reply_failing_past_the_window_retries_its_entry_and_is_never_dead_lettered() {
    let faulty = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 1));
    faulty.outage(&[CallKind::Publish], Duration::from_secs(60));
    let app = start_with_job(&faulty, "reply-faults-long", long).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        LONG_RUNS.load(Ordering::SeqCst),
        1,
        "published again in place"
    );
    tokio::time::sleep(Duration::from_secs(100)).await;
    let runs = LONG_RUNS.load(Ordering::SeqCst);
    assert!(runs >= 2, "retried after the window: {runs} runs");
    assert!(runs <= 4, "no loop: {runs} runs in 2 minutes");
    assert_eq!(replies(&faulty).await, 1);
    let info = faulty.group_info("reply-faults-long", "g").await.unwrap();
    assert_eq!(
        (info.pending, info.lag, info.dead_letters),
        (0, 0, 0),
        "{info:?}"
    );
    app.shutdown().await;
}
