//! What the tool reads and writes, whichever target answers: the same
//! records, with the admin endpoint's JSON field names (so a record
//! decodes from the endpoint's answer and is printed in the same shape).

use std::collections::BTreeMap;

use ruststream::{ConsumerInfo, DeadLetter, Entry, EntryId, GroupInfo, PendingEntry, StreamInfo};
use serde::{Deserialize, Serialize};

/// Entry ids as their `ms-seq` text in JSON.
pub mod id_text {
    use ruststream::EntryId;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes an id as `ms-seq`.
    pub fn serialize<S: Serializer>(id: &EntryId, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(id)
    }

    /// Reads an id from `ms-seq`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EntryId, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A stream's summary (`GET /streams/{stream}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// The stream's name.
    pub stream: String,
    /// Entries it holds.
    pub length: u64,
    /// Its oldest entry, if any.
    pub first_id: Option<String>,
    /// The last id ever appended (`0-0` if none).
    pub last_id: String,
    /// Its consumer groups.
    pub groups: Vec<String>,
}

impl From<StreamInfo> for StreamSummary {
    fn from(info: StreamInfo) -> Self {
        StreamSummary {
            stream: info.name,
            length: info.length,
            first_id: info.first_id.map(|id| id.to_string()),
            last_id: info.last_id.to_string(),
            groups: info.groups,
        }
    }
}

/// One consumer of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerSummary {
    /// Its name.
    pub name: String,
    /// Entries it holds.
    pub pending: u64,
    /// Milliseconds since it last read.
    pub idle_ms: u64,
}

impl From<ConsumerInfo> for ConsumerSummary {
    fn from(c: ConsumerInfo) -> Self {
        ConsumerSummary {
            name: c.name,
            pending: c.pending,
            idle_ms: c.idle_ms,
        }
    }
}

/// A group's summary with its consumers (`GET /groups/{stream}/{group}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// The stream.
    pub stream: String,
    /// The group.
    pub group: String,
    /// The group's cursor.
    pub last_delivered: String,
    /// Entries after the cursor not handed out yet.
    pub lag: u64,
    /// Entries delivered (or owed) and not settled.
    pub pending: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// How many consumers.
    pub consumers: u64,
    /// Each consumer.
    pub consumer_list: Vec<ConsumerSummary>,
}

impl GroupSummary {
    /// A summary from a broker's answers.
    pub fn new(info: GroupInfo, consumers: Vec<ConsumerInfo>) -> Self {
        GroupSummary {
            stream: info.stream,
            group: info.name,
            last_delivered: info.last_delivered.to_string(),
            lag: info.lag,
            pending: info.pending,
            dead_letters: info.dead_letters,
            consumers: info.consumers,
            consumer_list: consumers.into_iter().map(Into::into).collect(),
        }
    }
}

/// One entry of a pending list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRow {
    /// The entry's id.
    #[serde(with = "id_text")]
    pub id: EntryId,
    /// Who holds it; `null` when it is owed again and held by nobody.
    pub consumer: Option<String>,
    /// Milliseconds since its last delivery.
    pub idle_ms: u64,
    /// Deliveries so far.
    pub times_delivered: u32,
    /// For a delayed retry: milliseconds until it is owed again.
    pub owed_in_ms: Option<u64>,
}

impl From<PendingEntry> for PendingRow {
    fn from(p: PendingEntry) -> Self {
        PendingRow {
            id: p.id,
            consumer: p.consumer,
            idle_ms: p.idle_ms,
            times_delivered: p.times_delivered,
            owed_in_ms: p.owed_in_ms,
        }
    }
}

/// A payload: its text when it is UTF-8, else its bytes (a JSON array of
/// numbers), as the admin endpoint writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Payload {
    /// UTF-8 text.
    Text(String),
    /// Anything else.
    Bytes(Vec<u8>),
}

impl Payload {
    /// The payload of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Payload::Text(text.to_owned()),
            Err(_) => Payload::Bytes(bytes.to_vec()),
        }
    }
}

/// One stream entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryRow {
    /// Its id.
    #[serde(with = "id_text")]
    pub id: EntryId,
    /// Its headers.
    pub headers: BTreeMap<String, String>,
    /// Its payload.
    pub payload: Payload,
}

impl From<&Entry> for EntryRow {
    fn from(entry: &Entry) -> Self {
        EntryRow {
            id: entry.id,
            headers: entry
                .headers()
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            payload: Payload::from_bytes(entry.payload()),
        }
    }
}

/// The header a Redis broker puts on a dead retry copy, naming the entry
/// it was copied from.
pub const ORIGINAL_ID_HEADER: &str = ruststream_redis::ORIGINAL_ID_HEADER;

/// One dead letter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterRow {
    /// The dead entry's id (what redrive and discard take).
    #[serde(with = "id_text")]
    pub id: EntryId,
    /// Why it was dead-lettered.
    pub reason: String,
    /// Deliveries before it was.
    pub times_delivered: u32,
    /// When, wall-clock milliseconds.
    pub dead_at_ms: u64,
    /// The entry.
    pub entry: EntryRow,
}

impl DeadLetterRow {
    /// The id of the entry as first published: the header
    /// [`ORIGINAL_ID_HEADER`] when the entry carries it, else its own id.
    pub fn original_id(&self) -> String {
        self.entry
            .headers
            .get(ORIGINAL_ID_HEADER)
            .cloned()
            .unwrap_or_else(|| self.id.to_string())
    }
}

impl From<&DeadLetter> for DeadLetterRow {
    fn from(d: &DeadLetter) -> Self {
        DeadLetterRow {
            id: d.id(),
            reason: d.reason.clone(),
            times_delivered: d.times_delivered,
            dead_at_ms: d.dead_at_ms,
            entry: EntryRow::from(&d.entry),
        }
    }
}

/// What a redrive or discard did (`POST .../redrive`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteResult {
    /// Whether nothing was changed on purpose.
    pub dry_run: bool,
    /// The ids selected.
    pub selected: Vec<String>,
    /// How many changed.
    pub changed: u64,
    /// Ids named on the command line that were not dead letters of the
    /// group (already changed, or never one), left alone and not in
    /// `selected`. (Older admin endpoints do not send it.)
    #[serde(default)]
    pub skipped: Vec<String>,
}

/// What a prune did (`POST .../consumers/prune`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneResult {
    /// Whether nothing was deleted on purpose.
    pub dry_run: bool,
    /// Consumers deleted (or, on a dry run, that would be).
    pub deleted: Vec<String>,
    /// Consumers idle long enough that still hold entries: kept.
    pub kept_holding: Vec<ConsumerSummary>,
}
