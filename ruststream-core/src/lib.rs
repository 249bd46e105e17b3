//! Core types of ruststream and the [`Broker`] trait.
//!
//! This crate is what backends build on: the entry id, headers, messages
//! and deliveries, group and consumer reports, errors, the clock, and the
//! trait through which the runtime talks to a broker. Applications use the
//! `ruststream` crate, which re-exports everything here. The rules every
//! broker applies before it changes anything live here too (names, counts,
//! start positions, read requests), so that a broker, the runtime and the
//! `#[subscriber]` macro check them the same way.
//!
//! ```
//! use ruststream_core::{
//!     check_name, Counts, EntryId, Message, NameKind, ReadMode, ReadRequest, StreamStart,
//! };
//!
//! // Ids are `ms-seq`, ordered by time then sequence.
//! let id: EntryId = "1700000000000-3".parse().unwrap();
//! assert!(id > EntryId::new(1_700_000_000_000, 2));
//!
//! // Messages carry a payload and headers, round-tripped byte for byte.
//! let message = Message::new(b"{\"id\":1}".to_vec()).with_header("tenant", "acme");
//! assert_eq!(message.headers.get_str("tenant"), Some("acme"));
//!
//! // The rules, before anything is sent to a broker.
//! assert!(check_name(NameKind::Stream, "payments").is_ok());
//! assert!(check_name(NameKind::Group, "a}:due:b").is_err());
//! let counts = Counts { workers: 8, prefetch: Some(32), max_deliveries: None };
//! assert!(counts.validate().is_ok());
//! assert!(StreamStart::Id(EntryId::new(9, 0)).check_within("jobs", EntryId::new(5, 0)).is_err());
//! let read = ReadRequest::new("payments", "ledger", "w1", ReadMode::New, 32);
//! assert!(read.validate().is_ok());
//! ```

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
pub use id::{EntryId, IdText, ParseEntryIdError};
pub use info::{ConsumerInfo, DeadLetter, GroupInfo, PendingEntry, StreamInfo, StreamStart};
pub use message::{Delivery, Entry, Message};
pub use names::{MAX_NAME_LEN, NameKind, NameRules, check_name, check_stream_group};
pub use options::{
    BATCH_WITH_BY_KEY, CountOption, Counts, check_prefetch_covers_batch,
    check_prefetch_covers_workers,
};
