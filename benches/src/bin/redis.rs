//! Throughput of the Redis broker on a real server, beside a hand-written
//! redis-rs loop doing the same work on the same server, in one run.
//!
//! Every message is the same small JSON `Payment { id, account,
//! amount_cents }` (about 55 bytes) in the field `payload`, the layout
//! both sides share. Rows:
//!
//! - **publish**, batches of 500: the hand loop sends a pipeline of 500
//!   `XADD`s per round trip; the broker's `publish_batch` does the same
//!   through the `Broker` trait.
//! - **consume**: the stream is filled first (untimed), then timed until
//!   every entry is read, decoded with serde_json and acked.
//!   - *hand loop*: `XREADGROUP ... COUNT 500 ... >`, decode each payload,
//!     one `XACK` per batch, on one multiplexed connection, replies parsed
//!     from `redis::Value` directly (no `HashMap` per entry).
//!   - *broker loop*: the same through `RedisBroker` (`read` with
//!     `ReadMode::New`, count 500, then `ack`): the read script's cost
//!     (owed entries, copies, attempt bound) plus the broker's decoding
//!     into `Delivery`s.
//!   - *#[subscriber]*: an app whose handler takes `&Payment` and returns
//!     `()` (ack), with `workers(8)`: everything the runtime does per
//!     entry (bounded read-ahead, lanes, the delivery span check, panic
//!     catching, batched settling). With the default read-ahead (32 per
//!     read) and with `prefetch(500)`.
//!   - *#[subscriber] batch*: a batch handler taking `Vec<Payment>` and
//!     returning `()`, with `batch(max = 500, wait = 10ms)` (one worker,
//!     the default read-ahead of two batches): the same per-entry
//!     settling, one handler call per 500 entries.
//!
//! Every side decodes the same way: `std::str::from_utf8`, then
//! `serde_json::from_str` (what the framework's `decode` does).
//!
//! Each row is the median of `REPS` runs, interleaved. Everything runs on
//! one current-thread tokio runtime (one core; the server has the other).
//! Client allocations per message come from a separate pass of 50,000
//! messages per consume row under the counting global allocator (filling
//! the stream not counted).
//!
//! ```text
//! redis-server --save "" --appendonly no &
//! cargo run --release -p ruststream-benches --bin redis
//! cargo run --release -p ruststream-benches --bin redis -- --messages 500000
//! ```
//!
//! The server is `RUSTSTREAM_REDIS_URL` (default `redis://127.0.0.1:6379`).
//! Keys are named `rs-bench:*` and deleted after each run.

use std::error::Error;
use std::time::{Duration, Instant};

use ruststream::prelude::*;
use ruststream::{Broker, Message};
use ruststream_benches::redis_loops::{self, BATCH};
use ruststream_benches::run_stream::{self, GROUP, PROBE, ledger};
use ruststream_benches::{
    Payment, batches, counting, cpu, median, payload, warm_up_and_interleave,
};
use ruststream_redis::RedisBroker;

type BenchResult<T> = Result<T, Box<dyn Error>>;

const DEFAULT_MESSAGES: u64 = 200_000;
const REPS: usize = 5;
/// The issue's target: the `#[subscriber]` path at 80% of the hand loop.
const TARGET_RATIO: f64 = 0.80;
/// Issue 15's target: a batch subscriber at least as fast as the hand loop.
const BATCH_TARGET_RATIO: f64 = 1.0;

fn url() -> String {
    std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

#[subscriber(
    RedisStream::new(run_stream::name()).group(GROUP).start_id(StreamStart::Beginning),
    workers(8),
    prefetch(500)
)]
async fn ledger_prefetch(payment: &Payment) {
    PROBE.handled(payment);
}

#[subscriber(
    RedisStream::new(run_stream::name()).group(GROUP).start_id(StreamStart::Beginning),
    batch(max = 500, wait = 10ms)
)]
async fn ledger_batch(payments: Vec<Payment>) {
    for payment in &payments {
        PROBE.handled(payment);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    PublishHand,
    PublishBroker,
    ConsumeHand,
    ConsumeBroker,
    SubscriberDefault,
    SubscriberPrefetch,
    SubscriberBatch,
}

impl Row {
    const ALL: [Row; 7] = [
        Row::PublishHand,
        Row::PublishBroker,
        Row::ConsumeHand,
        Row::ConsumeBroker,
        Row::SubscriberDefault,
        Row::SubscriberPrefetch,
        Row::SubscriberBatch,
    ];

    fn label(self) -> &'static str {
        match self {
            Row::PublishHand => "publish, hand loop (pipelined XADD x500)",
            Row::PublishBroker => "publish, RedisBroker::publish_batch(500)",
            Row::ConsumeHand => "consume, hand loop (XREADGROUP 500 + XACK)",
            Row::ConsumeBroker => "consume, RedisBroker read(500) + ack",
            Row::SubscriberDefault => "consume, #[subscriber] workers(8)",
            Row::SubscriberPrefetch => "consume, #[subscriber] workers(8), prefetch(500)",
            Row::SubscriberBatch => "consume, #[subscriber] batch(max = 500, wait = 10ms)",
        }
    }
}

