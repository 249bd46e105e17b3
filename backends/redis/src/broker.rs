//! [`RedisBroker`]: the [`Broker`] trait over a Redis server.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, Value};
use ruststream_core::{
    Broker, BrokerError, BrokerFuture, BrokerResult, ConsumerInfo, DeadLetter, Entry, EntryId,
    GroupInfo, Message, NameKind, PendingEntry, ReadBatch, ReadMode, ReadRequest, Retry,
    StreamInfo, StreamStart, Trim, check_name,
};
use tokio::sync::OnceCell;

use crate::codec::{self, GroupKeys};
use crate::error::{BROKER, Scope, redact};
use crate::scripts::{Lua, Scripts};

/// The oldest server the broker works with: `XAUTOCLAIM` and exclusive
/// `XPENDING` ranges came in 6.2.
const MIN_VERSION: Version = Version(6, 2, 0);
/// The first server with `XREADGROUP ... CLAIM`.
const CLAIM_VERSION: Version = Version(8, 4, 0);
/// Longest wait between two checks for idle entries in a blocking claiming
/// or reclaim read.
const MAX_IDLE_POLL: Duration = Duration::from_secs(1);
/// Shortest such wait.
const MIN_IDLE_POLL: Duration = Duration::from_millis(10);

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
    /// Default 2.
    pub reconnect_attempts: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            reconnect_attempts: 2,
        }
    }
}

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
    /// The URL with any password masked: what errors and logs show.
    url: String,
    /// The client, or why the URL is not usable (reported on first use).
    client: Result<Client, String>,
    config: RedisConfig,
    manager: OnceCell<ConnectionManager>,
    /// Idle connections for blocking waits.
    blocking: Mutex<Vec<MultiplexedConnection>>,
    scripts: Scripts,
    /// XAUTOCLAIM cursors by (stream, group, consumer).
    cursors: Mutex<HashMap<(String, String, String), String>>,
    /// Set once the server was seen to serve claiming reads, so that a
    /// claiming read asks for the version only until then.
    claiming_verified: AtomicBool,
}

impl fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBroker")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl Version {
    fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
        Some(Version(
            parts.next()??,
            parts.next().flatten().unwrap_or(0),
            parts.next().flatten().unwrap_or(0),
        ))
    }

    /// The server version in an `INFO server` reply.
    fn from_info(info: &str) -> Option<Version> {
        info.lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .and_then(Version::parse)
    }
}

/// What a `New` read leaves for the post script (see `lua/post.lua`).
#[derive(Default)]
struct Post {
    ack: Vec<EntryId>,
    fix: Vec<(EntryId, u32)>,
    dead: Vec<(EntryId, u32)>,
    back: Vec<EntryId>,
}

impl Post {
    fn is_empty(&self) -> bool {
        self.ack.is_empty() && self.fix.is_empty() && self.dead.is_empty() && self.back.is_empty()
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn start_arg(start: StreamStart) -> String {
    match start {
        StreamStart::New => "$".to_owned(),
        StreamStart::Beginning => "0".to_owned(),
        StreamStart::Id(id) => id.to_string(),
    }
}

fn ready<T: Send + 'static>(result: BrokerResult<T>) -> BrokerFuture<'static, T> {
    Box::pin(std::future::ready(result))
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

/// What probing `XREADGROUP ... CLAIM` found.
#[derive(Debug, PartialEq, Eq)]
enum ClaimSupport {
    /// The server ran it.
    Supported,
    /// The server refused it as a syntax it does not know; its answer.
    Missing(String),
}

/// Classifies the server's answer to the `XREADGROUP ... CLAIM` probe. Any
/// reply is support (an empty read, here); an `ERR` about the syntax (what a
/// server without CLAIM answers: Redis 7.0 says `ERR syntax error`) is its
/// absence. Any other error (a lost connection, an ACL refusal) is handed
/// back as it is: it says nothing about CLAIM.
fn classify_claim_probe(reply: Result<Value, RedisError>) -> Result<ClaimSupport, RedisError> {
    let e = match reply {
        Ok(_) => return Ok(ClaimSupport::Supported),
        Err(e) => e,
    };
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    let about_syntax = [
        "syntax",
        "unrecognized",
        "unknown",
        "wrong number of arguments",
    ]
    .iter()
    .any(|word| detail.contains(word));
    if e.code() == Some("ERR") && about_syntax {
        let shown = format!("ERR {}", e.detail().unwrap_or_default());
        return Ok(ClaimSupport::Missing(shown));
    }
    Err(e)
}

/// Whether a claiming read can be served, given the server's version and
/// what the probe found. The probe decides: a server can report 8.4 or
/// later and lack CLAIM (a development build reports 255.255.255).
fn claim_gate(url: &str, version: Version, support: &ClaimSupport) -> BrokerResult<()> {
    let ClaimSupport::Missing(answer) = support else {
        return Ok(());
    };
    let advice = "on this server read new entries with RedisStream::new(..) and take over a stopped worker's entries \
         with a second subscription RedisStream::reclaim(.., min_idle) on the same group (XAUTOCLAIM)";
    let needed = format!("{}.{}", CLAIM_VERSION.0, CLAIM_VERSION.1);
    let detail = if version < CLAIM_VERSION {
        format!(
            "a claiming read (XREADGROUP ... CLAIM) needs Redis {needed} or later, and the server at {url} runs Redis {version} \
             (it answered XREADGROUP ... CLAIM with {answer:?}); {advice}"
        )
    } else {
        format!(
            "a claiming read needs XREADGROUP ... CLAIM (Redis {needed} or later), and the server at {url} reports Redis {version} \
             but does not have it (it answered XREADGROUP ... CLAIM with {answer:?}); {advice}"
        )
    };
    Err(BrokerError::Unsupported {
        broker: BROKER,
        detail,
    })
}

/// A key for one claim probe: in the `rs:` namespace (no stream name has
/// braces, so no stream is called this) and unique, so that concurrent
/// probes never meet.
fn probe_key() -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "rs:{{ruststream-probe}}:claim:{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
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
        let url = url.into();
        let shown = redact(&url);
        let client = Client::open(url.as_str())
            .map_err(|e| format!("{shown} is not a usable Redis URL: {e}"));
        RedisBroker {
            inner: Arc::new(Inner {
                url: shown,
                client,
                config,
                manager: OnceCell::new(),
                blocking: Mutex::new(Vec::new()),
                scripts: Scripts::new(),
                cursors: Mutex::new(HashMap::new()),
                claiming_verified: AtomicBool::new(false),
            }),
        }
    }

    /// The server's URL, with any password masked.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    fn scope<'a>(&'a self, stream: &'a str, group: Option<&'a str>) -> Scope<'a> {
        Scope {
            url: &self.inner.url,
            stream,
            group,
        }
    }

