//! Throughput of the memory broker, each figure beside a raw baseline
//! measured in the same run.
//!
//! Three workloads, each with batches of 1, 64 and 512 messages:
//!
//! - **publish**: publish batches of `B` messages to one stream.
//! - **read+ack**: the stream is filled first (not timed); then one
//!   consumer of a group reads `ReadMode::New` with `count = B` and
//!   acknowledges each batch, until the stream is drained.
//! - **end-to-end**: publish `B`, read `B`, ack `B`, repeated.
//!
//! The publishing loops trim the stream (`Trim::MaxLen(0)`, timed) every
//! 65,536 messages, as a long-running deployment must: the engine keeps
//! acknowledged entries until trimmed, and an untrimmed stream makes the
//! figures measure page faults and allocator growth, not the broker.
//!
//! The *framework* figure goes through the [`Broker`] trait: a
//! [`MemoryBroker`] whose async calls are awaited on a current-thread tokio
//! runtime (so it includes the lock, the boxed futures, the broker's clock
//! reads and the `Vec` the batch API takes). The *baseline* is a
//! hand-written loop over the same [`Engine`] calls (`publish`, `read`,
//! `ack`, `trim`) with no lock and no async, reading the same [`Clock`]
//! where the engine needs a time. It hands `Engine::publish` an iterator
//! of messages (no intermediate `Vec`) and, for single messages, calls
//! `Engine::publish_shared` as `MemoryBroker::publish` does. The ratio
//! framework / baseline is the share of the raw engine's speed that the
//! broker keeps.
//!
//! Every message has a ~60-byte JSON-like payload and no headers; creating
//! it (one payload allocation) is part of both loops. Each figure is the
//! median of five timed runs on a fresh broker (or engine), after a short
//! warm-up. A separate, untimed pass with a counting global allocator gives
//! heap allocations per message (allocations and reallocations; frees are
//! not counted) for every row.
//!
//! The target (issue 2) is end-to-end through the broker API at 1,000,000
//! messages per second or more with batches of 64 or more; the program says
//! whether this run met it.
//!
//! Run it in release mode:
//!
//! ```text
//! cargo run --release -p ruststream-benches --bin memory
//! ```

use std::error::Error;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ruststream_benches::{counting, median, thousands};
use ruststream_core::{
    Broker, BrokerError, Clock, Delivery, EntryId, Message, ReadMode, ReadRequest, StreamStart,
    Trim,
};
use ruststream_engine::Engine;

const STREAM: &str = "orders";
const GROUP: &str = "billing";
const CONSUMER: &str = "worker-1";

/// The payload of every message: 63 bytes of JSON.
const PAYLOAD: &[u8] = br#"{"order_id":1234567,"customer":"acme-corp","amount_cents":4999}"#;

/// The batch sizes measured.
const BATCHES: [usize; 3] = [1, 64, 512];

/// Timed runs per figure; the median is reported.
const REPS: usize = 5;

/// The issue's target for end-to-end through the broker API, messages/s.
const TARGET_MSGS_PER_SEC: f64 = 1_000_000.0;

/// The smallest batch the target applies to.
const TARGET_MIN_BATCH: usize = 64;

/// Messages per allocation-counting pass (a multiple of every batch size).
const ALLOC_PASS_MESSAGES: u64 = 512 * 256;

/// Messages per warm-up run, which also calibrates the timed runs.
const WARM_UP_MESSAGES: u64 = 512 * 200;

/// How long a timed run should last; its message count is set from the
/// warm-up's rate.
const RUN_TARGET: Duration = Duration::from_millis(500);

/// Bounds on messages per timed run.
const RUN_MESSAGES: std::ops::RangeInclusive<u64> = 512 * 500..=512 * 32_000;

/// The publishing loops trim the stream to nothing (every entry is
/// acknowledged by then, or there is no group) each time this many messages
/// have been published since the last trim, so that memory stays bounded
/// and a run measures the steady state, freeing included, rather than the
/// page faults of an ever-growing stream. A multiple of every batch size.
const TRIM_EVERY: u64 = 65_536;

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    Publish,
    ReadAck,
    EndToEnd,
}

