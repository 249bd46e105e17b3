//! Where a group starts, and what the admin calls report.

use crate::{Entry, EntryId};

/// Where a consumer group starts reading when it is created, or where
/// `set_group_position` moves it.
///
/// ```
/// use ruststream_core::{EntryId, StreamStart};
/// assert_eq!(StreamStart::default(), StreamStart::New);
/// let from = StreamStart::Id(EntryId::new(5, 0)); // entries after 5-0
/// # let _ = from;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StreamStart {
    /// Only entries appended after the group is created (Redis `$`).
    #[default]
    New,
    /// Every entry the stream still holds (Redis `0`).
    Beginning,
    /// Entries after this id: the group behaves as if it had already been
    /// delivered everything up to and including it.
    Id(EntryId),
}

impl StreamStart {
    /// Checks that a group can start (or move its cursor) here on a stream
    /// whose last id ever appended is `last_id`. An id past that is refused:
    /// the group would pass over every entry appended until the clock
    /// reached the id, a silent skip. Every broker calls this before it
    /// creates or moves a group.
    ///
    /// ```
    /// use ruststream_core::{EntryId, StreamStart};
    ///
    /// let last = EntryId::new(5, 0);
    /// assert!(StreamStart::Id(EntryId::new(5, 0)).check_within("jobs", last).is_ok());
    /// let err = StreamStart::Id(EntryId::new(9, 0)).check_within("jobs", last).unwrap_err();
    /// assert!(err.to_string().contains("past the last entry of stream \"jobs\" (5-0)"));
    /// ```
    pub fn check_within(self, stream: &str, last_id: EntryId) -> crate::BrokerResult<()> {
        match self {
            StreamStart::Id(id) if id > last_id => {
                Err(crate::BrokerError::InvalidArgument(format!(
                    "start position {id} is past the last entry of stream {stream:?} ({last_id}): \
                     the group would skip every entry appended before the clock reaches it; \
                     use StreamStart::New for only new entries"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// A summary of one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    /// The stream's name.
    pub name: String,
    /// Entries the stream holds now.
    pub length: u64,
    /// The oldest entry held, if any.
    pub first_id: Option<EntryId>,
    /// The id of the last entry ever appended (kept after trimming);
    /// [`EntryId::ZERO`] for a stream that never had one.
    pub last_id: EntryId,
    /// Names of the stream's consumer groups.
    pub groups: Vec<String>,
}

/// A summary of one consumer group (`docs/semantics.md`, rule 9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The stream the group reads.
    pub stream: String,
    /// The group's name.
    pub name: String,
    /// The group's cursor: the last entry id handed out as new.
    pub last_delivered: EntryId,
    /// Entries after the cursor that the group has not been handed yet.
    pub lag: u64,
    /// Entries delivered (or owed again) and not yet acknowledged or
    /// dead-lettered.
    pub pending: u64,
    /// Entries recorded as dead letters.
    pub dead_letters: u64,
    /// Consumers the group knows.
    pub consumers: u64,
}

/// One consumer of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerInfo {
    /// The consumer's name.
    pub name: String,
    /// Entries it holds (delivered to it and not yet settled).
    pub pending: u64,
    /// Milliseconds since the consumer last read from the group.
    pub idle_ms: u64,
}

/// One entry of a group's pending list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    /// The entry's id.
    pub id: EntryId,
    /// The consumer holding it; `None` when it is owed again (after a
    /// retry with a delay, an immediate nack or a redrive) and held by
    /// nobody.
    pub consumer: Option<String>,
    /// Milliseconds since its last delivery (or since it became owed).
    pub idle_ms: u64,
    /// How many times it has been delivered to the group (counting the
    /// deliveries of the original a retry copy was made from).
    pub times_delivered: u32,
    /// For an entry retried with a delay: milliseconds until it is owed
    /// again. `Some(0)` when it is owed now; `None` for an entry held under
    /// an ordinary claim.
    pub owed_in_ms: Option<u64>,
}

/// A dead letter: an entry the group gave up on, with the reason.
///
/// A dead letter points at the entry; brokers keep the entry itself for as
/// long as the dead letter exists, whatever the stream's retention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The entry (its id, headers and payload).
    pub entry: Entry,
    /// Why it was dead-lettered.
    pub reason: String,
    /// How many times it had been delivered.
    pub times_delivered: u32,
    /// When it was dead-lettered, wall-clock milliseconds.
    pub dead_at_ms: u64,
}

impl DeadLetter {
    /// The dead entry's id.
    pub fn id(&self) -> EntryId {
        self.entry.id
    }
}