    fn client(&self) -> BrokerResult<&Client> {
        self.inner
            .client
            .as_ref()
            .map_err(|detail| BrokerError::InvalidArgument(detail.clone()))
    }

    /// The shared multiplexed connection (made on first use; it reconnects
    /// by itself after a loss).
    async fn conn(&self) -> BrokerResult<ConnectionManager> {
        let client = self.client()?;
        let config = &self.inner.config;
        let manager = self
            .inner
            .manager
            .get_or_try_init(|| async {
                let settings = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(config.response_timeout))
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_number_of_retries(config.reconnect_attempts)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(1));
                ConnectionManager::new_lazy_with_config(client.clone(), settings).map_err(|e| {
                    BrokerError::Connection {
                        broker: BROKER,
                        detail: format!("{}: {e}", self.inner.url),
                    }
                })
            })
            .await?;
        Ok(manager.clone())
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &Cmd,
        scope: Scope<'_>,
    ) -> BrokerResult<T> {
        let mut conn = self.conn().await?;
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))
    }

    async fn server_version(&self) -> BrokerResult<Version> {
        let scope = self.scope("", None);
        let info: String = self.query(redis::cmd("INFO").arg("server"), scope).await?;
        Version::from_info(&info).ok_or_else(|| BrokerError::Backend {
            broker: BROKER,
            detail: format!(
                "the server at {} did not report its version in INFO server",
                self.inner.url
            ),
        })
    }

    async fn check(&self, mode: ReadMode) -> BrokerResult<()> {
        let version = self.server_version().await?;
        if version < MIN_VERSION {
            return Err(BrokerError::Unsupported {
                broker: BROKER,
                detail: format!(
                    "the server at {} runs Redis {version}; ruststream needs Redis {MIN_VERSION} or later (XAUTOCLAIM)",
                    self.inner.url
                ),
            });
        }
        if matches!(mode, ReadMode::Claiming { .. }) {
            let support = self.probe_claim(&probe_key()).await?;
            claim_gate(&self.inner.url, version, &support)?;
        }
        Ok(())
    }

    /// Asks the server to run `XREADGROUP ... CLAIM` on a scratch stream
    /// `key` (made, read and deleted in one round trip).
    async fn probe_claim(&self, key: &str) -> BrokerResult<ClaimSupport> {
        let scope = self.scope(key, None);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("XGROUP")
            .arg("CREATE")
            .arg(key)
            .arg("probe")
            .arg("$")
            .arg("MKSTREAM");
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg("probe")
            .arg("probe")
            .arg("COUNT")
            .arg(1)
            .arg("CLAIM")
            .arg(1)
            .arg("STREAMS")
            .arg(key)
            .arg(">");
        pipe.cmd("DEL").arg(key);
        let mut conn = self.conn().await?;
        let replies: Vec<Result<Value, RedisError>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        let [created, read, deleted] = <[_; 3]>::try_from(replies).map_err(|_| {
            scope.bad_reply(codec::BadReply(
                "a three-command pipeline did not answer three times".to_owned(),
            ))
        })?;
        created.map_err(|e| scope.error(&e))?;
        deleted.map_err(|e| scope.error(&e))?;
        classify_claim_probe(read).map_err(|e| scope.error(&e))
    }

    /// One non-blocking read. A `New` read is the hot path: the owed-entries
    /// script and a plain `XREADGROUP`, pipelined in one round trip (so that
    /// entries never pass through Lua, which would cost more than the read
    /// itself); every other mode is one script.
    async fn read_once(&self, req: &ReadRequest<'_>) -> BrokerResult<codec::ScriptRead> {
        if req.mode == ReadMode::New {
            return self.read_new(req).await;
        }
        self.read_script(req, false).await
    }

    /// The read script: the whole read for `req.mode`, or with `owed_only`
    /// just the owed entries that are due.
    async fn read_script(
        &self,
        req: &ReadRequest<'_>,
        owed_only: bool,
    ) -> BrokerResult<codec::ScriptRead> {
        let scope = self.scope(req.stream, Some(req.group));
        let keys = GroupKeys::new(req.stream, req.group);
        let (mode, min_idle) = match req.mode {
            _ if owed_only => ("owed", 0),
            ReadMode::New => ("new", 0),
            ReadMode::Claiming { min_idle } => ("claiming", ms(min_idle)),
            ReadMode::Reclaim { min_idle } => ("reclaim", ms(min_idle)),
            ReadMode::OwnPending { .. } => ("own", 0),
        };
        let position = match req.mode {
            ReadMode::OwnPending { after } => after.to_string(),
            ReadMode::Reclaim { .. } => self.cursor(req),
            _ => "0-0".to_owned(),
        };
        let mut invocation = self.inner.scripts.read.script.prepare_invoke();
        invocation
            .key(req.stream)
            .key(&keys.due)
            .key(&keys.owed)
            .key(&keys.dead)
            .key(&keys.dead_index)
            .key(&keys.wake)
            .arg(req.group)
            .arg(req.consumer)
            .arg(mode)
            .arg(req.count)
            .arg(min_idle)
            .arg(req.max_deliveries.unwrap_or(0))
            .arg(position);
        if let (ReadMode::Claiming { min_idle }, false) = (req.mode, owed_only) {
            for arg in claim_read_command(req.stream, req.group, req.consumer, req.count, min_idle)
            {
                invocation.arg(arg);
            }
        }
        let mut conn = self.conn().await?;
        let value: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        let mut read = codec::script_read(&value).map_err(|e| scope.bad_reply(e))?;
        if let (ReadMode::Reclaim { .. }, Some(cursor)) = (req.mode, &read.cursor) {
            self.set_cursor(req, cursor);
        }
        let aside = std::mem::take(&mut read.aside);
        self.settle_aside(req, aside, &mut read.dead_lettered).await;
        if !read.dropped.is_empty() {
            tracing::warn!(
                stream = req.stream,
                group = req.group,
                consumer = req.consumer,
                ids = ?read.dropped,
                "pending entries no longer in the stream (trimmed while pending): acked away"
            );
        }
        Ok(read)
    }

    async fn read_new(&self, req: &ReadRequest<'_>) -> BrokerResult<codec::ScriptRead> {
        let scope = self.scope(req.stream, Some(req.group));
        let keys = GroupKeys::new(req.stream, req.group);
        let max = req.max_deliveries.unwrap_or(0);
        // One round trip of plain commands: the server's clock, the first
        // owed entry's due time, the wake stream's last id (where a blocking
        // wait starts), and the read itself.
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("TIME");
        pipe.cmd("ZRANGE")
            .arg(&keys.due)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        pipe.cmd("XREVRANGE")
            .arg(&keys.wake)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1);
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg(req.group)
            .arg(req.consumer)
            .arg("COUNT")
            .arg(req.count)
            .arg("STREAMS")
            .arg(req.stream)
            .arg(">");
        let mut conn = self.conn().await?;
        let replies: Vec<Result<Value, RedisError>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        let [time, first_due, wake, new] = <[_; 4]>::try_from(replies).map_err(|_| {
            scope.bad_reply(codec::BadReply(
                "a four-command pipeline did not answer four times".to_owned(),
            ))
        })?;
        let new = new.map_err(|e| scope.error(&e))?;
        let time = time.map_err(|e| scope.error(&e))?;
        let first_due = first_due.map_err(|e| scope.error(&e))?;
        let wake = wake.map_err(|e| scope.error(&e))?;
        let now_ms = codec::server_time_ms(&time)
            .ok_or_else(|| scope.bad_reply(codec::bad("TIME", &time)))?;
        let next_due_ms = codec::array(&first_due)
            .get(1)
            .and_then(codec::text)
            .and_then(|t| t.parse::<f64>().ok())
            .map(|due| due as u64);
        let mut read = codec::ScriptRead {
            now_ms,
            next_due_ms,
            wake_last: Some(
                codec::array(&wake)
                    .first()
                    .and_then(|e| codec::array(e).first())
                    .and_then(codec::text)
                    .unwrap_or("0-0")
                    .to_owned(),
            ),
            ..codec::ScriptRead::default()
        };
        if next_due_ms.is_some_and(|due| due <= now_ms) {
            // Owed entries are due: they go first. The new entries read
            // beside them that leave no room are handed back below.
            match self.read_script(req, true).await {
                Ok(owed) => {
                    read.deliveries = owed.deliveries;
                    read.dead_lettered = owed.dead_lettered;
                    read.next_due_ms = owed.next_due_ms;
                }
                Err(e) => {
                    tracing::error!(stream = req.stream, group = req.group, error = %e, "owed entries not read");
                }
            }
        }
        let mut post = Post::default();
        let mut fresh = Vec::new();
        for entry in codec::into_stream_entries(new) {
            let entry = codec::entry_of_read(entry).map_err(|e| scope.bad_reply(e))?;
            match entry.copy_for {
                Some(group) if group != req.group => post.ack.push(entry.delivery.id()),
                Some(_) => {
                    let carried = entry.delivery.delivery_count;
                    if max > 0 && carried >= max {
                        post.dead.push((entry.delivery.id(), carried));
                    } else {
                        if carried > 0 {
                            post.fix.push((entry.delivery.id(), carried));
                        }
                        fresh.push(entry.delivery);
                    }
                }
                None => fresh.push(entry.delivery),
            }
        }
        let room = req.count.saturating_sub(read.deliveries.len());
        let beyond = if fresh.len() > room {
            fresh.split_off(room)
        } else {
            Vec::new()
        };
        post.back = beyond.iter().map(|d| d.id()).collect();
        read.deliveries.extend(fresh);
        if post.is_empty() {
            return Ok(read);
        }
        match self.post(req, &keys, max, &post).await {
            Ok((buried, aside)) => {
                read.dead_lettered.extend(buried);
                self.settle_aside(req, aside, &mut read.dead_lettered).await;
            }
            Err(e) => {
                // Entries that could not be handed back are delivered after
                // all (over the count, rather than stuck pending unseen).
                // Copies left unsettled stay pending and are settled by their
                // next claim.
                tracing::error!(
                    stream = req.stream,
                    group = req.group,
                    error = %e,
                    "could not settle retry copies or hand back entries read beyond the count"
                );
                read.deliveries.extend(beyond);
            }
        }
        Ok(read)
    }

    /// Deals with the entries a read script set aside rather than fail
    /// half-way: an entry at its attempt bound whose dead letter was too big
    /// for a script is dead-lettered from here (the dead-letter script takes
    /// such appends from the broker); any other is logged. Either way the
    /// entries behind it were read on.
    async fn settle_aside(
        &self,
        req: &ReadRequest<'_>,
        aside: Vec<codec::Aside>,
        dead_lettered: &mut Vec<EntryId>,
    ) {
        if aside.is_empty() {
            return;
        }
        for entry in aside {
            if !entry.error.is_empty() {
                tracing::error!(
                    stream = req.stream,
                    group = req.group,
                    id = %entry.id,
                    error = %entry.error,
                    "an owed entry could neither be handed out nor dead-lettered: set aside (owed again in 10 s), \
                     the entries behind it are read on"
                );
                continue;
            }
            let dead = self
                .dead_letter_impl(
                    req.stream,
                    req.group,
                    &[entry.id],
                    &entry.reason,
                    Some(entry.times),
                )
                .await;
            match dead {
                Ok(0) => {} // settled by another worker meanwhile
                Ok(_) => dead_lettered.push(entry.id),
                Err(e) => tracing::error!(
                    stream = req.stream,
                    group = req.group,
                    id = %entry.id,
                    error = %e,
                    "an entry at max_deliveries could not be dead-lettered: it stays where it was \
                     (an owed one is owed again in 10 s) and the entries behind it are read on"
                ),
            }
        }
        dead_lettered.sort_unstable();
    }

    /// Runs the post script; returns the copies it dead-lettered and the
    /// entries it set aside.
    async fn post(
        &self,
        req: &ReadRequest<'_>,
        keys: &GroupKeys,
        max: u32,
        post: &Post,
    ) -> BrokerResult<(Vec<EntryId>, Vec<codec::Aside>)> {
        let scope = self.scope(req.stream, Some(req.group));
        let mut invocation = self.inner.scripts.post.script.prepare_invoke();
        invocation
            .key(req.stream)
            .key(&keys.due)
            .key(&keys.owed)
            .key(&keys.dead)
            .key(&keys.dead_index)
            .key(&keys.wake)
            .arg(req.group)
            .arg(req.consumer)
            .arg(max);
        invocation.arg("ack").arg(post.ack.len());
        for id in &post.ack {
            invocation.arg(id.to_string());
        }
        for (name, items) in [("fix", &post.fix), ("dead", &post.dead)] {
            invocation.arg(name).arg(items.len() * 2);
            for (id, count) in items {
                invocation.arg(id.to_string()).arg(*count);
            }
        }
        invocation.arg("back").arg(post.back.len());
        for id in &post.back {
            invocation.arg(id.to_string());
        }
        let mut conn = self.conn().await?;
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        codec::post_reply(&reply).map_err(|e| scope.bad_reply(e))
    }

    fn cursor(&self, req: &ReadRequest<'_>) -> String {
        let cursors = self.inner.cursors.lock().unwrap_or_else(|p| p.into_inner());
        cursors
            .get(&(
                req.stream.to_owned(),
                req.group.to_owned(),
                req.consumer.to_owned(),
            ))
            .cloned()
            .unwrap_or_else(|| "0-0".to_owned())
    }

    fn set_cursor(&self, req: &ReadRequest<'_>, cursor: &str) {
        let mut cursors = self.inner.cursors.lock().unwrap_or_else(|p| p.into_inner());
        cursors.insert(
            (
                req.stream.to_owned(),
                req.group.to_owned(),
                req.consumer.to_owned(),
            ),
            cursor.to_owned(),
        );
    }

    async fn read_impl(&self, req: ReadRequest<'_>) -> BrokerResult<ReadBatch> {
        check_names(req.stream, Some(req.group), Some(req.consumer))?;
        if req.count == 0 {
            return Err(BrokerError::InvalidArgument(format!(
                "read from group {:?} on stream {:?} asked for 0 entries; count must be at least 1",
                req.group, req.stream
            )));
        }
        if matches!(req.mode, ReadMode::Claiming { .. })
            && !self.inner.claiming_verified.load(Ordering::Relaxed)
        {
            self.check(req.mode).await?;
            self.inner.claiming_verified.store(true, Ordering::Relaxed);
        }
        let deadline = req
            .block
            .filter(|_| !matches!(req.mode, ReadMode::OwnPending { .. }))
            .map(|block| tokio::time::Instant::now() + block);
        loop {
            let read = self.read_once(&req).await?;
            let batch = ReadBatch {
                deliveries: read.deliveries,
                dead_lettered: read.dead_lettered,
            };
            let Some(deadline) = deadline else {
                return Ok(batch);
            };
            let now = tokio::time::Instant::now();
            if !batch.deliveries.is_empty() || !batch.dead_lettered.is_empty() || now >= deadline {
                return Ok(batch);
            }
            let mut wait = deadline - now;
            if let Some(due) = read.next_due_ms {
                let until_due = Duration::from_millis(due.saturating_sub(read.now_ms).max(1));
                wait = wait.min(until_due);
            }
            if let ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } = req.mode {
                wait = wait.min((min_idle / 4).clamp(MIN_IDLE_POLL, MAX_IDLE_POLL));
            }
            let mut keys = Vec::with_capacity(2);
            let wake = GroupKeys::new(req.stream, req.group).wake;
            if !matches!(req.mode, ReadMode::Reclaim { .. }) {
                // Past the group's cursor nothing is left to read (the read
                // just found nothing new), so anything appended later wakes
                // the wait, however late it starts.
                let after = match read.stream_last {
                    Some(last) => last,
                    None => self.cursor_of(req.stream, req.group).await?.to_string(),
                };
                keys.push((req.stream.to_owned(), after));
            }
            keys.push((wake, read.wake_last.unwrap_or_else(|| "$".to_owned())));
            self.wait_for(&keys, wait, self.scope(req.stream, Some(req.group)))
                .await?;
        }
    }

    /// Waits up to `wait` for any of `keys` (stream, last id seen) to get an
    /// entry after that id, on a connection of its own. Delivers nothing.
    async fn wait_for(
        &self,
        keys: &[(String, String)],
        wait: Duration,
        scope: Scope<'_>,
    ) -> BrokerResult<()> {
        let block_ms = ms(wait).max(1);
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS");
        for (key, _) in keys {
            cmd.arg(key);
        }
        for (_, id) in keys {
            cmd.arg(id);
        }
        let mut conn = self.blocking_conn(scope).await?;
        // The server answers when the block time passes; the margin covers
        // the round trip. Past it the connection is presumed dead.
        let limit = wait + self.inner.config.response_timeout;
        match tokio::time::timeout(limit, cmd.query_async::<Value>(&mut conn)).await {
            Ok(Ok(_)) => {
                self.inner
                    .blocking
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(conn);
                Ok(())
            }
            Ok(Err(e)) => Err(scope.error(&e)),
            Err(_) => Err(BrokerError::Connection {
                broker: BROKER,
                detail: format!(
                    "{}: no answer to a blocking wait of {block_ms} ms within {limit:?}",
                    self.inner.url
                ),
            }),
        }
    }

    /// A connection for blocking waits: an idle pooled one, or a new one.
    /// One that is dropped mid-wait (the read was cancelled) or failed is
    /// never returned to the pool.
    async fn blocking_conn(&self, scope: Scope<'_>) -> BrokerResult<MultiplexedConnection> {
        let pooled = self
            .inner
            .blocking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        if let Some(conn) = pooled {
            return Ok(conn);
        }
        let settings = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.inner.config.connect_timeout))
            .set_response_timeout(None);
        self.client()?
            .get_multiplexed_async_connection_with_config(&settings)
            .await
            .map_err(|e| scope.error(&e))
    }

    /// Runs a settle script (retry, dead letter, redrive) on `ids` in one
    /// call: `keys`, then `args`, then the precopied part (none), then the
    /// ids. A script whose appends are too big for it changes nothing and
    /// plans them instead (see `plan_appends` in `lua/common.lua`); they
    /// are then made here, followed by the script, in one MULTI/EXEC, so
    /// that the call is still applied whole or not at all.
    async fn settle(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
        ids: &[EntryId],
        scope: Scope<'_>,
    ) -> BrokerResult<Value> {
        let mut conn = self.conn().await?;
        let mut invocation = lua.script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        invocation.arg(0);
        for id in ids {
            invocation.arg(id.to_string());
        }
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        let plan = match codec::settled(reply).map_err(|e| scope.bad_reply(e))? {
            codec::Settled::Done(reply) => return Ok(reply),
            codec::Settled::Big(plan) => plan,
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (_, fields) in &plan.items {
            let xadd = pipe.cmd("XADD").arg(&plan.target).arg("*");
            for field in fields {
                xadd.arg(codec::bytes(field).unwrap_or_default());
            }
            xadd.ignore();
        }
        // EVAL, not EVALSHA: inside MULTI a NOSCRIPT could not fall back to
        // the code, and the appends before it would stay.
        let mut eval = redis::cmd("EVAL");
        eval.arg(&lua.code).arg(keys.len());
        for key in keys {
            eval.arg(*key);
        }
        for arg in args {
            eval.arg(*arg);
        }
        eval.arg(plan.items.len());
        for (id, _) in &plan.items {
            eval.arg(id);
        }
        for id in ids {
            codec::push_id(&mut eval, *id);
        }
        pipe.add_command(eval);
        let (reply,): (Value,) = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        match codec::settled(reply).map_err(|e| scope.bad_reply(e))? {
            codec::Settled::Done(reply) => Ok(reply),
            codec::Settled::Big(_) => Err(scope.bad_reply(codec::BadReply(
                "a settle script asked for appends it had been given".to_owned(),
            ))),
        }
    }

    /// Dead-letters `ids`; `times` is the delivery count to record in
    /// place of the one the group has (a read passes the count it saw
    /// before its claim bumped it).
    async fn dead_letter_impl(
        &self,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        reason: &str,
        times: Option<u32>,
    ) -> BrokerResult<u64> {
        let keys = GroupKeys::new(stream, group);
        let times = times.map(|t| t.to_string()).unwrap_or_default();
        let reply = self
            .settle(
                &self.inner.scripts.dead_letter,
                &[stream, &keys.due, &keys.owed, &keys.dead, &keys.dead_index],
                &[group, reason, &times],
                ids,
                self.scope(stream, Some(group)),
            )
            .await?;
        Ok(codec::settled_count(&reply))
    }

    /// The last id `stream` ever had ([`EntryId::ZERO`] if it does not
    /// exist).
    async fn last_id(&self, stream: &str, scope: Scope<'_>) -> BrokerResult<EntryId> {
        let mut conn = self.conn().await?;
        let info: Result<Value, RedisError> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(stream)
            .query_async(&mut conn)
            .await;
        match info {
            Ok(info) => Ok(codec::stream(&info).last_id),
            Err(e) if e.to_string().contains("no such key") => Ok(EntryId::ZERO),
            Err(e) => Err(self.scope(stream, scope.group).error(&e)),
        }
    }

    async fn publish_impl(
        &self,
        stream: &str,
        messages: Vec<Message>,
    ) -> BrokerResult<Vec<EntryId>> {
        check_names(stream, None, None)?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let scope = self.scope(stream, None);
        let mut pipe = redis::pipe();
        for message in &messages {
            let mut cmd = redis::cmd("XADD");
            cmd.arg(stream).arg("*");
            codec::push_fields(&mut cmd, message);
            pipe.add_command(cmd);
        }
        let mut conn = self.conn().await?;
        let replies: Vec<Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        replies
            .iter()
            .map(|r| codec::id(r).ok_or_else(|| scope.bad_reply(codec::bad("XADD id", r))))
            .collect()
    }

    async fn ensure_group_impl(
        &self,
        stream: &str,
        group: &str,
        start: StreamStart,
    ) -> BrokerResult<bool> {
        check_names(stream, Some(group), None)?;
        let scope = self.scope(stream, Some(group));
        if let StreamStart::Id(_) = start {
            start.check_within(stream, self.last_id(stream, scope).await?)?;
        }
        let mut conn = self.conn().await?;
        let created: Result<Value, RedisError> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(group)
            .arg(start_arg(start))
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(false),
            Err(e) => Err(scope.error(&e)),
        }
    }

    async fn group_info_impl(&self, stream: &str, group: &str) -> BrokerResult<GroupInfo> {
        check_names(stream, Some(group), None)?;
        let scope = self.scope(stream, Some(group));
        let keys = GroupKeys::new(stream, group);
        let mut pipe = redis::pipe();
        pipe.cmd("XINFO").arg("GROUPS").arg(stream);
        pipe.cmd("ZCARD").arg(&keys.due);
        pipe.cmd("ZCARD").arg(&keys.dead_index);
        let mut conn = self.conn().await?;
        let (groups, owed, dead): (Value, u64, u64) = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| scope.error(&e))?;
        let row = codec::groups(&groups)
            .map_err(|e| scope.bad_reply(e))?
            .into_iter()
            .find(|g| g.name == group)
            .ok_or_else(|| BrokerError::no_group(stream, group))?;
        let lag = match row.lag {
            Some(lag) => lag,
            None => self.count_after(stream, row.last_delivered, scope).await?,
        };
        Ok(GroupInfo {
            stream: stream.to_owned(),
            name: group.to_owned(),
            last_delivered: row.last_delivered,
            lag,
            pending: row.pending + owed,
            dead_letters: dead,
            consumers: row.consumers,
        })
    }

    /// A group's cursor (its last-delivered id).
    async fn cursor_of(&self, stream: &str, group: &str) -> BrokerResult<EntryId> {
        let scope = self.scope(stream, Some(group));
        let reply: Value = self
            .query(redis::cmd("XINFO").arg("GROUPS").arg(stream), scope)
            .await?;
        codec::groups(&reply)
            .map_err(|e| scope.bad_reply(e))?
            .into_iter()
            .find(|g| g.name == group)
            .map(|g| g.last_delivered)
            .ok_or_else(|| BrokerError::no_group(stream, group))
    }

    /// Entries after `after`, counted by paging through them: the lag when
    /// the server cannot tell it (a group started or moved to an arbitrary
    /// id).
    async fn count_after(
        &self,
        stream: &str,
        after: EntryId,
        scope: Scope<'_>,
    ) -> BrokerResult<u64> {
        const PAGE: usize = 1000;
        let mut conn = self.conn().await?;
        let mut from = format!("({after}");
        let mut total = 0u64;
        loop {
            let page: Value = redis::cmd("XRANGE")
                .arg(stream)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut conn)
                .await
                .map_err(|e| scope.error(&e))?;
            let items = codec::array(&page);
            total += items.len() as u64;
            let last = items
                .last()
                .and_then(|e| codec::array(e).first())
                .and_then(codec::id);
            match last {
                Some(last) if items.len() == PAGE => from = format!("({last}"),
                _ => return Ok(total),
            }
        }
    }

    async fn stream_info_impl(&self, stream: &str) -> BrokerResult<Option<StreamInfo>> {
        check_names(stream, None, None)?;
        let scope = self.scope(stream, None);
        let mut pipe = redis::pipe();
        pipe.cmd("XINFO").arg("STREAM").arg(stream);
        pipe.cmd("XINFO").arg("GROUPS").arg(stream);
        let mut conn = self.conn().await?;
        let reply: Result<(Value, Value), RedisError> = pipe.query_async(&mut conn).await;
        let (info, groups) = match reply {
            Ok(reply) => reply,
            // Alone or inside a pipeline failure, "no such key" means no stream.
            Err(e) if e.to_string().contains("no such key") => return Ok(None),
            Err(e) => return Err(scope.error(&e)),
        };
        let row = codec::stream(&info);
        let groups = codec::groups(&groups).map_err(|e| scope.bad_reply(e))?;
        Ok(Some(StreamInfo {
            name: stream.to_owned(),
            length: row.length,
            first_id: row.first_id,
            last_id: row.last_id,
            groups: groups.into_iter().map(|g| g.name).collect(),
        }))
    }
}

