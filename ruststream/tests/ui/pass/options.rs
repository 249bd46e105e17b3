//! Every `#[subscriber]` option, with literals and with expressions.

use ruststream::prelude::*;
use ruststream::{Subscriber, Subscription};

#[derive(Debug, Deserialize)]
struct Order {}

const WORKERS: usize = 4;
const MAX_DELIVERIES: u32 = 10;

#[subscriber(RedisStream::new("orders").group("defaults"))]
async fn defaults(_: &Order) {}

#[subscriber(RedisStream::new("orders").group("workers"), workers(8))]
async fn workers(_: &Order) {}

#[subscriber(RedisStream::new("orders").group("by-key"), workers(8, by_key))]
async fn by_key(_: &Order) {}

#[subscriber(RedisStream::new("orders").group("bounded"), max_deliveries(5))]
async fn bounded(_: &Order) {}

#[subscriber(RedisStream::new("orders").group("prefetch"), workers(2), prefetch(2))]
async fn prefetch(_: &Order) {}

#[subscriber(
    RedisStream::new("orders").group("everything"),
    prefetch(64),
    max_deliveries(3),
    reply,
    workers(16, by_key),
)]
async fn everything(_: &Order) -> Echo {
    Echo {}
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "echoes")]
struct Echo {}

// Counts may be any expression; the runtime checks them at start-up.
#[subscriber(
    RedisStream::new("orders").group("computed"),
    workers(WORKERS * 2, by_key),
    max_deliveries(MAX_DELIVERIES),
    prefetch(std::thread::available_parallelism().map_or(1, |n| n.get()) * 64)
)]
async fn computed(_: &Order) {}

fn options(subscription: Subscription) -> (usize, bool, Option<u32>, Option<usize>) {
    (
        subscription.workers,
        subscription.by_key,
        subscription.max_deliveries,
        subscription.prefetch,
    )
}

fn main() {
    assert_eq!(options(defaults.subscription()), (1, false, None, None));
    assert_eq!(options(workers.subscription()), (8, false, None, None));
    assert_eq!(options(by_key.subscription()), (8, true, None, None));
    assert_eq!(options(bounded.subscription()), (1, false, Some(5), None));
    assert_eq!(options(prefetch.subscription()), (2, false, None, Some(2)));
    assert_eq!(
        options(everything.subscription()),
        (16, true, Some(3), Some(64))
    );
    assert!(everything.replies());
    assert!(!defaults.replies());
    // (A local named like a subscriber in scope would be a pattern
    // matching its unit struct, hence `n_workers` and not `workers`.)
    let (n_workers, keyed, max, read_ahead) = options(computed.subscription());
    assert_eq!((n_workers, keyed, max), (8, true, Some(10)));
    assert!(read_ahead.is_some_and(|p| p >= 64));
}
