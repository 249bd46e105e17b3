//! [`RedisBroker`]: the [`Broker`] trait over a Redis server.
//!
//! The trait's methods are calls to the functions of the same name in the
//! module for their role ([`delegate_broker!`]), which hold the commands
//! they send.
//!
//! - [`connection`]: the connections, and mapping client errors;
//! - [`capability`]: what the server can do (its version, `CLAIM`);
//! - [`write`](mod@write): publishing, making and moving groups;
//! - [`read`]: the read modes, and blocking reads;
//! - [`settle`]: ack, retry, dead letter, redrive, discard, extend claim;
//! - [`inspect`]: groups, consumers, pending lists, dead letters, ranges,
//!   streams, trimming.
//!
//! The scripts they run are in [`crate::scripts`], the field layout and
//! reply parsing in [`crate::codec`], the side keys in [`crate::keys`].

mod capability;
mod connection;
mod consumers;
mod inspect;
mod read;
mod settle;
mod write;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ruststream_core::{Broker, BrokerResult, NameKind, check_name, delegate_broker};

use self::connection::{BROKER, Connections};
use crate::scripts::Scripts;

pub use self::connection::RedisConfig;

/// A broker on a Redis server (Redis 6.2 or later; `claiming` reads need
/// 8.4). Cheap to clone: clones share connections.
///
/// See the [crate documentation](crate) for the field layout, the keys kept
/// beside each stream, and where Redis differs from the local brokers.
#[derive(Clone)]
pub struct RedisBroker {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Connections,
    scripts: Scripts,
    /// XAUTOCLAIM cursors by (stream, group, consumer).
    cursors: read::Cursors,
    /// Set once the server was seen to serve claiming reads, so that a
    /// claiming read asks for the version only until then.
    claiming_verified: AtomicBool,
}

impl fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBroker")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

impl RedisBroker {
    /// A broker on the standalone server at `url` (`redis://host:port/db`,
    /// `rediss://` for TLS is not built in), with default settings.
    ///
    /// Nothing connects here: the first call does, and an unreachable
    /// server or a malformed URL is reported then, naming the URL.
    pub fn standalone(url: impl Into<String>) -> Self {
        RedisBroker::standalone_with(url, RedisConfig::default())
    }

    /// [`RedisBroker::standalone`] with explicit connection settings.
    pub fn standalone_with(url: impl Into<String>, config: RedisConfig) -> Self {
        RedisBroker {
            inner: Arc::new(Inner {
                connections: Connections::new(&url.into(), config),
                scripts: Scripts::new(),
                cursors: read::Cursors::default(),
                claiming_verified: AtomicBool::new(false),
            }),
        }
    }

    /// The server's URL, with any password masked.
    pub fn url(&self) -> &str {
        self.inner.connections.url()
    }
}

/// Checks the names a call takes, before anything is sent: the rules every
/// broker applies ([`check_name`]), which also keep the key layout
/// unambiguous here (see the crate docs, *Names*).
fn check_names(stream: &str, group: Option<&str>, consumer: Option<&str>) -> BrokerResult<()> {
    check_name(NameKind::Stream, stream)?;
    if let Some(group) = group {
        check_name(NameKind::Group, group)?;
    }
    if let Some(consumer) = consumer {
        check_name(NameKind::Consumer, consumer)?;
    }
    Ok(())
}

impl Broker for RedisBroker {
    fn name(&self) -> &'static str {
        BROKER
    }

    delegate_broker!(capability: check_mode);
    delegate_broker!(write: publish_batch, ensure_group, set_group_position);
    delegate_broker!(read: read);
    delegate_broker!(settle: ack, retry, dead_letter, extend_claim, redrive, discard);
    delegate_broker!(consumers: delete_consumer);
    delegate_broker!(inspect: group_info, streams, consumers, pending, dead_letters, range);
    delegate_broker!(inspect: stream_info, trim);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn construction_never_connects() {
        // Nothing listens on port 1; building the broker must not care.
        let broker = RedisBroker::standalone("redis://127.0.0.1:1");
        assert_eq!(broker.url(), "redis://127.0.0.1:1");
        let bad = RedisBroker::standalone("not a url");
        assert!(bad.client().is_err());
    }
}
