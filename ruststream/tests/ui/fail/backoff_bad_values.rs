//! A `backoff(..)` policy with values its rules refuse: each is reported
//! on the argument that breaks the rule, and the app still compiles.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payments").group("a"), backoff(exponential(100ms, 0.5, max = 5min)))]
async fn shrinking(payment: &Payment) -> HandlerOutcome {
    if payment.id == 0 {
        return HandlerOutcome::retry();
    }
    HandlerOutcome::ack()
}

#[subscriber(RedisStream::new("payments").group("b"), backoff(fixed(0ms)))]
async fn zero(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("c"), backoff(fixed(-1s), jitter))]
async fn negative(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("d"), backoff(exponential(1min, 2.0, max = 30s)))]
async fn capped_below_base(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("e"), backoff(exponential(100, 2.0, max = 5days)))]
async fn units(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("f"), backoff(fixed(Duration::from_secs(1))))]
async fn not_a_literal(_: &Payment) {}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(shrinking);
        b.include(zero);
        b.include(negative);
        b.include(capped_below_base);
        b.include(units);
        b.include(not_a_literal);
    })
}

#[allow(dead_code)]
async fn unit_test() {
    let outcome = shrinking::handler(&Payment { id: 0 }).await;
    assert_eq!(outcome, HandlerOutcome::retry());
}
