//! A `backoff(..)` that is not written as a policy: each mistake is
//! reported on its own token, and the app around the subscribers still
//! compiles.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payments").group("a"), backoff(exponentail(100ms, 2.0, max = 5min)))]
async fn misspelt(payment: &Payment) -> HandlerOutcome {
    if payment.id == 0 {
        return HandlerOutcome::retry();
    }
    HandlerOutcome::ack()
}

#[subscriber(RedisStream::new("payments").group("b"), backoff(linear(1s)))]
async fn unknown(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("c"), backoff(exponential(100ms)))]
async fn missing(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("d"), backoff(fixed, jitter))]
async fn no_delay(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("e"), backoff)]
async fn bare(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("f"), backoff(fixed(1s), jiter))]
async fn not_jitter(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("g"), backoff(exponential(100ms, 2.0, 5min)))]
async fn unnamed_max(_: &Payment) {}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(misspelt);
        b.include(unknown);
        b.include(missing);
        b.include(no_delay);
        b.include(bare);
        b.include(not_jitter);
        b.include(unnamed_max);
    })
}

#[allow(dead_code)]
async fn unit_test() {
    let outcome = misspelt::handler(&Payment { id: 0 }).await;
    assert_eq!(outcome, HandlerOutcome::retry());
}
