//! What a stop leaves behind: a read in flight when a `new` subscription
//! stops is abandoned, and whatever the broker handed out by it is handed
//! back, so another consumer gets it now rather than after a restart.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{BrokerFuture, ReadBatch, ReadMode, ReadRequest, forward_broker};

#[derive(Debug, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "jobs")]
struct Job {
    n: u64,
}

/// A memory broker whose reads, once `stall` is set, are applied and then
/// never answer: a reply still on its way when the app stops.
#[derive(Clone, Default)]
struct Stalling {
    inner: MemoryBroker,
    stall: Arc<AtomicBool>,
}

impl Broker for Stalling {
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        Box::pin(async move {
            let batch = self.inner.read(request).await?;
            if self.stall.load(Ordering::SeqCst) && !batch.is_empty() {
                std::future::pending::<()>().await;
            }
            Ok(batch)
        })
    }

    forward_broker!(
        inner: name, check_mode, publish, publish_batch, ensure_group, set_group_position, ack,
        retry, dead_letter, extend_claim, count_deliveries, redrive, discard, group_info, consumers, pending,
        dead_letters, range, stream_info, trim,
    );
}

#[subscriber(RedisStream::new("abandoned").group("g").consumer("leaving"))]
async fn abandoned(_job: &Job) {}

#[tokio::test(start_paused = true)]
async fn entries_of_a_read_abandoned_at_shutdown_are_handed_back() {
    let broker = Stalling::default();
    let app = support::start_one_named("test", broker.clone(), abandoned).await;
    broker.stall.store(true, Ordering::SeqCst);
    let publisher = Publisher::new(Arc::new(broker.inner.clone()));
    for n in 0..3 {
        publisher.publish(&Job { n }).to("abandoned").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let held = broker
        .inner
        .group_info("abandoned", "g")
        .await
        .unwrap()
        .pending;
    assert!(held > 0, "the stalled read handed entries out");
    app.shutdown_within(Duration::from_secs(1)).await;
    // Owed again at once: another consumer gets them without waiting.
    let batch = broker
        .inner
        .read(ReadRequest::new(
            "abandoned",
            "g",
            "next",
            ReadMode::New,
            10,
        ))
        .await
        .unwrap();
    assert_eq!(
        batch.deliveries.len(),
        3,
        "every entry is there for the next consumer"
    );
}
