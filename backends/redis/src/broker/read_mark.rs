//! Read marks: how a read notices that the cluster client sent it twice.
//!
//! The cluster client sends a command again, by itself, when its connection
//! drops before the reply comes, whether or not the server ran it. A read
//! is not safe to run twice: the first attempt claims entries for the
//! consumer, and the caller only ever sees the second attempt's reply, as a
//! success. The first attempt's entries would sit pending under the
//! consumer, handed to no one, until its next look at its pending list,
//! and the entries after them would run first (`docs/guarantees.md`,
//! "Under faults").
//!
//! So on a cluster every read carries a mark: a token no other call uses,
//! set with `SET key token GET` on a key of the consumer's own beside the
//! stream, just before the read's claiming command (in the read's pipeline,
//! or first thing in the read script). The old value `GET` returns is this
//! call's own token only if an earlier attempt of this same call got that
//! far: the read then fails as a lost read does, and the caller's re-check
//! (the runtime's, after any failed read) hands back what both attempts
//! claimed, in id order. A standalone connection never re-sends (a lost
//! reply is an error), so reads there carry no mark.
//!
//! Two processes reading under one consumer name share the key: a re-sent
//! read of one can then miss the mark the other overwrote, and is not
//! noticed (the entries come back at the next look, as before).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Value;
use ruststream_core::{BrokerError, ReadRequest};

use super::RedisBroker;
use super::connection::Scope;
use super::topology::Topology;
use crate::codec;
use crate::keys;

/// How long a mark outlives its read, beyond the read's own time bounds:
/// far longer than the client's retries of one call.
const MARK_MARGIN: Duration = Duration::from_secs(60);

/// The mark one read carries: its key and this call's token.
pub(crate) struct ReadMark {
    pub(crate) key: String,
    pub(crate) token: String,
    /// Milliseconds the key lives.
    pub(crate) ttl_ms: u64,
}

impl ReadMark {
    /// The mark for `req`, which may wait up to `block` on the server,
    /// when the broker's connection can re-send it (a cluster); `None` on
    /// one server.
    pub(crate) fn for_read(
        broker: &RedisBroker,
        req: &ReadRequest<'_>,
        block: Duration,
    ) -> Option<ReadMark> {
        if !matches!(broker.topology(), Ok(Topology::Cluster(_))) {
            return None;
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let config = broker.inner.connections.config();
        let lives = MARK_MARGIN + block + config.response_timeout * 2;
        Some(ReadMark {
            key: keys::read_mark(req.stream, req.group, req.consumer),
            token: format!(
                "{}-{}",
                broker.inner.mark_prefix,
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            ttl_ms: u64::try_from(lives.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// `SET key token GET PX ttl`, for a read's pipeline.
    pub(crate) fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SET");
        cmd.arg(&self.key)
            .arg(&self.token)
            .arg("GET")
            .arg("PX")
            .arg(self.ttl_ms);
        cmd
    }

    /// Whether `old` (the value the mark's `SET ... GET` found) says that
    /// an earlier attempt of this call ran.
    pub(crate) fn seen_before(&self, old: &Value) -> bool {
        codec::bytes(old) == Some(self.token.as_bytes())
    }
}

/// The error of a read that found its own mark: the cluster client sent it
/// again after the reply to an earlier attempt was lost. Transient, as any
/// lost reply: the caller's re-check hands back what the attempts claimed.
pub(crate) fn resent(scope: &Scope<'_>, consumer: &str) -> BrokerError {
    scope.lost(&format!(
        "the cluster client sent a read again after the reply to its first attempt was lost; \
         what that attempt claimed is pending under consumer {consumer:?} until handed back"
    ))
}

/// Logs, once per broker, that a read could not set its mark (an ACL user
/// without `SET`): the read goes on unmarked, and a re-sent read would not
/// be noticed.
pub(crate) fn refused(broker: &RedisBroker, req: &ReadRequest<'_>, error: &redis::RedisError) {
    if broker.inner.mark_refused.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!(
        stream = req.stream,
        group = req.group,
        %error,
        "a read could not set its read mark (grant the user SET on rs:{{stream}}:* keys, \
         docs/operations.md): reads go on unmarked, and a read the cluster client sends twice \
         after a lost reply is not noticed"
    );
}
