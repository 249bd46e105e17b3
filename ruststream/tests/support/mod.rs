//! Helpers shared by the runtime tests.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::prelude::{Deserialize, Serialize};
use ruststream::{
    Broker, BrokerError, BrokerFuture, DeadLetter, EntryId, GroupInfo, MemoryBroker, Message,
    Outgoing, PARTITION_KEY_HEADER, PendingEntry, Publisher, ReadBatch, ReadMode, ReadRequest,
    Subscriber, forward_broker,
};

/// The message most runtime tests publish: a number.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "jobs")]
pub struct Job {
    pub n: u64,
}

/// Publishes a `Job` for each of `ns` to `stream`, in order.
pub async fn publish_jobs(broker: &MemoryBroker, stream: &str, ns: impl IntoIterator<Item = u64>) {
    let publisher = Publisher::new(Arc::new(broker.clone()));
    for n in ns {
        publisher.publish(&Job { n }).to(stream).await.unwrap();
    }
}

/// Publishes a `Job` for each `(n, key)` pair to `stream`, in order, the
/// key as the partition key (none for "").
pub async fn publish_keyed(broker: &MemoryBroker, stream: &str, jobs: &[(u64, &str)]) {
    for (n, key) in jobs {
        let message = Message::new(serde_json::to_vec(&Job { n: *n }).unwrap());
        let message = if key.is_empty() {
            message
        } else {
            message.with_header(PARTITION_KEY_HEADER, *key)
        };
        broker.publish(stream, message).await.unwrap();
    }
}

/// Makes group "g" on `stream` from its beginning, then publishes a `Job`
/// for each of `ns` to it, in order.
pub async fn group_with_jobs(
    broker: &MemoryBroker,
    stream: &str,
    ns: impl IntoIterator<Item = u64>,
) {
    broker
        .ensure_group(stream, "g", ruststream::StreamStart::Beginning)
        .await
        .unwrap();
    publish_jobs(broker, stream, ns).await;
}

/// Reads up to `count` new entries of `stream` for group "g" as `consumer`
/// (as another process would); their ids.
pub async fn read_new_as(
    broker: &dyn Broker,
    stream: &str,
    consumer: &str,
    count: usize,
) -> Vec<EntryId> {
    let request = ReadRequest::new(stream, "g", consumer, ReadMode::New, count);
    let batch = broker.read(request).await.unwrap();
    batch.deliveries.iter().map(|d| d.id()).collect()
}

/// A twin process reading `stream` as `consumer` of `group`: keeps its
/// claims on `ids` fresh every 5 s, as a subscription does, until aborted.
pub fn keep_claims_fresh(
    broker: MemoryBroker,
    (stream, group, consumer): (&'static str, &'static str, &'static str),
    ids: Vec<EntryId>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            broker
                .extend_claim(stream, group, consumer, &ids)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    })
}

/// The error a test broker named `broker` injects for a call it refuses.
pub fn refused(broker: &'static str) -> BrokerError {
    BrokerError::Connection {
        broker,
        detail: "injected: connection refused".into(),
    }
}

