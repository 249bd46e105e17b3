//! Throughput of the full consume path of the runtime, a `#[subscriber]`
//! handler on the memory broker, beside a hand-written loop over the same
//! broker calls, measured in the same run.
//!
//! Every message is a small JSON `Payment { id, account, amount_cents }`
//! (59 bytes). Both sides decode it with serde_json (one `String`
//! allocation for `account`), pass it to [`std::hint::black_box`] and ack
//! it:
//!
//! - **framework**: an app (`RustStream::new(..).with_broker(..)`, started
//!   with `start()`) runs a `#[subscriber]` whose handler takes
//!   `&Payment`, returns `()` (ack) and counts with an atomic. It goes
//!   through everything the runtime does per entry: the reader's
//!   read-ahead permits and blocking read, dispatch to a worker lane over a
//!   channel, the `delivery` tracing span, panic catching, handler timing,
//!   the settle channel and the settler's batched acks. Measured with
//!   `workers(8)` and `workers(1)`, each with the default read-ahead (4
//!   entries per worker).
//! - **hand loop**: one task reads the same kind of stream through the
//!   same [`Broker`] calls: `read` (`ReadMode::New`, `count` = the
//!   framework's read-ahead, and 64), the framework's decode per entry
//!   (`std::str::from_utf8`, then `serde_json::from_str::<Payment>`), `black_box`, one `ack` per batch.
//!
//! Each run gets a fresh `MemoryBroker` whose stream is filled with the same
//! N messages (not timed); the group is created at
//! `StreamStart::Beginning` inside the timed region (by `start()` for the
//! framework). A framework run is timed from `start()` until every entry
//! is acked: the handler's counter reaches N (it wakes the timing task
//! through a `Notify`, so nothing polls while the app works), then the
//! timing task yields until the app has settled everything it read (an
//! atomic load, `Running::in_flight`) and `group_info` shows nothing
//! pending. The shutdown that follows is not timed. Both sides run on a
//! current-thread tokio runtime (one core each); the framework also runs
//! on a 2-worker multi-thread runtime, as extra rows.
//!
//! Each rate is the median of five timed runs, interleaved across rows:
//! messages per wall-clock second, and messages per second of CPU time
//! (over all the process's threads in the same interval, from
//! `/proc/self/task/*/schedstat`, which can lag by a scheduler tick: runs
//! under 100 ms show none). Other processes on a shared machine delay the
//! first but not the second; for the current-thread rows the two agree
//! when the machine is quiet, and the multi-thread rows use more CPU time
//! than wall-clock time.
//!
//! Allocations per message come from a separate, untimed pass of 131,072
//! messages with a counting global allocator (allocations and
//! reallocations, not frees; the app's start-up and shutdown are included
//! but come to well under 0.01 per message). The same pass, through a
//! broker wrapper that counts calls, gives the messages per `read` and per
//! `ack` call (the framework's reader and settler batch by themselves).
//!
//! The target (issue 3) is the framework at 60% or more of the hand loop's
//! messages per second; the program says whether this run met it.
//!
//! ```text
//! cargo run --release -p ruststream-benches --bin runtime
//! cargo run --release -p ruststream-benches --bin runtime -- --messages 1000000
//! ```
//!
//! For callgrind (see `benches/callgrind.sh`), `--only` runs one path once
//! for one N, prints its allocation count, and does the work that scales
//! with N outside `callgrind_region` (filling the stream, dropping the
//! broker) so that `--collect-atstart=no --toggle-collect=*callgrind_region*`
//! counts the consume path only:
//!
//! ```text
//! runtime --only framework --workers 8 --messages 100000
//! runtime --only hand --count 32 --messages 100000
//! ```
//!
//! `--prometheus` installs the Prometheus recorder first (as the admin
//! endpoint does), so the runtime's metrics record; without it they are
//! no-ops, the default.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Subscriber};
use ruststream_benches::counted::{Calls, Counted};
use ruststream_benches::{
    Elapsed, Payment, Probe, Stopwatch, counting, median, memory_loops, payload, thousands,
};
use tokio::runtime::Runtime;

