//! A `backoff(..)` that is not written as a policy: each mistake is
//! reported on its own token, and the app around the subscribers still
//! compiles.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("a"), backoff(exponentail(100ms, 2.0, max = 5min)))]
async fn misspelt(_: &Payment) -> HandlerOutcome {
    HandlerOutcome::retry()
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

app_including!(misspelt, unknown, missing, no_delay, bare, not_jitter, unnamed_max);

#[allow(dead_code)]
async fn unit_test() {
    let outcome = misspelt::handler(&Payment {}).await;
    assert_eq!(outcome, HandlerOutcome::retry());
}