impl Workload {
    const ALL: [Workload; 3] = [Workload::Publish, Workload::ReadAck, Workload::EndToEnd];

    fn name(self) -> &'static str {
        match self {
            Workload::Publish => "publish",
            Workload::ReadAck => "read+ack",
            Workload::EndToEnd => "end-to-end",
        }
    }
}

/// One timed loop: how long it took and the allocations counted meanwhile
/// (zero unless counting was on).
#[derive(Clone, Copy, Debug)]
struct Run {
    elapsed: Duration,
    allocations: u64,
}

/// Times `body`, counting allocations around it.
fn timed<E>(body: impl FnOnce() -> Result<(), E>) -> Result<Run, E> {
    let allocations = counting::allocations();
    let start = Instant::now();
    body()?;
    let elapsed = start.elapsed();
    Ok(Run {
        elapsed,
        allocations: counting::allocations() - allocations,
    })
}

/// Async twin of [`timed`].
async fn timed_async<F>(body: F) -> Result<Run, BrokerError>
where
    F: Future<Output = Result<(), BrokerError>>,
{
    let allocations = counting::allocations();
    let start = Instant::now();
    body.await?;
    let elapsed = start.elapsed();
    Ok(Run {
        elapsed,
        allocations: counting::allocations() - allocations,
    })
}

fn message() -> Message {
    Message::new(PAYLOAD.to_vec())
}

/// `messages` split into publish batches of at most 512, for filling a
/// stream before a timed read.
fn chunks(messages: u64) -> impl Iterator<Item = u64> {
    (0..messages)
        .step_by(512)
        .map(move |start| (messages - start).min(512))
}

/// Whether the publishing loop trims after `round` (counted from 1).
fn trim_due(round: u64, batch: usize) -> bool {
    (round * batch as u64).is_multiple_of(TRIM_EVERY)
}

fn request(batch: usize) -> ReadRequest<'static> {
    ReadRequest::new(STREAM, GROUP, CONSUMER, ReadMode::New, batch)
}

/// A check that the loop did what it should (so a fast figure is not a
/// loop that did nothing).
fn expect_count(what: &str, got: u64, want: u64) -> Result<(), BrokerError> {
    if got == want {
        Ok(())
    } else {
        Err(BrokerError::InvalidArgument(format!(
            "benchmark check failed: {what} handled {got} messages, expected {want}"
        )))
    }
}

/// The workload through the `Broker` trait on a fresh `MemoryBroker`.
async fn framework(workload: Workload, batch: usize, messages: u64) -> Result<Run, BrokerError> {
    let broker = ruststream_memory::with_retention(ruststream_memory::MemoryRetention::UNBOUNDED);
    // Through the trait object, as the runtime calls it.
    let broker: &dyn Broker = &broker;
    let rounds = messages / batch as u64;
    let mut ids: Vec<EntryId> = Vec::with_capacity(batch);
    match workload {
        Workload::Publish => {
            timed_async(async {
                for round in 1..=rounds {
                    if batch == 1 {
                        black_box(broker.publish(STREAM, message()).await?);
                    } else {
                        let batch: Vec<Message> = (0..batch).map(|_| message()).collect();
                        black_box(broker.publish_batch(STREAM, batch).await?);
                    }
                    if trim_due(round, batch) {
                        broker.trim(STREAM, Trim::MaxLen(0)).await?;
                    }
                }
                Ok(())
            })
            .await
        }
        Workload::ReadAck => {
            broker
                .ensure_group(STREAM, GROUP, StreamStart::Beginning)
                .await?;
            for chunk in chunks(messages) {
                broker
                    .publish_batch(STREAM, (0..chunk).map(|_| message()).collect())
                    .await?;
            }
            let mut acked = 0;
            let run = timed_async(async {
                for _ in 0..rounds {
                    let read = broker.read(request(batch)).await?;
                    ids.clear();
                    ids.extend(read.deliveries.iter().map(Delivery::id));
                    acked += broker.ack(STREAM, GROUP, &ids).await?;
                }
                Ok(())
            })
            .await?;
            expect_count("framework read+ack", acked, messages)?;
            Ok(run)
        }
        Workload::EndToEnd => {
            broker.ensure_group(STREAM, GROUP, StreamStart::New).await?;
            let mut acked = 0;
            let run = timed_async(async {
                for round in 1..=rounds {
                    if batch == 1 {
                        broker.publish(STREAM, message()).await?;
                    } else {
                        let batch: Vec<Message> = (0..batch).map(|_| message()).collect();
                        broker.publish_batch(STREAM, batch).await?;
                    }
                    let read = broker.read(request(batch)).await?;
                    ids.clear();
                    ids.extend(read.deliveries.iter().map(Delivery::id));
                    acked += broker.ack(STREAM, GROUP, &ids).await?;
                    if trim_due(round, batch) {
                        broker.trim(STREAM, Trim::MaxLen(0)).await?;
                    }
                }
                Ok(())
            })
            .await?;
            expect_count("framework end-to-end", acked, messages)?;
            Ok(run)
        }
    }
}

