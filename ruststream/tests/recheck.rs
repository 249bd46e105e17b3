//! The re-check after a failed read (a reply may have been lost), on the
//! memory broker and the paused clock: it lists the consumer's own pending
//! entries and hands back only those nothing here will settle, so it
//! neither counts deliveries of entries the lanes hold nor runs an entry
//! whose ack is on its way. Both tests failed on an earlier re-check that
//! re-read the own pending list.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{
    Broker, BrokerFuture, EntryId, ReadBatch, ReadMode, ReadRequest, Subscriber, forward_broker,
};
use support::{Job, advance, group_info, publish_jobs, refused, start_fresh_named};

/// A memory broker whose next `fail_new_reads` non-own-pending reads fail
/// (before anything is applied), whose reads all fail while `reads_down`,
/// and whose acks fail while `acks_down`.
#[derive(Clone, Default)]
struct Down {
    inner: MemoryBroker,
    fail_new_reads: Arc<AtomicUsize>,
    reads_down: Arc<AtomicBool>,
    acks_down: Arc<AtomicBool>,
}

impl Broker for Down {
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        Box::pin(async move {
            if self.reads_down.load(Ordering::SeqCst) {
                return Err(refused("down"));
            }
            if !matches!(request.mode, ReadMode::OwnPending { .. })
                && self
                    .fail_new_reads
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err(refused("down"));
            }
            self.inner.read(request).await
        })
    }

    fn ack<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        Box::pin(async move {
            if self.acks_down.load(Ordering::SeqCst) {
                return Err(refused("down"));
            }
            self.inner.ack(s, g, ids).await
        })
    }

    forward_broker!(
        inner: name, check_mode, publish, publish_batch, ensure_group, set_group_position,
        retry, dead_letter, redrive, discard, group_info, consumers, pending, dead_letters, range,
        stream_info, trim,
        extend_claim, count_deliveries,
    );
}

/// An app on a fresh [`Down`] broker running `subscriber`, with one job
/// published to `stream` and its handler (which counts its runs in `runs`)
/// started once.
async fn start_running_one(
    subscriber: impl Subscriber,
    stream: &str,
    runs: &AtomicUsize,
) -> (Down, ruststream::Running) {
    let (down, app) = start_fresh_named::<Down>("test", subscriber).await;
    publish_jobs(&down.inner, stream, [1]).await;
    advance(Duration::from_millis(100), 5).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    (down, app)
}

// ---- the re-check read dead-letters an entry the lanes hold -------------------------

static SLOW_RUNS: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("recheck-dead").group("g"), workers(1), prefetch(2), max_deliveries(2))]
async fn recheck_dead(_job: &Job) {
    SLOW_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// Two failed reads during one slow handler (with `max_deliveries(2)`)
/// count no delivery of the entry it runs: it is not dead-lettered while
/// it runs, and its ack lands.
#[tokio::test(start_paused = true)]
async fn a_recheck_does_not_dead_letter_an_entry_its_lane_still_runs() {
    let (down, app) = start_running_one(recheck_dead, "recheck-dead", &SLOW_RUNS).await;
    // Two failed reads, some seconds apart, while the handler runs.
    down.fail_new_reads.store(1, Ordering::SeqCst);
    advance(Duration::from_secs(1), 8).await;
    down.fail_new_reads.store(1, Ordering::SeqCst);
    advance(Duration::from_secs(1), 70).await;
    let info = group_info(&down.inner, "recheck-dead", "g").await;
    assert_eq!(SLOW_RUNS.load(Ordering::SeqCst), 1);
    assert_eq!(
        info.dead_letters, 0,
        "an entry delivered once and acked was dead-lettered by the re-check: {info:?}"
    );
    app.shutdown().await;
}

// ---- the re-check re-reads an entry whose ack has not landed ---------------------------

static OUTAGE_RUNS: AtomicUsize = AtomicUsize::new(0);

#[subscriber(RedisStream::new("recheck-dup").group("g"), workers(2), prefetch(4))]
async fn recheck_dup(_job: &Job) {
    OUTAGE_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(7)).await;
}

/// A broker outage: reads and acks fail. A read fails while a handler
/// runs; the handler finishes during the outage and its ack waits in the
/// settler. When reads come back before acks, the re-check waits for the
/// ack and does not run the entry again.
#[tokio::test(start_paused = true)]
async fn a_recheck_does_not_rerun_an_entry_whose_ack_is_on_its_way() {
    let (down, app) = start_running_one(recheck_dup, "recheck-dup", &OUTAGE_RUNS).await;
    // The outage starts: the blocking read in flight returns empty at ~5 s
    // and the next one fails; the handler ends at ~7 s, its ack fails.
    down.reads_down.store(true, Ordering::SeqCst);
    down.acks_down.store(true, Ordering::SeqCst);
    advance(Duration::from_millis(100), 90).await;
    // Reads come back first, acks a few seconds later.
    down.reads_down.store(false, Ordering::SeqCst);
    advance(Duration::from_millis(100), 40).await;
    down.acks_down.store(false, Ordering::SeqCst);
    advance(Duration::from_secs(1), 30).await;
    assert_eq!(
        OUTAGE_RUNS.load(Ordering::SeqCst),
        1,
        "a handled entry whose ack was on its way ran again"
    );
    app.shutdown().await;
}