/// Starts an app called `name` on `broker` with the subscribers `include`
/// adds.
pub async fn start_named<B: Broker>(
    name: &str,
    broker: B,
    include: impl FnOnce(&mut ruststream::BrokerScope<'_>),
) -> ruststream::Running {
    ruststream::RustStream::new(ruststream::AppInfo::new(name, "0"))
        .with_broker(broker, include)
        .start()
        .await
        .expect("app starts")
}

/// Starts an app on `broker` with the subscribers `include` adds.
pub async fn start(
    broker: &MemoryBroker,
    include: impl FnOnce(&mut ruststream::BrokerScope<'_>),
) -> ruststream::Running {
    start_named("test", broker.clone(), include).await
}

/// Starts an app on `broker` with the one subscriber `subscriber`.
pub async fn start_one(broker: &MemoryBroker, subscriber: impl Subscriber) -> ruststream::Running {
    start_one_named("test", broker.clone(), subscriber).await
}

/// A fresh memory broker and an app running on it with the one subscriber
/// `subscriber`.
pub async fn start_fresh(subscriber: impl Subscriber) -> (MemoryBroker, ruststream::Running) {
    start_fresh_named("test", subscriber).await
}

/// A fresh `B` (a test broker: with its switches off) and an app called
/// `name` running on it with the one subscriber `subscriber`.
pub async fn start_fresh_named<B: Broker + Clone + Default>(
    name: &str,
    subscriber: impl Subscriber,
) -> (B, ruststream::Running) {
    let broker = B::default();
    let app = start_one_named(name, broker.clone(), subscriber).await;
    (broker, app)
}

/// Starts an app called `name` on `broker` with the one subscriber
/// `subscriber`.
pub async fn start_one_named<B: Broker>(
    name: &str,
    broker: B,
    subscriber: impl Subscriber,
) -> ruststream::Running {
    start_named(name, broker, |b| {
        b.include(subscriber);
    })
    .await
}

/// Starts an app called `name` on `broker` with the two subscribers `first`
/// and `second`.
pub async fn start_two_named<B: Broker>(
    name: &str,
    broker: B,
    first: impl Subscriber,
    second: impl Subscriber,
) -> ruststream::Running {
    start_named(name, broker, |b| {
        b.include(first);
        b.include(second);
    })
    .await
}

/// Starts an app on `broker` with the two subscribers `first` and `second`.
pub async fn start_two(
    broker: &MemoryBroker,
    first: impl Subscriber,
    second: impl Subscriber,
) -> ruststream::Running {
    start_two_named("test", broker.clone(), first, second).await
}

/// Lets every task that can run, run, without moving the paused clock.
pub async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

/// Moves the paused clock on by `step`, `times` times, letting every task
/// that can run, run after each step.
pub async fn advance(step: Duration, times: u32) {
    for _ in 0..times {
        tokio::time::advance(step).await;
        settle().await;
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

/// Checks that the next delivery lands at `due` from now, not a
/// millisecond sooner: moves the paused clock on to a millisecond short of
/// `due`, checks that `count()` is still `n` (`why` if not), then moves it
/// the last millisecond and waits until `count()` is `n + 1`.
pub async fn next_delivery_at(due: Duration, n: usize, count: impl Fn() -> usize, why: &str) {
    advance(due - Duration::from_millis(1), 1).await;
    assert_eq!(count(), n, "{why}");
    tokio::time::advance(Duration::from_millis(1)).await;
    until("the next delivery", async || count() == n + 1).await;
}

/// Yields until `group` on `stream` holds nothing pending.
pub async fn until_acked(what: &str, broker: &dyn Broker, stream: &str, group: &str) {
    until(what, async || {
        pending(broker, stream, group).await.is_empty()
    })
    .await;
}

/// Yields until `group` on `stream` counts `n` dead letters.
pub async fn until_dead(what: &str, broker: &dyn Broker, stream: &str, group: &str, n: u64) {
    until(what, async || {
        group_info(broker, stream, group).await.dead_letters == n
    })
    .await;
}

/// Yields until `group` on `stream` counts `n` entries pending.
pub async fn until_pending(what: &str, broker: &dyn Broker, stream: &str, group: &str, n: u64) {
    until(what, async || {
        group_info(broker, stream, group).await.pending == n
    })
    .await;
}

pub async fn pending(broker: &dyn Broker, stream: &str, group: &str) -> Vec<PendingEntry> {
    broker
        .pending(stream, group, EntryId::ZERO, 1000, None)
        .await
        .unwrap()
}

/// The first `count` dead letters of `group` on `stream`.
pub async fn dead_letters(
    broker: &dyn Broker,
    stream: &str,
    group: &str,
    count: usize,
) -> Vec<DeadLetter> {
    broker
        .dead_letters(stream, group, EntryId::ZERO, count)
        .await
        .unwrap()
}

pub async fn group_info(broker: &dyn Broker, stream: &str, group: &str) -> GroupInfo {
    broker.group_info(stream, group).await.unwrap()
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
        extend_claim, count_deliveries,
    );
}

pub const SECOND: Duration = Duration::from_secs(1);
