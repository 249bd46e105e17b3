//! A `#[ruststream::app]` with a mistake reports it and nothing else: the
//! binary still has a `main`.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Ping {}

#[subscriber(RedisStream::new("pings").group("pong"))]
async fn pong(_: &Ping) {}

#[ruststream::app]
async fn app() -> impl App {
    RustStream::new(AppInfo::new("pings", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(pong);
    })
}
