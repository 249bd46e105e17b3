//! [`RedisBroker`]: the [`Broker`] trait over a Redis server.
//!
//! The trait's methods are calls to the functions of the same name in the
//! module for their role ([`delegate_broker!`]), which hold the commands
//! they send.
//!
//! - [`topology`]: one server or a cluster, and the connection type both
//!   share;
//! - [`connection`]: the connections, and mapping client errors;
//! - [`tls`]: the TLS material of `rediss://` connections;
//! - [`capability`]: what the server can do (its version, `CLAIM`);
//! - [`write`](mod@write): publishing, making and moving groups;
//! - [`read`]: the read modes, and blocking reads;
//! - [`read_mark`]: how a read notices that the cluster client sent it
//!   twice;
//! - [`wait`]: a blocking wait with its read queued behind it;
//! - [`settle`]: ack, retry, dead letter, redrive, discard, extend claim;
//! - [`inspect`]: groups, consumers, pending lists, dead letters, ranges,
//!   streams, trimming;
//! - [`retention`]: trimming by a rule, never past what groups need.
//!
//! The scripts they run are in [`crate::scripts`], the field layout and
//! reply parsing in [`crate::codec`], the side keys in [`crate::keys`].

mod capability;
mod connection;
mod consumers;
mod inspect;
mod read;
mod read_mark;
mod retention;
mod settle;
mod tls;
mod topology;
mod wait;
mod write;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ruststream_core::{Broker, BrokerResult, NameKind, check_name, delegate_broker};

use self::connection::{BROKER, Connections};
use crate::scripts::Scripts;

pub use self::connection::{CLUSTER_REDIRECTIONS, RedisConfig, ReplicaAck};
pub(crate) use self::read_mark::ReadMark;
pub use self::retention::{RETENTION_EVERY, RedisRetention};
pub use self::tls::RedisTls;
pub(crate) use self::topology::Conn;

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
    /// When each stream was last trimmed by the retention rule.
    retention: retention::Passes,
    /// Waits given up on whose reads are being handed back.
    abandoned: wait::Abandoned,
    /// The first part of this broker's read-mark tokens (a
    /// [`crate::unique_token`]).
    mark_prefix: String,
    /// Set once a read mark was refused (logged once).
    mark_refused: AtomicBool,
}

impl fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBroker")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

impl RedisBroker {
    /// A broker on the standalone server at `url`
    /// (`redis://[user:password@]host:port[/db]`, or `rediss://` for TLS;
    /// see [`RedisTls`] for a private CA or a client certificate), with
    /// default settings.
    ///
    /// Nothing connects here: the first call does, and an unreachable
    /// server or a malformed URL is reported then, naming the URL.
    pub fn standalone(url: impl Into<String>) -> Self {
        RedisBroker::standalone_with(url, RedisConfig::default())
    }

    /// [`RedisBroker::standalone`] with explicit connection settings.
    pub fn standalone_with(url: impl Into<String>, config: RedisConfig) -> Self {
        RedisBroker::on(Connections::standalone(&url.into(), config))
    }

