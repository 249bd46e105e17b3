//! `/health/ready` over a real HTTP client flips to not ready when the
//! Redis server an app reads from is stopped, and back to ready when it
//! returns. The server is a private `redis-server` this test starts and
//! kills, never the shared one.
//!
//! Real sockets need tokio's real clock: the test waits for each state
//! with a bounded poll, never for a fixed time.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{ReadinessOptions, RedisBroker};
use serde_json::Value;
use support::redis_server::{Persistence, RedisServer};

#[subscriber(RedisStream::new("ready-redis").group("g"))]
async fn work(_payload: &[u8]) {}

/// Polls `url` every 50 ms for up to 60 s until it answers `want`.
async fn until_status(url: &str, want: u16) -> Value {
    let mut last = String::new();
    for _ in 0..1_200 {
        if let Ok(response) = reqwest::get(url).await {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            if status == want {
                return serde_json::from_str(&body).unwrap();
            }
            last = format!("{status} {body}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} never answered {want}; last: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_redis_server_down_and_back() {
    let mut server = RedisServer::start("admin-ready", Persistence::AofAlways);
    let broker = RedisBroker::standalone(server.url());
    let app = RustStream::new(AppInfo::new("ready-redis", "0"))
        .admin(([127, 0, 0, 1], 0).into())
        .readiness(ReadinessOptions {
            read_failure_window: Duration::from_secs(1),
            ..ReadinessOptions::default()
        })
        .with_shared_broker(Arc::new(broker), |b| {
            b.include(work);
        })
        .start()
        .await
        .unwrap();
    let ready = format!("http://{}/health/ready", app.admin_addr().unwrap());
    until_status(&ready, 200).await;

    server.kill();
    let down = until_status(&ready, 503).await;
    assert_eq!(down["status"], "not ready");
    let reasons = down["reasons"].to_string();
    assert!(
        reasons.contains("`work`: reads have failed for"),
        "{reasons}"
    );

    server.restart(Persistence::AofAlways);
    let up = until_status(&ready, 200).await;
    assert_eq!(up["status"], "ready");
    app.shutdown().await;
}
