//! Testing tools for ruststream.
//!
//! - [`TestApp`]: runs a whole app in process on a memory broker and
//!   tokio's paused clock, so that a 30-second claim timeout is tested in
//!   microseconds; records what every subscriber received and how it was
//!   settled.
//! - [`conformance`]: the broker conformance suite (`docs/semantics.md`), one
//!   parameterised set of tests that every backend runs.
//! - [`faults`]: [`FaultyBroker`], a broker wrapper that injects failures,
//!   lost replies, delays and lost consumer groups on a seeded schedule.

#![forbid(unsafe_code)]

pub mod conformance;
pub mod faults;
mod harness;

pub use faults::{CallKind, Fault, FaultyBroker};
pub use harness::{Received, STEP_BUDGET, TestApp};

// The README's code blocks compile and run as doctests here, where both
// `ruststream` and this crate are dependencies.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