/// The largest COUNT sent to the server: callers may ask for `usize::MAX`
/// ("all"), which Redis (a signed 64-bit COUNT, and Lua's doubles) would
/// refuse or mangle.
const MAX_COUNT: usize = 1 << 30;

/// The `XREADGROUP ... CLAIM` command of a claiming read (Redis 8.4): idle
/// pending entries first (longest idle first), then new ones, `count` in
/// all. The read script runs it with `COUNT` lowered to the room left after
/// owed entries.
pub(crate) fn claim_read_command(
    stream: &str,
    group: &str,
    consumer: &str,
    count: usize,
    min_idle: Duration,
) -> Vec<String> {
    vec![
        "XREADGROUP".to_owned(),
        "GROUP".to_owned(),
        group.to_owned(),
        consumer.to_owned(),
        "COUNT".to_owned(),
        count.to_string(),
        "CLAIM".to_owned(),
        ms(min_idle).to_string(),
        "STREAMS".to_owned(),
        stream.to_owned(),
        ">".to_owned(),
    ]
}

impl Broker for RedisBroker {
    fn name(&self) -> &'static str {
        BROKER
    }

    fn check_mode(&self, mode: ReadMode) -> BrokerFuture<'_, ()> {
        Box::pin(self.check(mode))
    }

    fn publish_batch<'a>(
        &'a self,
        stream: &'a str,
        messages: Vec<Message>,
    ) -> BrokerFuture<'a, Vec<EntryId>> {
        Box::pin(self.publish_impl(stream, messages))
    }

    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        Box::pin(self.ensure_group_impl(stream, group, start))
    }

    fn set_group_position<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, ()> {
        Box::pin(async move {
            check_names(stream, Some(group), None)?;
            let scope = self.scope(stream, Some(group));
            if let StreamStart::Id(_) = start {
                start.check_within(stream, self.last_id(stream, scope).await?)?;
            }
            let _: Value = self
                .query(
                    redis::cmd("XGROUP")
                        .arg("SETID")
                        .arg(stream)
                        .arg(group)
                        .arg(start_arg(start)),
                    scope,
                )
                .await?;
            Ok(())
        })
    }

    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        Box::pin(self.read_impl(request))
    }

    fn ack<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        if let Err(e) = check_names(stream, Some(group), None) {
            return ready(Err(e));
        }
        if ids.is_empty() {
            return ready(Ok(0));
        }
        Box::pin(async move {
            // One XACK of the whole batch, in a script that also clears ids
            // it did not find pending from the owed set (an owed entry is
            // held by nobody), all or nothing.
            let keys = GroupKeys::new(stream, group);
            let scope = self.scope(stream, Some(group));
            let mut invocation = self.inner.scripts.ack.script.prepare_invoke();
            invocation
                .key(stream)
                .key(&keys.due)
                .key(&keys.owed)
                .arg(group);
            for id in ids {
                invocation.arg(id.to_string());
            }
            let mut conn = self.conn().await?;
            let acked: u64 = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(|e| scope.error(&e))?;
            Ok(acked)
        })
    }

    fn retry<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        how: Retry,
    ) -> BrokerFuture<'a, u64> {
        if let Err(e) = check_names(stream, Some(group), None) {
            return ready(Err(e));
        }
        if ids.is_empty() {
            return ready(Ok(0));
        }
        Box::pin(async move {
            let keys = GroupKeys::new(stream, group);
            let scope = self.scope(stream, Some(group));
            let (kind, delay) = match how {
                Retry::Copy => ("copy", 0),
                Retry::After(delay) => ("after", ms(delay)),
            };
            let delay = delay.to_string();
            let reply = self
                .settle(
                    &self.inner.scripts.retry,
                    &[stream, &keys.due, &keys.owed, &keys.wake],
                    &[group, kind, &delay],
                    ids,
                    scope,
                )
                .await?;
            let dropped: Vec<String> = codec::array(&reply)
                .get(1)
                .map(codec::array)
                .unwrap_or(&[])
                .iter()
                .filter_map(|v| codec::text(v).map(str::to_owned))
                .collect();
            if !dropped.is_empty() {
                tracing::warn!(
                    stream,
                    group,
                    ids = ?dropped,
                    "retry with copy: entries no longer in the stream (trimmed while pending): acked away"
                );
            }
            Ok(codec::settled_count(&reply))
        })
    }

    fn dead_letter<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
        reason: &'a str,
    ) -> BrokerFuture<'a, u64> {
        if let Err(e) = check_names(stream, Some(group), None) {
            return ready(Err(e));
        }
        if ids.is_empty() {
            return ready(Ok(0));
        }
        Box::pin(self.dead_letter_impl(stream, group, ids, reason, None))
    }

    fn redrive<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        if let Err(e) = check_names(stream, Some(group), None) {
            return ready(Err(e));
        }
        if ids.is_empty() {
            return ready(Ok(0));
        }
        Box::pin(async move {
            let keys = GroupKeys::new(stream, group);
            let reply = self
                .settle(
                    &self.inner.scripts.redrive,
                    &[
                        stream,
                        &keys.due,
                        &keys.owed,
                        &keys.dead,
                        &keys.dead_index,
                        &keys.wake,
                    ],
                    &[group],
                    ids,
                    self.scope(stream, Some(group)),
                )
                .await?;
            let parts = codec::array(&reply);
            if parts.first().and_then(codec::bytes) == Some(b"lost".as_slice()) {
                let lost: Vec<&str> = parts
                    .get(1)
                    .map(codec::array)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(codec::text)
                    .collect();
                return Err(BrokerError::InvalidArgument(format!(
                    "cannot redrive dead letters {} of group {group:?} on stream {stream:?}: their entries were trimmed \
                     from the stream before they were dead-lettered, so no copy of their fields was kept; \
                     nothing was redriven (discard them instead)",
                    lost.join(", ")
                )));
            }
            Ok(codec::settled_count(&reply))
        })
    }

    fn discard<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        ids: &'a [EntryId],
    ) -> BrokerFuture<'a, u64> {
        if let Err(e) = check_names(stream, Some(group), None) {
            return ready(Err(e));
        }
        if ids.is_empty() {
            return ready(Ok(0));
        }
        Box::pin(async move {
            let keys = GroupKeys::new(stream, group);
            let scope = self.scope(stream, Some(group));
            let mut invocation = self.inner.scripts.discard.script.prepare_invoke();
            invocation
                .key(stream)
                .key(&keys.dead)
                .key(&keys.dead_index)
                .arg(group);
            for id in ids {
                invocation.arg(id.to_string());
            }
            let mut conn = self.conn().await?;
            let reply: Value = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(|e| scope.error(&e))?;
            Ok(codec::settled_count(&reply))
        })
    }

    fn group_info<'a>(&'a self, stream: &'a str, group: &'a str) -> BrokerFuture<'a, GroupInfo> {
        Box::pin(self.group_info_impl(stream, group))
    }

    fn consumers<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
    ) -> BrokerFuture<'a, Vec<ConsumerInfo>> {
        Box::pin(async move {
            check_names(stream, Some(group), None)?;
            let scope = self.scope(stream, Some(group));
            let reply: Value = self
                .query(
                    redis::cmd("XINFO").arg("CONSUMERS").arg(stream).arg(group),
                    scope,
                )
                .await?;
            codec::consumers(&reply).map_err(|e| scope.bad_reply(e))
        })
    }

    fn pending<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
        consumer: Option<&'a str>,
    ) -> BrokerFuture<'a, Vec<PendingEntry>> {
        Box::pin(async move {
            check_names(stream, Some(group), consumer)?;
            let scope = self.scope(stream, Some(group));
            if count == 0 {
                return Ok(Vec::new());
            }
            let keys = GroupKeys::new(stream, group);
            let mut conn = self.conn().await?;
            let reply: Value = self
                .inner
                .scripts
                .pending
                .script
                .key(stream)
                .key(&keys.due)
                .key(&keys.owed)
                .arg(group)
                .arg(from.to_string())
                .arg(count.min(MAX_COUNT))
                .arg(consumer.unwrap_or(""))
                .invoke_async(&mut conn)
                .await
                .map_err(|e| scope.error(&e))?;
            codec::pending(&reply).map_err(|e| scope.bad_reply(e))
        })
    }

    fn dead_letters<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        from: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<DeadLetter>> {
        Box::pin(async move {
            check_names(stream, Some(group), None)?;
            let scope = self.scope(stream, Some(group));
            if count == 0 {
                return Ok(Vec::new());
            }
            let keys = GroupKeys::new(stream, group);
            let mut conn = self.conn().await?;
            let reply: Value = self
                .inner
                .scripts
                .dead_letters
                .script
                .key(stream)
                .key(&keys.dead)
                .key(&keys.dead_index)
                .arg(group)
                .arg(from.to_string())
                .arg(count.min(MAX_COUNT))
                .invoke_async(&mut conn)
                .await
                .map_err(|e| scope.error(&e))?;
            codec::dead_letters(&reply).map_err(|e| scope.bad_reply(e))
        })
    }

    fn range<'a>(
        &'a self,
        stream: &'a str,
        from: EntryId,
        to: EntryId,
        count: usize,
    ) -> BrokerFuture<'a, Vec<Entry>> {
        Box::pin(async move {
            check_names(stream, None, None)?;
            if from > to || count == 0 {
                return Ok(Vec::new());
            }
            let scope = self.scope(stream, None);
            let reply: Value = self
                .query(
                    redis::cmd("XRANGE")
                        .arg(stream)
                        .arg(from.to_string())
                        .arg(to.to_string())
                        .arg("COUNT")
                        .arg(count.min(MAX_COUNT)),
                    scope,
                )
                .await?;
            codec::entries(&reply).map_err(|e| scope.bad_reply(e))
        })
    }

    fn stream_info<'a>(&'a self, stream: &'a str) -> BrokerFuture<'a, Option<StreamInfo>> {
        Box::pin(self.stream_info_impl(stream))
    }

    fn trim<'a>(&'a self, stream: &'a str, trim: Trim) -> BrokerFuture<'a, u64> {
        Box::pin(async move {
            check_names(stream, None, None)?;
            let scope = self.scope(stream, None);
            let mut cmd = redis::cmd("XTRIM");
            cmd.arg(stream);
            match trim {
                Trim::MaxLen(n) => cmd.arg("MAXLEN").arg(n),
                Trim::MinId(id) => cmd.arg("MINID").arg(id.to_string()),
            };
            self.query(&cmd, scope).await
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(Version::parse("7.0.15"), Some(Version(7, 0, 15)));
        assert_eq!(Version::parse("8.4"), Some(Version(8, 4, 0)));
        assert!(Version(7, 0, 15) < CLAIM_VERSION && Version(8, 4, 2) >= CLAIM_VERSION);
        let info = "# Server\r\nredis_version:8.4.0\r\nredis_mode:standalone\r\n";
        assert_eq!(Version::from_info(info), Some(Version(8, 4, 0)));
        assert_eq!(Version::from_info("# Server\r\n"), None);
    }

    #[test]
    fn a_claiming_read_is_one_xreadgroup_with_claim() {
        let cmd = claim_read_command(
            "payments",
            "ledger",
            "ruststream-0",
            32,
            Duration::from_secs(30),
        );
        assert_eq!(
            cmd,
            [
                "XREADGROUP",
                "GROUP",
                "ledger",
                "ruststream-0",
                "COUNT",
                "32",
                "CLAIM",
                "30000",
                "STREAMS",
                "payments",
                ">"
            ]
        );
    }

    /// A reply as the server sent it (RESP bytes), read the way the client
    /// reads every reply.
    fn recorded(resp: &[u8]) -> Result<Value, RedisError> {
        redis::parse_redis_value(resp).and_then(Value::extract_error)
    }

    #[test]
    fn claim_probe_replies_are_classified() {
        // Redis 7.0.15 (recorded): XREADGROUP GROUP g c COUNT 1 CLAIM 1 STREAMS k >
        assert_eq!(
            classify_claim_probe(recorded(b"-ERR syntax error\r\n")).ok(),
            Some(ClaimSupport::Missing("ERR syntax error".to_owned()))
        );
        // Another wording a server without the option could use.
        assert!(matches!(
            classify_claim_probe(recorded(b"-ERR Unrecognized XREADGROUP option 'CLAIM'\r\n")),
            Ok(ClaimSupport::Missing(_))
        ));
        // Redis 8.4 on the fresh probe stream: nothing to read (a null in
        // RESP2 and in RESP3), or, were there an entry, the entry with its
        // idle time and delivery count.
        for reply in [
            b"*-1\r\n".as_slice(),
            b"_\r\n",
            b"*1\r\n*2\r\n$1\r\nk\r\n*1\r\n*4\r\n$3\r\n5-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:0\r\n:0\r\n",
        ] {
            assert_eq!(
                classify_claim_probe(recorded(reply)).ok(),
                Some(ClaimSupport::Supported),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
        // Errors that say nothing about CLAIM are errors.
        assert!(classify_claim_probe(recorded(b"-NOPERM no permissions\r\n")).is_err());
        assert!(classify_claim_probe(recorded(b"-LOADING loading\r\n")).is_err());
        let lost = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(classify_claim_probe(Err(lost)).is_err());
    }

    #[test]
    fn a_server_without_claim_is_refused_whatever_version_it_reports() {
        let missing = ClaimSupport::Missing("ERR syntax error".to_owned());
        // 255.255.255: what a development build reports.
        for version in [Version(255, 255, 255), Version(8, 4, 0), Version(7, 0, 15)] {
            let err = claim_gate("redis://h:1", version, &missing).unwrap_err();
            let BrokerError::Unsupported { detail, .. } = &err else {
                panic!("{err:?}")
            };
            for needed in [
                version.to_string().as_str(),
                "8.4",
                "ERR syntax error",
                "redis://h:1",
                "RedisStream::new",
                "RedisStream::reclaim",
                "same group",
            ] {
                assert!(detail.contains(needed), "{needed:?} in {detail}");
            }
        }
        assert!(claim_gate("redis://h:1", Version(8, 4, 0), &ClaimSupport::Supported).is_ok());
    }

    #[tokio::test]
    async fn the_claim_probe_runs_on_a_scratch_key_and_is_refused_by_a_server_without_claim() {
        let url = std::env::var("RUSTSTREAM_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let broker = RedisBroker::standalone(url.as_str());
        let version = broker.server_version().await.unwrap();
        let key = probe_key();
        let support = broker.probe_claim(&key).await.unwrap();
        let client = Client::open(url.as_str()).unwrap();
        let mut cli = client.get_multiplexed_async_connection().await.unwrap();
        let left: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut cli)
            .await
            .unwrap();
        assert_eq!(left, 0, "the probe cleans up after itself");
        if version >= CLAIM_VERSION {
            // Only a server that has CLAIM passes; this one says which.
            return;
        }
        let ClaimSupport::Missing(answer) = &support else {
            panic!("Redis {version} accepted XREADGROUP ... CLAIM?")
        };
        assert!(answer.contains("syntax"), "{answer}");
        let err = broker
            .check(ReadMode::Claiming {
                min_idle: Duration::from_secs(1),
            })
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&version.to_string()) && text.contains("RedisStream::reclaim"),
            "{text}"
        );
    }

    #[test]
    fn construction_never_connects() {
        // Nothing listens on port 1; building the broker must not care.
        let broker = RedisBroker::standalone("redis://127.0.0.1:1");
        assert_eq!(broker.url(), "redis://127.0.0.1:1");
        let bad = RedisBroker::standalone("not a url");
        assert!(bad.client().is_err());
    }
}
