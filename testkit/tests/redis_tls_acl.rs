//! The connections managed Redis services require: TLS (`rediss://`) with
//! a private CA and a client certificate (mutual TLS), and an ACL user
//! allowed only the commands docs/operations.md lists and only its
//! stream's keys, on one server and on a cluster. Each test starts its own
//! `redis-server`s with TLS ports and certificates it makes with `openssl`
//! (never the shared servers).
//!
//! A subscriber runs end to end over each (blocking reads, retries with
//! delay, dead letters: every script the broker has), and the failures an
//! operator meets (no client certificate, an untrusted server, a key
//! outside the user's patterns, a wrong password) are clear errors that
//! never show the password.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, BrokerScope, Message, RedisBroker, RedisConfig, RedisTls, StreamStart};
use support::redis_cluster::RedisCluster;
use support::redis_server::{Persistence, RedisServer, free_port};
use support::tls::TestCerts;
use support::{Job, wait_until};

const TLS_STREAM: &str = "tls-jobs";
const ACL_STREAM: &str = "acl-jobs";
const CLUSTER_STREAM: &str = "tls-cluster-jobs";
const JOBS: u64 = 60;
const PASSWORD: &str = "s3cret-acl-pass";

/// The least a subscriber needs (docs/operations.md, *Redis ACL*).
const SUBSCRIBER_COMMANDS: &str = "+ping +info +time +evalsha +eval +script|load \
     +multi +exec +exists +type +del +xadd +xreadgroup +xread +xack +xclaim +xautoclaim \
     +xpending +xgroup +xinfo +xrange +xrevrange +xlen +xdel +hget +hset +hdel +hgetall +zadd \
     +zrange +zrangebyscore +zrangebylex +zrem +zscore +zcard";

/// What a subscriber on a cluster needs on top (docs/operations.md).
const CLUSTER_COMMANDS: &str = "+cluster|slots +set";

static TLS_SEEN: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());
static ACL_SEEN: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());
static CLUSTER_SEEN: Mutex<BTreeMap<u64, u32>> = Mutex::new(BTreeMap::new());

/// Every fifth job is retried once after 20 ms; every seventh is
/// dead-lettered.
fn outcome(seen: &Mutex<BTreeMap<u64, u32>>, n: u64) -> HandlerOutcome {
    let times = {
        let mut seen = seen.lock().unwrap();
        let count = seen.entry(n).or_default();
        *count += 1;
        *count
    };
    if n.is_multiple_of(7) {
        HandlerOutcome::dead_letter("sevens are refused")
    } else if n.is_multiple_of(5) && times == 1 {
        HandlerOutcome::retry_after(Duration::from_millis(20))
    } else {
        HandlerOutcome::Ack
    }
}

#[subscriber(RedisStream::new(TLS_STREAM).group("g").consumer("tls"), workers(2))]
async fn tls_handler(job: &Job) -> HandlerOutcome {
    outcome(&TLS_SEEN, job.n)
}

#[subscriber(RedisStream::new(ACL_STREAM).group("g").consumer("acl"), workers(2))]
async fn acl_handler(job: &Job) -> HandlerOutcome {
    outcome(&ACL_SEEN, job.n)
}

#[subscriber(RedisStream::new(CLUSTER_STREAM).group("g").consumer("cluster"), workers(2))]
async fn cluster_handler(job: &Job) -> HandlerOutcome {
    outcome(&CLUSTER_SEEN, job.n)
}

