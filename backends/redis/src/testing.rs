//! What the unit tests share: the server they run against, fresh streams
//! on it, and clearing them away.

#![allow(clippy::unwrap_used)]

use redis::aio::MultiplexedConnection;
use ruststream_core::{Broker, StreamStart};

use crate::RedisBroker;

/// The server under test: `RUSTSTREAM_REDIS_URL`, default
/// `redis://127.0.0.1:6379`.
pub(crate) fn url() -> String {
    std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A plain connection to it, as another client would have.
pub(crate) async fn connection() -> MultiplexedConnection {
    let client = redis::Client::open(url().as_str()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// A broker on the server under test, and a stream no other run uses
/// (`rs-test:<token>:<what>`) with the group `g` created on it, starting at
/// new entries.
pub(crate) async fn stream_with_group(what: &str) -> (RedisBroker, String) {
    let broker = RedisBroker::standalone(url());
    let stream = format!("rs-test:{}:{what}", crate::unique_token());
    broker
        .ensure_group(&stream, "g", StreamStart::New)
        .await
        .unwrap();
    (broker, stream)
}

/// The server's answer to `command key` (`DEL`, `EXISTS`, `XLEN`), asked
/// on a connection of its own.
pub(crate) async fn ask<T: redis::FromRedisValue>(command: &str, key: &str) -> T {
    redis::cmd(command)
        .arg(key)
        .query_async(&mut connection().await)
        .await
        .unwrap()
}

/// Deletes `key` from the server.
pub(crate) async fn delete(key: &str) {
    let _: redis::Value = ask("DEL", key).await;
}
