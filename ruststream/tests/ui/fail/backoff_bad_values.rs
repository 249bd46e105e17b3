//! A `backoff(..)` policy with values its rules refuse: each is reported
//! on the argument that breaks the rule, and the app still compiles.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("a"), backoff(exponential(100ms, 0.5, max = 5min)))]
async fn shrinking(_: &Payment) -> HandlerOutcome {
    HandlerOutcome::retry()
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

app_including!(shrinking, zero, negative, capped_below_base, units, not_a_literal);

#[allow(dead_code)]
async fn unit_test() {
    let outcome = shrinking::handler(&Payment {}).await;
    assert_eq!(outcome, HandlerOutcome::retry());
}
