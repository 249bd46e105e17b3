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

mod support;

use ruststream_redis::RedisBroker;
use ruststream_testkit::conformance::Target;

async fn cluster_target() -> Target {
    let list = std::env::var("RUSTSTREAM_REDIS_CLUSTER_URLS");
    let urls = ruststream_redis::split_urls(list.as_deref().unwrap_or("redis://127.0.0.1:7000"));
    support::redis_target(
        RedisBroker::cluster(urls),
        "set RUSTSTREAM_REDIS_CLUSTER_URLS, or run scripts/redis-cluster, which starts one",
    )
    .await
}

ruststream_testkit::conformance_suite!(real_time, cluster_target);
