//! Shared by the testkit's real-time tests: the crash tests' bookkeeping
//! (`crash`) and private `redis-server` processes (`redis_server`).

// Each test binary uses part of this.
#![allow(dead_code, unreachable_pub)]

pub mod crash;
pub mod redis_server;
