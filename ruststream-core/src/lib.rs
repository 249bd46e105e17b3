//! Core types of ruststream and the [`Broker`] trait.
//!
//! This crate is what backends build on: the entry id, headers, messages
//! and deliveries, group and consumer reports, errors, the clock, and the
//! trait through which the runtime talks to a broker. Applications use the
//! `ruststream` crate, which re-exports everything here.

#![forbid(unsafe_code)]

mod backoff;
mod broker;
#[cfg(feature = "clock")]
mod clock;
mod error;
mod forward;
mod headers;
mod id;
mod info;
mod message;
mod names;
mod options;

pub use backoff::{BackoffCurve, BackoffPolicy, DURATION_UNITS};
pub use broker::{Broker, BrokerFuture, ReadBatch, ReadMode, ReadRequest, Retry, Trim};
#[cfg(feature = "clock")]
pub use clock::Clock;
pub use error::{BrokerError, BrokerResult};
pub use headers::Headers;
pub use id::{EntryId, ParseEntryIdError};
pub use info::{ConsumerInfo, DeadLetter, GroupInfo, PendingEntry, StreamInfo, StreamStart};
pub use message::{Delivery, Entry, Message};
pub use names::{MAX_NAME_LEN, NameKind, NameRules, check_name, check_stream_group};
pub use options::{CountOption, Counts, check_prefetch_covers_workers};
