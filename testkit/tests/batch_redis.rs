//! Batch subscribers (`docs/batches.md`) on a real Redis server, in real
//! time: the scenarios every broker runs (`batch_scenarios`).
//!
//! The server is the one at `RUSTSTREAM_REDIS_URL`, or
//! `redis://127.0.0.1:6379` when that is unset. Streams carry a random
//! prefix per run (`rs-test:<random>:`).

mod batch_scenarios;
mod support;

use ruststream_redis::RedisBroker;

fn broker() -> RedisBroker {
    let url = std::env::var("RUSTSTREAM_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    batch_scenarios::set_prefix(format!("rs-test:{}:", ruststream_redis::unique_token()));
    RedisBroker::standalone(url)
}

batch_scenarios::batch_scenario_tests!(
    #[tokio::test]
    broker()
);
