//! Latency and scaling curves of the `#[subscriber]` path (issue 15,
//! point 6), each point beside a hand-written loop over the same broker,
//! measured in the same run.
//!
//! Four curves (`--only` picks one):
//!
//! - **latency**: end-to-end latency, from publish to the start of the
//!   handler, at fixed offered rates (1k, 10k and 50k msg/s by default):
//!   p50, p99 and p99.9, on the memory broker and on Redis. A paced
//!   publisher on a thread of its own (its own current-thread runtime, its
//!   own broker handle) publishes every message that is due, stamped with
//!   the time it is published (nanoseconds on one monotonic clock shared by
//!   the process), then sleeps until the next one is due; so at 50k msg/s
//!   it publishes in small bursts of a few messages per wake (the wake-up
//!   granularity of `std::thread::sleep`). The consumer decodes the
//!   payload, reads the clock and records the difference. The framework is
//!   an app whose `#[subscriber]` (`workers(8)`, default read-ahead)
//!   records it as the handler's first statement; the hand loop is a
//!   blocking read loop over the same broker (memory: `Broker::read` with
//!   `ReadMode::New`, count 64, `block` 100 ms, then one `ack` per batch;
//!   Redis: redis-rs `XREADGROUP COUNT 64 BLOCK 100` and one `XACK` per
//!   batch on one connection). The first fifth of a second of messages is
//!   a warm-up and not counted.
//! - **workers**: throughput of a handler that awaits 1 ms of simulated
//!   I/O (`tokio::time::sleep`) against `workers(n)`, n = 1, 8, 64 and
//!   512, on the memory broker (stream filled first, untimed). Beside it:
//!   the hand loop (read n entries, spawn n tasks that each sleep 1 ms,
//!   join them all, ack the batch), the timer alone (n tasks sleeping 1 ms
//!   in a loop, no broker: what tokio's 1 ms sleeps deliver at that
//!   concurrency), and the ideal n × 1000 msg/s; and each one's CPU time
//!   per message, which shows whether the cost of an entry grows with the
//!   number of lanes.
//! - **payload**: throughput against payload size, 100 B, 1 KiB and
//!   16 KiB of JSON (`{"id":..,"pad":"xxxx.."}`, decoded by both sides into
//!   a struct with a `String`), on memory and Redis, `workers(8)` beside the
//!   hand loop of each broker (memory: `read` count 512 + `ack`; Redis:
//!   `XREADGROUP COUNT 500` + `XACK`, `redis_loops::hand_consume_as`). The
//!   message count shrinks with the size so that one run holds at most 256
//!   MiB (memory) or 64 MiB (Redis) of payload.
//! - **subs**: throughput against the number of subscriptions in one app,
//!   1, 10 and 100, each reading a stream of its own, the total number of
//!   messages fixed, `workers(8)` each, a handler that decodes a `Payment`
//!   and returns; beside as many hand loops (one task per stream, the same
//!   loop as the payload curve), all on the memory broker (`--subs-redis`
//!   adds Redis). Then counters from one more framework pass per point:
//!   messages per `read` and per `ack` call (a broker wrapper counts them),
//!   allocations per message, and how long `start()` took.
//!
//! Throughput rows are the median of `--reps` runs (default 3),
//! interleaved framework / hand; a run is timed from the app's start (the
//! hand loop's first call) until every entry is handled and acked, in
//! messages per wall-clock second and per second of CPU time over all the
//! process's threads (`Stopwatch`; other processes on a shared machine
//! slow the first, not the second; runs under 100 ms show no CPU figure).
//! The latency rows give each percentile's median over the `--reps` runs.
//! `--prefetch N` gives every framework subscription `prefetch(N)` instead
//! of the default read-ahead (for the subscriptions curve's finding: the
//! entries read ahead by all subscriptions together are the working set). The
//! consumers run on one current-thread tokio runtime, as in the other
//! benchmarks. The load average is printed before and after, since the
//! machine may be shared.
//!
//! ```text
//! cargo run --release -p ruststream-benches --bin curves
//! cargo run --release -p ruststream-benches --bin curves -- --only latency --broker memory
//! cargo run --release -p ruststream-benches --bin curves -- --only workers --messages 100000
//! ```
//!
//! Redis is `RUSTSTREAM_REDIS_URL` (default `redis://127.0.0.1:6379`);
//! keys are named `rs-bench:curves:{pid}:*` and deleted after each run.

use std::error::Error;
use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ruststream::prelude::*;
use ruststream::{
    Broker, Message, ReadMode, ReadRequest, Settle, Subscriber, SubscriberInfo, Subscription,
};
use ruststream_benches::counted::{Calls, Counted};
use ruststream_benches::{
    Elapsed, Payment, Probe, Stopwatch, counting, median, memory_loops, payload, redis_loops,
    thousands,
};
use ruststream_redis::RedisBroker;

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// The group of every subscription and hand loop.
const GROUP: &str = "curves";
/// Give up on a run that has not handled every message by then.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Entries per read of the latency hand loops.
const LATENCY_READ: usize = 64;
/// How long the latency hand loops block in one read.
const LATENCY_BLOCK: Duration = Duration::from_millis(100);
/// The latency curve's warm-up, not counted: this share of a second of
/// messages at the start.
const WARM_UP_SECONDS: f64 = 0.2;
/// The workers of the framework in every curve but `workers`.
const WORKERS: usize = 8;
/// The hand loop's read size on the memory broker in the throughput
/// curves: the framework's read-ahead with `workers(8)`.
const MEMORY_HAND_READ: usize = 512;
/// At most this many payload bytes in one payload-curve run.
const MEMORY_PAYLOAD_BUDGET: u64 = 512 << 20;
/// The same on Redis (the server is shared).
const REDIS_PAYLOAD_BUDGET: u64 = 64 << 20;

