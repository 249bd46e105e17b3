//! The connections to the server, and turning client errors into
//! [`BrokerError`]s that name the server, the stream and the group.
//!
//! One shared connection carries every command, pipelined: on one server a
//! `ConnectionManager`, which reconnects by itself; on a cluster, the
//! cluster connection (see [`super::topology`]). Blocking waits get
//! connections of their own, so that a reader blocked for seconds never
//! holds up an ack.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError,
    ServerErrorKind, Value,
};
use ruststream_core::{BrokerError, BrokerResult};
use tokio::sync::OnceCell;

use super::RedisBroker;
use super::retention::RedisRetention;
use super::tls::{RedisTls, is_tls};
use super::topology::{ClusterClients, Conn, Topology};
use crate::codec::{BadReply, ms};
use crate::scripts::{ScriptError, Scripts};

pub(super) const BROKER: &str = "redis";

/// Connection settings of a [`RedisBroker`].
///
/// ```
/// use std::time::Duration;
/// use ruststream_redis::{RedisBroker, RedisConfig};
///
/// let config = RedisConfig {
///     response_timeout: Duration::from_secs(2),
///     ..RedisConfig::default()
/// };
/// let broker = RedisBroker::standalone_with("redis://127.0.0.1:6379", config);
/// # let _ = broker;
/// ```
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// How long to wait for a server's reply before the call fails with a
    /// (transient) connection error. Blocking waits are not bound by it.
    /// Default 5 s.
    pub response_timeout: Duration,
    /// How long one connection attempt may take. Default 2 s.
    pub connect_timeout: Duration,
    /// How many times a lost connection is re-established inside one call
    /// before the call fails (the runtime then backs off and calls again).
    /// Default 2. On a cluster a call also follows up to
    /// [`CLUSTER_REDIRECTIONS`] `MOVED`/`ASK` redirections on top.
    pub reconnect_attempts: usize,
    /// Whether a publish waits for replicas to hold its entries before it
    /// returns `Ok`. `None` (the default): the master's reply is enough,
    /// and a failover right after can lose the newest entries (replication
    /// is asynchronous). See [`ReplicaAck`].
    pub publish_replicas: Option<ReplicaAck>,
    /// TLS material for `rediss://` URLs (a private CA, a client
    /// certificate). `None`: the system's roots, no client certificate.
    /// Given with a `redis://` URL, it is an error on first use.
    pub tls: Option<RedisTls>,
    /// How much of each stream to keep ([`RedisRetention`]). `None` (the
    /// default): nothing is trimmed unless you call `Broker::trim`.
    pub retention: Option<RedisRetention>,
}

/// A publish waits until `replicas` replicas hold its entries (`WAIT
/// replicas timeout` after the `XADD`s, in the same round trip), or fails
/// as transient when fewer did within `timeout`: the entries were written
/// but may not survive a failover, and publishing again (which may
/// duplicate them) is the safe move.
///
/// With `ReplicaAck { replicas: 1, .. }` on a cluster with a replica per
/// master, a publish that returned `Ok` survives the failover of its
/// master (docs/guarantees.md, *Redis Cluster*). It costs a replication
/// round trip per publish call; BENCHMARKS.md has the figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAck {
    /// How many replicas must acknowledge.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// How many redirections (`MOVED`, `ASK`, a slot map refreshed after a
/// failover) one call on a cluster follows before it fails as transient.
pub const CLUSTER_REDIRECTIONS: usize = 4;

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            reconnect_attempts: 2,
            publish_replicas: None,
            tls: None,
            retention: None,
        }
    }
}

/// A broker's connections, made on first use, never at construction: an
/// app is built before its runtime starts, and the testkit swaps brokers
/// out.
pub(super) struct Connections {
    /// The URL with any password masked: what errors and logs show.
    url: String,
    /// The client(s), or why the URL is not usable (reported on first use).
    topology: Result<Topology, String>,
    config: RedisConfig,
    shared: OnceCell<Conn>,
    /// Idle connections for blocking waits.
    blocking: Mutex<Vec<Conn>>,
}

