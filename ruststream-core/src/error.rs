//! Errors a broker reports.

use std::path::PathBuf;

/// Result of a broker call.
pub type BrokerResult<T> = Result<T, BrokerError>;

/// What went wrong in a broker call. Every variant names what it concerns
/// (stream, group, file, server) so that the message alone tells a person
/// where to look.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The group does not exist on the stream (Redis: `NOGROUP`).
    #[error(
        "no consumer group {group:?} on stream {stream:?}: create it first (ensure_group; the runtime does this at start-up)"
    )]
    NoGroup {
        /// The stream named in the call.
        stream: String,
        /// The group named in the call.
        group: String,
    },
    /// An argument the broker cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The broker cannot serve this request at all (for example a claiming
    /// read on a server without support for it).
    #[error("{broker} broker cannot serve this: {detail}")]
    Unsupported {
        /// Which broker.
        broker: &'static str,
        /// What was asked, why it cannot be served and what to do instead.
        detail: String,
    },
    /// The connection to a broker server failed or was lost. Transient: the
    /// runtime retries with backoff.
    #[error("{broker} connection failed: {detail}")]
    Connection {
        /// Which broker.
        broker: &'static str,
        /// What failed.
        detail: String,
    },
    /// An operating-system I/O error on a file or directory.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored data failed a check (checksum, framing, version).
    #[error("corrupt data in {path} at byte offset {offset}: {detail}")]
    Corrupt {
        /// The file concerned.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What check failed.
        detail: String,
    },
    /// Another process holds the broker's directory.
    #[error(
        "{path} is in use by another process ({holder}); stop that process or open another directory"
    )]
    InUse {
        /// The directory (or its lock file).
        path: PathBuf,
        /// Who holds it, as far as can be told (its pid).
        holder: String,
    },
    /// The broker stopped taking writes after a storage failure, so that
    /// nothing is acknowledged that cannot be kept.
    #[error(
        "{broker} broker failed and takes no more writes: {detail}; restart the process once the cause is fixed"
    )]
    Failed {
        /// Which broker.
        broker: &'static str,
        /// The first failure.
        detail: String,
    },
    /// The broker was shut down and takes no more calls.
    #[error("{broker} broker is closed")]
    Closed {
        /// Which broker.
        broker: &'static str,
    },
    /// Any other error reported by a backend.
    #[error("{broker} broker error: {detail}")]
    Backend {
        /// Which broker.
        broker: &'static str,
        /// The backend's message.
        detail: String,
    },
}

impl BrokerError {
    /// Whether retrying the same call later may succeed (a lost connection,
    /// an I/O hiccup, a group that a restarted server forgot). The runtime
    /// backs off and retries these; it stops on the others.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BrokerError::Connection { .. } | BrokerError::Io { .. } | BrokerError::NoGroup { .. }
        )
    }

    /// Shorthand for [`BrokerError::NoGroup`].
    pub fn no_group(stream: &str, group: &str) -> Self {
        BrokerError::NoGroup {
            stream: stream.to_owned(),
            group: group.to_owned(),
        }
    }
}