/// How long `work` took to run to completion.
async fn timed(work: impl Future<Output = redis_loops::LoopResult>) -> BenchResult<Duration> {
    let started = Instant::now();
    work.await?;
    Ok(started.elapsed())
}

async fn publish_broker(broker: &RedisBroker, stream: &str, n: u64) -> BenchResult<Duration> {
    let started = Instant::now();
    for batch in batches(n, BATCH) {
        let batch: Vec<Message> = batch.map(|j| Message::new(payload(j))).collect();
        broker.publish_batch(stream, batch).await?;
    }
    Ok(started.elapsed())
}

async fn consume_app(
    broker: &RedisBroker,
    stream: &str,
    n: u64,
    row: Row,
) -> BenchResult<Duration> {
    redis_loops::app_consume(broker, stream, GROUP, n, &PROBE, |b| {
        match row {
            Row::SubscriberPrefetch => b.include(ledger_prefetch),
            Row::SubscriberBatch => b.include(ledger_batch),
            _ => b.include(ledger),
        };
    })
    .await
}

/// Client-side allocations per message of a consume row (the fill not
/// counted).
async fn allocations(
    row: Row,
    conn: &mut redis::aio::MultiplexedConnection,
    broker: &RedisBroker,
) -> BenchResult<f64> {
    const N: u64 = 50_000;
    let stream = format!("rs-bench:{}:alloc:{row:?}", std::process::id());
    redis_loops::hand_fill(conn, &stream, N).await?;
    counting::enable(true);
    let before = counting::allocations();
    let result = match row {
        Row::ConsumeHand => timed(redis_loops::hand_consume(conn, &stream, GROUP, N)).await,
        Row::ConsumeBroker => timed(redis_loops::broker_consume(broker, &stream, GROUP, N)).await,
        Row::SubscriberDefault | Row::SubscriberPrefetch | Row::SubscriberBatch => {
            consume_app(broker, &stream, N, row).await
        }
        Row::PublishHand | Row::PublishBroker => Ok(Duration::ZERO),
    };
    let made = counting::allocations() - before;
    counting::enable(false);
    result?;
    redis::cmd("DEL")
        .arg(&stream)
        .query_async::<()>(conn)
        .await?;
    Ok(made as f64 / N as f64)
}

/// One run of a row: its wall-clock time, and the CPU time it cost this
/// process and the server (neither of which other processes on a shared
/// machine inflate).
#[derive(Clone, Copy, Debug)]
struct Sample {
    wall: Duration,
    client_cpu: Option<Duration>,
    server_cpu: Option<Duration>,
}

async fn run_row(
    row: Row,
    conn: &mut redis::aio::MultiplexedConnection,
    broker: &RedisBroker,
    n: u64,
    run: usize,
) -> BenchResult<Sample> {
    let stream = format!("rs-bench:{}:{run}:{row:?}", std::process::id());
    if !matches!(row, Row::PublishHand | Row::PublishBroker) {
        redis_loops::hand_fill(conn, &stream, n).await?;
    }
    let client_before = ruststream_benches::cpu_time();
    let server_before = cpu::redis_server_time(conn).await;
    let wall = match row {
        // The hand loop's publish: pipelined XADD.
        Row::PublishHand => timed(redis_loops::hand_fill(conn, &stream, n)).await?,
        Row::PublishBroker => publish_broker(broker, &stream, n).await?,
        Row::ConsumeHand => timed(redis_loops::hand_consume(conn, &stream, GROUP, n)).await?,
        Row::ConsumeBroker => timed(redis_loops::broker_consume(broker, &stream, GROUP, n)).await?,
        Row::SubscriberDefault | Row::SubscriberPrefetch | Row::SubscriberBatch => {
            consume_app(broker, &stream, n, row).await?
        }
    };
    let client_cpu = ruststream_benches::cpu_time()
        .zip(client_before)
        .and_then(|(after, before)| after.checked_sub(before));
    let server_cpu = cpu::redis_server_time(conn)
        .await
        .zip(server_before)
        .and_then(|(after, before)| after.checked_sub(before));
    redis::cmd("DEL")
        .arg(&stream)
        .query_async::<()>(conn)
        .await?;
    Ok(Sample {
        wall,
        client_cpu,
        server_cpu,
    })
}