impl Connections {
    /// Connections to the one server at `url`.
    pub(super) fn standalone(url: &str, config: RedisConfig) -> Self {
        let shown = redact(url);
        let topology = tls_fits(&shown, &[url], &config).and_then(|()| {
            match &config.tls {
                Some(tls) => Client::build_with_tls(url, tls.certificates()),
                None => Client::open(url),
            }
            .map(|client| Topology::Standalone(Box::new(client)))
            .map_err(|e| format!("{shown} is not a usable Redis URL: {e}"))
        });
        Connections::with(shown, topology, config)
    }

    /// Connections to the cluster that `urls` (seed nodes) belong to.
    pub(super) fn cluster(urls: &[String], config: RedisConfig) -> Self {
        let shown = format!(
            "cluster {}",
            urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
        );
        let urls_given: Vec<&str> = urls.iter().map(String::as_str).collect();
        let topology = if urls.is_empty() {
            Err("a Redis cluster needs at least one seed node URL".to_owned())
        } else if let Err(e) = tls_fits(&shown, &urls_given, &config) {
            Err(e)
        } else {
            let builder = || {
                let builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .connection_timeout(config.connect_timeout)
                    .retries(
                        u32::try_from(config.reconnect_attempts + CLUSTER_REDIRECTIONS)
                            .unwrap_or(u32::MAX),
                    )
                    .min_retry_wait(50)
                    .max_retry_wait(1000);
                match &config.tls {
                    Some(tls) => builder.certs(tls.certificates()),
                    None => builder,
                }
            };
            let shared = builder()
                .response_timeout(config.response_timeout)
                .overall_response_timeout(Some(config.response_timeout * 2));
            shared
                .build()
                .and_then(|client: ClusterClient| {
                    Ok(Topology::Cluster(Box::new(ClusterClients {
                        shared: client,
                        blocking: builder().build()?,
                    })))
                })
                .map_err(|e| format!("{shown} is not a usable set of Redis cluster URLs: {e}"))
        };
        Connections::with(shown, topology, config)
    }

    fn with(url: String, topology: Result<Topology, String>, config: RedisConfig) -> Self {
        Connections {
            url,
            topology,
            config,
            shared: OnceCell::new(),
            blocking: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    pub(super) fn config(&self) -> &RedisConfig {
        &self.config
    }
}

impl RedisBroker {
    pub(super) fn scope<'a>(&'a self, stream: &'a str, group: Option<&'a str>) -> Scope<'a> {
        Scope {
            url: self.url(),
            stream,
            group,
        }
    }

    pub(super) fn topology(&self) -> BrokerResult<&Topology> {
        self.inner
            .connections
            .topology
            .as_ref()
            .map_err(|detail| BrokerError::InvalidArgument(detail.clone()))
    }

    /// The shared connection (made on first use; it reconnects by itself
    /// after a loss).
    pub(super) async fn conn(&self) -> BrokerResult<Conn> {
        let topology = self.topology()?;
        let connections = &self.inner.connections;
        let config = &connections.config;
        let lost = |e: RedisError| BrokerError::Connection {
            broker: BROKER,
            detail: format!("{}: {e}", connections.url),
        };
        let shared = connections
            .shared
            .get_or_try_init(|| async {
                match topology {
                    Topology::Standalone(client) => {
                        let settings = ConnectionManagerConfig::new()
                            .set_response_timeout(Some(config.response_timeout))
                            .set_connection_timeout(Some(config.connect_timeout))
                            .set_number_of_retries(config.reconnect_attempts)
                            .set_min_delay(Duration::from_millis(50))
                            .set_max_delay(Duration::from_secs(1));
                        ConnectionManager::new_lazy_with_config((**client).clone(), settings)
                            .map(Conn::Managed)
                            .map_err(lost)
                    }
                    Topology::Cluster(clients) => clients
                        .shared
                        .get_async_connection()
                        .await
                        .map(Conn::Cluster)
                        .map_err(lost),
                }
            })
            .await?;
        Ok(shared.clone())
    }