type BenchResult<T> = Result<T, Box<dyn Error>>;

const STREAM: &str = "payments";
const FRAMEWORK_GROUP: &str = "ledger";
const HAND_GROUP: &str = "ledger-hand";

/// Messages per timed run (`--messages` changes it).
const DEFAULT_MESSAGES: u64 = 1_000_000;
/// Timed runs per row; the median is reported.
const REPS: usize = 5;
/// Messages per warm-up run.
const WARM_UP_MESSAGES: u64 = 50_000;
/// Messages per allocation-counting pass.
const ALLOC_PASS_MESSAGES: u64 = 131_072;
/// The hand loop's extra batch size.
const BIG_BATCH: usize = 64;
/// The issue's target: framework msgs/s over the hand loop's.
const TARGET_RATIO: f64 = 0.60;
/// Give up on a run that has not handled every message by then.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Worker threads of the multi-thread runtime.
const MULTI_THREAD_WORKERS: usize = 2;

static PROBE: Probe = Probe::new();

#[subscriber(
    RedisStream::new(STREAM).group(FRAMEWORK_GROUP).start_id(StreamStart::Beginning),
    workers(8)
)]
async fn ledger_8(payment: &Payment) {
    PROBE.handled(payment);
}

#[subscriber(
    RedisStream::new(STREAM).group(FRAMEWORK_GROUP).start_id(StreamStart::Beginning),
    workers(1)
)]
async fn ledger_1(payment: &Payment) {
    PROBE.handled(payment);
}

/// Which runtime the framework runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    CurrentThread,
    MultiThread,
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// The hand-written loop, reading `count` entries per call.
    Hand { count: usize },
    /// The `#[subscriber]` with `workers` lanes.
    Framework { workers: usize, flavor: Flavor },
}

impl Path {
    fn flavor(self) -> Flavor {
        match self {
            Path::Hand { .. } => Flavor::CurrentThread,
            Path::Framework { flavor, .. } => flavor,
        }
    }

    /// Entries per read: the hand loop's count, the framework's read-ahead
    /// bound.
    fn count(self) -> usize {
        match self {
            Path::Hand { count } => count,
            Path::Framework { workers, .. } => read_ahead(workers),
        }
    }

    fn name(self) -> String {
        match self {
            Path::Hand { count } => format!("hand loop, count {count}"),
            Path::Framework { workers, .. } => format!("framework, workers({workers})"),
        }
    }
}

fn flavor_name(flavor: Flavor) -> String {
    match flavor {
        Flavor::CurrentThread => "current-thread".to_owned(),
        Flavor::MultiThread => format!("multi-thread ({MULTI_THREAD_WORKERS})"),
    }
}

/// The framework's read-ahead bound for `workers(n)`, from its
/// subscription (the default: 4 per worker).
fn read_ahead(workers: usize) -> usize {
    match workers {
        1 => ledger_1.subscription().read_ahead(),
        _ => ledger_8.subscription().read_ahead(),
    }
}

/// The subscriber for `workers(n)`; only 1 and 8 are declared.
fn check_workers(workers: usize) -> BenchResult<()> {
    match workers {
        1 | 8 => Ok(()),
        n => {
            Err(format!("--workers {n}: this benchmark declares workers(1) and workers(8)").into())
        }
    }
}

/// Publishes the `messages` payments to `broker`'s stream (not timed).
async fn fill(broker: &dyn Broker, messages: u64) -> BenchResult<()> {
    memory_loops::fill(broker, STREAM, messages, payload).await
}

/// A check that a run did what it should (so a fast figure is not a run
/// that did nothing).
fn expect_count(what: &str, got: u64, want: u64) -> BenchResult<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("benchmark check failed: {what}: {got}, expected {want}").into())
    }
}

