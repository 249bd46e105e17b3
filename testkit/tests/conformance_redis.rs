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

mod support;

use ruststream_redis::RedisBroker;
use ruststream_testkit::conformance::Target;

async fn redis_target() -> Target {
    let url = std::env::var("RUSTSTREAM_REDIS_URL");
    support::redis_target(
        RedisBroker::standalone(url.as_deref().unwrap_or("redis://127.0.0.1:6379")),
        "set RUSTSTREAM_REDIS_URL, or run .ci/run, which starts one",
    )
    .await
}

ruststream_testkit::conformance_suite!(real_time, redis_target);
