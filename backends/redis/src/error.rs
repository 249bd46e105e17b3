//! Turning client errors into [`BrokerError`]s that name the server, the
//! stream and the group.

use redis::{ErrorKind, RedisError, ServerErrorKind};
use ruststream_core::BrokerError;

use crate::codec::BadReply;

pub(crate) const BROKER: &str = "redis";

/// What a call was about, for error messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scope<'a> {
    pub(crate) url: &'a str,
    pub(crate) stream: &'a str,
    pub(crate) group: Option<&'a str>,
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
    pub(crate) fn error(&self, e: &RedisError) -> BrokerError {
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

    pub(crate) fn bad_reply(&self, e: BadReply) -> BrokerError {
        BrokerError::Backend {
            broker: BROKER,
            detail: format!("{} ({}, server {})", e.0, self.about(), self.url),
        }
    }
}

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
            )
        )
        || matches!(e.code(), Some("BUSY" | "LOADING" | "MASTERDOWN"))
}

/// `url` with any password replaced by `***`, fit for logs and errors.
pub(crate) fn redact(url: &str) -> String {
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
}