/// Runs the `workers(n)` app on `broker` until all `messages` are acked,
/// and returns how long that took; then shuts it down (not timed).
async fn framework<B: Broker + Clone>(
    broker: &B,
    workers: usize,
    messages: u64,
) -> BenchResult<Elapsed> {
    PROBE.arm(messages);
    let start = Stopwatch::start();
    let app =
        RustStream::new(AppInfo::new("runtime-bench", "0")).with_broker(broker.clone(), |b| {
            match workers {
                1 => {
                    b.include(ledger_1);
                }
                _ => {
                    b.include(ledger_8);
                }
            }
        });
    let running = app.start().await?;
    PROBE
        .wait(messages, RUN_TIMEOUT)
        .await
        .map_err(|e| format!("framework: {e}"))?;
    // The last handler has run; its ack may still be on its way. The app
    // counts an entry as settled only once its ack call has returned (and
    // its `acked` counter is up to date, which the check below reads): wait
    // for that (an atomic load), then ask the broker.
    loop {
        if running.in_flight() == 0 {
            let info = broker.group_info(STREAM, FRAMEWORK_GROUP).await?;
            if info.pending == 0 {
                break;
            }
        }
        tokio::task::yield_now().await;
    }
    let elapsed = start.elapsed();
    let stats = running.stats().await;
    running.shutdown().await;
    expect_count(
        "framework handler calls",
        PROBE.handled.load(Ordering::SeqCst),
        messages,
    )?;
    let acked: u64 = stats.iter().map(|s| s.acked).sum();
    expect_count("framework acks", acked, messages)?;
    Ok(elapsed)
}

/// The hand-written loop: read `count`, decode each, `black_box`, ack the
/// batch; until `messages` are acked.
async fn hand(broker: &dyn Broker, count: usize, messages: u64) -> BenchResult<Elapsed> {
    let start = Stopwatch::start();
    let acked =
        memory_loops::hand_consume_as::<Payment>(broker, STREAM, HAND_GROUP, count, messages)
            .await?;
    let info = broker.group_info(STREAM, HAND_GROUP).await?;
    let elapsed = start.elapsed();
    expect_count("hand loop acks", acked, messages)?;
    expect_count("hand loop pending at the end", info.pending, 0)?;
    Ok(elapsed)
}

/// One run of `path` over `messages` on `broker` (already filled).
async fn run_path<B: Broker + Clone>(
    path: Path,
    broker: &B,
    messages: u64,
) -> BenchResult<Elapsed> {
    match path {
        Path::Hand { count } => hand(broker, count, messages).await,
        Path::Framework { workers, .. } => framework(broker, workers, messages).await,
    }
}

/// The region callgrind counts (`--toggle-collect=*callgrind_region*`):
/// never inlined, so that it has a symbol.
#[inline(never)]
fn callgrind_region<T>(body: impl FnOnce() -> T) -> T {
    body()
}

/// The runtimes, built once: always a current-thread one, and the
/// multi-thread one only if a row needs it.
struct Runtimes {
    current: Runtime,
    multi: Option<Runtime>,
}

impl Runtimes {
    fn new(multi: bool) -> BenchResult<Self> {
        let multi = if multi {
            Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(MULTI_THREAD_WORKERS)
                    .enable_time()
                    .build()?,
            )
        } else {
            None
        };
        Ok(Runtimes {
            current: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?,
            multi,
        })
    }

    fn get(&self, flavor: Flavor) -> BenchResult<&Runtime> {
        match flavor {
            Flavor::CurrentThread => Ok(&self.current),
            Flavor::MultiThread => self
                .multi
                .as_ref()
                .ok_or_else(|| "the multi-thread runtime was not built".into()),
        }
    }
}