/// The same workload as a hand-written loop over the engine: no lock, no
/// async, no boxing.
fn baseline(workload: Workload, batch: usize, messages: u64) -> Result<Run, BrokerError> {
    let mut engine = Engine::new();
    let clock = Clock::new();
    let rounds = messages / batch as u64;
    let req = request(batch);
    let mut ids: Vec<EntryId> = Vec::with_capacity(batch);
    match workload {
        Workload::Publish => timed(|| {
            for round in 1..=rounds {
                if batch == 1 {
                    black_box(engine.publish_shared(STREAM, Arc::new(message()), clock.now_ms()));
                } else {
                    black_box(engine.publish(
                        STREAM,
                        (0..batch).map(|_| message()),
                        clock.now_ms(),
                    ));
                }
                if trim_due(round, batch) {
                    engine.trim(STREAM, Trim::MaxLen(0))?;
                }
            }
            Ok(())
        }),
        Workload::ReadAck => {
            engine.ensure_group(STREAM, GROUP, StreamStart::Beginning, clock.now_ms());
            // Filled exactly as the framework's stream is (a `Vec` per
            // batch), so that both read the same heap layout.
            for chunk in chunks(messages) {
                let batch: Vec<Message> = (0..chunk).map(|_| message()).collect();
                engine.publish(STREAM, batch, clock.now_ms());
            }
            let mut acked = 0;
            let run = timed(|| {
                for _ in 0..rounds {
                    let read = engine.read(&req, clock.now_ms())?;
                    ids.clear();
                    ids.extend(read.deliveries.iter().map(Delivery::id));
                    acked += engine.ack(STREAM, GROUP, &ids)?;
                }
                Ok::<_, BrokerError>(())
            })?;
            expect_count("baseline read+ack", acked, messages)?;
            Ok(run)
        }
        Workload::EndToEnd => {
            engine.ensure_group(STREAM, GROUP, StreamStart::New, clock.now_ms());
            let mut acked = 0;
            let run = timed(|| {
                for round in 1..=rounds {
                    if batch == 1 {
                        engine.publish_shared(STREAM, Arc::new(message()), clock.now_ms());
                    } else {
                        engine.publish(STREAM, (0..batch).map(|_| message()), clock.now_ms());
                    }
                    let read = engine.read(&req, clock.now_ms())?;
                    ids.clear();
                    ids.extend(read.deliveries.iter().map(Delivery::id));
                    acked += engine.ack(STREAM, GROUP, &ids)?;
                    if trim_due(round, batch) {
                        engine.trim(STREAM, Trim::MaxLen(0))?;
                    }
                }
                Ok::<_, BrokerError>(())
            })?;
            expect_count("baseline end-to-end", acked, messages)?;
            Ok(run)
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
struct Row {
    workload: Workload,
    batch: usize,
    messages: u64,
    framework_rate: f64,
    baseline_rate: f64,
    framework_allocs: f64,
    baseline_allocs: f64,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.framework_rate / self.baseline_rate
    }
}

fn rate(messages: u64, run: Run) -> f64 {
    messages as f64 / run.elapsed.as_secs_f64()
}

/// Measures one workload and batch size: warm-up, allocation pass, then
/// `REPS` timed runs of framework and baseline, interleaved, each of the
/// same number of messages (about `RUN_TARGET` of the framework's time).
fn measure(
    runtime: &tokio::runtime::Runtime,
    workload: Workload,
    batch: usize,
) -> Result<Row, BrokerError> {
    runtime.block_on(framework(workload, batch, WARM_UP_MESSAGES))?;
    baseline(workload, batch, WARM_UP_MESSAGES)?;
    // Calibrate on the framework (the slower side, usually): a second
    // warm-up run, timed.
    let warm = runtime.block_on(framework(workload, batch, WARM_UP_MESSAGES))?;
    let messages = ((rate(WARM_UP_MESSAGES, warm) * RUN_TARGET.as_secs_f64()) as u64)
        .next_multiple_of(512)
        .clamp(*RUN_MESSAGES.start(), *RUN_MESSAGES.end());

    counting::enable(true);
    let framework_counted = runtime.block_on(framework(workload, batch, ALLOC_PASS_MESSAGES));
    let baseline_counted = baseline(workload, batch, ALLOC_PASS_MESSAGES);
    counting::enable(false);
    let per_message = |run: Run| run.allocations as f64 / ALLOC_PASS_MESSAGES as f64;
    let framework_allocs = per_message(framework_counted?);
    let baseline_allocs = per_message(baseline_counted?);

    let mut framework_rates = Vec::with_capacity(REPS);
    let mut baseline_rates = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        framework_rates.push(rate(
            messages,
            runtime.block_on(framework(workload, batch, messages))?,
        ));
        baseline_rates.push(rate(messages, baseline(workload, batch, messages)?));
    }
    Ok(Row {
        workload,
        batch,
        messages,
        framework_rate: median(framework_rates),
        baseline_rate: median(baseline_rates),
        framework_allocs,
        baseline_allocs,
    })
}

fn print_header() {
    println!(
        "| {:<10} | {:>5} | {:>9} | {:>16} | {:>16} | {:>5} | {:>14} | {:>14} |",
        "workload",
        "batch",
        "messages",
        "framework msg/s",
        "baseline msg/s",
        "ratio",
        "fw allocs/msg",
        "raw allocs/msg"
    );
    println!(
        "|{:-<12}|{:->7}|{:->11}|{:->18}|{:->18}|{:->7}|{:->16}|{:->16}|",
        ":", ":", ":", ":", ":", ":", ":", ":"
    );
}

fn print_row(row: &Row) {
    println!(
        "| {:<10} | {:>5} | {:>9} | {:>16} | {:>16} | {:>5.2} | {:>14.3} | {:>14.3} |",
        row.workload.name(),
        row.batch,
        thousands(row.messages as f64),
        thousands(row.framework_rate),
        thousands(row.baseline_rate),
        row.ratio(),
        row.framework_allocs,
        row.baseline_allocs,
    );
}

fn main() -> Result<(), Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    println!("ruststream memory broker: framework (Broker API, MemoryBroker, current-thread");
    println!("tokio) against a raw baseline (the same Engine calls, no lock, no async).");
    println!(
        "Payload {} bytes, no headers; median of {REPS} runs; allocations from a separate \
         counted pass of {} messages.",
        PAYLOAD.len(),
        thousands(ALLOC_PASS_MESSAGES as f64)
    );
    println!();
    print_header();
    let mut rows = Vec::new();
    for workload in Workload::ALL {
        for batch in BATCHES {
            let row = measure(&runtime, workload, batch)?;
            print_row(&row);
            rows.push(row);
        }
    }
    println!();

    let target_rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload == Workload::EndToEnd && r.batch >= TARGET_MIN_BATCH)
        .collect();
    let met = !target_rows.is_empty()
        && target_rows
            .iter()
            .all(|r| r.framework_rate >= TARGET_MSGS_PER_SEC);
    let figures: Vec<String> = target_rows
        .iter()
        .map(|r| format!("B={}: {} msg/s", r.batch, thousands(r.framework_rate)))
        .collect();
    println!(
        "Target: end-to-end through the Broker API >= {} msg/s with batches >= {}: {} ({})",
        thousands(TARGET_MSGS_PER_SEC),
        TARGET_MIN_BATCH,
        if met { "MET" } else { "NOT MET" },
        figures.join(", ")
    );
    Ok(())
}
