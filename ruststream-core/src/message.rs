//! What producers send, what streams hold and what consumers receive.

use std::sync::Arc;

use crate::{EntryId, Headers};

/// A message as a producer sends it and a stream stores it: headers and an
/// opaque payload. Brokers keep both byte-exact.
///
/// ```
/// use ruststream_core::Message;
///
/// let m = Message::new(br#"{"id":1}"#.to_vec()).with_header("tenant", "acme");
/// assert_eq!(m.headers.get_str("tenant"), Some("acme"));
/// assert_eq!(m.payload, br#"{"id":1}"#);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Headers, string pairs.
    pub headers: Headers,
    /// The payload bytes (ruststream's runtime writes JSON here).
    pub payload: Vec<u8>,
}

impl Message {
    /// A message with this payload and no headers.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Message {
            headers: Headers::new(),
            payload: payload.into(),
        }
    }

    /// This message with one more header.
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key, value);
        self
    }
}

/// An entry of a stream: its id and its message.
///
/// The message is shared (`Arc`), so handing an entry to a consumer or
/// listing it costs a reference count, not a copy of the payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The entry's id in its stream.
    pub id: EntryId,
    /// Headers and payload.
    pub message: Arc<Message>,
}

impl Entry {
    /// The entry's headers.
    pub fn headers(&self) -> &Headers {
        &self.message.headers
    }

    /// The entry's payload.
    pub fn payload(&self) -> &[u8] {
        &self.message.payload
    }
}

/// One delivery of an entry to a consumer of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The entry delivered.
    pub entry: Entry,
    /// Deliveries of this entry to the group before this one: 0 for a first
    /// delivery, at least 1 for a redelivery (a claim, a retry, a re-read of
    /// the consumer's own pending list). A retry copy carries its original's
    /// count. This is the value of the runtime's `DELIVERY_COUNT_HEADER`.
    pub delivery_count: u32,
    /// How long the entry sat idle (since its previous delivery, or since it
    /// was made owed again) before this delivery, in milliseconds. 0 for a
    /// first delivery.
    pub idle_ms: u64,
}

impl Delivery {
    /// The delivered entry's id.
    pub fn id(&self) -> EntryId {
        self.entry.id
    }
}
