//! The consumer-group state machine of ruststream's local brokers.
//!
//! [`Engine`] holds streams and their consumer groups and implements every
//! consumer-group rule of `docs/semantics.md` once, for the memory broker
//! and the file-log broker alike. It is pure: synchronous, no I/O, no async
//! runtime, and the time is an argument (`now_ms`, wall-clock milliseconds)
//! of every call that needs one. The same calls with the same times always
//! produce the same state, which is what lets the file log rebuild a group
//! by replaying its journal.
//!
//! ```
//! use ruststream_core::{Message, ReadMode, ReadRequest, StreamStart};
//! use ruststream_engine::Engine;
//!
//! let mut engine = Engine::new();
//! engine.ensure_group("jobs", "workers", StreamStart::New, 1_000);
//! let id = engine.publish("jobs", [Message::new(b"job-1".to_vec())], 1_000)[0];
//! let read = ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 10);
//! let batch = engine.read(&read, 1_001).unwrap();
//! assert_eq!(batch.deliveries[0].entry.id, id);
//! assert_eq!(engine.ack("jobs", "workers", &[id]).unwrap(), 1);
//! ```
//!
//! # Model
//!
//! A stream is a run of entries with strictly increasing ids. Trimming
//! removes old entries, except those a group still has pending or
//! dead-lettered: those move to a side table and stay readable (a dead
//! letter is a pointer, so the entry must outlive it).
//!
//! A group has a cursor (the last id handed out as new), a pending list and
//! a dead-letter list. A pending entry is either *held* by a consumer (since
//! its last delivery) or *owed* (held by nobody, due at a time: after a
//! retry with a delay, a nack or a redrive). Two indexes keep reads cheap
//! however long the pending list grows: held entries by last-delivery time
//! (for idle claims) and owed entries by due time.
//!
//! Payloads: the engine holds every entry's id (a few bytes each) but,
//! when bounded ([`Engine::cache_payloads`]), only the newest payloads. An
//! entry whose payload it does not hold comes out (of reads, ranges, dead
//! letters) with the [`unloaded`] placeholder message, which the broker
//! replaces with the payload from its storage before handing the entry
//! on; the engine itself does no I/O.
//!
//! # Layout
//!
//! One file per role, each adding its part of [`Engine`]'s calls:
//!
//! - `stream`: publishing, trimming, ranges and stream summaries;
//! - `entries`: a stream's entries, compactly (ids delta-encoded in
//!   blocks, retry-copy markers aside, payloads of the newest entries);
//! - `group`: a group's state and indexes, creating groups and moving their
//!   cursors;
//! - `read`: reads, phase by phase (own pending, owed, idle, new), and when
//!   a read could next return something;
//! - `settle`: acks and retries;
//! - `dead`: dead letters, redrives and discards;
//! - `info`: group summaries, consumers and pending lists;
//! - `journal`: recording changes and rebuilding from them;
//! - `idmap`: the ordered map behind a pending list.

#![forbid(unsafe_code)]

mod dead;
mod entries;
mod group;
mod idmap;
mod info;
mod journal;
mod read;
mod settle;
mod stream;

pub use entries::{is_unloaded, unloaded};
pub use group::SEEN_EVERY_MS;
pub use journal::{Change, GroupChange, RestoreReport};
pub use settle::Retried;
pub use stream::CopyOf;

use std::collections::HashMap;

use ruststream_core::{BrokerError, BrokerResult};

use group::Group;
use stream::{EntryRef, StreamState};

/// A map keyed by stream name, looked up on every call (and twice on a
/// publish that may create its stream): hashed with foldhash rather than
/// SipHash, which cost more than the rest of a publish's engine work.
type StreamMap = HashMap<String, StreamState, foldhash::fast::RandomState>;

/// Streams and their consumer groups, in memory.
#[derive(Debug, Default)]
pub struct Engine {
    streams: StreamMap,
    /// Whether new streams and groups record their changes.
    recording: bool,
    /// Payload bytes each stream holds in memory (`None`: all).
    cache: Option<usize>,
}

impl Engine {
    /// An engine with no streams.
    pub fn new() -> Self {
        Engine::default()
    }

    fn group_of(&self, stream: &str, group: &str) -> BrokerResult<(&StreamState, &Group)> {
        let s = self
            .streams
            .get(stream)
            .ok_or_else(|| BrokerError::no_group(stream, group))?;
        Ok((s, s.group(stream, group)?))
    }

    fn stream_mut(&mut self, stream: &str, group: &str) -> BrokerResult<&mut StreamState> {
        self.streams
            .get_mut(stream)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    /// `stream`'s state, created (recording if the engine records) if new.
    fn stream_entry(&mut self, stream: &str) -> &mut StreamState {
        let (recording, cache) = (self.recording, self.cache);
        let s = self.streams.entry_ref(stream);
        if recording && s.log.is_none() {
            s.log = Some(Vec::new());
        }
        s.cache = cache;
        s
    }
}

/// Gives memory back from a queue left much larger than what it holds
/// (after a burst of pending entries, say): shrunk to twice its length
/// once its capacity is over four times that (plus slack), so memory
/// follows the working set, and a queue that grows and shrinks around one
/// size is never reallocated.
fn shrink_if_oversized<T>(queue: &mut std::collections::VecDeque<T>) {
    const SMALL: usize = 1024;
    let len = queue.len();
    if queue.capacity() > 4 * (len + SMALL) {
        queue.shrink_to(2 * len + SMALL);
    }
}

#[cfg(test)]
mod tests;