    /// Sends a command or a pipeline in one round trip, on the shared
    /// connection, with its errors mapped for `scope`.
    pub(super) async fn query<T: FromRedisValue>(
        &self,
        query: &impl Query,
        scope: Scope<'_>,
    ) -> BrokerResult<T> {
        let mut conn = self.conn().await?;
        query.send(&mut conn).await.map_err(|e| scope.error(&e))
    }

    /// Runs a script's wrapper on the shared connection, with its errors
    /// mapped for `scope`.
    pub(super) async fn script<'a, T, F>(
        &'a self,
        scope: Scope<'_>,
        call: impl FnOnce(&'a Scripts, Conn) -> F,
    ) -> BrokerResult<T>
    where
        F: Future<Output = Result<T, ScriptError>>,
    {
        let conn = self.conn().await?;
        call(&self.inner.scripts, conn)
            .await
            .map_err(|e| scope.script_error(e))
    }

    /// Waits up to `wait` for any of `keys` (stream, last id seen) to get an
    /// entry after that id, on a connection of its own. Delivers nothing.
    pub(super) async fn wait_for(
        &self,
        keys: &[(String, String)],
        wait: Duration,
        scope: Scope<'_>,
    ) -> BrokerResult<()> {
        let cmd = wait_command(keys, wait);
        let mut conn = self.blocking_conn(scope).await?;
        let limit = self.wait_limit(wait);
        match tokio::time::timeout(limit, cmd.query_async::<Value>(&mut conn)).await {
            Ok(Ok(_)) => {
                self.pool_blocking(conn);
                Ok(())
            }
            Ok(Err(e)) => Err(scope.error(&e)),
            Err(_) => Err(self.no_answer(wait, limit)),
        }
    }

    /// How long a blocking wait of `wait` may go unanswered before its
    /// connection is presumed dead: the server answers when the block time
    /// passes, and the margin covers the round trip.
    pub(super) fn wait_limit(&self, wait: Duration) -> Duration {
        wait + self.inner.connections.config.response_timeout
    }

    /// The error of a blocking wait of `wait` that got no answer within
    /// `limit`.
    pub(super) fn no_answer(&self, wait: Duration, limit: Duration) -> BrokerError {
        BrokerError::Connection {
            broker: BROKER,
            detail: format!(
                "{}: no answer to a blocking wait of {} ms within {limit:?}",
                self.inner.connections.url,
                wait_ms(wait)
            ),
        }
    }

    /// Puts a connection whose blocking wait was answered back in the pool.
    pub(super) fn pool_blocking(&self, conn: Conn) {
        self.inner
            .connections
            .blocking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
    }

    /// A connection for blocking waits: an idle pooled one, or a new one.
    /// One that is dropped mid-wait (the read was cancelled) or failed is
    /// never returned to the pool.
    pub(super) async fn blocking_conn(&self, scope: Scope<'_>) -> BrokerResult<Conn> {
        let connections = &self.inner.connections;
        let pooled = connections
            .blocking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        if let Some(conn) = pooled {
            return Ok(conn);
        }
        match self.topology()? {
            Topology::Standalone(client) => {
                let settings = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connections.config.connect_timeout))
                    .set_response_timeout(None);
                client
                    .get_multiplexed_async_connection_with_config(&settings)
                    .await
                    .map(Conn::Direct)
            }
            Topology::Cluster(clients) => clients
                .blocking
                .get_async_connection()
                .await
                .map(Conn::Cluster),
        }
        .map_err(|e| scope.error(&e))
    }
}

/// A wait's block time in whole milliseconds, at least 1 (`BLOCK 0` would
/// wait for ever).
fn wait_ms(wait: Duration) -> u64 {
    ms(wait).max(1)
}

