//! Helpers shared by the runtime tests.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::{
    Broker, BrokerError, BrokerFuture, ConsumerInfo, DeadLetter, Entry, EntryId, GroupInfo,
    MemoryBroker, Message, PendingEntry, ReadBatch, ReadMode, ReadRequest, Retry, StreamInfo,
    StreamStart, Trim,
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
    fn publish_batch<'a>(&'a self, s: &'a str, m: Vec<Message>) -> BrokerFuture<'a, Vec<EntryId>> {
        self.inner.publish_batch(s, m)
    }
    fn ensure_group<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        st: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        self.inner.ensure_group(s, g, st)
    }
    fn set_group_position<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        st: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        self.inner.set_group_position(s, g, st)
    }
    fn read<'a>(&'a self, r: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        self.read_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.read(r)
    }
    fn ack<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        self.ack_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.ack(s, g, ids)
    }
    fn retry<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        self.inner.retry(s, g, ids, how)
    }
    fn dead_letter<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        ids: &'a [EntryId],
        r: &'a str,
    ) -> BrokerFuture<'a, u64> {
        self.inner.dead_letter(s, g, ids, r)
    }
    fn redrive<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        self.inner.redrive(s, g, ids)
    }
    fn discard<'a>(&'a self, s: &'a str, g: &'a str, ids: &'a [EntryId]) -> BrokerFuture<'a, u64> {
        self.inner.discard(s, g, ids)
    }
    fn group_info<'a>(&'a self, s: &'a str, g: &'a str) -> BrokerFuture<'a, GroupInfo> {
        self.inner.group_info(s, g)
    }
    fn consumers<'a>(&'a self, s: &'a str, g: &'a str) -> BrokerFuture<'a, Vec<ConsumerInfo>> {
        self.inner.consumers(s, g)
    }
    fn pending<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        f: EntryId,
        c: usize,
        o: Option<&'a str>,
    ) -> BrokerFuture<'a, Vec<PendingEntry>> {
        self.inner.pending(s, g, f, c, o)
    }
    fn dead_letters<'a>(
        &'a self,
        s: &'a str,
        g: &'a str,
        f: EntryId,
        c: usize,
    ) -> BrokerFuture<'a, Vec<DeadLetter>> {
        self.inner.dead_letters(s, g, f, c)
    }
    fn range<'a>(
        &'a self,
        s: &'a str,
        f: EntryId,
        t: EntryId,
        c: usize,
    ) -> BrokerFuture<'a, Vec<Entry>> {
        self.inner.range(s, f, t, c)
    }
    fn stream_info<'a>(&'a self, s: &'a str) -> BrokerFuture<'a, Option<StreamInfo>> {
        self.inner.stream_info(s)
    }
    fn trim<'a>(&'a self, s: &'a str, t: Trim) -> BrokerFuture<'a, u64> {
        self.inner.trim(s, t)
    }
}

pub const SECOND: Duration = Duration::from_secs(1);
