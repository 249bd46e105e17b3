//! ruststream: a declarative worker framework for Rust services that
//! consume streams through consumer groups.
//!
//! This crate is the one applications depend on. It re-exports the core
//! types and the [`Broker`] trait from `ruststream-core`, and the built-in
//! brokers behind features (`memory` on by default).

#![forbid(unsafe_code)]

pub use ruststream_core::*;

#[cfg(feature = "memory")]
pub use ruststream_memory::MemoryBroker;

// The README's code blocks compile and run as doctests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
