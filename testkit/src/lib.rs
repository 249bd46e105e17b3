//! Testing tools for ruststream.
//!
//! - [`conformance`]: the broker conformance suite (SPEC section 3), one
//!   parameterised set of tests that every backend runs.

#![forbid(unsafe_code)]

pub mod conformance;
