//! Memory of the file-log broker (`ruststream-filelog`) against the number
//! of entries it retains (issue 16): resident memory after writing and
//! after reopening, how long the reopen takes, and how fast a backlog that
//! is not in memory is consumed and replayed.
//!
//! For each entry count N (default 1,000,000, 5,000,000 and 10,000,000) a
//! child process fills a fresh directory with N messages of 100 bytes
//! (`publish_batch` of 512, `SyncPolicy::Interval(10 ms)`), reports its
//! peak resident memory and exits. A second child opens the directory,
//! and reports:
//!
//! - the time `FileLogBroker::open` took, and resident memory right after
//!   it (`VmRSS`) and at its peak so far (`VmHWM`);
//! - consume+ack of the whole stream by a new group reading from the
//!   beginning (`ReadMode::New`, count 512, each batch acked): none of it
//!   is in memory after a reopen, so every payload comes from the segment
//!   files (through the page cache, which the fill left warm);
//! - replay: `Broker::range` from the first entry to the last, 10,000
//!   entries a call;
//! - resident memory after both (current and peak).
//!
//! The reopening child compacts the group state before it exits, so that
//! the next reopen of the same files (`--reuse`) reads a snapshot rather
//! than the journal of that child's consumption.
//!
//! Children are this program run again (`--child fill|reopen`), so each
//! figure is one process's own. Directories are made under `--dir`
//! (default: the system's temporary directory) and deleted at the end
//! unless `--keep`; with `--reuse` a directory already filled is reopened
//! as it is (a different build can then measure the same files).
//!
//! ```text
//! cargo run --release -p ruststream-benches --bin filelog_memory
//! filelog_memory --entries 1000000,5000000 --dir /data/bench --keep
//! ```

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ruststream_benches::filelog_workload::{CONSUMER, PAYLOAD, READ_COUNT, STREAM};
use ruststream_benches::thousands;
use ruststream_core::{Broker, Delivery, EntryId, Message, ReadMode, ReadRequest, StreamStart};
use ruststream_filelog::{FileLogBroker, FileLogOptions, SyncPolicy};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Messages per publish while filling.
const FILL_BATCH: usize = 512;
/// Entries per `range` call of the replay.
const RANGE_COUNT: usize = 10_000;

fn options() -> FileLogOptions {
    FileLogOptions {
        sync: SyncPolicy::Interval(Duration::from_millis(10)),
        ..FileLogOptions::default()
    }
}

/// A field of `/proc/self/status` in MB (`VmRSS`, `VmHWM`).
fn status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn fill(dir: &Path, entries: u64) -> BenchResult<()> {
    let broker = FileLogBroker::open_with(dir, options())?;
    let started = Instant::now();
    let mut left = entries;
    while left > 0 {
        let n = left.min(FILL_BATCH as u64);
        let batch = (0..n).map(|_| Message::new(PAYLOAD.to_vec())).collect();
        broker.publish_batch(STREAM, batch).await?;
        left -= n;
    }
    broker.sync().await?;
    let took = started.elapsed();
    println!(
        "fill entries={entries} secs={:.2} rss_mb={:.1} peak_mb={:.1}",
        took.as_secs_f64(),
        status_mb("VmRSS"),
        status_mb("VmHWM")
    );
    Ok(())
}

async fn reopen(dir: &Path) -> BenchResult<()> {
    let started = Instant::now();
    let broker = FileLogBroker::open_with(dir, options())?;
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let (open_rss, open_peak) = (status_mb("VmRSS"), status_mb("VmHWM"));

    let group = format!("backlog-{}", std::process::id());
    broker
        .ensure_group(STREAM, &group, StreamStart::Beginning)
        .await?;
    let started = Instant::now();
    let mut ids = Vec::with_capacity(READ_COUNT);
    let mut consumed = 0u64;
    loop {
        let request = ReadRequest::new(STREAM, &group, CONSUMER, ReadMode::New, READ_COUNT);
        let batch = broker.read(request).await?;
        if batch.is_empty() {
            break;
        }
        ids.clear();
        ids.extend(batch.deliveries.iter().map(Delivery::id));
        consumed += broker.ack(STREAM, &group, &ids).await?;
    }
    let consume_rate = consumed as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut from = EntryId::ZERO;
    let mut replayed = 0u64;
    let mut bytes = 0u64;
    loop {
        let entries = broker
            .range(STREAM, from, EntryId::MAX, RANGE_COUNT)
            .await?;
        let Some(last) = entries.last() else { break };
        from = last.id.next();
        replayed += entries.len() as u64;
        bytes += entries
            .iter()
            .map(|e| e.message.payload.len() as u64)
            .sum::<u64>();
    }
    let replay_rate = replayed as f64 / started.elapsed().as_secs_f64();
    if bytes != replayed * PAYLOAD.len() as u64 {
        return Err(format!("replay read {bytes} payload bytes for {replayed} entries").into());
    }
    println!(
        "reopen open_ms={open_ms:.0} open_rss_mb={open_rss:.1} open_peak_mb={open_peak:.1} \
         consumed={consumed} consume_rate={consume_rate:.0} replayed={replayed} \
         replay_rate={replay_rate:.0} rss_mb={:.1} peak_mb={:.1}",
        status_mb("VmRSS"),
        status_mb("VmHWM")
    );
    // The next reopen of these files starts from a snapshot, as one after
    // a clean shutdown does, not from this run's journal.
    broker.compact()?;
    drop(broker);
    Ok(())
}

/// The value of `key=` in a child's report line.
fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn child(kind: &str, dir: &Path, entries: u64) -> BenchResult<String> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args(["--child", kind, "--entries", &entries.to_string()])
        .arg("--path")
        .arg(dir)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "child {kind} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let text = String::from_utf8(out.stdout)?;
    Ok(text
        .lines()
        .find(|l| l.starts_with(kind))
        .unwrap_or_default()
        .to_owned())
}

fn main() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(kind) = arg(&args, "--child") {
        let dir = PathBuf::from(arg(&args, "--path").ok_or("--path missing")?);
        let entries: u64 = arg(&args, "--entries")
            .ok_or("--entries missing")?
            .parse()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        return runtime.block_on(async {
            match kind.as_str() {
                "fill" => fill(&dir, entries).await,
                _ => reopen(&dir).await,
            }
        });
    }
    let counts: Vec<u64> = arg(&args, "--entries")
        .unwrap_or_else(|| "1000000,5000000,10000000".to_owned())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let base = arg(&args, "--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    let keep = args.iter().any(|a| a == "--keep");
    let reuse = args.iter().any(|a| a == "--reuse");
    println!(
        "| entries | fill peak RSS (MB) | reopen (ms) | RSS after reopen (MB) | consume+ack msg/s | replay entries/s | RSS after (MB) | peak RSS (MB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for entries in counts {
        let dir = base.join(format!("filelog-memory-{entries}"));
        let fill_peak = if reuse && dir.exists() {
            f64::NAN
        } else {
            let _ = std::fs::remove_dir_all(&dir);
            field(&child("fill", &dir, entries)?, "peak_mb")
        };
        let line = child("reopen", &dir, entries)?;
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {} | {} | {:.0} | {:.0} |",
            thousands(entries as f64),
            fill_peak,
            field(&line, "open_ms"),
            field(&line, "open_rss_mb"),
            thousands(field(&line, "consume_rate")),
            thousands(field(&line, "replay_rate")),
            field(&line, "rss_mb"),
            field(&line, "peak_mb"),
        );
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}
