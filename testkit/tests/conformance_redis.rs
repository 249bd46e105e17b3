//! The conformance suite against a real Redis server, in real time.
//!
//! The server is the one at `RUSTSTREAM_REDIS_URL`, or
//! `redis://127.0.0.1:6379` when that is unset (CI sets it, and `.ci/run`
//! starts a server if none runs). These tests never skip: without a server
//! they fail, saying so.
//!
//! Every test gets its own key prefix (`rs-test:<random>:`), so tests run in
//! parallel and runs never see each other's streams. Where Redis genuinely
//! differs from the local brokers the target says so: claiming reads need
//! Redis 8.4 (older servers run the suite's reclaim-then-new reads instead),
//! and trimming deletes entries a group still has pending.

use std::sync::Arc;

use ruststream_core::{Broker, ReadMode};
use ruststream_redis::RedisBroker;
use ruststream_testkit::conformance::Target;

fn url() -> String {
    std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

fn prefix() -> String {
    format!("rs-test:{}:", ruststream_redis::unique_token())
}

async fn redis_target() -> Target {
    let broker = RedisBroker::standalone(url());
    let claiming = broker
        .check_mode(ReadMode::Claiming {
            min_idle: std::time::Duration::from_secs(1),
        })
        .await;
    let target = Target::real_time(Arc::new(broker), prefix()).trim_drops_pending();
    match claiming {
        Ok(()) => target,
        Err(ruststream_core::BrokerError::Unsupported { .. }) => target.without_claiming_reads(),
        Err(e) => panic!(
            "no Redis server to test against at {} (set RUSTSTREAM_REDIS_URL, or run .ci/run, which starts one): {e}",
            url()
        ),
    }
}

ruststream_testkit::conformance_suite!(real_time, redis_target);
