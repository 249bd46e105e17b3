//! Helpers shared by the runtime tests.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::{
    Broker, BrokerError, BrokerFuture, EntryId, MemoryBroker, PendingEntry, ReadBatch, ReadMode,
    ReadRequest, forward_broker,
};

/// Starts an app on `broker` with the subscribers `include` adds.
pub async fn start(
    broker: &MemoryBroker,
    include: impl FnOnce(&mut ruststream::BrokerScope<'_>),
) -> ruststream::Running {
    ruststream::RustStream::new(ruststream::AppInfo::new("test", "0"))
        .with_broker(broker.clone(), include)
        .start()
        .await
        .expect("app starts")
}

/// Lets every task that can run, run, without moving the paused clock.
pub async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

/// Yields until `cond` holds (failing after many rounds).
pub async fn until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    for _ in 0..2_000 {
        if cond().await {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("timed out waiting for: {what}");
}

pub async fn pending(broker: &dyn Broker, stream: &str, group: &str) -> Vec<PendingEntry> {
    broker
        .pending(stream, group, EntryId::ZERO, 1000, None)
        .await
        .unwrap()
}

pub async fn stream_len(broker: &dyn Broker, stream: &str) -> u64 {
    broker
        .stream_info(stream)
        .await
        .unwrap()
        .map_or(0, |i| i.length)
}

/// A memory broker that counts calls and can refuse claiming reads, for
/// tests of batching and start-up validation.
#[derive(Clone, Default)]
pub struct Spy {
    pub inner: MemoryBroker,
    pub ack_calls: Arc<AtomicUsize>,
    pub read_calls: Arc<AtomicUsize>,
    pub refuse_claiming: Arc<AtomicBool>,
}

impl Spy {
    pub fn acks(&self) -> usize {
        self.ack_calls.load(Ordering::SeqCst)
    }
}

impl Broker for Spy {
    fn name(&self) -> &'static str {
        "spy"
    }
    fn check_mode(&self, mode: ReadMode) -> BrokerFuture<'_, ()> {
        let refuse = self.refuse_claiming.load(Ordering::SeqCst)
            && matches!(mode, ReadMode::Claiming { .. });
        Box::pin(async move {
            if refuse {
                return Err(BrokerError::Unsupported {
                    broker: "spy",
                    detail: "claiming reads need server 8.4, this one is 7.0".into(),
                });
            }
            Ok(())
        })
    }
    fn read<'a>(&'a self, r: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        self.read_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.read(r)
    }
    fn ack<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        self.ack_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.ack(s, g, ids)
    }

    // Everything else passes through unchanged.
    forward_broker!(
        inner: publish_batch, ensure_group, set_group_position, retry, dead_letter, redrive,
        discard, group_info, consumers, pending, dead_letters, range, stream_info, trim,
        extend_claim,
    );
}

pub const SECOND: Duration = Duration::from_secs(1);
