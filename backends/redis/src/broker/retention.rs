//! Retention: what bounds the server's memory. Each stream is trimmed by a
//! rule (a length, an age, or both) after publishes, at most once a second
//! per stream, and never past what a group still needs (`retain.lua`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;
use ruststream_core::{BrokerError, BrokerResult};

use super::{RedisBroker, check_names};
use crate::codec;
use crate::scripts::Retained;

/// How much of each stream the server keeps: entries past `max_len`
/// (oldest first) or older than `max_age` are trimmed after publishes,
/// except what a group still needs (unread entries, pending and owed ones,
/// dead letters). `None` fields set no limit.
///
/// ```
/// use std::time::Duration;
/// use ruststream_redis::{RedisBroker, RedisConfig, RedisRetention};
///
/// let config = RedisConfig {
///     retention: Some(RedisRetention {
///         max_len: Some(1_000_000),
///         max_age: Some(Duration::from_secs(7 * 24 * 3600)),
///     }),
///     ..RedisConfig::default()
/// };
/// let broker = RedisBroker::standalone_with("redis://127.0.0.1:6379", config);
/// # let _ = broker;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisRetention {
    /// Keep at most this many entries (plus what groups need).
    pub max_len: Option<u64>,
    /// Keep entries at most this old (plus what groups need).
    pub max_age: Option<Duration>,
}

/// How often a stream is trimmed at most, per broker.
pub const RETENTION_EVERY: Duration = Duration::from_secs(1);

/// When each stream was last trimmed by this broker.
#[derive(Default)]
pub(super) struct Passes(Mutex<HashMap<String, Instant>>);

impl Passes {
    /// Whether `stream` is due a pass now (and if so, records it).
    fn due(&self, stream: &str) -> bool {
        let now = Instant::now();
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match last.get(stream) {
            Some(at) if now.duration_since(*at) < RETENTION_EVERY => false,
            _ => {
                last.insert(stream.to_owned(), now);
                true
            }
        }
    }
}

/// After a publish to `stream`: a retention pass if one is set and due.
/// A failed pass is logged, never the publish's failure (its entries are
/// written); the next one tries again.
pub(super) async fn after_publish(broker: &RedisBroker, stream: &str) {
    let Some(rule) = broker.inner.connections.config().retention else {
        return;
    };
    if !broker.inner.retention.due(stream) {
        return;
    }
    if let Err(e) = retain(broker, stream, rule).await {
        tracing::warn!(stream, error = %e, "retention pass failed; the next publish tries again");
    }
}

/// Trims `stream` by `rule` now; returns how many entries went.
pub(super) async fn retain(
    broker: &RedisBroker,
    stream: &str,
    rule: RedisRetention,
) -> BrokerResult<u64> {
    check_names(stream, None, None)?;
    let scope = broker.scope(stream, None);
    // A group made between the listing and the script makes the script
    // refuse; list again (once: groups are not made that often).
    for _ in 0..2 {
        let reply: Result<Value, BrokerError> = broker
            .query(redis::cmd("XINFO").arg("GROUPS").arg(stream), scope)
            .await;
        let groups: Vec<String> = match reply {
            Ok(reply) => codec::groups(&reply)
                .map_err(|e| scope.bad_reply(e))?
                .into_iter()
                .map(|g| g.name)
                .collect(),
            // No such stream: nothing to trim.
            Err(BrokerError::Backend { detail, .. }) if detail.contains("no such key") => {
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        let retained = broker
            .script(scope, |scripts, conn| {
                scripts.retain(conn, stream, &groups, rule.max_len, rule.max_age)
            })
            .await?;
        if let Retained::Trimmed(n) = retained {
            return Ok(n);
        }
    }
    Ok(0)
}