/// A timed run on a freshly filled broker.
fn timed_run(runtimes: &Runtimes, path: Path, messages: u64) -> BenchResult<Elapsed> {
    let runtime = runtimes.get(path.flavor())?;
    let broker = ruststream_memory::with_retention(ruststream_memory::MemoryRetention::UNBOUNDED);
    runtime.block_on(fill(&broker, messages))?;
    let elapsed = runtime.block_on(run_path(path, &broker, messages))?;
    // Dropping the filled broker is not timed.
    drop(broker);
    Ok(elapsed)
}

/// What an untimed pass of `messages` cost: allocations and broker calls.
#[derive(Clone, Copy, Debug)]
struct Counts {
    allocations: u64,
    reads: u64,
    acks: u64,
}

/// An untimed pass with the allocation counter on and broker calls
/// counted.
fn counted_run(runtimes: &Runtimes, path: Path, messages: u64) -> BenchResult<Counts> {
    let runtime = runtimes.get(path.flavor())?;
    let calls = Arc::new(Calls::default());
    let broker = Counted {
        inner: ruststream_memory::with_retention(ruststream_memory::MemoryRetention::UNBOUNDED),
        calls: Arc::clone(&calls),
    };
    runtime.block_on(fill(&broker, messages))?;
    let (reads, acks) = calls.snapshot();
    counting::enable(true);
    let before = counting::allocations();
    let result = runtime.block_on(run_path(path, &broker, messages));
    let allocations = counting::allocations() - before;
    counting::enable(false);
    result?;
    let (reads_after, acks_after) = calls.snapshot();
    drop(broker);
    Ok(Counts {
        allocations,
        reads: reads_after - reads,
        acks: acks_after - acks,
    })
}

/// Per-message figures from one counted pass. The app's start-up and
/// shutdown are in the pass too, but come to well under 0.01 allocations
/// per message over `ALLOC_PASS_MESSAGES`; `benches/callgrind.sh` gives the
/// exact difference between two sizes.
#[derive(Clone, Copy, Debug)]
struct PerMessage {
    allocations: f64,
    /// Messages per `read` call.
    per_read: f64,
    /// Messages per `ack` call.
    per_ack: f64,
}

fn per_message(runtimes: &Runtimes, path: Path) -> BenchResult<PerMessage> {
    let counts = counted_run(runtimes, path, ALLOC_PASS_MESSAGES)?;
    let m = ALLOC_PASS_MESSAGES as f64;
    Ok(PerMessage {
        allocations: counts.allocations as f64 / m,
        per_read: m / counts.reads as f64,
        per_ack: m / counts.acks as f64,
    })
}

/// One measured row.
#[derive(Clone, Copy, Debug)]
struct Row {
    path: Path,
    /// Messages per wall-clock second (median).
    rate: f64,
    /// Messages per second of CPU time over all threads (median), if the
    /// CPU time could be read.
    cpu_rate: Option<f64>,
    counts: PerMessage,
}

/// The hand loop's row at `count`, if measured.
fn hand_row(rows: &[Row], count: usize) -> Option<&Row> {
    rows.iter().find(|r| r.path == Path::Hand { count })
}

/// The hand loop's wall-clock rate at `count`, if measured.
fn hand_rate(rows: &[Row], count: usize) -> Option<f64> {
    hand_row(rows, count).map(|r| r.rate)
}

