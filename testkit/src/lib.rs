//! Testing tools for ruststream.
//!
//! - [`TestApp`]: runs a whole app in process on a memory broker and
//!   tokio's paused clock, so that a 30-second claim timeout is tested in
//!   microseconds; records what every subscriber received and how it was
//!   settled. Start the test's runtime paused
//!   (`#[tokio::test(start_paused = true)]`; see [`TestApp::start`]).
//! - [`conformance`]: the broker conformance suite (`docs/semantics.md`), one
//!   parameterised set of tests that every backend runs.
//! - [`serve_admin`]: starts an app with its admin endpoint on a free
//!   local port, for tests that call the endpoint over HTTP.
//! - [`HandWritten`]: a subscriber written by hand around a [`Handle`],
//!   for a test whose handler carries state.
//! - [`faults`]: [`FaultyBroker`], a broker wrapper that injects failures,
//!   lost replies, delays and lost consumer groups on a seeded schedule.
//!
//! ```
//! use ruststream::prelude::*;
//! use ruststream_testkit::TestApp;
//!
//! #[derive(Debug, Deserialize, Serialize, Outgoing)]
//! #[outgoing(name = "jobs")]
//! struct Job { n: u64 }
//!
//! #[subscriber(RedisStream::new("jobs").group("workers"))]
//! async fn work(job: &Job) -> HandlerOutcome {
//!     if job.n == 0 { HandlerOutcome::retry_after(Duration::from_secs(60)) } else { HandlerOutcome::ack() }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let app = RustStream::new(AppInfo::new("jobs", "0.1.0"))
//!     .with_broker(MemoryBroker::new(), |b| { b.include(work); });
//! let tb = TestApp::start(app).await.unwrap();
//! tb.publish(&Job { n: 0 }).await.unwrap();
//! tb.run_until_quiet().await;
//! tb.advance(Duration::from_secs(60)).await; // a minute, in microseconds
//! assert_eq!(tb.received("work").len(), 2);
//! # tb.shutdown().await;
//! # }
//! ```

#![forbid(unsafe_code)]

mod admin;
pub mod conformance;
pub mod faults;
mod hand_written;
pub use hand_written::{HandWritten, Handle};
mod harness;
mod watchdog;

pub use admin::serve_admin;
pub use faults::{CallKind, Fault, FaultyBroker};
pub use harness::{ADVANCE_REAL_TIME_LIMIT, Received, STEP_BUDGET, TestApp};

// The README's code blocks compile and run as doctests here, where both
// `ruststream` and this crate are dependencies.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