/// Counts handled messages; wakes the timing task at the last one.
static PROBE: Probe = Probe::new();

/// The process's clock origin, shared by the publisher and the consumers.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since [`EPOCH`].
fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The latency samples of the current run: `(message id, nanoseconds)`.
static LATENCIES: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A latency-curve message: its id and when it was published.
#[derive(Debug, serde::Deserialize)]
struct Stamped {
    id: u64,
    sent_ns: u64,
}

impl Stamped {
    fn payload(id: u64, sent_ns: u64) -> Vec<u8> {
        format!(r#"{{"id":{id},"sent_ns":{sent_ns}}}"#).into_bytes()
    }

    /// Records this message's latency (now minus its stamp) and counts it
    /// handled.
    fn record(&self) {
        let latency = now_ns().saturating_sub(self.sent_ns);
        if let Ok(mut all) = LATENCIES.lock() {
            all.push((self.id, latency));
        }
        PROBE.handled_one();
    }
}

/// A payload-curve message: an id and padding.
#[derive(Debug, serde::Deserialize)]
struct Padded {
    id: u64,
    pad: String,
}

/// The `i`th payload-curve message, exactly `size` bytes of JSON (or the
/// bare minimum if `size` is smaller).
fn padded_payload(i: u64, size: usize) -> Vec<u8> {
    let head = format!(r#"{{"id":{i},"pad":""#);
    let pad = size.saturating_sub(head.len() + 2);
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    out.resize(head.len() + pad, b'x');
    out.extend_from_slice(b"\"}");
    out
}

// The handlers. Their descriptors are placeholders: every run gives its
// own stream, group and workers through `Configured`.

#[subscriber(RedisStream::new("curves").group(GROUP))]
async fn on_stamped(message: &Stamped) {
    message.record();
}

#[subscriber(RedisStream::new("curves").group(GROUP))]
async fn on_io(payment: &Payment) {
    tokio::time::sleep(Duration::from_millis(1)).await;
    PROBE.handled(payment);
}

#[subscriber(RedisStream::new("curves").group(GROUP))]
async fn on_padded(message: &Padded) {
    black_box((message.id, message.pad.len()));
    PROBE.handled_one();
}

#[subscriber(RedisStream::new("curves").group(GROUP))]
async fn on_payment(payment: &Payment) {
    PROBE.handled(payment);
}

/// A `#[subscriber]` run with another subscription: its handler and
/// decode exactly as the attribute generated them, its stream, group and
/// workers set per run (the attribute's options are constants, and one
/// app here includes up to 100 subscriptions of one handler).
#[derive(Clone, Debug)]
struct Configured<S> {
    inner: S,
    subscription: Subscription,
}

impl<S: Subscriber> Subscriber for Configured<S> {
    fn info(&self) -> SubscriberInfo {
        self.inner.info()
    }

    fn subscription(&self) -> Subscription {
        self.subscription.clone()
    }

    fn handle<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        self.inner.handle(ctx)
    }
}

/// `inner` reading `stream` in group [`GROUP`] from its beginning, with
/// `workers` lanes and `prefetch(n)` if given (else the default
/// read-ahead).
fn configured<S: Subscriber>(
    inner: S,
    stream: &str,
    workers: usize,
    prefetch: Option<usize>,
) -> Configured<S> {
    let descriptor = RedisStream::new(stream)
        .group(GROUP)
        .start_id(StreamStart::Beginning);
    let mut subscription = Subscription::new(descriptor).workers(workers);
    subscription.prefetch = prefetch;
    Configured {
        inner,
        subscription,
    }
}

/// Which broker a point runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Memory,
    Redis,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Redis => "Redis",
        }
    }
}