/// Microseconds of CPU per message, the median over runs (`-` if any run
/// could not read its CPU time).
fn cpu_per_message(samples: &[Option<Duration>], n: u64) -> String {
    let per: Option<Vec<f64>> = samples
        .iter()
        .map(|s| s.map(|d| d.as_secs_f64() * 1e6 / n as f64))
        .collect();
    match per {
        Some(per) if !per.is_empty() => format!("{:.2}", median(per)),
        _ => "-".to_owned(),
    }
}

/// The command line: `--messages N`, and `--only ROW` (a row's index in
/// the table, 0 to 6) to run one row once, for profiling.
fn args() -> BenchResult<(u64, Option<usize>)> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut n = DEFAULT_MESSAGES;
    let mut only = None;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        match (word.as_str(), words.next()) {
            ("--messages", Some(v)) => n = v.parse()?,
            ("--only", Some(v)) => only = Some(v.parse::<usize>()?),
            _ => return Err("usage: redis [--messages N] [--only ROW]".into()),
        }
    }
    Ok((n, only))
}

fn main() -> BenchResult<()> {
    let (n, only) = args()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = redis::Client::open(url())?;
        let mut conn = client.get_multiplexed_async_connection().await.map_err(|e| {
            format!("no Redis server at {} ({e}); start one or set RUSTSTREAM_REDIS_URL", url())
        })?;
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned();
        let broker = RedisBroker::standalone(url());
        println!(
            "Redis {version} at {}, {n} messages per run, median of {REPS} runs, one current-thread runtime",
            url()
        );
        if let Some(i) = only {
            let row = *Row::ALL.get(i).ok_or("--only takes a row index, 0 to 6")?;
            let sample = run_row(row, &mut conn, &broker, n, 0).await?;
            println!(
                "{}: {:.0} msg/s, client CPU {} us/msg, server CPU {} us/msg",
                row.label(),
                n as f64 / sample.wall.as_secs_f64(),
                cpu_per_message(&[sample.client_cpu], n),
                cpu_per_message(&[sample.server_cpu], n),
            );
            return Ok(());
        }
        let samples = warm_up_and_interleave(&Row::ALL, 20_000, n, REPS, async |row, n, run| {
            run_row(row, &mut conn, &broker, n, run).await
        })
        .await?;
        let rates: Vec<f64> = samples
            .iter()
            .map(|runs| median(runs.iter().map(|s| n as f64 / s.wall.as_secs_f64()).collect()))
            .collect();
        let mut allocs = Vec::new();
        for row in Row::ALL {
            allocs.push(allocations(row, &mut conn, &broker).await?);
        }
        let baseline = |row: Row| match row {
            Row::PublishHand | Row::PublishBroker => rates[0],
            _ => rates[2],
        };
        println!();
        println!(
            "| row | msg/s | vs hand loop | client allocs/msg | client CPU us/msg | server CPU us/msg |"
        );
        println!("|:--|--:|--:|--:|--:|--:|");
        for (i, row) in Row::ALL.into_iter().enumerate() {
            let allocs = match row {
                Row::PublishHand | Row::PublishBroker => "".to_owned(),
                _ => format!("{:.2}", allocs[i]),
            };
            let client: Vec<_> = samples[i].iter().map(|s| s.client_cpu).collect();
            let server: Vec<_> = samples[i].iter().map(|s| s.server_cpu).collect();
            println!(
                "| {} | {:.0} | {:.2} | {allocs} | {} | {} |",
                row.label(),
                rates[i],
                rates[i] / baseline(row),
                cpu_per_message(&client, n),
                cpu_per_message(&server, n),
            );
        }
        let best = rates[4].max(rates[5]) / rates[2];
        println!();
        println!(
            "target: #[subscriber] >= {:.0}% of the hand loop: {} (best {:.2})",
            TARGET_RATIO * 100.0,
            if best >= TARGET_RATIO { "met" } else { "not met" },
            best
        );
        let batch = rates[6] / rates[2];
        println!(
            "target: batch subscriber >= {:.2} of the hand loop: {} ({batch:.2})",
            BATCH_TARGET_RATIO,
            if batch >= BATCH_TARGET_RATIO { "met" } else { "not met" },
        );
        Ok(())
    })
}
