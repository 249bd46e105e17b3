//! Shared by the testkit's real-time tests: the crash tests' bookkeeping
//! (`crash`) and private `redis-server` processes (`redis_server`).

// Each test binary uses part of this.
#![allow(dead_code, unreachable_pub)]

pub mod crash;
pub mod redis_server;

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
