//! What the tool talks to: a Redis server, a file-log directory, or a
//! running service's admin endpoint. Commands see one [`Conn`] with the
//! same calls on all three.
//!
//! - `filelog`: opening a directory, read-only when a service holds it;
//! - `broker`: the calls on a [`Broker`] (Redis, a file log);
//! - `admin`: the calls over the admin endpoint's HTTP routes.

mod admin;
mod broker;
mod filelog;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ruststream::{Broker, EntryId, FileLogBroker};
use ruststream_redis::{RedisBroker, RedisConfig};

pub use admin::AdminClient;
pub use filelog::{open_file_log, open_read_only};

use crate::error::{CliError, CliResult};
use crate::model::{DeadLetterRow, EntryRow, GroupSummary, PendingRow, PruneResult, StreamSummary};

/// The environment variable that names a target when no target option is
/// given: `redis://…` (or `rediss://…`), `file:DIR`, or `http://…`.
pub const URL_VAR: &str = "RUSTSTREAM_URL";

/// Where the commands go, as the command line named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Redis server, by URL.
    Redis(String),
    /// A file-log directory.
    FileLog(PathBuf),
    /// A running service's admin endpoint, with the token of its write
    /// routes.
    Admin {
        /// The endpoint's base URL.
        url: String,
        /// The token, if given.
        token: Option<String>,
    },
}

impl Target {
    /// The one target the options name, else the one [`URL_VAR`] names.
    /// Two targets, or none, is a usage error.
    pub fn choose(
        redis: Option<String>,
        dir: Option<PathBuf>,
        admin: Option<String>,
        token: Option<String>,
        env_url: Option<String>,
    ) -> CliResult<Target> {
        let given = usize::from(redis.is_some())
            + usize::from(dir.is_some())
            + usize::from(admin.is_some());
        if given > 1 {
            return Err(CliError::Usage(
                "give exactly one target: --redis URL, --dir DIR or --admin URL".to_owned(),
            ));
        }
        if let Some(url) = redis {
            return Ok(Target::Redis(url));
        }
        if let Some(dir) = dir {
            return Ok(Target::FileLog(dir));
        }
        if let Some(url) = admin {
            return Ok(Target::Admin { url, token });
        }
        match env_url.filter(|u| !u.trim().is_empty()) {
            Some(url) => Target::from_url(url.trim(), token),
            None => Err(CliError::Usage(format!(
                "no target: give --redis URL, --dir DIR or --admin URL, or set {URL_VAR} \
                 (redis://HOST:PORT, file:DIR or http://HOST:PORT)"
            ))),
        }
    }

    /// The target a [`URL_VAR`] value names.
    fn from_url(url: &str, token: Option<String>) -> CliResult<Target> {
        let redis = [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "rediss+cluster://",
        ];
        if redis.iter().any(|scheme| url.starts_with(scheme)) {
            Ok(Target::Redis(url.to_owned()))
        } else if let Some(dir) = url.strip_prefix("file:") {
            if dir.is_empty() {
                return Err(CliError::Usage(format!(
                    "{URL_VAR}={url:?}: name the directory after file:"
                )));
            }
            Ok(Target::FileLog(PathBuf::from(dir)))
        } else if url.starts_with("http://") || url.starts_with("https://") {
            Ok(Target::Admin {
                url: url.to_owned(),
                token,
            })
        } else {
            Err(CliError::Usage(format!(
                "{URL_VAR}={url:?} is not a target: use redis://HOST:PORT, file:DIR or http://HOST:PORT"
            )))
        }
    }

    /// Opens the target for `access`: a file log is opened here (read-only
    /// for [`Access::Read`]); Redis
    /// and the admin endpoint connect on the first call.
    pub fn connect(&self, access: Access) -> CliResult<Conn> {
        match self {
            Target::Redis(url) => {
                let config = RedisConfig {
                    connect_timeout: Duration::from_secs(3),
                    reconnect_attempts: 1,
                    ..RedisConfig::default()
                };
                let broker = RedisBroker::from_url_with(url, config);
                Ok(Conn::Broker {
                    broker: Arc::new(broker),
                    file_log: None,
                })
            }
            Target::FileLog(dir) => {
                let log = open_file_log(dir, access)?;
                Ok(Conn::Broker {
                    broker: Arc::new(log.clone()),
                    file_log: Some(log),
                })
            }
            Target::Admin { url, token } => Ok(Conn::Admin(AdminClient::new(url, token.clone())?)),
        }
    }
}