/// Adds the operator's ACL user `app` on the server at `port`: the
/// subscriber's commands, on `stream` and the keys ruststream keeps beside
/// it, nothing else.
fn add_acl_user(port: u16, stream: &str, more: &str) {
    let rule = format!(
        "ACL SETUSER app reset on >{PASSWORD} ~{stream} ~rs:{{{stream}}}:* resetchannels -@all {SUBSCRIBER_COMMANDS} {more}"
    );
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(rule.split_whitespace())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "OK",
        "{rule}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private server with a TLS port (clients must present a certificate
/// the test CA signed) beside its plain one (for set-up and readiness).
fn tls_server(what: &str, certs: &TestCerts) -> (RedisServer, u16) {
    let tls_port = free_port();
    let args = certs.server_args(tls_port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (
        RedisServer::start_with(what, Persistence::None, &args),
        tls_port,
    )
}

fn mutual_tls(certs: &TestCerts) -> RedisTls {
    RedisTls::from_files(
        Some(&certs.path("ca.pem")),
        Some((&certs.path("client.pem"), &certs.path("client.key"))),
    )
    .unwrap()
}

fn config(tls: RedisTls) -> RedisConfig {
    RedisConfig {
        tls: Some(tls),
        connect_timeout: Duration::from_secs(2),
        reconnect_attempts: 0,
        ..RedisConfig::default()
    }
}

/// Runs an app with `include`d subscriber on `broker`, publishes `JOBS`
/// jobs to `stream`, and checks that each is handled as [`outcome`] says:
/// retried ones twice, sevens dead-lettered.
async fn run_jobs(
    broker: RedisBroker,
    stream: &str,
    seen: &'static Mutex<BTreeMap<u64, u32>>,
    include: impl FnOnce(&mut BrokerScope<'_>),
) {
    let running = RustStream::new(AppInfo::new("tls", "0"))
        .with_shared_broker(Arc::new(broker.clone()) as Arc<dyn Broker>, include)
        .start()
        .await
        .unwrap();
    for n in 0..JOBS {
        broker.publish(stream, Job::message(n)).await.unwrap();
    }
    let expected = |n: u64| {
        if n.is_multiple_of(5) && !n.is_multiple_of(7) {
            2
        } else {
            1
        }
    };
    let done = async || {
        let seen = seen.lock().unwrap();
        (0..JOBS).all(|n| seen.get(&n).copied().unwrap_or(0) >= expected(n))
    };
    let finished = wait_until(Duration::from_secs(20), done).await;
    let seen_now = seen.lock().unwrap().clone();
    assert!(
        finished,
        "{stream}: not every job was handled as expected: {seen_now:?}"
    );
    let dead = broker
        .dead_letters(stream, "g", ruststream::EntryId::ZERO, 100)
        .await
        .unwrap();
    assert_eq!(
        dead.len() as u64,
        (0..JOBS).filter(|n| n.is_multiple_of(7)).count() as u64,
        "{stream}: dead letters"
    );
    tokio::time::timeout(Duration::from_secs(10), running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_runs_over_mutual_tls_and_bad_tls_is_a_clear_error() {
    let certs = tokio::task::block_in_place(|| TestCerts::make("mtls"));
    let (_server, tls_port) = tokio::task::block_in_place(|| tls_server("mtls", &certs));
    let url = format!("rediss://127.0.0.1:{tls_port}");

    let broker = RedisBroker::standalone_with(&url, config(mutual_tls(&certs)));
    run_jobs(broker, TLS_STREAM, &TLS_SEEN, |b| {
        b.include(tls_handler);
    })
    .await;

    // Trusting the CA but presenting no client certificate: refused.
    let no_client = RedisTls {
        client: None,
        ..mutual_tls(&certs)
    };
    let broker = RedisBroker::standalone_with(&url, config(no_client));
    let err = broker
        .ensure_group(TLS_STREAM, "other", StreamStart::New)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&url), "names the server: {err}");

    // The system's roots do not know the test CA: the server's certificate
    // is not trusted.
    let broker = RedisBroker::standalone_with(
        &url,
        RedisConfig {
            connect_timeout: Duration::from_secs(2),
            reconnect_attempts: 0,
            ..RedisConfig::default()
        },
    );
    let err = broker
        .ensure_group(TLS_STREAM, "other", StreamStart::New)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&url) && text.to_lowercase().contains("certificate"),
        "an untrusted server is named, and the certificate blamed: {text}"
    );

    // TLS settings with a plain URL are a mistake, said on first use.
    let plain = format!("redis://127.0.0.1:{tls_port}");
    let broker = RedisBroker::standalone_with(&plain, config(mutual_tls(&certs)));
    let err = broker
        .ensure_group(TLS_STREAM, "other", StreamStart::New)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("rediss://"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_limited_to_its_streams_keys_runs_a_subscriber_over_tls() {
    let certs = tokio::task::block_in_place(|| TestCerts::make("acl"));
    let (server, tls_port) = tokio::task::block_in_place(|| tls_server("acl", &certs));
    add_acl_user(server.port(), ACL_STREAM, "");
    let url = format!("rediss://app:{PASSWORD}@127.0.0.1:{tls_port}");
    let broker = RedisBroker::standalone_with(&url, config(mutual_tls(&certs)));
    assert!(!broker.url().contains(PASSWORD), "{}", broker.url());

    run_jobs(broker.clone(), ACL_STREAM, &ACL_SEEN, |b| {
        b.include(acl_handler);
    })
    .await;

    // A stream outside the user's keys: refused, clearly, password hidden.
    let err = broker
        .publish("someone-elses", Message::new(b"{}".to_vec()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("NOPERM") || text.contains("permission"),
        "{text}"
    );
    assert!(text.contains("someone-elses"), "names the stream: {text}");
    assert!(!text.contains(PASSWORD), "shows the password: {text}");

    // A wrong password: refused, and neither password shown.
    let wrong = format!("rediss://app:not-{PASSWORD}@127.0.0.1:{tls_port}");
    let broker = RedisBroker::standalone_with(&wrong, config(mutual_tls(&certs)));
    let err = broker
        .publish(ACL_STREAM, Message::new(b"{}".to_vec()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(!text.contains(PASSWORD), "shows a password: {text}");
    assert!(text.contains("app:***@"), "names the user: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_runs_a_subscriber_on_a_tls_cluster() {
    let certs = tokio::task::block_in_place(|| TestCerts::make("cluster"));
    let cluster = tokio::task::block_in_place(|| RedisCluster::start_tls("tls", &certs));
    for port in cluster.plain_ports() {
        // A cluster client also reads the slot map.
        add_acl_user(port, CLUSTER_STREAM, CLUSTER_COMMANDS);
    }
    let seeds: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replace("rediss://", &format!("rediss://app:{PASSWORD}@")))
        .collect();
    let broker = RedisBroker::cluster_with(seeds, config(mutual_tls(&certs)));
    assert!(!broker.url().contains(PASSWORD), "{}", broker.url());
    run_jobs(broker, CLUSTER_STREAM, &CLUSTER_SEEN, |b| {
        b.include(cluster_handler);
    })
    .await;
}
