//! The conformance suite against a real Redis Cluster (3 masters, 3
//! replicas on loopback), in real time: the fourth target.
//!
//! The cluster is the one at `RUSTSTREAM_REDIS_CLUSTER_URLS` (comma-
//! separated seed URLs), or the one `scripts/redis-cluster` starts on
//! ports 7000-7005 when that is unset. `scripts/test` (and so `.ci/run`)
//! starts it and sets the variable. These tests never skip: without a
//! cluster they fail, saying how to start one.
//!
//! The differences from one server are those of Redis itself (claiming
//! reads need 8.4; trimming deletes pending entries): a cluster adds none.
//! Every stream of a test run gets its own prefix, so its keys fall on
//! slots all over the cluster, and every script and pipeline of a call
//! must keep to one slot (a call that crossed slots would fail here with
//! `CROSSSLOT`).

use std::sync::Arc;

use ruststream_core::{Broker, ReadMode};
use ruststream_redis::RedisBroker;
use ruststream_testkit::conformance::Target;

fn urls() -> Vec<String> {
    std::env::var("RUSTSTREAM_REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| "redis://127.0.0.1:7000".to_owned())
        .split(',')
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect()
}

fn prefix() -> String {
    format!("rs-test:{}:", ruststream_redis::unique_token())
}

async fn cluster_target() -> Target {
    let broker = RedisBroker::cluster(urls());
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
            "no Redis cluster to test against at {:?} (set RUSTSTREAM_REDIS_CLUSTER_URLS, or run scripts/redis-cluster, which starts one): {e}",
            urls()
        ),
    }
}

ruststream_testkit::conformance_suite!(real_time, cluster_target);
