//! Consume+ack and publish on a Redis Cluster, beside hand-written redis-rs
//! loops on the same cluster, in one run.
//!
//! Rows (each the median of `REPS` interleaved runs, one current-thread
//! runtime: one client core, while the six servers share the other):
//!
//! - **consume, 1 stream**: the stream is filled first (untimed), then read
//!   and acked until empty. *hand loop*: `XREADGROUP COUNT 500` + one
//!   `XACK` per batch on redis-rs's cluster connection, payloads decoded
//!   with serde_json. *broker loop*: `RedisBroker::cluster` `read(500)` +
//!   `ack`. *#\[subscriber\]*: an app with `workers(8)` and default options.
//! - **consume, 8 streams**: eight such loops at once, one per stream, the
//!   streams' slots spread over the three masters.
//! - **publish, one message per call**: 8 concurrent publishers, with the
//!   master's reply (the default) and with `ReplicaAck { replicas: 1 }`
//!   (`WAIT 1` after every `XADD`): the cost of surviving a failover.
//!
//! ```text
//! scripts/redis-cluster          # a 3+3 cluster on ports 7000-7005
//! cargo run --release -p ruststream-benches --bin redis_cluster
//! ```
//!
//! The cluster is `RUSTSTREAM_REDIS_CLUSTER_URLS` (default the one
//! `scripts/redis-cluster` starts). Keys are `rs-bench:*`, deleted after
//! each run.

use std::error::Error;
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use ruststream::{Broker, Message};
use ruststream_benches::redis_loops;
use ruststream_benches::run_stream::{GROUP, PROBE, ledger};
use ruststream_benches::{median, payload, warm_up_and_interleave};
use ruststream_redis::{RedisBroker, RedisConfig, ReplicaAck};

type BenchResult<T> = Result<T, Box<dyn Error>>;

const DEFAULT_MESSAGES: u64 = 100_000;
const REPS: usize = 3;
const STREAMS: usize = 8;
const PUBLISHERS: u64 = 8;

