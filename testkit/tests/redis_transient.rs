//! Redis answers that mean "not now" are transient errors, so that the
//! runtime retries what met them (a handler's reply, a read) rather than
//! dead-letter the entry: a server out of memory (`OOM`), and a replica
//! that was a master before a failover (`READONLY`). Each test starts its
//! own `redis-server` processes on spare loopback ports.

#![allow(clippy::unwrap_used)]

mod support;

use ruststream_core::{Broker, Message};
use ruststream_redis::RedisBroker;
use support::redis_server::{Persistence, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_out_of_memory_is_a_transient_error() {
    let server = RedisServer::start_with(
        "oom",
        Persistence::None,
        &["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"],
    );
    let broker = RedisBroker::standalone(server.url());
    let payload = vec![b'x'; 64 * 1024];
    let mut error = None;
    for _ in 0..1_000 {
        if let Err(e) = broker.publish("full", Message::new(payload.clone())).await {
            error = Some(e);
            break;
        }
    }
    let error = error.expect("a 2 MB server fills up");
    assert!(error.to_string().contains("OOM"), "{error}");
    assert!(error.is_transient(), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_replica_is_a_transient_error() {
    let master = RedisServer::start("master", Persistence::None);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(
        "replica",
        Persistence::None,
        &["--replicaof", "127.0.0.1", &port],
    );
    let broker = RedisBroker::standalone(replica.url());
    let error = broker
        .publish("s", Message::new(b"x".to_vec()))
        .await
        .unwrap_err();
    assert!(
        error.to_string().to_uppercase().contains("READONLY"),
        "{error}"
    );
    assert!(error.is_transient(), "{error:?}");
}