/// Whether a command only looks or also changes something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// It only reads.
    Read,
    /// It publishes, redrives, discards or deletes.
    Write,
}

/// One message to publish: its payload text and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// The payload.
    pub payload: String,
    /// The headers.
    pub headers: BTreeMap<String, String>,
}

/// One page of a listing: up to `count` items with ids at or after `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// The first id it may hold.
    pub from: EntryId,
    /// How many items it holds at most.
    pub count: usize,
}

/// Which consumers a prune deletes, and whether it only says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pruning {
    /// Only consumers idle at least this long (and holding nothing).
    pub idle: Duration,
    /// List what would be deleted, and delete nothing.
    pub dry_run: bool,
}

/// An opened target.
pub enum Conn {
    /// A broker the tool opened itself.
    Broker {
        /// The broker.
        broker: Arc<dyn Broker>,
        /// The same broker when it is a file log (to sync it at the end).
        file_log: Option<FileLogBroker>,
    },
    /// A running service, through its admin endpoint.
    Admin(AdminClient),
}

impl Conn {
    /// Every stream with its summary, by name.
    pub async fn streams(&self) -> CliResult<Vec<StreamSummary>> {
        match self {
            Conn::Broker { broker, .. } => broker::streams(&**broker).await,
            Conn::Admin(admin) => admin.streams().await,
        }
    }

    /// A stream's summary; [`CliError::NotFound`] if there is no such
    /// stream.
    pub async fn stream(&self, stream: &str) -> CliResult<StreamSummary> {
        match self {
            Conn::Broker { broker, .. } => broker::stream(&**broker, stream).await,
            Conn::Admin(admin) => admin.stream(stream).await,
        }
    }

    /// A group's summary with its consumers.
    pub async fn group(&self, stream: &str, group: &str) -> CliResult<GroupSummary> {
        match self {
            Conn::Broker { broker, .. } => broker::group(&**broker, stream, group).await,
            Conn::Admin(admin) => admin.group(stream, group).await,
        }
    }

    /// A page of the pending list, `consumer`'s only when given.
    pub async fn pending(
        &self,
        stream: &str,
        group: &str,
        page: Page,
        consumer: Option<&str>,
    ) -> CliResult<Vec<PendingRow>> {
        match self {
            Conn::Broker { broker, .. } => {
                let found = broker
                    .pending(stream, group, page.from, page.count, consumer)
                    .await?;
                Ok(found.into_iter().map(Into::into).collect())
            }
            Conn::Admin(admin) => {
                let only = consumer.map(|c| ("consumer", c.to_owned()));
                let path = ["groups", stream, group, "pending"];
                admin.listing(&path, page, only.as_slice()).await
            }
        }
    }

    /// A page of the dead letters.
    pub async fn dead_letters(
        &self,
        stream: &str,
        group: &str,
        page: Page,
    ) -> CliResult<Vec<DeadLetterRow>> {
        match self {
            Conn::Broker { broker, .. } => {
                let found = broker
                    .dead_letters(stream, group, page.from, page.count)
                    .await?;
                Ok(found.iter().map(Into::into).collect())
            }
            Conn::Admin(admin) => {
                let path = ["groups", stream, group, "dead-letters"];
                admin.listing(&path, page, &[]).await
            }
        }
    }

    /// One dead letter; [`CliError::NotFound`] if `id` is not one.
    pub async fn dead_letter(
        &self,
        stream: &str,
        group: &str,
        id: EntryId,
    ) -> CliResult<DeadLetterRow> {
        match self {
            Conn::Broker { broker, .. } => {
                let found = broker.dead_letters(stream, group, id, 1).await?;
                match found.first().filter(|d| d.id() == id) {
                    Some(letter) => Ok(letter.into()),
                    None => Err(CliError::NotFound(format!(
                        "no dead letter {id} in group {group:?} of stream {stream:?}"
                    ))),
                }
            }
            Conn::Admin(admin) => admin.dead_letter(stream, group, id).await,
        }
    }

