//! What the server can do: its version, and whether it serves claiming
//! reads (`XREADGROUP ... CLAIM`).

use std::fmt;
use std::sync::atomic::Ordering;

use redis::{RedisError, Value};
use ruststream_core::{BrokerError, BrokerResult, ReadMode};

use super::RedisBroker;
use super::connection::BROKER;
use crate::codec::BadReply;
use crate::keys::unique_token;

/// The oldest server the broker works with: `XAUTOCLAIM` and exclusive
/// `XPENDING` ranges came in 6.2.
const MIN_VERSION: Version = Version(6, 2, 0);
/// The first server with `XREADGROUP ... CLAIM`.
const CLAIM_VERSION: Version = Version(8, 4, 0);

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

/// Refuses a server older than [`MIN_VERSION`] and, for a claiming read,
/// one that does not serve `XREADGROUP ... CLAIM`.
pub(super) async fn check_mode(broker: &RedisBroker, mode: ReadMode) -> BrokerResult<()> {
    let version = server_version(broker).await?;
    if version < MIN_VERSION {
        return Err(BrokerError::Unsupported {
            broker: BROKER,
            detail: format!(
                "the server at {} runs Redis {version}; ruststream needs Redis {MIN_VERSION} or later (XAUTOCLAIM)",
                broker.url()
            ),
        });
    }
    if matches!(mode, ReadMode::Claiming { .. }) {
        let support = probe_claim(broker, &probe_key()).await?;
        claim_gate(broker.url(), version, &support)?;
    }
    Ok(())
}

/// [`check_mode`] for a claiming read, until the server has passed it once.
pub(super) async fn check_claiming_once(broker: &RedisBroker, mode: ReadMode) -> BrokerResult<()> {
    let verified = &broker.inner.claiming_verified;
    if matches!(mode, ReadMode::Claiming { .. }) && !verified.load(Ordering::Relaxed) {
        check_mode(broker, mode).await?;
        verified.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// The server's version; on a cluster, the oldest master's (a stream may
/// live on any of them).
async fn server_version(broker: &RedisBroker) -> BrokerResult<Version> {
    let scope = broker.scope("", None);
    let mut conn = broker.conn().await?;
    let holders = conn.key_holders().await.map_err(|e| scope.error(&e))?;
    let mut oldest: Option<Version> = None;
    for holder in &holders {
        let info: String = conn
            .query_on(holder, redis::cmd("INFO").arg("server"))
            .await
            .map_err(|e| scope.error(&e))?;
        let version = Version::from_info(&info).ok_or_else(|| BrokerError::Backend {
            broker: BROKER,
            detail: format!(
                "the server at {} ({holder:?}) did not report its version in INFO server",
                broker.url()
            ),
        })?;
        oldest = Some(oldest.map_or(version, |o| o.min(version)));
    }
    oldest.ok_or_else(|| BrokerError::Backend {
        broker: BROKER,
        detail: format!("{} lists no master to ask for its version", broker.url()),
    })
}

/// Asks the server to run `XREADGROUP ... CLAIM` on a scratch stream `key`
/// (made, read and deleted in one round trip).
async fn probe_claim(broker: &RedisBroker, key: &str) -> BrokerResult<ClaimSupport> {
    let scope = broker.scope(key, None);
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
    let replies: Vec<Result<Value, RedisError>> = broker.query(&pipe, scope).await?;
    let [created, read, deleted] = <[_; 3]>::try_from(replies).map_err(|_| {
        scope.bad_reply(BadReply(
            "a three-command pipeline did not answer three times".to_owned(),
        ))
    })?;
    created.map_err(|e| scope.error(&e))?;
    deleted.map_err(|e| scope.error(&e))?;
    classify_claim_probe(read).map_err(|e| scope.error(&e))
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
    format!("rs:{{ruststream-probe}}:claim:{}", unique_token())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

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
        let broker = RedisBroker::standalone(crate::testing::url());
        let version = server_version(&broker).await.unwrap();
        let key = probe_key();
        let support = probe_claim(&broker, &key).await.unwrap();
        let left: i64 = crate::testing::ask("EXISTS", &key).await;
        assert_eq!(left, 0, "the probe cleans up after itself");
        if version >= CLAIM_VERSION {
            // Only a server that has CLAIM passes; this one says which.
            return;
        }
        let ClaimSupport::Missing(answer) = &support else {
            panic!("Redis {version} accepted XREADGROUP ... CLAIM?")
        };
        assert!(answer.contains("syntax"), "{answer}");
        let err = check_mode(
            &broker,
            ReadMode::Claiming {
                min_idle: Duration::from_secs(1),
            },
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&version.to_string()) && text.contains("RedisStream::reclaim"),
            "{text}"
        );
    }
}
