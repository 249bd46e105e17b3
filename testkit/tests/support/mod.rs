//! Shared by the testkit's real-time tests: the crash tests' bookkeeping
//! (`crash`), private `redis-server` processes (`redis_server`) and
//! private clusters of them (`redis_cluster`), and a proxy that holds a
//! server's answers back (`proxy`), and a handler that records its runs
//! (`recorder`); and polling helpers for the tests on tokio's clock.

// Each test binary uses part of this.
#![allow(dead_code, unreachable_pub)]

pub mod crash;
pub mod proxy;
pub mod recorder;
pub mod redis_cluster;
pub mod redis_server;
pub mod tls;

/// Fails unless `found` is empty, with `context`, how many were found and
/// `what` they are, and up to `shown` of them.
#[track_caller]
pub fn assert_none<T: std::fmt::Debug>(
    found: &[T],
    shown: usize,
    context: impl std::fmt::Display,
    what: &str,
) {
    assert!(
        found.is_empty(),
        "{context}: {} {what}, e.g. {:?}",
        found.len(),
        &found[..found.len().min(shown)]
    );
}

/// Waits (in real time, at most `limit`) until `done` holds; returns
/// whether it did. For tests whose servers really run.
pub async fn wait_until(limit: std::time::Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if done().await {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Polls `cond` every `every` of tokio's clock (a paused clock moves only
/// while the app is idle) until it holds; panics naming `what` once
/// `limit` has passed.
pub async fn poll_until(
    what: &str,
    every: std::time::Duration,
    limit: std::time::Duration,
    mut cond: impl AsyncFnMut() -> bool,
) {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(every).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Whether group `group` of `stream` has settled everything: nothing
/// pending, nothing left to read.
pub async fn group_settled(
    broker: &(impl ruststream::Broker + ?Sized),
    stream: &str,
    group: &str,
) -> bool {
    let info = broker
        .group_info(stream, group)
        .await
        .expect("the group can be inspected");
    info.pending == 0 && info.lag == 0
}

/// The payload of the real-time tests' jobs: a number that names each.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub struct Job {
    pub n: u64,
}

impl Job {
    /// `{"n":<n>}` as a message.
    pub fn message(n: u64) -> ruststream::Message {
        ruststream::Message::new(serde_json::to_vec(&Job { n }).expect("a job encodes"))
    }
}

/// What `stream` holds now, as each entry's id and job number.
pub async fn stored_jobs(
    broker: &dyn ruststream::Broker,
    stream: &str,
) -> std::collections::BTreeMap<ruststream::EntryId, u64> {
    use ruststream::EntryId;
    broker
        .range(stream, EntryId::ZERO, EntryId::MAX, usize::MAX)
        .await
        .expect("the stream can be read")
        .iter()
        .map(|e| {
            let job: Job = serde_json::from_slice(e.payload()).expect("a job payload");
            (e.id, job.n)
        })
        .collect()
}

/// Starts the app `name` (version 0) running `subscriber` alone on a
/// clone of `broker` (clones share their connections).
pub async fn start_app(
    name: &str,
    broker: &ruststream_redis::RedisBroker,
    subscriber: impl ruststream::Subscriber,
) -> ruststream::Running {
    start_shared(name, std::sync::Arc::new(broker.clone()), subscriber).await
}

/// Starts the app `name` (version 0) running `subscriber` alone on
/// `broker`.
pub async fn start_shared(
    name: &str,
    broker: std::sync::Arc<dyn ruststream::Broker>,
    subscriber: impl ruststream::Subscriber,
) -> ruststream::Running {
    let app = ruststream::RustStream::new(ruststream::AppInfo::new(name, "0"));
    start_alone(app, broker, subscriber).await
}

/// Starts `app` (configured as the test needs) running `subscriber` alone
/// on `broker`.
pub async fn start_alone(
    app: ruststream::RustStream,
    broker: std::sync::Arc<dyn ruststream::Broker>,
    subscriber: impl ruststream::Subscriber,
) -> ruststream::Running {
    app.with_shared_broker(broker, |b| {
        b.include(subscriber);
    })
    .start()
    .await
    .expect("the app starts")
}

/// The conformance target of a Redis broker (one server or a cluster), in
/// real time, with a key prefix of its own: claiming reads only where the
/// server serves them (8.4), and trimming that drops pending entries (what
/// Redis does). Panics, with `hint` on how to start a server, when none
/// answers.
pub async fn redis_target(
    broker: ruststream_redis::RedisBroker,
    hint: &str,
) -> ruststream_testkit::conformance::Target {
    use ruststream::{Broker, BrokerError, ReadMode};
    let claiming = broker
        .check_mode(ReadMode::Claiming {
            min_idle: std::time::Duration::from_secs(1),
        })
        .await;
    let prefix = format!("rs-test:{}:", ruststream_redis::unique_token());
    let url = broker.url().to_owned();
    let target =
        ruststream_testkit::conformance::Target::real_time(std::sync::Arc::new(broker), prefix)
            .trim_drops_pending();
    match claiming {
        Ok(()) => target,
        Err(BrokerError::Unsupported { .. }) => target.without_claiming_reads(),
        Err(e) => panic!("no Redis to test against at {url} ({hint}): {e}"),
    }
}
