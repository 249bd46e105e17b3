//! What the unit tests share: the server they run against.

#![allow(clippy::unwrap_used)]

use redis::aio::MultiplexedConnection;

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
