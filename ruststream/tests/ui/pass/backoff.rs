//! `backoff(..)`: both policies, with and without jitter, and every unit.

use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{BackoffCurve, BackoffPolicy, Subscriber};

#[derive(Debug, Deserialize)]
struct Order {}

#[subscriber(RedisStream::new("orders").group("fixed"), backoff(fixed(1s)))]
async fn fixed(_: &Order) {}

#[subscriber(
    RedisStream::claiming("orders", Duration::from_secs(30)).group("exponential"),
    backoff(exponential(100ms, 2.0, max = 5min), jitter),
    max_deliveries(10)
)]
async fn exponential(_: &Order) {}

#[subscriber(RedisStream::new("orders").group("units"), backoff(exponential(2min, 3, max = 1h)))]
async fn units(_: &Order) {}

fn main() {
    assert_eq!(
        fixed.subscription().backoff,
        Some(BackoffPolicy::fixed(Duration::from_secs(1)).unwrap())
    );
    let policy = exponential.subscription().backoff.unwrap();
    assert!(policy.has_jitter());
    assert_eq!(
        policy.curve(),
        BackoffCurve::Exponential {
            base: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_secs(300),
        }
    );
    let policy = units.subscription().backoff.unwrap();
    assert!(!policy.has_jitter());
    assert_eq!(policy.ceiling(1), Duration::from_secs(360));
    assert_eq!(policy.ceiling(9), Duration::from_secs(3600));
}