/// `XREAD COUNT 1 BLOCK ms STREAMS ..`: waits up to `wait` for any of
/// `keys` (stream, last id seen) to get an entry after that id. Claims
/// nothing.
pub(super) fn wait_command(keys: &[(String, String)], wait: Duration) -> Cmd {
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT")
        .arg(1)
        .arg("BLOCK")
        .arg(wait_ms(wait))
        .arg("STREAMS");
    for (key, _) in keys {
        cmd.arg(key);
    }
    for (_, id) in keys {
        cmd.arg(id);
    }
    cmd
}

/// What a call was about, for error messages.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scope<'a> {
    url: &'a str,
    stream: &'a str,
    group: Option<&'a str>,
}

impl Scope<'_> {
    fn about(&self) -> String {
        match self.group {
            Some(group) => format!("stream {:?}, group {:?}", self.stream, group),
            None => format!("stream {:?}", self.stream),
        }
    }

    /// Maps a client error.
    ///
    /// - `NOGROUP` (and a missing stream where a group was named) is
    ///   [`BrokerError::NoGroup`]: the runtime recreates the group.
    /// - Lost, refused or timed-out connections, and a server that is
    ///   loading, busy or failing over, are [`BrokerError::Connection`]:
    ///   transient, the runtime backs off and retries.
    /// - Anything else is [`BrokerError::Backend`].
    pub(super) fn error(&self, e: &RedisError) -> BrokerError {
        if let Some(group) = self.group {
            let missing_key = e.detail().is_some_and(|d| {
                d.contains("no such key") || d.contains("requires the key to exist")
            });
            if e.code() == Some("NOGROUP") || missing_key {
                return BrokerError::no_group(self.stream, group);
            }
        }
        if is_transient(e) {
            return BrokerError::Connection {
                broker: BROKER,
                detail: format!("{} ({}): {e}", self.url, self.about()),
            };
        }
        BrokerError::Backend {
            broker: BROKER,
            detail: format!("{e} ({}, server {})", self.about(), self.url),
        }
    }

    /// A transient failure that is not the client's error: `detail` says
    /// what was lost.
    pub(super) fn lost(&self, detail: &str) -> BrokerError {
        BrokerError::Connection {
            broker: BROKER,
            detail: format!("{} ({}): {detail}", self.url, self.about()),
        }
    }

    pub(super) fn bad_reply(&self, e: BadReply) -> BrokerError {
        BrokerError::Backend {
            broker: BROKER,
            detail: format!("{} ({}, server {})", e.0, self.about(), self.url),
        }
    }

    pub(super) fn script_error(&self, e: ScriptError) -> BrokerError {
        match e {
            ScriptError::Server(e) => self.error(&e),
            ScriptError::Reply(e) => self.bad_reply(e),
        }
    }
}

/// Whether the server may take the same call later: the connection, a
/// server loading or busy, a cluster in the middle of a failover (a former
/// master now a replica answers `READONLY`), or a server out of memory
/// (`OOM`: memory frees as groups ack and streams are trimmed).
fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            )
        )
        // The cluster client found no node for the slot (its master is
        // gone and the failover is not over).
        || e.kind() == ErrorKind::ClusterConnectionNotFound
        || e.code().is_some_and(transient_code)
        // A pipeline's failure carries each failed command's error.
        || e.clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, error)| transient_code(error.code())))
}

/// Server error codes that mean "not now" (see [`is_transient`]). `MOVED`
/// and `ASK` reach the caller only once the cluster client has followed
/// its redirections ([`CLUSTER_REDIRECTIONS`]) without landing: during a
/// failover, a write sent to the replica of a master that is gone is
/// redirected back to that master until the replica takes over.
/// `NOREPLICAS` (a master with `min-replicas-to-write` and too few
/// replicas) and `MISCONF` (a master that cannot save, with
/// `stop-writes-on-bgsave-error`) refuse writes until their replicas or
/// their disk come back.
fn transient_code(code: &str) -> bool {
    matches!(
        code,
        "BUSY"
            | "LOADING"
            | "MASTERDOWN"
            | "READONLY"
            | "OOM"
            | "TRYAGAIN"
            | "CLUSTERDOWN"
            | "MOVED"
            | "ASK"
            | "NOREPLICAS"
            | "MISCONF"
    )
}

