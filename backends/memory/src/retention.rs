//! Retention for the memory broker, so that a long-running service on it
//! does not grow without bound: after each call on a stream (a publish,
//! or the acks that let the trim go further), a stream over its limits is
//! trimmed, in steps of an eighth of the bound so that a trim is
//! not paid on every publish. Entries some group has not read yet are
//! never trimmed, and entries a group has pending or dead-lettered are kept
//! until settled (the engine's trim keeps them), so retention loses nothing
//! a group still needs: memory is then bounded by what the groups hold and
//! have yet to read, plus the bound.

use std::time::Duration;

use ruststream_core::Trim;
use ruststream_engine::Engine;

/// How much of each stream the memory broker keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRetention {
    /// Keep at most this many entries per stream (default
    /// [`MemoryRetention::DEFAULT_MAX_LEN`]); `None`: no count limit.
    pub max_len: Option<u64>,
    /// Drop entries published longer ago than this; `None` (the default):
    /// no age limit.
    pub max_age: Option<Duration>,
}

impl MemoryRetention {
    /// The default count limit per stream.
    pub const DEFAULT_MAX_LEN: u64 = 100_000;

    /// Keeps everything (the broker then grows with every entry).
    pub const UNBOUNDED: MemoryRetention = MemoryRetention {
        max_len: None,
        max_age: None,
    };
}

impl Default for MemoryRetention {
    fn default() -> Self {
        MemoryRetention {
            max_len: Some(Self::DEFAULT_MAX_LEN),
            max_age: None,
        }
    }
}

impl MemoryRetention {
    /// Trims `stream` if it is over the limits by more than an eighth.
    pub(crate) fn apply(&self, engine: &mut Engine, stream: &str, now_ms: u64) {
        let max_len = self.max_len.map(|max| max.max(1));
        let slack = max_len.map(|max| max + max / 8);
        let min_ms = self
            .max_age
            .map(|age| now_ms.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)));
        let over_len = match (slack, engine.stream_len(stream)) {
            (Some(slack), Some(len)) => len > slack,
            _ => false,
        };
        if !over_len && min_ms.is_none() {
            return;
        }
        if let Some(below) = engine.retention_cutoff(stream, max_len, min_ms) {
            // The memory broker's engine records nothing: nothing to persist.
            let _ = engine.trim(stream, Trim::MinId(below));
        }
    }
}
