//! The in-memory broker: the local broker ([`LocalBroker`]) with a
//! persistence that keeps nothing.
//!
//! Every consumer-group rule of `docs/semantics.md` but durability, in
//! process. It is the broker of the testkit and a fine choice for a single
//! process that can afford to lose its queue on exit. Blocking reads and
//! the clock work as the `ruststream-local` crate describes: under a paused
//! test clock, `tokio::time::advance` drives claims, delays and block
//! timeouts together.
//!
//! ```
//! use ruststream_core::{Broker, Message, ReadMode, ReadRequest, StreamStart};
//! use ruststream_memory::MemoryBroker;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ruststream_core::BrokerError> {
//! let broker = MemoryBroker::new();
//! broker.ensure_group("jobs", "workers", StreamStart::New).await?;
//! let id = broker.publish("jobs", Message::new(b"hello".to_vec())).await?;
//! let batch = broker
//!     .read(ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 16))
//!     .await?;
//! assert_eq!(batch.deliveries[0].entry.payload(), b"hello");
//! broker.ack("jobs", "workers", &[id]).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

use ruststream_core::BrokerResult;
use ruststream_engine::Change;
use ruststream_local::{LocalBroker, Persistence};

/// An in-memory broker. Cheap to clone: clones share the same streams.
///
/// `MemoryBroker::new()` is an empty broker on a clock that starts at the
/// current wall time and follows tokio's; `MemoryBroker::with_clock(clock)`
/// one on the given clock.
pub type MemoryBroker = LocalBroker<Volatile>;

/// Keeps nothing: the memory broker's [`Persistence`]. The engine records
/// no changes, so the broker has nothing to hand it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Volatile;

impl Persistence for Volatile {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn records(&self) -> bool {
        false
    }

    fn persist(&mut self, changes: &mut Vec<Change>) -> BrokerResult<u64> {
        changes.clear();
        Ok(0)
    }
}