/// `RUSTSTREAM_REDIS_URL`, or the local default.
fn redis_url() -> String {
    std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A fresh stream name for Redis (memory runs get a fresh broker).
fn stream_name(tag: &str, run: usize) -> String {
    format!("rs-bench:curves:{}:{tag}:{run}", std::process::id())
}

/// The brokers of one run: a fresh memory broker, or the shared Redis
/// server (a broker and a raw connection for the hand loops).
#[derive(Clone)]
enum Target {
    Memory(MemoryBroker),
    Redis {
        broker: RedisBroker,
        conn: redis::aio::MultiplexedConnection,
    },
}

impl Target {
    async fn new(kind: Kind) -> BenchResult<Self> {
        Ok(match kind {
            Kind::Memory => Target::Memory(ruststream_memory::with_retention(
                ruststream_memory::MemoryRetention::UNBOUNDED,
            )),
            Kind::Redis => {
                let client = redis::Client::open(redis_url())?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| {
                        format!(
                            "no Redis server at {} ({e}); start one or set RUSTSTREAM_REDIS_URL",
                            redis_url()
                        )
                    })?;
                Target::Redis {
                    broker: RedisBroker::standalone(redis_url()),
                    conn,
                }
            }
        })
    }

    fn broker(&self) -> &dyn Broker {
        match self {
            Target::Memory(b) => b,
            Target::Redis { broker, .. } => broker,
        }
    }

    /// Deletes `streams` (Redis; a memory broker is simply dropped).
    async fn clean(&mut self, streams: &[String]) -> BenchResult<()> {
        if let Target::Redis { conn, .. } = self {
            for stream in streams {
                redis::cmd("DEL")
                    .arg(stream)
                    .query_async::<()>(conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// An app running `subscribers` on `broker`.
fn app_on<B: Broker + Clone, S: Subscriber + Clone>(broker: &B, subscribers: &[S]) -> RustStream {
    RustStream::new(AppInfo::new("curves", "0")).with_broker(broker.clone(), |b| {
        for s in subscribers {
            b.include(s.clone());
        }
    })
}

impl Target {
    /// An app running `subscribers` on this target's broker.
    fn app<S: Subscriber + Clone>(&self, subscribers: &[S]) -> RustStream {
        match self {
            Target::Memory(broker) => app_on(broker, subscribers),
            Target::Redis { broker, .. } => app_on(broker, subscribers),
        }
    }
}

/// How long an app's run took.
#[derive(Clone, Copy, Debug)]
struct AppRun {
    /// From `start()` until every entry was acked.
    elapsed: Elapsed,
    /// `start()` alone (groups ensured, subscriptions spawned).
    start: Duration,
}

/// Runs `app` until `total` entries are handled, then until every entry
/// is acked on `streams` of `broker`; returns the time from the app's
/// start to then. The shutdown is not timed.
async fn run_app(
    app: RustStream,
    broker: &dyn Broker,
    streams: &[String],
    total: u64,
) -> BenchResult<AppRun> {
    PROBE.arm(total);
    let started = Stopwatch::start();
    let running = app.start().await?;
    let start = started.elapsed().wall;
    wait_handled(total).await?;
    loop {
        let mut settled = running.in_flight() == 0;
        for stream in streams {
            if !settled {
                break;
            }
            let info = broker.group_info(stream, GROUP).await?;
            settled = info.pending == 0 && info.lag == 0;
        }
        if settled {
            break;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let elapsed = started.elapsed();
    running.shutdown().await;
    Ok(AppRun { elapsed, start })
}

/// Waits until [`PROBE`] has counted `total` handled messages.
async fn wait_handled(total: u64) -> BenchResult<()> {
    Ok(PROBE.wait(total, RUN_TIMEOUT).await?)
}

/// Messages per second of a point: wall-clock, and per second of CPU
/// time over all the process's threads (which other processes on a shared
/// machine do not inflate; `None` if a run was too short to tell).
#[derive(Clone, Copy, Debug)]
struct Rates {
    wall: f64,
    cpu: Option<f64>,
}

impl Rates {
    /// The medians over `runs`, each the time `messages` took.
    fn of(messages: u64, runs: &[Elapsed]) -> Self {
        let per_second = |d: Duration| messages as f64 / d.as_secs_f64();
        let cpu: Option<Vec<f64>> = runs.iter().map(|r| r.cpu.map(per_second)).collect();
        Rates {
            wall: median(runs.iter().map(|r| per_second(r.wall)).collect()),
            cpu: cpu.map(median),
        }
    }

    /// The table columns `hand msg/s | framework msg/s | ratio | hand
    /// msg/CPU-s | framework msg/CPU-s | ratio`, this being the framework's
    /// rates and `hand` the hand loop's (`-` where a CPU rate is missing).
    fn columns(self, hand: Rates) -> String {
        let cpu = |r: Rates| r.cpu.map_or("-".to_owned(), thousands);
        let cpu_ratio = match (self.cpu, hand.cpu) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "-".to_owned(),
        };
        format!(
            "{} | {} | {:.2} | {} | {} | {cpu_ratio}",
            thousands(hand.wall),
            thousands(self.wall),
            self.wall / hand.wall,
            cpu(hand),
            cpu(self),
        )
    }
}

// ---------------------------------------------------------------- latency

/// Publishes `total` stamped messages to `stream` at `rate` per second
/// from a thread of its own, with its own runtime and broker handle: the
/// memory broker `memory`, or (`None`) a new `RedisBroker`.
fn spawn_publisher(
    memory: Option<MemoryBroker>,
    stream: String,
    rate: u64,
    total: u64,
) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let broker: Box<dyn Broker> = match memory {
                Some(b) => Box::new(b),
                None => Box::new(RedisBroker::standalone(redis_url())),
            };
            let interval = 1e9 / rate as f64;
            let start = Instant::now();
            let mut sent = 0u64;
            while sent < total {
                let elapsed = start.elapsed().as_nanos() as f64;
                let due = ((elapsed / interval) as u64 + 1).min(total);
                if due > sent {
                    let stamp = now_ns();
                    let batch: Vec<Message> = (sent..due)
                        .map(|id| Message::new(Stamped::payload(id, stamp)))
                        .collect();
                    broker
                        .publish_batch(&stream, batch)
                        .await
                        .map_err(|e| e.to_string())?;
                    sent = due;
                } else {
                    let next = Duration::from_nanos((sent as f64 * interval) as u64);
                    std::thread::sleep(next.saturating_sub(start.elapsed()));
                }
            }
            Ok(())
        })
    })
}

/// The hand-written latency loop on the memory broker: blocking reads of
/// [`LATENCY_READ`], decode, record, one ack per batch.
async fn hand_latency_memory(broker: &dyn Broker, stream: &str, total: u64) -> BenchResult<()> {
    let mut ids = Vec::with_capacity(LATENCY_READ);
    while PROBE.handled.load(Ordering::Relaxed) < total {
        let mut request = ReadRequest::new(stream, GROUP, "hand-1", ReadMode::New, LATENCY_READ);
        request.block = Some(LATENCY_BLOCK);
        let batch = broker.read(request).await?;
        ids.clear();
        for delivery in &batch.deliveries {
            let message: Stamped =
                serde_json::from_str(std::str::from_utf8(delivery.entry.payload())?)?;
            message.record();
            ids.push(delivery.id());
        }
        if !ids.is_empty() {
            broker.ack(stream, GROUP, &ids).await?;
        }
    }
    Ok(())
}

/// The hand-written latency loop on Redis: `XREADGROUP COUNT 64 BLOCK
/// 100`, decode, record, one `XACK` per batch.
async fn hand_latency_redis(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
    total: u64,
) -> BenchResult<()> {
    let block = LATENCY_BLOCK.as_millis() as u64;
    while PROBE.handled.load(Ordering::Relaxed) < total {
        let reply =
            redis_loops::hand_read(conn, stream, GROUP, "hand-1", LATENCY_READ, Some(block))
                .await?;
        let mut ack = redis::cmd("XACK");
        ack.arg(stream).arg(GROUP);
        let read = redis_loops::visit_entries(&reply, |id, payload| {
            let message: Stamped = serde_json::from_str(std::str::from_utf8(payload)?)?;
            message.record();
            ack.arg(id);
            Ok(())
        })?;
        if read > 0 {
            ack.query_async::<i64>(conn).await?;
        }
    }
    Ok(())
}

/// Percentiles of one latency run, in microseconds.
#[derive(Clone, Copy, Debug)]
struct Percentiles {
    samples: usize,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Percentiles {
    /// Each figure's median over `runs` (samples: one run's).
    fn median(runs: &[Percentiles]) -> Percentiles {
        let of = |f: fn(&Percentiles) -> f64| median(runs.iter().map(f).collect());
        Percentiles {
            samples: runs.first().map_or(0, |p| p.samples),
            p50: of(|p| p.p50),
            p99: of(|p| p.p99),
            p999: of(|p| p.p999),
            max: of(|p| p.max),
        }
    }
}

/// The percentiles of the run's samples, the warm-up (ids under
/// `skip`) left out.
fn percentiles(skip: u64) -> BenchResult<Percentiles> {
    let all = std::mem::take(&mut *LATENCIES.lock().map_err(|_| "latencies poisoned")?);
    let mut kept: Vec<u64> = all
        .into_iter()
        .filter(|&(id, _)| id >= skip)
        .map(|(_, ns)| ns)
        .collect();
    if kept.is_empty() {
        return Err("no latency samples after the warm-up".into());
    }
    kept.sort_unstable();
    let at = |q: f64| {
        let i = ((q * kept.len() as f64).ceil() as usize).clamp(1, kept.len()) - 1;
        kept[i] as f64 / 1e3
    };
    Ok(Percentiles {
        samples: kept.len(),
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        max: at(1.0),
    })
}

/// One latency run: `framework` or the hand loop, on `kind`, at `rate`.
async fn latency_run(
    kind: Kind,
    framework: bool,
    rate: u64,
    options: &Options,
    run: usize,
) -> BenchResult<Percentiles> {
    let (seconds, prefetch) = (options.seconds, options.prefetch);
    let total = ((rate as f64 * seconds) as u64).max(1);
    let stream = stream_name(&format!("latency-{rate}-{framework}"), run);
    let mut target = Target::new(kind).await?;
    if let Ok(mut all) = LATENCIES.lock() {
        all.clear();
        all.reserve(total as usize);
    }
    PROBE.arm(total);
    let memory = match &target {
        Target::Memory(b) => Some(b.clone()),
        Target::Redis { .. } => None,
    };
    let result = if framework {
        // The group is created by the app's start, before the publisher
        // starts.
        let app = target.app(&[configured(on_stamped, &stream, WORKERS, prefetch)]);
        let running = app.start().await?;
        let publisher = spawn_publisher(memory, stream.clone(), rate, total);
        let waited = wait_handled(total).await;
        running.shutdown().await;
        join_publisher(publisher)?;
        waited
    } else {
        target
            .broker()
            .ensure_group(&stream, GROUP, StreamStart::Beginning)
            .await?;
        let publisher = spawn_publisher(memory, stream.clone(), rate, total);
        let consumed = match &mut target {
            Target::Memory(b) => hand_latency_memory(b, &stream, total).await,
            Target::Redis { conn, .. } => hand_latency_redis(conn, &stream, total).await,
        };
        join_publisher(publisher)?;
        consumed
    };
    target.clean(std::slice::from_ref(&stream)).await?;
    result?;
    percentiles((rate as f64 * WARM_UP_SECONDS) as u64)
}

/// Waits for the publisher thread; its error, if any.
fn join_publisher(publisher: std::thread::JoinHandle<Result<(), String>>) -> BenchResult<()> {
    publisher
        .join()
        .map_err(|_| "the publisher thread panicked")?
        .map_err(|e| format!("publisher: {e}"))?;
    Ok(())
}

/// The latency curve: every broker, every rate, hand loop and framework.
async fn latency_curve(options: &Options) -> BenchResult<()> {
    println!(
        "## latency: publish to handler start, {:.1} s per rate ({WARM_UP_SECONDS} s of warm-up not counted), µs, median over {} runs of each percentile",
        options.seconds, options.reps
    );
    println!();
    println!(
        "| broker | offered msg/s | path | samples | p50 | p99 | p99.9 | max | p50 vs hand | p99 vs hand |"
    );
    println!("|:--|--:|:--|--:|--:|--:|--:|--:|--:|--:|");
    for &kind in &options.brokers {
        for &rate in &options.rates {
            let mut runs = [Vec::new(), Vec::new()];
            for run in 0..options.reps {
                for framework in [false, true] {
                    runs[usize::from(framework)]
                        .push(latency_run(kind, framework, rate, options, run).await?);
                }
            }
            let [hand, framework] = runs.map(|r| Percentiles::median(&r));
            for (label, p) in [("hand loop", hand), ("#[subscriber] workers(8)", framework)] {
                println!(
                    "| {} | {} | {label} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
                    kind.name(),
                    thousands(rate as f64),
                    p.samples,
                    p.p50,
                    p.p99,
                    p.p999,
                    p.max,
                    p.p50 / hand.p50,
                    p.p99 / hand.p99,
                );
            }
        }
    }
    println!();
    Ok(())
}

// ---------------------------------------------------------------- workers

/// The hand loop of the workers curve: read `n`, spawn `n` tasks that
/// each decode one entry and sleep 1 ms, join them all, ack the batch.
async fn hand_workers(
    broker: &MemoryBroker,
    stream: &str,
    n: usize,
    total: u64,
) -> BenchResult<()> {
    broker
        .ensure_group(stream, GROUP, StreamStart::Beginning)
        .await?;
    let mut acked = 0;
    let mut tasks = tokio::task::JoinSet::new();
    while acked < total {
        let request = ReadRequest::new(stream, GROUP, "hand-1", ReadMode::New, n);
        let batch = broker.read(request).await?;
        if batch.deliveries.is_empty() {
            return Err(format!("hand loop: drained after {acked} of {total}").into());
        }
        let mut ids = Vec::with_capacity(batch.deliveries.len());
        for delivery in &batch.deliveries {
            let payment: Payment =
                serde_json::from_str(std::str::from_utf8(delivery.entry.payload())?)?;
            ids.push(delivery.id());
            tasks.spawn(async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                black_box(payment);
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined?;
        }
        acked += broker.ack(stream, GROUP, &ids).await?;
    }
    Ok(())
}

/// The timer alone: `n` tasks each sleeping 1 ms `total / n` times.
async fn timer_alone(n: usize, total: u64) -> BenchResult<Elapsed> {
    let started = Stopwatch::start();
    let each = total / n as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        tasks.spawn(async move {
            for _ in 0..each {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined?;
    }
    Ok(started.elapsed())
}

/// The `workers(n)` curve, on the memory broker.
async fn workers_curve(options: &Options) -> BenchResult<()> {
    println!(
        "## workers(n): a handler awaiting 1 ms (tokio::time::sleep), memory broker, {} s of ideal work per run",
        options.workers_seconds
    );
    println!();
    println!(
        "| n | messages | ideal msg/s | timer alone msg/s | hand loop msg/s | #[subscriber] msg/s | vs hand | vs ideal | vs timer | CPU µs/msg, timer | CPU µs/msg, hand | CPU µs/msg, #[subscriber] |"
    );
    println!("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for &n in &options.workers {
        let ideal = n as f64 * 1000.0;
        let messages = ((ideal * options.workers_seconds) as u64 / n as u64).max(1) * n as u64;
        let stream = "workers".to_owned();
        let mut runs = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..options.reps {
            runs[0].push(timer_alone(n, messages).await?);
            let broker = filled_memory(&stream, messages, payload).await?;
            let started = Stopwatch::start();
            hand_workers(&broker, &stream, n, messages).await?;
            runs[1].push(started.elapsed());
            let broker = filled_memory(&stream, messages, payload).await?;
            let app = app_on(&broker, &[configured(on_io, &stream, n, options.prefetch)]);
            let streams = std::slice::from_ref(&stream);
            runs[2].push(run_app(app, &broker, streams, messages).await?.elapsed);
        }
        let [timer, hand, framework] = runs.map(|r| Rates::of(messages, &r));
        let cpu_us = |r: Rates| r.cpu.map_or("-".to_owned(), |c| format!("{:.2}", 1e6 / c));
        println!(
            "| {n} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            thousands(messages as f64),
            thousands(ideal),
            thousands(timer.wall),
            thousands(hand.wall),
            thousands(framework.wall),
            framework.wall / hand.wall,
            framework.wall / ideal,
            framework.wall / timer.wall,
            cpu_us(timer),
            cpu_us(hand),
            cpu_us(framework),
        );
    }
    println!();
    Ok(())
}

/// A fresh memory broker with `payload(0..n)` on `stream`.
async fn filled_memory(
    stream: &str,
    n: u64,
    payload: impl Fn(u64) -> Vec<u8>,
) -> BenchResult<MemoryBroker> {
    let broker = ruststream_memory::with_retention(ruststream_memory::MemoryRetention::UNBOUNDED);
    memory_loops::fill(&broker, stream, n, payload).await?;
    Ok(broker)
}

// ---------------------------------------------------------------- payload

/// Fills `streams` on `target` with `each` messages `payload(..)` (not
/// timed).
async fn fill_target(
    target: &mut Target,
    streams: &[String],
    each: u64,
    payload: &impl Fn(u64) -> Vec<u8>,
) -> BenchResult<()> {
    for stream in streams {
        match target {
            Target::Memory(b) => memory_loops::fill(b, stream, each, payload).await?,
            Target::Redis { conn, .. } => {
                redis_loops::hand_fill_with(conn, stream, each, payload).await?;
            }
        }
    }
    Ok(())
}

/// The hand loop of the throughput curves on `target`: one loop per
/// stream, all on this runtime, each decoding as a `T`.
async fn hand_throughput<T: serde::de::DeserializeOwned + Send + 'static>(
    target: &Target,
    streams: &[String],
    each: u64,
) -> BenchResult<Elapsed> {
    let started = Stopwatch::start();
    let mut loops = tokio::task::JoinSet::new();
    for stream in streams {
        let (stream, target) = (stream.clone(), target.clone());
        loops.spawn(async move {
            let result = match target {
                Target::Memory(b) => {
                    memory_loops::hand_consume_as::<T>(&b, &stream, GROUP, MEMORY_HAND_READ, each)
                        .await
                        .map(drop)
                }
                Target::Redis { mut conn, .. } => {
                    redis_loops::hand_consume_as::<T, _>(&mut conn, &stream, GROUP, each).await
                }
            };
            result.map_err(|e| e.to_string())
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined?.map_err(|e| format!("hand loop: {e}"))?;
    }
    Ok(started.elapsed())
}

/// One point of a throughput curve: `subscriptions` streams of `each`
/// messages `payload(..)` on `kind`, read by `subscriber` (the framework)
/// or by hand loops decoding a `T`.
struct Point<'a, S, P> {
    kind: Kind,
    subscriber: S,
    tag: &'a str,
    subscriptions: usize,
    each: u64,
    payload: P,
    /// The framework's `prefetch(n)`, if any.
    prefetch: Option<usize>,
}

/// One throughput run of the framework or the hand loop: the point's
/// streams filled (untimed), then consumed.
async fn throughput_run<S, T, P>(
    point: &Point<'_, S, P>,
    framework: bool,
    run: usize,
) -> BenchResult<Elapsed>
where
    S: Subscriber + Copy,
    T: serde::de::DeserializeOwned + Send + 'static,
    P: Fn(u64) -> Vec<u8>,
{
    let mut target = Target::new(point.kind).await?;
    let streams: Vec<String> = (0..point.subscriptions)
        .map(|i| stream_name(&format!("{}-{framework}-{i}", point.tag), run))
        .collect();
    fill_target(&mut target, &streams, point.each, &point.payload).await?;
    let total = point.each * point.subscriptions as u64;
    let result = if framework {
        let subscribers: Vec<_> = streams
            .iter()
            .map(|s| configured(point.subscriber, s, WORKERS, point.prefetch))
            .collect();
        run_app(target.app(&subscribers), target.broker(), &streams, total)
            .await
            .map(|run| run.elapsed)
    } else {
        hand_throughput::<T>(&target, &streams, point.each).await
    };
    target.clean(&streams).await?;
    result
}

/// The framework's and the hand loop's median msg/s at `point`, their
/// runs interleaved.
async fn throughput_point<S, T, P>(
    options: &Options,
    point: &Point<'_, S, P>,
) -> BenchResult<(Rates, Rates)>
where
    S: Subscriber + Copy,
    T: serde::de::DeserializeOwned + Send + 'static,
    P: Fn(u64) -> Vec<u8>,
{
    let total = point.each * point.subscriptions as u64;
    let mut runs = [Vec::new(), Vec::new()];
    for run in 0..options.reps {
        for framework in [false, true] {
            runs[usize::from(framework)]
                .push(throughput_run::<S, T, P>(point, framework, run).await?);
        }
    }
    let [hand, framework] = runs.map(|r| Rates::of(total, &r));
    Ok((framework, hand))
}

/// The payload-size curve: every broker, every size.
async fn payload_curve(options: &Options) -> BenchResult<()> {
    println!("## payload size: JSON {{\"id\",\"pad\"}} decoded by both sides, workers(8)");
    println!();
    println!(
        "| broker | payload | messages | hand loop msg/s | #[subscriber] msg/s | vs hand | hand msg/CPU-s | #[subscriber] msg/CPU-s | CPU ratio | #[subscriber] MB/s |"
    );
    println!("|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for &kind in &options.brokers {
        let (base, budget) = match kind {
            Kind::Memory => (options.messages, MEMORY_PAYLOAD_BUDGET),
            Kind::Redis => (options.redis_messages, REDIS_PAYLOAD_BUDGET),
        };
        for &size in &options.sizes {
            let messages = base.min(budget / size as u64).max(1);
            let point = Point {
                kind,
                subscriber: on_padded,
                tag: &format!("payload-{size}"),
                subscriptions: 1,
                each: messages,
                payload: move |i| padded_payload(i, size),
                prefetch: options.prefetch,
            };
            let (framework, hand) = throughput_point::<_, Padded, _>(options, &point).await?;
            println!(
                "| {} | {} | {} | {} | {:.0} |",
                kind.name(),
                size_name(size),
                thousands(messages as f64),
                framework.columns(hand),
                framework.wall * size as f64 / 1e6,
            );
        }
    }
    println!();
    Ok(())
}

/// `1024` as `1 KiB`, `100` as `100 B`.
fn size_name(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

// ---------------------------------------------------------------- subs

/// The subscriptions curve: every broker (Redis with `--subs-redis`),
/// every count, then the counters on memory.
async fn subs_curve(options: &Options) -> BenchResult<()> {
    println!(
        "## subscriptions in one app: {} messages in all, split over one stream per subscription, workers(8) each",
        thousands(options.messages as f64)
    );
    println!();
    println!(
        "| broker | subscriptions | messages each | hand loops msg/s | #[subscriber] msg/s | vs hand | hand msg/CPU-s | #[subscriber] msg/CPU-s | CPU ratio |"
    );
    println!("|:--|--:|--:|--:|--:|--:|--:|--:|--:|");
    for &kind in &options.brokers {
        if kind == Kind::Redis && !options.subs_redis {
            continue;
        }
        let total = match kind {
            Kind::Memory => options.messages,
            Kind::Redis => options.redis_messages,
        };
        for &k in &options.subscriptions {
            let each = (total / k as u64).max(1);
            let point = Point {
                kind,
                subscriber: on_payment,
                tag: &format!("subs-{k}"),
                subscriptions: k,
                each,
                payload,
                prefetch: options.prefetch,
            };
            let (framework, hand) = throughput_point::<_, Payment, _>(options, &point).await?;
            println!(
                "| {} | {k} | {} | {} |",
                kind.name(),
                thousands(each as f64),
                framework.columns(hand),
            );
        }
    }
    println!();
    if options.brokers.contains(&Kind::Memory) {
        subs_counts(options).await?;
    }
    Ok(())
}

/// The subscriptions curve's counters, from one untimed framework pass
/// per point on the memory broker: broker calls and allocations per
/// message, and the time `start()` took.
async fn subs_counts(options: &Options) -> BenchResult<()> {
    println!("Counters of one framework pass per point (memory broker):");
    println!();
    println!("| subscriptions | msgs/read | msgs/ack | allocs/msg | start() ms | run ms |");
    println!("|--:|--:|--:|--:|--:|--:|");
    for &k in &options.subscriptions {
        let each = (options.messages / k as u64).max(1);
        let calls = Arc::new(Calls::default());
        let broker = Counted {
            inner: ruststream_memory::with_retention(ruststream_memory::MemoryRetention::UNBOUNDED),
            calls: Arc::clone(&calls),
        };
        let streams: Vec<String> = (0..k).map(|i| format!("subs-{i}")).collect();
        for stream in &streams {
            memory_loops::fill(&broker, stream, each, payload).await?;
        }
        let subscribers: Vec<_> = streams
            .iter()
            .map(|s| configured(on_payment, s, WORKERS, options.prefetch))
            .collect();
        let app = app_on(&broker, &subscribers);
        let (reads, acks) = calls.snapshot();
        counting::enable(true);
        let before = counting::allocations();
        let run = run_app(app, &broker, &streams, each * k as u64).await;
        let allocations = counting::allocations() - before;
        counting::enable(false);
        let run = run?;
        let (reads_after, acks_after) = calls.snapshot();
        let total = (each * k as u64) as f64;
        println!(
            "| {k} | {:.1} | {:.1} | {:.3} | {:.2} | {:.1} |",
            total / (reads_after - reads) as f64,
            total / (acks_after - acks) as f64,
            allocations as f64 / total,
            run.start.as_secs_f64() * 1e3,
            run.elapsed.wall.as_secs_f64() * 1e3,
        );
    }
    println!();
    Ok(())
}

// ---------------------------------------------------------------- options

/// A curve, as `--only` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Curve {
    Latency,
    Workers,
    Payload,
    Subs,
}

/// The curves run without `--only`, in order.
const ALL_CURVES: [Curve; 4] = [Curve::Latency, Curve::Workers, Curve::Payload, Curve::Subs];

/// The command line's options.
#[derive(Debug)]
struct Options {
    curves: Vec<Curve>,
    brokers: Vec<Kind>,
    reps: usize,
    /// Messages per run of the memory throughput curves.
    messages: u64,
    /// Messages per run of the Redis throughput curves.
    redis_messages: u64,
    /// Seconds of publishing per latency point.
    seconds: f64,
    rates: Vec<u64>,
    workers: Vec<usize>,
    /// Seconds of ideal work per workers-curve run.
    workers_seconds: f64,
    sizes: Vec<usize>,
    subscriptions: Vec<usize>,
    /// Whether the subscriptions curve also runs on Redis.
    subs_redis: bool,
    /// The framework's `prefetch(n)` in every curve; `None`: the default
    /// read-ahead.
    prefetch: Option<usize>,
}

/// The command line.
const USAGE: &str = "usage: curves [--only latency|workers|payload|subs] [--broker memory|redis|both] \
    [--reps R] [--messages N] [--redis-messages N] [--seconds S] [--rates 1000,10000,50000] \
    [--workers 1,8,64,512] [--workers-seconds S] [--sizes 100,1024,16384] \
    [--subscriptions 1,10,100] [--subs-redis] [--prefetch N]";

/// A positive number, or an error naming the flag.
fn number<T: std::str::FromStr + PartialOrd + Default>(flag: &str, text: &str) -> BenchResult<T> {
    match text.parse::<T>() {
        Ok(v) if v > T::default() => Ok(v),
        _ => Err(format!("{flag} {text}: expected a positive number; {USAGE}").into()),
    }
}

/// A comma-separated list of positive numbers.
fn list<T: std::str::FromStr + PartialOrd + Default>(
    flag: &str,
    text: &str,
) -> BenchResult<Vec<T>> {
    text.split(',')
        .map(|part| number(flag, part.trim()))
        .collect()
}

/// The options from the command line; a clear error for a bad one.
fn parse_options() -> BenchResult<Options> {
    let mut options = Options {
        curves: ALL_CURVES.to_vec(),
        brokers: vec![Kind::Memory, Kind::Redis],
        reps: 3,
        messages: 1_000_000,
        redis_messages: 100_000,
        seconds: 3.0,
        rates: vec![1_000, 10_000, 50_000],
        workers: vec![1, 8, 64, 512],
        workers_seconds: 1.0,
        sizes: vec![100, 1024, 16 * 1024],
        subscriptions: vec![1, 10, 100],
        subs_redis: false,
        prefetch: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if flag == "--subs-redis" {
            options.subs_redis = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        match flag.as_str() {
            "--only" => {
                options.curves = vec![match value.as_str() {
                    "latency" => Curve::Latency,
                    "workers" => Curve::Workers,
                    "payload" => Curve::Payload,
                    "subs" => Curve::Subs,
                    other => return Err(format!("--only {other}: {USAGE}").into()),
                }]
            }
            "--broker" => {
                options.brokers = match value.as_str() {
                    "memory" => vec![Kind::Memory],
                    "redis" => vec![Kind::Redis],
                    "both" => vec![Kind::Memory, Kind::Redis],
                    other => return Err(format!("--broker {other}: {USAGE}").into()),
                }
            }
            "--reps" => options.reps = number(&flag, &value)?,
            "--messages" => options.messages = number(&flag, &value)?,
            "--redis-messages" => options.redis_messages = number(&flag, &value)?,
            "--seconds" => options.seconds = number(&flag, &value)?,
            "--rates" => options.rates = list(&flag, &value)?,
            "--workers" => options.workers = list(&flag, &value)?,
            "--workers-seconds" => options.workers_seconds = number(&flag, &value)?,
            "--sizes" => options.sizes = list(&flag, &value)?,
            "--subscriptions" => options.subscriptions = list(&flag, &value)?,
            "--prefetch" => options.prefetch = Some(number(&flag, &value)?),
            other => return Err(format!("unknown argument {other}; {USAGE}").into()),
        }
    }
    Ok(options)
}

/// `/proc/loadavg`'s first three fields, or `?`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_owned())
}

fn main() -> BenchResult<()> {
    let options = parse_options()?;
    now_ns();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!(
        "ruststream curves: {} core(s), load average {} at the start; consumers on one current-thread runtime; median of {} runs",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        options.reps,
    );
    println!();
    runtime.block_on(async {
        for curve in &options.curves {
            match curve {
                Curve::Latency => latency_curve(&options).await?,
                Curve::Workers => workers_curve(&options).await?,
                Curve::Payload => payload_curve(&options).await?,
                Curve::Subs => subs_curve(&options).await?,
            }
            println!("(load average {} after this curve)", load_average());
            println!();
        }
        Ok::<(), Box<dyn Error>>(())
    })
}