    /// A broker on the Redis Cluster that `urls` belong to (any of its
    /// nodes: `redis://host:port` each; the client finds the rest), with
    /// default settings.
    ///
    /// Commands go to the master of each stream's slot. Every call touches
    /// the keys of one stream, which share the stream's hash tag, so no call
    /// crosses slots; `MOVED` and `ASK` redirections (a failover, a reshard)
    /// are followed. Nothing connects here: the first call does.
    ///
    /// ```
    /// use ruststream_redis::RedisBroker;
    ///
    /// let broker = RedisBroker::cluster([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    /// ]);
    /// assert!(broker.url().starts_with("cluster "));
    /// ```
    pub fn cluster<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisBroker::cluster_with(urls, RedisConfig::default())
    }

    /// [`RedisBroker::cluster`] with explicit connection settings.
    pub fn cluster_with<I, S>(urls: I, config: RedisConfig) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        RedisBroker::on(Connections::cluster(&urls, config))
    }

    /// A broker from one URL, standalone or cluster by its scheme:
    ///
    /// - `redis://[user:password@]host:port[/db]` (`rediss://` for TLS): one
    ///   server, as [`RedisBroker::standalone`];
    /// - `redis+cluster://[user:password@]host:port,host:port,...`
    ///   (`rediss+cluster://` for TLS): a cluster with these seed nodes, as
    ///   [`RedisBroker::cluster`]; the credentials apply to every node.
    ///
    /// ```
    /// use ruststream_redis::{RedisBroker, RedisConfig};
    ///
    /// let broker = RedisBroker::from_url_with(
    ///     "redis+cluster://app:secret@10.0.0.1:6379,10.0.0.2:6379",
    ///     RedisConfig::default(),
    /// );
    /// assert_eq!(
    ///     broker.url(),
    ///     "cluster redis://app:***@10.0.0.1:6379,redis://app:***@10.0.0.2:6379"
    /// );
    /// ```
    pub fn from_url_with(url: &str, config: RedisConfig) -> Self {
        match cluster_seeds(url) {
            Some(seeds) => RedisBroker::cluster_with(seeds, config),
            None => RedisBroker::standalone_with(url, config),
        }
    }

    fn on(connections: Connections) -> Self {
        RedisBroker {
            inner: Arc::new(Inner {
                connections,
                scripts: Scripts::new(),
                cursors: read::Cursors::default(),
                claiming_verified: AtomicBool::new(false),
                retention: retention::Passes::default(),
                abandoned: wait::Abandoned::default(),
                mark_prefix: crate::unique_token(),
                mark_refused: AtomicBool::new(false),
            }),
        }
    }

    /// Trims `stream` by the configured retention rule now (publishes do
    /// it at most every [`RETENTION_EVERY`]); returns how many entries
    /// went. Without a rule, nothing is trimmed.
    pub async fn apply_retention(&self, stream: &str) -> BrokerResult<u64> {
        match self.inner.connections.config().retention {
            Some(rule) => retention::retain(self, stream, rule).await,
            None => Ok(0),
        }
    }

    /// The server's URL, with any password masked.
    pub fn url(&self) -> &str {
        self.inner.connections.url()
    }
}

/// The seed URLs a `redis+cluster://` or `rediss+cluster://` URL names,
/// each in the plain scheme with the URL's credentials; `None` for any
/// other URL.
fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.strip_suffix("+cluster")?;
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), rest),
    };
    let hosts = split_urls(hosts.trim_end_matches('/'));
    Some(
        hosts
            .iter()
            .map(|host| format!("{scheme}://{userinfo}{host}"))
            .collect(),
    )
}

/// The items of a comma-separated list of URLs (or `host:port`s), trimmed,
/// empty ones left out: what `RUSTSTREAM_REDIS_CLUSTER_URLS` holds, and the
/// hosts of a `redis+cluster://` URL.
///
/// ```
/// assert_eq!(
///     ruststream_redis::split_urls("redis://a:1, redis://b:2,"),
///     ["redis://a:1", "redis://b:2"]
/// );
/// ```
pub fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect()
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
    delegate_broker!(settle: ack, retry, dead_letter, extend_claim, count_deliveries, redrive, discard);
    delegate_broker!(consumers: delete_consumer);
    delegate_broker!(inspect: group_info, streams, consumers, pending, dead_letters, range);
    delegate_broker!(inspect: stream_info, trim);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_every_seed_with_the_credentials() {
        assert_eq!(
            cluster_seeds("redis+cluster://a:1,b:2"),
            Some(vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()])
        );
        assert_eq!(
            cluster_seeds("rediss+cluster://u:p@a:1, b:2/"),
            Some(vec![
                "rediss://u:p@a:1".to_owned(),
                "rediss://u:p@b:2".to_owned()
            ])
        );
        assert_eq!(cluster_seeds("redis://a:1"), None);
        assert_eq!(cluster_seeds("redis+cluster://"), Some(vec![]));
        // No seeds: an error on first use, naming the problem.
        let broker = RedisBroker::from_url_with("redis+cluster://", RedisConfig::default());
        assert!(broker.topology().is_err());
    }

    #[test]
    fn construction_never_connects() {
        // Nothing listens on port 1; building the broker must not care.
        let broker = RedisBroker::standalone("redis://127.0.0.1:1");
        assert_eq!(broker.url(), "redis://127.0.0.1:1");
        let bad = RedisBroker::standalone("not a url");
        assert!(bad.topology().is_err());
        let none = RedisBroker::cluster(Vec::<String>::new());
        assert!(none.topology().is_err());
    }
}