    /// Makes the dead letters `ids` owed again; returns how many were.
    pub async fn redrive(&self, stream: &str, group: &str, ids: &[EntryId]) -> CliResult<u64> {
        match self {
            Conn::Broker { broker, .. } => Ok(broker.redrive(stream, group, ids).await?),
            Conn::Admin(admin) => admin.write(stream, group, "redrive", ids).await,
        }
    }

    /// Drops the dead letters `ids`; returns how many were.
    pub async fn discard(&self, stream: &str, group: &str, ids: &[EntryId]) -> CliResult<u64> {
        match self {
            Conn::Broker { broker, .. } => Ok(broker.discard(stream, group, ids).await?),
            Conn::Admin(admin) => admin.write(stream, group, "discard", ids).await,
        }
    }

    /// Publishes `messages` in order; returns their ids.
    pub async fn publish(&self, stream: &str, messages: Vec<Outgoing>) -> CliResult<Vec<EntryId>> {
        match self {
            Conn::Broker { broker, .. } => broker::publish(&**broker, stream, messages).await,
            Conn::Admin(admin) => {
                // One request per message, so that a failure part-way
                // names what was published.
                let total = messages.len();
                let mut ids: Vec<EntryId> = Vec::with_capacity(total);
                for message in messages {
                    match admin.publish(stream, message).await {
                        Ok(id) => ids.push(id),
                        Err(error) => {
                            let failed = ids.len()..ids.len() + 1;
                            return Err(published_part_way(error, &ids, total, failed));
                        }
                    }
                }
                Ok(ids)
            }
        }
    }

    /// A page of the entries of `stream`.
    pub async fn entries(&self, stream: &str, page: Page) -> CliResult<Vec<EntryRow>> {
        match self {
            Conn::Broker { broker, .. } => {
                let found = broker
                    .range(stream, page.from, EntryId::MAX, page.count)
                    .await?;
                Ok(found.iter().map(Into::into).collect())
            }
            Conn::Admin(admin) => {
                admin
                    .listing(&["streams", stream, "entries"], page, &[])
                    .await
            }
        }
    }

    /// Deletes the group's consumers idle at least `how.idle` that hold
    /// nothing (none on a dry run); lists those kept because they hold
    /// entries.
    pub async fn prune(&self, stream: &str, group: &str, how: Pruning) -> CliResult<PruneResult> {
        match self {
            Conn::Broker { broker, .. } => broker::prune(&**broker, stream, group, how).await,
            Conn::Admin(admin) => admin.prune(stream, group, how).await,
        }
    }

    /// Ends a change made through this connection: makes what was written
    /// durable ([`Conn::finish`]) whether `result` is a success or a
    /// failure part-way (what the parts before it changed is reported as
    /// done, so it must last). The change's own error wins over a failed
    /// sync after it, which is added to its message.
    pub async fn finishing<T>(&self, result: CliResult<T>) -> CliResult<T> {
        let synced = self.finish().await;
        match (result, synced) {
            (Ok(value), Ok(())) => Ok(value),
            (Ok(_), Err(error)) => Err(error),
            (Err(error), Ok(())) => Err(error),
            (Err(error), Err(sync)) => Err(error.after(&format!(
                "could not make the changes made so far durable ({}); ",
                sync.message()
            ))),
        }
    }

    /// Makes what was written durable (a file log's group state) before
    /// the process exits.
    pub async fn finish(&self) -> CliResult<()> {
        if let Conn::Broker {
            file_log: Some(log),
            ..
        } = self
        {
            log.sync().await?;
        }
        Ok(())
    }
}

/// The error of a publish of `total` messages that failed at the messages
/// `failed` (0-based) after `ids` were published: when some were, the
/// message says how many and their ids, so that running the command again
/// does not publish them twice unknowingly. The error keeps its kind (and
/// exit code).
fn published_part_way(
    error: CliError,
    ids: &[EntryId],
    total: usize,
    failed: std::ops::Range<usize>,
) -> CliError {
    if ids.is_empty() {
        return error;
    }
    let published: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let which = if failed.len() == 1 {
        format!("message {}", failed.start + 1)
    } else {
        format!("messages {} to {}", failed.start + 1, failed.end)
    };
    error.after(&format!(
        "{} of {total} messages published ({}), then {which}: ",
        ids.len(),
        published.join(", ")
    ))
}