fn urls() -> Vec<String> {
    let list = std::env::var("RUSTSTREAM_REDIS_CLUSTER_URLS");
    ruststream_redis::split_urls(list.as_deref().unwrap_or("redis://127.0.0.1:7000"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    HandOne,
    BrokerOne,
    SubscriberOne,
    HandEight,
    BrokerEight,
    PublishMaster,
    PublishReplica,
}

impl Row {
    const ALL: [Row; 7] = [
        Row::HandOne,
        Row::BrokerOne,
        Row::SubscriberOne,
        Row::HandEight,
        Row::BrokerEight,
        Row::PublishMaster,
        Row::PublishReplica,
    ];

    fn label(self) -> &'static str {
        match self {
            Row::HandOne => "consume 1 stream, hand loop (XREADGROUP 500 + XACK)",
            Row::BrokerOne => "consume 1 stream, RedisBroker read(500) + ack",
            Row::SubscriberOne => "consume 1 stream, #[subscriber] workers(8), defaults",
            Row::HandEight => "consume 8 streams, 8 hand loops",
            Row::BrokerEight => "consume 8 streams, 8 RedisBroker loops",
            Row::PublishMaster => "publish 1 per call x8 publishers, master's reply",
            Row::PublishReplica => "publish 1 per call x8 publishers, ReplicaAck(1)",
        }
    }

    /// The row it is measured against.
    fn baseline(self) -> Row {
        match self {
            Row::HandOne | Row::BrokerOne | Row::SubscriberOne => Row::HandOne,
            Row::HandEight | Row::BrokerEight => Row::HandEight,
            Row::PublishMaster | Row::PublishReplica => Row::PublishMaster,
        }
    }
}

async fn consume_app(broker: &RedisBroker, stream: &str, n: u64) -> BenchResult<()> {
    redis_loops::app_consume(broker, stream, GROUP, n, &PROBE, |b| {
        b.include(ledger);
    })
    .await?;
    Ok(())
}

/// `PUBLISHERS` tasks publishing one message per call, `n` in all.
async fn publish_singles(broker: &RedisBroker, stream: &str, n: u64) -> BenchResult<()> {
    let each = n / PUBLISHERS;
    let tasks: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let (broker, stream) = (broker.clone(), stream.to_owned());
            tokio::spawn(async move {
                for j in 0..each {
                    broker
                        .publish(&stream, Message::new(payload(p * each + j)))
                        .await?;
                }
                Ok::<(), ruststream::BrokerError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Runs one row; returns messages per second.
async fn run_row(
    row: Row,
    conn: &mut ClusterConnection,
    brokers: &Brokers,
    n: u64,
    run: usize,
) -> BenchResult<f64> {
    let pid = std::process::id();
    let streams: Vec<String> = match row {
        Row::HandEight | Row::BrokerEight => (0..STREAMS)
            .map(|i| format!("rs-bench:{pid}:{run}:{row:?}:{i}"))
            .collect(),
        _ => vec![format!("rs-bench:{pid}:{run}:{row:?}")],
    };
    let each = n / streams.len() as u64;
    let publishing = matches!(row, Row::PublishMaster | Row::PublishReplica);
    if !publishing {
        for stream in &streams {
            redis_loops::hand_fill(conn, stream, each).await?;
        }
    }
    let started = Instant::now();
    match row {
        Row::HandOne | Row::HandEight => {
            let loops = streams
                .iter()
                .map(|s| {
                    let (mut conn, stream) = (conn.clone(), s.clone());
                    async move { redis_loops::hand_consume(&mut conn, &stream, GROUP, each).await }
                })
                .collect();
            join_all(loops).await?;
        }
        Row::BrokerOne | Row::BrokerEight => {
            let loops = streams
                .iter()
                .map(|s| {
                    let (broker, stream) = (brokers.plain.clone(), s.clone());
                    async move { redis_loops::broker_consume(&broker, &stream, GROUP, each).await }
                })
                .collect();
            join_all(loops).await?;
        }
        Row::SubscriberOne => consume_app(&brokers.plain, &streams[0], each).await?,
        Row::PublishMaster => publish_singles(&brokers.plain, &streams[0], n).await?,
        Row::PublishReplica => publish_singles(&brokers.replicated, &streams[0], n).await?,
    }
    let elapsed = started.elapsed();
    for stream in &streams {
        redis::cmd("DEL")
            .arg(stream)
            .query_async::<()>(conn)
            .await?;
    }
    let done = if publishing {
        n / PUBLISHERS * PUBLISHERS
    } else {
        each * streams.len() as u64
    };
    Ok(done as f64 / elapsed.as_secs_f64())
}

/// Runs every loop as a task of its own, to the end.
async fn join_all<F>(loops: Vec<F>) -> BenchResult<()>
where
    F: std::future::Future<Output = BenchResult<()>> + 'static,
{
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            let mut set = tokio::task::JoinSet::new();
            for one in loops {
                set.spawn_local(one);
            }
            while let Some(result) = set.join_next().await {
                result??;
            }
            Ok(())
        })
        .await
}

struct Brokers {
    plain: RedisBroker,
    replicated: RedisBroker,
}

fn main() -> BenchResult<()> {
    let mut n = DEFAULT_MESSAGES;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, value] = args.as_slice()
        && flag == "--messages"
    {
        n = value.parse()?;
    } else if !args.is_empty() {
        return Err("usage: redis_cluster [--messages N]".into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = redis::cluster::ClusterClient::new(urls())?;
        let mut conn = client.get_async_connection().await.map_err(|e| {
            format!(
                "no Redis cluster at {:?} ({e}); run scripts/redis-cluster or set RUSTSTREAM_REDIS_CLUSTER_URLS",
                urls()
            )
        })?;
        let brokers = Brokers {
            plain: RedisBroker::cluster(urls()),
            replicated: RedisBroker::cluster_with(
                urls(),
                RedisConfig {
                    publish_replicas: Some(ReplicaAck {
                        replicas: 1,
                        timeout: Duration::from_secs(1),
                    }),
                    ..RedisConfig::default()
                },
            ),
        };
        println!(
            "Redis Cluster at {:?}, {n} messages per run, median of {REPS} runs, one current-thread runtime",
            urls()
        );
        let rates = warm_up_and_interleave(&Row::ALL, 10_000, n, REPS, async |row, n, run| {
            run_row(row, &mut conn, &brokers, n, run).await
        })
        .await?;
        let rates: Vec<f64> = rates.into_iter().map(median).collect();
        let rate_of = |row: Row| {
            Row::ALL
                .iter()
                .position(|r| *r == row)
                .map_or(0.0, |i| rates[i])
        };
        println!();
        println!("| row | msg/s | vs baseline |");
        println!("|:--|--:|--:|");
        for (i, row) in Row::ALL.into_iter().enumerate() {
            println!(
                "| {} | {:.0} | {:.2} |",
                row.label(),
                rates[i],
                rates[i] / rate_of(row.baseline())
            );
        }
        Ok(())
    })
}
