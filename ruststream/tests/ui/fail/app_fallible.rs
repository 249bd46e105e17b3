//! An app whose building can fail is not an app: the message points at
//! `run_main_with`.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Ping {}

#[subscriber(RedisStream::new("pings").group("pong"))]
async fn pong(_: &Ping) {}

#[ruststream::app]
fn app() -> Result<RustStream, String> {
    let name = std::env::var("APP_NAME").map_err(|e| e.to_string())?;
    Ok(
        RustStream::new(AppInfo::new(name, "0.1.0")).with_broker(MemoryBroker::new(), |b| {
            b.include(pong);
        }),
    )
}
