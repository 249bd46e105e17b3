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

mod retention;

use ruststream_core::{BrokerResult, Clock};
use ruststream_engine::{Change, Engine};
use ruststream_local::{LocalBroker, Persistence};

pub use retention::MemoryRetention;

/// An in-memory broker. Cheap to clone: clones share the same streams.
///
/// `MemoryBroker::new()` is an empty broker on a clock that starts at the
/// current wall time and follows tokio's; `MemoryBroker::with_clock(clock)`
/// one on the given clock.
pub type MemoryBroker = LocalBroker<Volatile>;

/// Keeps nothing on disk: the memory broker's [`Persistence`]. The engine
/// records no changes, so the broker has nothing to hand it; after each
/// publish it applies the broker's [`MemoryRetention`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Volatile {
    retention: MemoryRetention,
}

/// A memory broker with a retention other than the default
/// ([`MemoryRetention::default`]: 100,000 entries per stream).
///
/// ```
/// use ruststream_memory::{MemoryBroker, MemoryRetention, with_retention};
///
/// let broker: MemoryBroker = with_retention(MemoryRetention {
///     max_len: Some(10_000),
///     ..MemoryRetention::default()
/// });
/// # let _ = broker;
/// ```
pub fn with_retention(retention: MemoryRetention) -> MemoryBroker {
    LocalBroker::with_persistence(Engine::new(), Volatile { retention }, None, Clock::new())
}

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

    fn upkeep(&mut self, engine: &mut Engine, stream: &str, now_ms: u64, _published: bool) {
        self.retention.apply(engine, stream, now_ms);
    }
}
