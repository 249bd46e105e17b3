//! Watching deliveries as they are settled: the hook behind the testkit's
//! assertions and the payments demo's running commentary.

use std::time::Duration;

use ruststream_core::Delivery;

/// How the runtime settled one delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Acked.
    Acked,
    /// A reply was published to `stream`, then the entry acked.
    Replied {
        /// Where the reply went.
        stream: String,
    },
    /// Retried: left pending (claiming, reclaim) or copied (new). `reason`
    /// says why when the handler did not ask for it (an error, a panic, a
    /// reply that could not be published).
    Retried {
        /// The error or panic message, if any.
        reason: Option<String>,
    },
    /// Owed again after this delay.
    RetriedAfter(Duration),
    /// Dead-lettered with this reason (by the handler, or because the
    /// payload could not be decoded).
    DeadLettered {
        /// Why.
        reason: String,
    },
    /// Read but never started because the app was shutting down: handed
    /// back for immediate redelivery.
    HandedBack,
}

/// One settled delivery, as an [`Observer`] sees it.
#[derive(Debug)]
pub struct Handled<'a> {
    /// The subscriber's name.
    pub subscriber: &'static str,
    /// The stream read.
    pub stream: &'a str,
    /// The group reading it.
    pub group: &'a str,
    /// The consumer it was delivered to.
    pub consumer: &'a str,
    /// The delivery (entry, delivery count, idle time).
    pub delivery: &'a Delivery,
    /// What happened to it.
    pub settlement: &'a Settlement,
}

/// Sees every delivery once it is settled. Register one with
/// [`RustStream::observe`](crate::RustStream::observe). Called on the
/// worker lane, so it should be quick.
pub trait Observer: Send + Sync + 'static {
    /// Called once per handled (or handed-back) delivery.
    fn handled(&self, event: &Handled<'_>);
}
