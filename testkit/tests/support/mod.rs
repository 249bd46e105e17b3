//! Shared by the testkit's real-time tests: the crash tests' bookkeeping
//! (`crash`), private `redis-server` processes (`redis_server`) and
//! private clusters of them (`redis_cluster`).

// Each test binary uses part of this.
#![allow(dead_code, unreachable_pub)]

pub mod crash;
pub mod redis_cluster;
pub mod redis_server;
pub mod tls;

/// Fails unless `found` is empty, with `context`, how many were found and
/// `what` they are, and up to `shown` of them.
#[track_caller]
pub fn assert_none<T: std::fmt::Debug>(
    found: &[T],
    shown: usize,
    context: impl std::fmt::Display,
    what: &str,
) {
    assert!(
        found.is_empty(),
        "{context}: {} {what}, e.g. {:?}",
        found.len(),
        &found[..found.len().min(shown)]
    );
}

/// Waits (in real time, at most `limit`) until `done` holds; returns
/// whether it did. For tests whose servers really run.
pub async fn wait_until(limit: std::time::Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if done().await {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
