//! A `new` read waiting on Redis whose answer comes back long after the
//! read gave up (a network that holds the server's answers back for a
//! while). The read's `XREADGROUP` was queued behind its wait (one round
//! trip per entry that finds the reader idle), so it claimed the entry
//! published meanwhile for a caller that is no longer there. The broker
//! must hand that entry back, owed at once, rather than leave it pending
//! under the consumer: it awaits the late answer for minutes, not for the
//! read's own time. The server is a private `redis-server` (its own port),
//! reached through a proxy that holds its answers back; the publisher
//! connects to it directly.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use ruststream::{
    Broker, EntryId, Message, ReadMode, ReadRequest, RedisBroker, RedisConfig, StreamStart,
};
use support::proxy::Proxy;
use support::redis_server::{Persistence, RedisServer};
use support::wait_until;

/// How long the read waits at most.
const BLOCK: Duration = Duration::from_secs(1);

/// How long the answers are held after the read gave up: longer than the
/// read's wait plus its reply time (1 + 0.3 s), twice over.
const HELD: Duration = Duration::from_secs(3);

/// A private server, a reader that reaches it through a proxy that can
/// hold its answers (replies within 300 ms, or a timeout), and a publisher
/// that connects directly; group `group` of `stream` made, at new entries.
struct Stalled {
    server: RedisServer,
    proxy: Proxy,
    reader: RedisBroker,
    publisher: RedisBroker,
}

impl Stalled {
    async fn start(what: &str, stream: &str, group: &str) -> Stalled {
        let server = RedisServer::start(what, Persistence::None);
        let proxy = Proxy::to(server.port());
        let config = RedisConfig {
            response_timeout: Duration::from_millis(300),
            ..RedisConfig::default()
        };
        let reader = RedisBroker::standalone_with(proxy.url(), config);
        let publisher = RedisBroker::standalone(server.url());
        publisher
            .ensure_group(stream, group, StreamStart::New)
            .await
            .unwrap();
        Stalled {
            server,
            proxy,
            reader,
            publisher,
        }
    }

    /// Sends `request`, a `new` read that finds nothing and waits (for
    /// [`BLOCK`]), waits until the server has it blocked in `XREAD`, then
    /// holds the server's answers back.
    async fn wait_then_hold(
        &self,
        request: ReadRequest<'static>,
    ) -> tokio::task::JoinHandle<ruststream::BrokerResult<ruststream::ReadBatch>> {
        let waiting = self.reader.clone();
        let read = tokio::spawn(async move { waiting.read(request.block(BLOCK)).await });
        let port = self.server.port();
        let waits = wait_until(Duration::from_secs(5), async || blocked_in_xread(port)).await;
        assert!(waits, "the read never waited");
        self.proxy.hold();
        read
    }
}

/// Up to ten new entries of `stream` for `group`, read as `consumer`.
async fn read_new(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    consumer: &str,
) -> ruststream::ReadBatch {
    let request = ReadRequest::new(stream, group, consumer, ReadMode::New, 10);
    broker.read(request).await.unwrap()
}

/// Publishes an empty JSON object to `stream`; its id.
async fn publish_one(broker: &RedisBroker, stream: &str) -> EntryId {
    broker
        .publish(stream, Message::new(b"{}".to_vec()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_a_read_claims_after_its_caller_gave_up_is_handed_back() {
    let (s, g) = ("held", "g");
    let stalled = Stalled::start("held-answers", s, g).await;
    let Stalled {
        proxy, publisher, ..
    } = &stalled;

    // The read finds nothing and waits, its read queued behind the wait.
    let read = stalled
        .wait_then_hold(ReadRequest::new(s, g, "gone", ReadMode::New, 10))
        .await;
    // The entry wakes the wait at once, and the queued read claims it; the
    // answer is held back until long after the read gave up.
    publish_one(publisher, s).await;
    let gave_up = read.await.unwrap();
    assert!(gave_up.is_err(), "no answer came in time: {gave_up:?}");
    let claimed = publisher
        .pending(s, g, EntryId::ZERO, 10, None)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].consumer.as_deref(), Some("gone"), "{claimed:?}");
    tokio::time::sleep(HELD).await;
    proxy.release();

    // What the read claimed comes back, owed at once (under no consumer).
    let handed_back = wait_until(Duration::from_secs(10), async || {
        let listed = publisher.pending(s, g, EntryId::ZERO, 10, None).await;
        listed.is_ok_and(|listed| listed.len() == 1 && listed[0].consumer.is_none())
    })
    .await;
    assert!(
        handed_back,
        "not handed back: {:?}",
        publisher.pending(s, g, EntryId::ZERO, 10, None).await
    );
    let batch = read_new(publisher, s, g, "other").await;
    assert_eq!(
        batch.deliveries.len(),
        1,
        "another consumer reads it at once"
    );
    assert_eq!(batch.deliveries[0].delivery_count, 0, "as if never read");
}

/// The read gave up, and before its late answer came, the runtime's look
/// at its pending list (a failed read's re-check) handed the entry back and
/// read it again: the consumer runs it now. The late answer's hand-back
/// must leave that delivery alone, not make the entry owed again (and so
/// hand it to another consumer while this one runs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_back_leaves_an_entry_delivered_again_since() {
    let (s, g) = ("late", "g");
    let stalled = Stalled::start("late-hand-back", s, g).await;
    let Stalled {
        proxy,
        reader,
        publisher,
        ..
    } = &stalled;
    // The reader's shared connection, opened now, keeps answering.
    assert!(
        reader
            .pending(s, g, EntryId::ZERO, 10, None)
            .await
            .unwrap()
            .is_empty()
    );
    proxy.hold_only_new_connections();

    let read = stalled
        .wait_then_hold(ReadRequest::new(s, g, "c", ReadMode::New, 10))
        .await;
    let e = publish_one(publisher, s).await;
    assert!(read.await.unwrap().is_err(), "the read gave up");

    // The re-check: the entry is pending under "c"; handed back, read again.
    let listed = reader
        .pending(s, g, EntryId::ZERO, 10, Some("c"))
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|p| p.id).collect::<Vec<_>>(), [e]);
    reader
        .retry(s, g, &[e], ruststream::Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let again = read_new(reader, s, g, "c").await;
    assert_eq!(
        again.deliveries.iter().map(|d| d.id()).collect::<Vec<_>>(),
        [e]
    );

    // The late answer comes; its hand-back runs.
    proxy.release();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let other = read_new(publisher, s, g, "d").await;
    assert!(
        other.deliveries.is_empty(),
        "while c runs {e}, d is handed it too: {:?}",
        publisher.pending(s, g, EntryId::ZERO, 10, None).await
    );
    let pending = publisher
        .pending(s, g, EntryId::ZERO, 10, None)
        .await
        .unwrap();
    assert_eq!(pending[0].consumer.as_deref(), Some("c"), "{pending:?}");
}

/// Whether a client of the server on `port` waits in `XREAD` (`CLIENT
/// LIST`: flag `b`, blocked).
fn blocked_in_xread(port: u16) -> bool {
    let listed = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "CLIENT", "LIST"])
        .output()
        .expect("redis-cli can be run");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|client| client.contains(" flags=b ") && client.contains(" cmd=xread "))
}