fn print_table(rows: &[Row]) {
    println!(
        "| {:<22} | {:<18} | {:>5} | {:>11} | {:>9} | {:>10} | {:>11} | {:>9} | {:>10} | {:>9} | {:>8} |",
        "path",
        "runtime",
        "count",
        "msg/s",
        "vs hand",
        "vs hand 64",
        "msg/CPU-s",
        "CPU ratio",
        "allocs/msg",
        "msgs/read",
        "msgs/ack"
    );
    println!(
        "|{:-<24}|{:-<20}|{:->7}|{:->13}|{:->11}|{:->12}|{:->13}|{:->11}|{:->12}|{:->11}|{:->10}|",
        ":", ":", ":", ":", ":", ":", ":", ":", ":", ":", ":"
    );
    let big = hand_rate(rows, BIG_BATCH);
    for row in rows {
        let same = match row.path {
            Path::Hand { .. } => None,
            Path::Framework { .. } => hand_row(rows, row.path.count()),
        };
        let ratio = |value: Option<f64>, base: Option<f64>| match (value, base) {
            (Some(v), Some(b)) => format!("{:.2}", v / b),
            _ => "-".to_owned(),
        };
        let count = match row.path {
            Path::Hand { count } => count.to_string(),
            Path::Framework { .. } => format!("<={}", row.path.count()),
        };
        println!(
            "| {:<22} | {:<18} | {:>5} | {:>11} | {:>9} | {:>10} | {:>11} | {:>9} | {:>10.3} | {:>9.1} | {:>8.1} |",
            row.path.name(),
            flavor_name(row.path.flavor()),
            count,
            thousands(row.rate),
            ratio(Some(row.rate), same.map(|h| h.rate)),
            ratio(Some(row.rate), big),
            row.cpu_rate.map_or("-".to_owned(), thousands),
            ratio(row.cpu_rate, same.and_then(|h| h.cpu_rate)),
            row.counts.allocations,
            row.counts.per_read,
            row.counts.per_ack,
        );
    }
}

/// Command-line options.
#[derive(Debug)]
struct Options {
    messages: u64,
    only: Option<Only>,
    workers: usize,
    count: Option<usize>,
    flavor: Flavor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    Framework,
    Hand,
}

const USAGE: &str = "usage: runtime [--messages N] [--prometheus] \
    [--only framework|hand [--workers 1|8] [--count C] [--runtime current|multi]]";

fn parse_options() -> BenchResult<Options> {
    let mut options = Options {
        messages: DEFAULT_MESSAGES,
        only: None,
        workers: 8,
        count: None,
        flavor: Flavor::CurrentThread,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--messages" => options.messages = value()?.parse()?,
            "--prometheus" => {
                // The recorder the admin endpoint installs: the metrics
                // then record, rather than being no-ops.
                metrics_exporter_prometheus::PrometheusBuilder::new()
                    .install_recorder()
                    .map_err(|e| format!("--prometheus: {e}"))?;
            }
            "--workers" => options.workers = value()?.parse()?,
            "--count" => options.count = Some(value()?.parse()?),
            "--only" => {
                options.only = Some(match value()?.as_str() {
                    "framework" => Only::Framework,
                    "hand" => Only::Hand,
                    other => return Err(format!("--only {other}: {USAGE}").into()),
                })
            }
            "--runtime" => {
                options.flavor = match value()?.as_str() {
                    "current" => Flavor::CurrentThread,
                    "multi" => Flavor::MultiThread,
                    other => return Err(format!("--runtime {other}: {USAGE}").into()),
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}; {USAGE}").into()),
        }
    }
    if options.messages == 0 {
        return Err("--messages must be at least 1".into());
    }
    check_workers(options.workers)?;
    Ok(options)
}

