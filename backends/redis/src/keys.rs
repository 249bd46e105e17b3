//! The keys ruststream keeps beside a stream for each group, and unique
//! names for keys of its own.

use std::sync::atomic::{AtomicU64, Ordering};

/// The names of the keys ruststream keeps beside a stream for one group.
///
/// Every one is `rs:{<stream>}:<kind>:<group>`: the stream's name in braces
/// is a Redis Cluster hash tag, so a group's side keys live in the same slot
/// as the stream and one script can touch them all. Stream and group names
/// never contain braces (the broker checks every name it is given), so the
/// first `}` ends the stream's name, the kind runs to the next `:` and the
/// group is the rest: no two (stream, kind, group) share a key, and no side
/// key is a stream's name (those have no braces).
#[derive(Clone, Debug)]
pub(crate) struct GroupKeys {
    /// Sorted set: owed entry id -> due time (server milliseconds).
    pub(crate) due: String,
    /// Hash: owed entry id -> `"<times delivered> <owed since ms>"`.
    pub(crate) owed: String,
    /// Stream: one entry per dead letter.
    pub(crate) dead: String,
    /// Sorted set (all scores 0): `"<padded id>:<dead-letter entry id>"`.
    pub(crate) dead_index: String,
    /// Stream: a one-entry stream appended to when entries become owed, so
    /// that blocked readers wake.
    pub(crate) wake: String,
}

impl GroupKeys {
    pub(crate) fn new(stream: &str, group: &str) -> Self {
        let key = |kind: &str| format!("rs:{{{stream}}}:{kind}:{group}");
        GroupKeys {
            due: key("due"),
            owed: key("owed"),
            dead: key("dead"),
            dead_index: key("dead-index"),
            wake: key("wake"),
        }
    }

    /// `stream` and every side key, in the order the scripts that touch
    /// them all take them as KEYS (read, post, redrive).
    pub(crate) fn all<'a>(&'a self, stream: &'a str) -> [&'a str; 6] {
        [
            stream,
            &self.due,
            &self.owed,
            &self.dead,
            &self.dead_index,
            &self.wake,
        ]
    }
}

/// The key of `consumer`'s read mark (see `broker/read_mark.rs`):
/// `rs:{<stream>}:read-mark:<group's length>:<group>:<consumer>`, in the
/// stream's slot. The group's length keeps two (group, consumer) pairs from
/// sharing a key however their names use `:`.
pub(crate) fn read_mark(stream: &str, group: &str, consumer: &str) -> String {
    format!(
        "rs:{{{stream}}}:read-mark:{}:{group}:{consumer}",
        group.len()
    )
}

/// A token no other call makes, in this process or another:
/// `<pid>-<nanoseconds since the epoch, hex>-<counter>`. Claim probes name
/// their keys with it (and tests their streams).
pub fn unique_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of a key Redis Cluster hashes to pick its slot: the text
    /// between the first `{` and the next `}` when that is not empty, else
    /// the whole key.
    fn hashed_part(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn every_key_of_a_stream_hashes_to_the_stream_s_slot() {
        for stream in ["payments", "a", "rs-test:x:jobs", "odd:name.with-dots"] {
            let keys = GroupKeys::new(stream, "ledger");
            for key in keys.all(stream) {
                assert_eq!(hashed_part(key), stream, "{key}");
            }
        }
    }

    #[test]
    fn side_keys_share_the_stream_hash_tag() {
        let keys = GroupKeys::new("payments", "ledger");
        assert_eq!(keys.due, "rs:{payments}:due:ledger");
        assert_eq!(keys.dead_index, "rs:{payments}:dead-index:ledger");
        assert_eq!(keys.wake, "rs:{payments}:wake:ledger");
    }
}