/// TLS material only goes with `rediss://` URLs; a cluster's seeds all
/// use TLS or none do.
fn tls_fits(shown: &str, urls: &[&str], config: &RedisConfig) -> Result<(), String> {
    let tls = urls.iter().filter(|u| is_tls(u)).count();
    if tls != 0 && tls != urls.len() {
        return Err(format!(
            "{shown}: some seed URLs are rediss:// and some redis://; use one scheme for all"
        ));
    }
    if config.tls.is_some() && tls == 0 {
        return Err(format!(
            "{shown}: TLS settings (RedisConfig::tls) were given for a redis:// URL; use rediss:// to connect over TLS"
        ));
    }
    Ok(())
}

/// `url` with any password replaced by `***`, fit for logs and errors.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{user}@{host}{path}")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("redis://app:s3cret@cache:6379/2"),
            "redis://app:***@cache:6379/2"
        );
        assert_eq!(redact("rediss://:s3cret@cache"), "rediss://:***@cache");
        assert_eq!(redact("redis://token@cache/0"), "redis://***@cache/0");
    }

    #[test]
    fn nogroup_and_lost_connections_are_classified() {
        let scope = Scope {
            url: "redis://h:1",
            stream: "jobs",
            group: Some("workers"),
        };
        let nogroup = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "NOGROUP",
            "No such key 'jobs' or consumer group 'workers'".to_owned(),
        ));
        let _ = nogroup.code();
        let lost = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let mapped = scope.error(&lost);
        assert!(mapped.is_transient(), "{mapped}");
        assert!(mapped.to_string().contains("redis://h:1"), "{mapped}");
        assert!(mapped.to_string().contains("jobs"), "{mapped}");
    }

    /// A server error as redis-rs builds it from the wire (`-CODE detail`).
    fn server_error(wire: &str) -> RedisError {
        let value = redis::parse_redis_value(format!("-{wire}\r\n").as_bytes());
        match value.map(redis::Value::extract_error) {
            Ok(Err(error)) => error,
            other => panic!("{wire:?} is not a server error: {other:?}"),
        }
    }

    /// The "not now" answers of a cluster in a failover, or of a master
    /// refusing writes for a while, are transient: a reply publish that
    /// meets one retries its entry rather than dead-lettering it.
    #[test]
    fn not_now_answers_of_a_cluster_or_a_master_are_transient() {
        let scope = Scope {
            url: "redis://h:1",
            stream: "replies",
            group: None,
        };
        let errors = [
            RedisError::from((ErrorKind::ClusterConnectionNotFound, "No connections found")),
            server_error("MOVED 3999 127.0.0.1:7001"),
            server_error("ASK 3999 127.0.0.1:7001"),
            server_error("NOREPLICAS Not enough good replicas to write."),
            server_error(
                "MISCONF Redis is configured to save RDB snapshots, but it's unable to persist to disk.",
            ),
            server_error("READONLY You can't write against a read only replica."),
        ];
        for e in &errors {
            let mapped = scope.error(e);
            assert!(mapped.is_transient(), "{e:?} -> {mapped}");
        }
        let refused = scope.error(&server_error(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ));
        assert!(!refused.is_transient(), "{refused}");
    }
}

/// What [`RedisBroker::query`] sends in one round trip: a command or a
/// pipeline.
pub(super) trait Query {
    /// Sends it on `conn` and decodes the reply.
    fn send<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
    ) -> impl Future<Output = redis::RedisResult<T>> + Send;
}

/// Implements [`Query`] for redis-rs types that send themselves with
/// `query_async`.
macro_rules! query_async {
    ($($query:ty),+) => {$(
        impl Query for $query {
            fn send<T: FromRedisValue>(
                &self,
                conn: &mut Conn,
            ) -> impl Future<Output = redis::RedisResult<T>> + Send {
                self.query_async(conn)
            }
        }
    )+};
}

query_async!(Cmd, Pipeline);