/// `--only`: one run of one path, for callgrind. Prints what the script
/// reads: the path, N and the allocations inside the region.
fn only(runtimes: &Runtimes, options: &Options, which: Only) -> BenchResult<()> {
    let path = match which {
        Only::Framework => Path::Framework {
            workers: options.workers,
            flavor: options.flavor,
        },
        Only::Hand => Path::Hand {
            count: options.count.unwrap_or_else(|| read_ahead(options.workers)),
        },
    };
    let runtime = runtimes.get(path.flavor())?;
    let broker = ruststream_memory::with_retention(ruststream_memory::MemoryRetention::UNBOUNDED);
    runtime.block_on(fill(&broker, options.messages))?;
    counting::enable(true);
    let before = counting::allocations();
    let elapsed = callgrind_region(|| runtime.block_on(run_path(path, &broker, options.messages)))?;
    let allocations = counting::allocations() - before;
    counting::enable(false);
    drop(broker);
    println!(
        "path={:?} runtime={:?} count={} messages={} allocations={} elapsed_ms={:.1} cpu_ms={}",
        which,
        path.flavor(),
        path.count(),
        options.messages,
        allocations,
        elapsed.wall.as_secs_f64() * 1e3,
        elapsed.cpu.map_or("-".to_owned(), |cpu| format!(
            "{:.1}",
            cpu.as_secs_f64() * 1e3
        )),
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    let options = parse_options()?;
    if let Some(which) = options.only {
        let runtimes = Runtimes::new(options.flavor == Flavor::MultiThread)?;
        return only(&runtimes, &options, which);
    }
    let runtimes = Runtimes::new(true)?;

    let messages = options.messages;
    let (w8, w1) = (read_ahead(8), read_ahead(1));
    let mut hand_counts = vec![w1, w8, BIG_BATCH];
    hand_counts.sort_unstable();
    hand_counts.dedup();
    let mut paths: Vec<Path> = hand_counts
        .into_iter()
        .map(|count| Path::Hand { count })
        .collect();
    for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
        for workers in [8, 1] {
            paths.push(Path::Framework { workers, flavor });
        }
    }

    println!("ruststream runtime: a #[subscriber] handler (&Payment, JSON, returns ()) on the");
    println!(
        "memory broker against a hand-written read/decode/ack loop over the same Broker calls."
    );
    println!(
        "{} messages per run ({}-byte payloads, e.g. {}); median of {REPS} runs; allocations \
         from an untimed pass of {} messages.",
        thousands(messages as f64),
        payload(42).len(),
        String::from_utf8_lossy(&payload(42)),
        thousands(ALLOC_PASS_MESSAGES as f64),
    );
    println!();

    for &path in &paths {
        timed_run(&runtimes, path, WARM_UP_MESSAGES)?;
    }
    let mut counts = Vec::with_capacity(paths.len());
    for &path in &paths {
        counts.push(per_message(&runtimes, path)?);
    }
    let mut runs: Vec<Vec<Elapsed>> = vec![Vec::with_capacity(REPS); paths.len()];
    for _ in 0..REPS {
        for (i, &path) in paths.iter().enumerate() {
            runs[i].push(timed_run(&runtimes, path, messages)?);
        }
    }
    let per_second = |d: Duration| messages as f64 / d.as_secs_f64();
    let rows: Vec<Row> = paths
        .iter()
        .zip(runs)
        .zip(counts)
        .map(|((&path, runs), counts)| {
            let cpu: Option<Vec<f64>> = runs.iter().map(|r| r.cpu.map(per_second)).collect();
            Row {
                path,
                rate: median(runs.iter().map(|r| per_second(r.wall)).collect()),
                cpu_rate: cpu.map(median),
                counts,
            }
        })
        .collect();
    print_table(&rows);
    println!();

    let mut all_met = true;
    let mut figures = Vec::new();
    for row in &rows {
        if let Path::Framework {
            workers,
            flavor: Flavor::CurrentThread,
        } = row.path
        {
            let base = hand_row(&rows, row.path.count()).ok_or("no hand-loop row")?;
            let ratio = row.rate / base.rate;
            all_met &= ratio >= TARGET_RATIO;
            let cpu = match (row.cpu_rate, base.cpu_rate) {
                (Some(fw), Some(hand)) => format!(" (CPU time: {:.2})", fw / hand),
                _ => String::new(),
            };
            figures.push(format!(
                "workers({workers}): {ratio:.2}{cpu} of the hand loop at count {}",
                row.path.count()
            ));
        }
    }
    println!(
        "Target: framework >= {:.0}% of the hand loop's msg/s (current-thread, same read count): {} ({})",
        TARGET_RATIO * 100.0,
        if all_met { "MET" } else { "NOT MET" },
        figures.join(", ")
    );
    Ok(())
}
