//! Throughput of the file-log broker (`ruststream-filelog`), each figure
//! beside a raw baseline measured in the same run, on the same disk.
//!
//! Four workloads (issue 5, point 9):
//!
//! 1. **Durable publish** with `SyncPolicy::EveryPublish`: 1 and 16
//!    publishers, each a tokio task on a 2-worker multi-thread runtime that
//!    awaits each `publish` of one 100-byte message before the next. Extra
//!    rows: 16 publishers awaiting `publish_batch` of 16, and 64 and 256
//!    single-message publishers (how many it takes to fill an fsync).
//!    Baselines: a naive loop that appends one framed record to a plain
//!    file and calls `fdatasync` (for 1 publisher), and the simplest honest
//!    group commit (for more): as many threads as publishers append framed
//!    records to one file under a mutex; a writer whose record is not yet
//!    durable either waits on a condition variable for the sync in progress
//!    or, if none is running, becomes the leader and runs one `fdatasync`
//!    that covers every record written before it started. A variant whose
//!    leader first waits up to 100 us for all 16 writers to have written
//!    is measured too (one line under the table): it shows what a smarter
//!    group commit would gain here.
//!    The rows of single messages from 1 and 16 publishers also give their
//!    *ceiling* (issue 15): P publishers with one message in flight each
//!    have at most P messages per fsync, so at most P × the fsyncs per
//!    second of the naive loop, measured in half-length runs just before
//!    and just after each framework run (the disk's rate drifts when other
//!    processes use it); "of ceil" is the median of each run's share.
//! 2. **Publish with `SyncPolicy::Interval(10 ms)`**, 1 and 16 publishers
//!    (and 16 × batches of 16), beside raw appends with no sync in the
//!    write path and a thread that calls `fdatasync` every 10 ms.
//! 3. **Consume+ack**: N entries (default 1,000,000) are published first
//!    (not timed); then one consumer reads `ReadMode::New` with
//!    `count = 512` and acks each batch until the group has read them all.
//!    Baselines: the same calls on `ruststream_engine::Engine` directly
//!    (no lock, no async, no I/O), and a raw sequential read of the
//!    stream's segment files (1 MiB reads, walking the record headers).
//! 4. **Reopen**: `FileLogBroker::open` of the directory left by (3), N
//!    entries and group state (one group with entries pending and
//!    dead-lettered, besides the drained ones), as left and again after
//!    `compact()`. Baselines: `fs::read` of the same segment files, and
//!    `fs::read` plus a CRC-32 check of every record. The page cache is
//!    warm (dropping it needs root): these are warm-cache figures.
//!
//! The records the baselines write use the file log's own framing (marker,
//! kind, length, CRC-32 of kind and body; body = id, copy flag, header
//! count, payload), so both sides write the same bytes per message.
//!
//! Where the temporary directory is on a block device listed in
//! `/proc/diskstats`, every publish row also gives the device's *flush
//! requests* per second over the run (field "flushes completed", Linux
//! 5.5+): this counts the cache flushes `fdatasync` caused for the broker,
//! whose own sync calls are not visible from outside. The raw rows also
//! count their `fdatasync` calls exactly. Other processes writing to the
//! same disk add to the flush count. "msg/flush" (the framework's messages
//! per device flush) shows how well group commit fills each sync: at most
//! P for P publishers of one message each. "fw fair" is the fewest
//! messages one publisher sent over the most (median of the runs): 1.00
//! when every publisher got as many turns. A faster row with a low figure
//! is starving publishers, not serving them faster.
//!
//! Publish figures are the median of `--reps` runs (default 3) of
//! `--seconds` each (default 2), framework and baseline interleaved, each
//! run on a fresh directory under `std::env::temp_dir()` that is deleted
//! afterwards. Consume+ack is the median over `--reps` groups of the same
//! stream (each group drains all N entries), reopen the median of
//! `--reps` opens.
//!
//! Targets (issue 5, on this 2-core machine): 16 concurrent publishers at
//! least 200,000 durable msgs/s; consume+ack at least 300,000 msgs/s;
//! reopen of 1,000,000 entries under 2 s. The program says whether each
//! was met.
//!
//! ```text
//! cargo run --release -p ruststream-benches --bin filelog
//! cargo run --release -p ruststream-benches --bin filelog -- --entries 200000 --seconds 1
//! ```
//!
//! For profiling, `--only` runs one path once. For `consume`,
//! `consume-engine` and `reopen` the work that is not measured (filling
//! the stream, dropping the broker) is outside `callgrind_region`, so that
//! callgrind's `--collect-atstart=no --toggle-collect=*callgrind_region*`
//! counts only that path. The publish paths run on the runtime's worker
//! threads, which that toggle does not follow: collect everything and
//! subtract a shorter run (`--seconds`) to remove start-up and shutdown.
//! `raw` runs the raw group commit alone, `--gather-us` giving its leader
//! a wait for the other writers.
//!
//! ```text
//! filelog --only consume --entries 100000
//! filelog --only consume-engine --entries 100000
//! filelog --only reopen --entries 100000
//! filelog --only publish --publishers 16 --batch 1 --seconds 3
//! filelog --only interval --publishers 1 --seconds 2
//! filelog --only raw --publishers 16 --gather-us 100
//! filelog --only table --reps 5
//! ```
//!
//! `table` prints sections 1 and 2 alone (the publish rows and their
//! targets).

use std::error::Error;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ruststream_benches::counting;
use ruststream_benches::filelog_workload::{CONSUMER, PAYLOAD, READ_COUNT, STREAM};
use ruststream_core::{
    Broker, BrokerError, Clock, Delivery, EntryId, Message, ReadMode, ReadRequest, StreamStart,
};
use ruststream_engine::Engine;
use ruststream_filelog::{FileLogBroker, FileLogOptions, SyncPolicy};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The group left with pending entries and dead letters for the reopen.
const STATE_GROUP: &str = "audit";

/// Batch of the pre-publishing (not timed) and of the extra publish rows.
const FILL_BATCH: usize = 512;
const PUBLISH_BATCH: usize = 16;

/// How long the leader of the gathering raw group commit waits at most.
const GATHER: Duration = Duration::from_micros(100);

/// The interval of the weaker sync policy.
const INTERVAL: Duration = Duration::from_millis(10);

/// Issue 5's targets.
const TARGET_PUBLISH_16: f64 = 200_000.0;
const TARGET_CONSUME: f64 = 300_000.0;
const TARGET_REOPEN: Duration = Duration::from_secs(2);
/// The reopen target is for this many entries.
const TARGET_REOPEN_ENTRIES: u64 = 1_000_000;

/// Frame layout of the file log (see `backends/filelog/FORMAT.md`).
const FRAME_MAGIC: u8 = 0xA5;
const KIND_ENTRY: u8 = 1;
const FRAME_HEADER_LEN: usize = 10;
const FILE_HEADER_LEN: usize = 8;

// ---- options ------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    Publish,
    Interval,
    Consume,
    ConsumeEngine,
    Raw,
    Reopen,
    /// The publish table (sections 1 and 2) alone.
    Table,
}

#[derive(Clone, Debug)]
struct Options {
    entries: u64,
    run: Duration,
    reps: usize,
    only: Option<Only>,
    publishers: usize,
    batch: usize,
    gather: Option<Duration>,
}

fn parse_options() -> BenchResult<Options> {
    let mut options = Options {
        entries: 1_000_000,
        run: Duration::from_secs(2),
        reps: 3,
        only: None,
        publishers: 16,
        batch: 1,
        gather: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--entries" => options.entries = value()?.parse()?,
            "--seconds" => options.run = Duration::from_secs_f64(value()?.parse()?),
            "--reps" => options.reps = value()?.parse::<usize>()?.max(1),
            "--publishers" => options.publishers = value()?.parse::<usize>()?.max(1),
            "--batch" => options.batch = value()?.parse::<usize>()?.max(1),
            "--gather-us" => {
                options.gather = Some(Duration::from_micros(value()?.parse()?));
            }
            "--only" => {
                options.only = Some(match value()?.as_str() {
                    "publish" => Only::Publish,
                    "interval" => Only::Interval,
                    "consume" => Only::Consume,
                    "consume-engine" => Only::ConsumeEngine,
                    "raw" => Only::Raw,
                    "reopen" => Only::Reopen,
                    "table" => Only::Table,
                    other => {
                        return Err(format!(
                            "--only {other}: expected publish, interval, consume, consume-engine, raw, \
                             reopen or table"
                        )
                        .into());
                    }
                })
            }
            "--help" | "-h" => {
                println!(
                    "filelog [--entries N] [--seconds S] [--reps R] \
                     [--only publish|interval|consume|consume-engine|raw|reopen|table [--publishers P] \
                     [--batch B] [--gather-us U]]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    Ok(options)
}

// ---- helpers ----------------------------------------------------------------------

/// A directory under `std::env::temp_dir()`, deleted when dropped.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new(label: &str) -> BenchResult<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "ruststream-bench-filelog-{}-{n}-{label}",
            std::process::id()
        ));
        if path.exists() {
            fs::remove_dir_all(&path)?;
        }
        fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.path) {
            eprintln!("cannot delete {}: {e}", self.path.display());
        }
    }
}

/// Flush requests completed by the block device a directory lives on, from
/// `/proc/diskstats`.
#[derive(Clone, Copy, Debug)]
struct Flushes {
    major: u64,
    minor: u64,
}

impl Flushes {
    fn for_dir(dir: &Path) -> Option<Flushes> {
        let dev = fs::metadata(dir).ok()?.dev();
        // glibc's `major()` / `minor()`.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        let flushes = Flushes { major, minor };
        flushes.read().map(|_| flushes)
    }

    /// The device's "flushes completed" counter, if the kernel reports it.
    fn read(&self) -> Option<u64> {
        let stats = fs::read_to_string("/proc/diskstats").ok()?;
        stats.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 20
                || fields[0].parse::<u64>().ok()? != self.major
                || fields[1].parse::<u64>().ok()? != self.minor
            {
                return None;
            }
            fields[18].parse().ok()
        })
    }

    fn name(&self) -> String {
        fs::read_to_string("/proc/diskstats")
            .ok()
            .and_then(|stats| {
                stats.lines().find_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    (f.len() > 2
                        && f[0] == self.major.to_string()
                        && f[1] == self.minor.to_string())
                    .then(|| f[2].to_owned())
                })
            })
            .unwrap_or_else(|| format!("{}:{}", self.major, self.minor))
    }
}

fn message() -> Message {
    Message::new(PAYLOAD.to_vec())
}

/// Appends one record framed as the file log frames an entry.
fn encode_record(out: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[FRAME_MAGIC, KIND_ENTRY, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&1_700_000_000_000u64.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.push(0); // not a retry copy
    out.extend_from_slice(&0u32.to_le_bytes()); // no headers
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let body = &out[start + FRAME_HEADER_LEN..];
    let body_len = body.len() as u32;
    let crc = checksum(KIND_ENTRY, body);
    out[start + 2..start + 6].copy_from_slice(&body_len.to_le_bytes());
    out[start + 6..start + 10].copy_from_slice(&crc.to_le_bytes());
}

fn checksum(kind: u8, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[kind]);
    hasher.update(body);
    hasher.finalize()
}

/// A plain file opened for appending, with the same 8-byte header a
/// segment starts with.
fn create_log(dir: &Path) -> BenchResult<File> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(dir.join("raw.log"))?;
    file.write_all(b"RSSEG\0\x01\0")?;
    file.sync_all()?;
    Ok(file)
}

/// `1234567.8` as `1,234,568`.
fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_owned();
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if value < 0.0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn median_duration(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn met(yes: bool) -> &'static str {
    if yes { "MET" } else { "NOT MET" }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

// ---- publishing ---------------------------------------------------------------

/// What one publishing run did.
#[derive(Clone, Copy, Debug, Default)]
struct PublishRun {
    messages: u64,
    elapsed: Duration,
    /// `fdatasync` calls (raw runs only).
    syncs: Option<u64>,
    /// Device flush requests over the run.
    flushes: Option<u64>,
    /// The fewest and the most messages one publisher sent (framework
    /// runs): how evenly the publishers got their turns.
    spread: Option<(u64, u64)>,
}

impl PublishRun {
    fn rate(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64()
    }

    /// The fewest messages one publisher sent over the most: 1.0 when
    /// every publisher got as many turns.
    fn fairness(&self) -> Option<f64> {
        self.spread
            .filter(|&(_, most)| most > 0)
            .map(|(fewest, most)| fewest as f64 / most as f64)
    }

    fn per_second(&self, count: Option<u64>) -> Option<f64> {
        count.map(|c| c as f64 / self.elapsed.as_secs_f64())
    }

    /// This run and `other` as one.
    fn and(self, other: PublishRun) -> PublishRun {
        let sum = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a + b);
        PublishRun {
            messages: self.messages + other.messages,
            elapsed: self.elapsed + other.elapsed,
            syncs: sum(self.syncs, other.syncs),
            flushes: sum(self.flushes, other.flushes),
            spread: None,
        }
    }
}

/// The fewest and the most of `each` (messages per publisher).
fn each_spread(each: &[u64]) -> Option<(u64, u64)> {
    Some((*each.iter().min()?, *each.iter().max()?))
}

/// `publishers` tasks publishing `batch` messages per call to a fresh file
/// log with `sync`, for `run`.
fn framework_publish(
    runtime: &tokio::runtime::Runtime,
    sync: SyncPolicy,
    publishers: usize,
    batch: usize,
    run: Duration,
) -> BenchResult<PublishRun> {
    let dir = TempDir::new("publish")?;
    let broker = FileLogBroker::open_with(
        dir.path(),
        FileLogOptions {
            sync,
            ..FileLogOptions::default()
        },
    )?;
    // The stream's directory and first segment are created by a first
    // publish, not timed.
    runtime.block_on(broker.publish(STREAM, message()))?;
    let flushes = Flushes::for_dir(dir.path());
    let out = callgrind_region(|| {
        let before = flushes.and_then(|f| f.read());
        let start = Instant::now();
        let deadline = start + run;
        let messages = runtime.block_on(async {
            let mut tasks = Vec::with_capacity(publishers);
            for _ in 0..publishers {
                let broker = broker.clone();
                tasks.push(tokio::spawn(async move {
                    let mut sent = 0u64;
                    while Instant::now() < deadline {
                        if batch == 1 {
                            broker.publish(STREAM, message()).await?;
                            sent += 1;
                        } else {
                            let messages = (0..batch).map(|_| message()).collect();
                            sent += broker.publish_batch(STREAM, messages).await?.len() as u64;
                        }
                    }
                    Ok::<u64, BrokerError>(sent)
                }));
            }
            let mut each = Vec::with_capacity(publishers);
            for task in tasks {
                each.push(task.await.map_err(|e| format!("publisher task: {e}"))??);
            }
            Ok::<Vec<u64>, Box<dyn Error + Send + Sync>>(each)
        })?;
        let spread = each_spread(&messages);
        let messages = messages.iter().sum();
        let elapsed = start.elapsed();
        let after = flushes.and_then(|f| f.read());
        Ok::<_, Box<dyn Error + Send + Sync>>(PublishRun {
            messages,
            elapsed,
            syncs: None,
            flushes: before.zip(after).map(|(b, a)| a - b),
            spread,
        })
    })?;
    drop(broker);
    Ok(out)
}

/// Group commit over a plain file: writers append under a mutex; a writer
/// whose record is not durable yet waits for the sync in progress, or runs
/// one itself if none is, covering every record written before it started.
///
/// With `gather`, the writer that is to run the sync first waits (at most
/// the given time) until all `writers` have written, so that one sync
/// covers everyone rather than whoever happened to write before it began.
struct GroupCommit {
    file: File,
    state: Mutex<CommitState>,
    synced_now: Condvar,
    /// Wakes a gathering leader when a writer has written.
    gathered: Condvar,
    gather: Option<(usize, Duration)>,
    syncs: AtomicU64,
}

#[derive(Default)]
struct CommitState {
    written: u64,
    synced: u64,
    /// A sync is running (or its leader is gathering writers).
    syncing: bool,
    /// Writers that have written and are waiting for their sync.
    waiting: usize,
}

impl GroupCommit {
    fn new(file: File, gather: Option<(usize, Duration)>) -> Self {
        GroupCommit {
            file,
            state: Mutex::new(CommitState::default()),
            synced_now: Condvar::new(),
            gathered: Condvar::new(),
            gather,
            syncs: AtomicU64::new(0),
        }
    }

    /// Appends `bytes` and returns once they are on disk.
    fn append_durably(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut state = lock(&self.state);
        (&self.file).write_all(bytes)?;
        state.written += 1;
        state.waiting += 1;
        let ticket = state.written;
        if self.gather.is_some() {
            self.gathered.notify_one();
        }
        let mut result = Ok(());
        while state.synced < ticket {
            if state.syncing {
                state = self
                    .synced_now
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
                continue;
            }
            state.syncing = true;
            if let Some((writers, most)) = self.gather {
                let until = Instant::now() + most;
                while state.waiting < writers {
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    state = self
                        .gathered
                        .wait_timeout(state, until - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
            let target = state.written;
            drop(state);
            let synced = self.file.sync_data();
            self.syncs.fetch_add(1, Ordering::Relaxed);
            state = lock(&self.state);
            state.syncing = false;
            if synced.is_ok() {
                state.synced = state.synced.max(target);
            }
            self.synced_now.notify_all();
            if synced.is_err() {
                result = synced;
                break;
            }
        }
        state.waiting -= 1;
        result
    }
}

/// Raw baseline of the publish rows: `writers` threads appending `batch`
/// records per write to one plain file for `run`. `sync`:
/// `EveryPublish` with one writer is the naive append + `fdatasync` loop,
/// with more the group commit above; `Interval(d)` appends with no sync in
/// the write path while a thread calls `fdatasync` every `d`.
fn raw_publish(
    sync: SyncPolicy,
    writers: usize,
    batch: usize,
    run: Duration,
    gather: Option<Duration>,
) -> BenchResult<PublishRun> {
    let gather = gather.map(|most| (writers, most));
    let dir = TempDir::new("raw")?;
    let log = Arc::new(GroupCommit::new(create_log(dir.path())?, gather));
    let flushes = Flushes::for_dir(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let before = flushes.and_then(|f| f.read());
    let start = Instant::now();
    let deadline = start + run;
    let syncer = match sync {
        SyncPolicy::EveryPublish => None,
        SyncPolicy::Interval(period) => {
            let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
            Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    log.file.sync_data()?;
                    log.syncs.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), std::io::Error>(())
            }))
        }
    };
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut buf = Vec::with_capacity(batch * (PAYLOAD.len() + 64));
                let mut sent = 0u64;
                let mut seq = (w as u64) << 40;
                while Instant::now() < deadline {
                    buf.clear();
                    // The payload is copied out of a fresh `Vec`, as the
                    // framework's message owns one.
                    for _ in 0..batch {
                        let payload = PAYLOAD.to_vec();
                        encode_record(&mut buf, seq, &payload);
                        seq += 1;
                    }
                    match sync {
                        SyncPolicy::EveryPublish if writers == 1 => {
                            (&log.file).write_all(&buf)?;
                            log.file.sync_data()?;
                            log.syncs.fetch_add(1, Ordering::Relaxed);
                        }
                        SyncPolicy::EveryPublish => log.append_durably(&buf)?,
                        SyncPolicy::Interval(_) => {
                            let _state = lock(&log.state);
                            (&log.file).write_all(&buf)?;
                        }
                    }
                    sent += batch as u64;
                }
                Ok::<u64, std::io::Error>(sent)
            })
        })
        .collect();
    let mut messages = 0;
    for thread in threads {
        messages += thread.join().map_err(|_| "a raw writer panicked")??;
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    if let Some(syncer) = syncer {
        syncer
            .join()
            .map_err(|_| "the raw sync thread panicked")??;
    }
    let after = flushes.and_then(|f| f.read());
    Ok(PublishRun {
        messages,
        elapsed,
        syncs: Some(log.syncs.load(Ordering::Relaxed)),
        flushes: before.zip(after).map(|(b, a)| a - b),
        spread: None,
    })
}

/// One row of the publish tables.
struct PublishRow {
    policy: &'static str,
    publishers: usize,
    batch: usize,
    baseline: &'static str,
    framework: Vec<PublishRun>,
    raw: Vec<PublishRun>,
    /// Durable rows of single messages: the naive append+fdatasync loop,
    /// run beside each framework run, for the ceiling of that run.
    naive: Vec<PublishRun>,
}

impl PublishRow {
    fn framework_rate(&self) -> f64 {
        median(self.framework.iter().map(PublishRun::rate).collect())
    }

    fn raw_rate(&self) -> f64 {
        median(self.raw.iter().map(PublishRun::rate).collect())
    }

    /// The ceiling of each run: `publishers` messages per fsync at the
    /// rate the naive loop beside it synced (the most `publishers`
    /// publishers with one message in flight each can reach), and the
    /// framework's median share of it.
    fn ceiling(&self) -> Option<(f64, f64)> {
        let per_run: Option<Vec<(f64, f64)>> = self
            .framework
            .iter()
            .zip(&self.naive)
            .map(|(fw, naive)| {
                let ceiling = naive.per_second(naive.syncs)? * self.publishers as f64;
                Some((ceiling, fw.rate() / ceiling))
            })
            .collect();
        let per_run = per_run.filter(|runs| !runs.is_empty())?;
        Some((
            median(per_run.iter().map(|r| r.0).collect()),
            median(per_run.iter().map(|r| r.1).collect()),
        ))
    }

    fn median_of(runs: &[PublishRun], f: impl Fn(&PublishRun) -> Option<f64>) -> Option<f64> {
        let values: Option<Vec<f64>> = runs.iter().map(f).collect();
        values.map(median)
    }
}

fn opt(value: Option<f64>) -> String {
    value.map(thousands).unwrap_or_else(|| "n/a".to_owned())
}

fn print_publish_header() {
    println!(
        "| {:<13} | {:>4} | {:>5} | {:>11} | {:>7} | {:>10} | {:>9} | {:<25} | {:>11} | {:>10} | {:>11} | {:>5} | {:>11} | {:>7} |",
        "policy",
        "pubs",
        "batch",
        "fw msg/s",
        "fw fair",
        "fw flush/s",
        "msg/flush",
        "baseline",
        "raw msg/s",
        "raw sync/s",
        "raw flush/s",
        "ratio",
        "ceiling",
        "of ceil"
    );
    println!(
        "|{:-<15}|{:->6}|{:->7}|{:->13}|{:->9}|{:->12}|{:->11}|{:-<27}|{:->13}|{:->12}|{:->13}|{:->7}|{:->13}|{:->9}|",
        ":", ":", ":", ":", ":", ":", ":", ":", ":", ":", ":", ":", ":", ":"
    );
}

fn print_publish_row(row: &PublishRow) {
    let fw = row.framework_rate();
    let raw = row.raw_rate();
    let (ceiling, share) = match row.ceiling() {
        Some((ceiling, share)) => (thousands(ceiling), format!("{share:.2}")),
        None => ("-".to_owned(), "-".to_owned()),
    };
    println!(
        "| {:<13} | {:>4} | {:>5} | {:>11} | {:>7} | {:>10} | {:>9} | {:<25} | {:>11} | {:>10} | {:>11} | {:>5.2} | {:>11} | {:>7} |",
        row.policy,
        row.publishers,
        row.batch,
        thousands(fw),
        PublishRow::median_of(&row.framework, PublishRun::fairness)
            .map(|f| format!("{f:.2}"))
            .unwrap_or_else(|| "n/a".to_owned()),
        opt(PublishRow::median_of(&row.framework, |r| r.per_second(r.flushes))),
        PublishRow::median_of(&row.framework, |r| r
            .flushes
            .filter(|&f| f > 0)
            .map(|f| r.messages as f64 / f as f64))
        .map(|m| format!("{m:.1}"))
        .unwrap_or_else(|| "n/a".to_owned()),
        row.baseline,
        thousands(raw),
        opt(PublishRow::median_of(&row.raw, |r| r.per_second(r.syncs))),
        opt(PublishRow::median_of(&row.raw, |r| r.per_second(r.flushes))),
        fw / raw,
        ceiling,
        share,
    );
}

fn measure_publish(
    runtime: &tokio::runtime::Runtime,
    options: &Options,
    sync: SyncPolicy,
    publishers: usize,
    batch: usize,
) -> BenchResult<PublishRow> {
    let (policy, baseline) = match (sync, publishers) {
        (SyncPolicy::EveryPublish, 1) => ("EveryPublish", "append+fdatasync loop"),
        (SyncPolicy::EveryPublish, _) => ("EveryPublish", "group commit, threads"),
        (SyncPolicy::Interval(_), 1) => ("Interval 10ms", "append, sync/10ms"),
        (SyncPolicy::Interval(_), _) => ("Interval 10ms", "append (mutex), sync/10ms"),
    };
    let mut row = PublishRow {
        policy,
        publishers,
        batch,
        baseline,
        framework: Vec::new(),
        raw: Vec::new(),
        naive: Vec::new(),
    };
    // Single durable messages from up to 16 publishers get a ceiling: the
    // naive loop's fsync rate (that loop is the baseline itself for one
    // publisher). More publishers than that fill an fsync anyway.
    let ceiling = sync == SyncPolicy::EveryPublish && batch == 1 && publishers <= 16;
    // A short warm-up of each side.
    let warm = Duration::from_millis(200);
    framework_publish(runtime, sync, publishers, batch, warm)?;
    raw_publish(sync, publishers, batch, warm, None)?;
    // The disk's fsync rate drifts within seconds when others use it: the
    // ceiling of a multi-publisher run is measured by half-length naive
    // runs just before and just after it.
    let bracket = ceiling && publishers > 1;
    let half = options.run / 2;
    for _ in 0..options.reps {
        let before = bracket
            .then(|| raw_publish(sync, 1, 1, half, None))
            .transpose()?;
        row.framework.push(framework_publish(
            runtime,
            sync,
            publishers,
            batch,
            options.run,
        )?);
        if let Some(before) = before {
            row.naive
                .push(before.and(raw_publish(sync, 1, 1, half, None)?));
        }
        let raw = raw_publish(sync, publishers, batch, options.run, None)?;
        if ceiling && publishers == 1 {
            row.naive.push(raw);
        }
        row.raw.push(raw);
    }
    Ok(row)
}

// ---- consume + ack ------------------------------------------------------------

fn group_name(rep: usize) -> String {
    format!("billing-{rep}")
}

/// Publishes `entries` messages in batches (not timed).
async fn fill(broker: &FileLogBroker, entries: u64) -> Result<(), BrokerError> {
    let mut left = entries;
    while left > 0 {
        let n = left.min(FILL_BATCH as u64);
        broker
            .publish_batch(STREAM, (0..n).map(|_| message()).collect())
            .await?;
        left -= n;
    }
    Ok(())
}

/// Reads the group dry, `READ_COUNT` at a time, acking each batch.
async fn consume(broker: &FileLogBroker, group: &str) -> Result<u64, BrokerError> {
    let mut ids = Vec::with_capacity(READ_COUNT);
    let mut acked = 0;
    loop {
        let batch = broker
            .read(ReadRequest::new(
                STREAM,
                group,
                CONSUMER,
                ReadMode::New,
                READ_COUNT,
            ))
            .await?;
        if batch.is_empty() {
            return Ok(acked);
        }
        ids.clear();
        ids.extend(batch.deliveries.iter().map(Delivery::id));
        acked += broker.ack(STREAM, group, &ids).await?;
    }
}

/// The same loop on the engine alone.
fn consume_engine(engine: &mut Engine, clock: Clock, group: &str) -> Result<u64, BrokerError> {
    let mut ids = Vec::with_capacity(READ_COUNT);
    let mut acked = 0;
    let req = ReadRequest::new(STREAM, group, CONSUMER, ReadMode::New, READ_COUNT);
    loop {
        let batch = engine.read(&req, clock.now_ms())?;
        if batch.is_empty() {
            return Ok(acked);
        }
        ids.clear();
        ids.extend(batch.deliveries.iter().map(Delivery::id));
        acked += engine.ack(STREAM, group, &ids)?;
    }
}

fn expect_count(what: &str, got: u64, want: u64) -> BenchResult<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: {got} messages, expected {want}").into())
    }
}

/// The segment files of the stream, in order.
fn segment_files(dir: &Path) -> BenchResult<Vec<PathBuf>> {
    let stream_dir = dir.join("streams").join(STREAM);
    let mut files: Vec<PathBuf> = fs::read_dir(&stream_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    Ok(files)
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|items| {
            items
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Walks the frames of a segment's bytes (after its header), checking each
/// CRC if `crc`; returns the number of records. A bad record is an error.
fn walk(path: &Path, bytes: &[u8], crc: bool) -> BenchResult<u64> {
    let mut at = FILE_HEADER_LEN;
    let mut records = 0;
    while at < bytes.len() {
        let header = bytes
            .get(at..at + FRAME_HEADER_LEN)
            .ok_or_else(|| format!("{}: record header cut at {at}", path.display()))?;
        let len = u32::from_le_bytes([header[2], header[3], header[4], header[5]]) as usize;
        let body = bytes
            .get(at + FRAME_HEADER_LEN..at + FRAME_HEADER_LEN + len)
            .ok_or_else(|| format!("{}: record cut at {at}", path.display()))?;
        if header[0] != FRAME_MAGIC {
            return Err(format!("{}: no record marker at {at}", path.display()).into());
        }
        if crc {
            let want = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
            if checksum(header[1], body) != want {
                return Err(format!("{}: checksum mismatch at {at}", path.display()).into());
            }
        }
        records += 1;
        at += FRAME_HEADER_LEN + len;
    }
    Ok(records)
}

/// Sequential read of the segment files with a 1 MiB buffer, walking the
/// record headers (records may straddle buffer ends). Returns the records.
fn read_segments_streaming(files: &[PathBuf]) -> BenchResult<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut records = 0;
    for path in files {
        let mut file = File::open(path)?;
        // Bytes of the current buffer still to skip before the next record
        // header, and a partial header carried over a buffer end.
        let mut skip = FILE_HEADER_LEN;
        let mut partial: Vec<u8> = Vec::with_capacity(FRAME_HEADER_LEN);
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            let mut at = 0;
            while at < n {
                if skip > 0 {
                    let step = skip.min(n - at);
                    skip -= step;
                    at += step;
                    continue;
                }
                let want = FRAME_HEADER_LEN - partial.len();
                let take = want.min(n - at);
                partial.extend_from_slice(&buf[at..at + take]);
                at += take;
                if partial.len() == FRAME_HEADER_LEN {
                    let len = u32::from_le_bytes([partial[2], partial[3], partial[4], partial[5]]);
                    skip = len as usize;
                    partial.clear();
                    records += 1;
                }
            }
        }
        if skip > 0 || !partial.is_empty() {
            return Err(format!("{}: last record cut short", path.display()).into());
        }
    }
    Ok(records)
}

struct ConsumeFigures {
    framework_rate: f64,
    engine_rate: f64,
    raw_read_rate: f64,
    framework_allocs: f64,
    engine_allocs: f64,
    segment_bytes: u64,
}

/// Fills a file log with `entries` (groups created first), measures the
/// consume+ack figures, then leaves group state for the reopen: one more
/// group with entries pending and dead-lettered. Returns the directory.
fn measure_consume(
    runtime: &tokio::runtime::Runtime,
    options: &Options,
) -> BenchResult<(ConsumeFigures, TempDir)> {
    let entries = options.entries;
    let dir = TempDir::new("consume")?;
    // One group per timed run and one for the allocation count, all at the
    // beginning of the stream, plus the group left with state.
    let groups: Vec<String> = (0..=options.reps).map(group_name).collect();
    let broker = FileLogBroker::open(dir.path())?;
    let filled = Instant::now();
    runtime.block_on(async {
        for group in groups.iter().map(String::as_str).chain([STATE_GROUP]) {
            broker
                .ensure_group(STREAM, group, StreamStart::Beginning)
                .await?;
        }
        fill(&broker, entries).await
    })?;
    println!(
        "  filled {} entries through publish_batch({FILL_BATCH}) in {:.1} s (not timed)",
        thousands(entries as f64),
        filled.elapsed().as_secs_f64()
    );

    let mut engine = Engine::new();
    let clock = Clock::new();
    for group in &groups {
        engine.ensure_group(STREAM, group, StreamStart::Beginning, clock.now_ms());
    }
    let mut left = entries;
    while left > 0 {
        let n = left.min(FILL_BATCH as u64);
        engine.publish(STREAM, (0..n).map(|_| message()), clock.now_ms());
        left -= n;
    }

    // Allocations per message: the last group, counted, untimed.
    let counted = &groups[options.reps];
    counting::enable(true);
    let before = counting::allocations();
    let acked = runtime.block_on(consume(&broker, counted));
    let framework_allocs = (counting::allocations() - before) as f64 / entries as f64;
    let before = counting::allocations();
    let engine_acked = consume_engine(&mut engine, clock, counted);
    let engine_allocs = (counting::allocations() - before) as f64 / entries as f64;
    counting::enable(false);
    expect_count("framework consume (counted)", acked?, entries)?;
    expect_count("engine consume (counted)", engine_acked?, entries)?;

    let files = segment_files(dir.path())?;
    let segment_bytes = files
        .iter()
        .map(|f| fs::metadata(f).map(|m| m.len()))
        .sum::<Result<u64, _>>()?;
    let (mut fw, mut eng, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for group in &groups[..options.reps] {
        let start = Instant::now();
        let acked = runtime.block_on(consume(&broker, group))?;
        let elapsed = start.elapsed();
        expect_count("framework consume", acked, entries)?;
        fw.push(entries as f64 / elapsed.as_secs_f64());

        let start = Instant::now();
        let acked = consume_engine(&mut engine, clock, group)?;
        let elapsed = start.elapsed();
        expect_count("engine consume", acked, entries)?;
        eng.push(entries as f64 / elapsed.as_secs_f64());

        let start = Instant::now();
        let records = read_segments_streaming(&files)?;
        let elapsed = start.elapsed();
        expect_count("raw segment read", records, entries)?;
        raw.push(entries as f64 / elapsed.as_secs_f64());
    }
    drop(engine);

    // Group state for the reopen: the audit group reads a tenth of the
    // stream in batches of `READ_COUNT`, acks nine tenths of each batch,
    // dead-letters 16 of the rest until it has about 1,000 dead letters,
    // and leaves the others pending.
    runtime.block_on(async {
        let mut read = 0u64;
        let tenth = (entries / 10).max(1);
        let mut dead = 0u64;
        while read < tenth {
            let batch = broker
                .read(ReadRequest::new(
                    STREAM,
                    STATE_GROUP,
                    CONSUMER,
                    ReadMode::New,
                    READ_COUNT,
                ))
                .await?;
            if batch.is_empty() {
                break;
            }
            read += batch.deliveries.len() as u64;
            let ids: Vec<EntryId> = batch.deliveries.iter().map(Delivery::id).collect();
            let keep = ids.len() / 10;
            let (kept, settle) = ids.split_at(keep);
            if dead < 1_000 {
                let n = kept.len().min(16);
                dead += broker
                    .dead_letter(STREAM, STATE_GROUP, &kept[..n], "benchmark")
                    .await?;
            }
            broker.ack(STREAM, STATE_GROUP, settle).await?;
        }
        Ok::<(), BrokerError>(())
    })?;
    drop(broker);
    Ok((
        ConsumeFigures {
            framework_rate: median(fw),
            engine_rate: median(eng),
            raw_read_rate: median(raw),
            framework_allocs,
            engine_allocs,
            segment_bytes,
        },
        dir,
    ))
}

// ---- reopen -------------------------------------------------------------------

struct ReopenRow {
    label: String,
    open: Duration,
    state_bytes: u64,
}

struct ReopenFigures {
    rows: Vec<ReopenRow>,
    read: Duration,
    read_crc: Duration,
    entries: u64,
    pending: u64,
    dead: u64,
}

fn open_timed(dir: &Path) -> BenchResult<(Duration, FileLogBroker)> {
    let start = Instant::now();
    let broker = FileLogBroker::open(dir)?;
    Ok((start.elapsed(), broker))
}

fn measure_reopen(
    runtime: &tokio::runtime::Runtime,
    options: &Options,
    dir: &Path,
) -> BenchResult<ReopenFigures> {
    let state_dir = dir.join("state");
    let files = segment_files(dir)?;
    // Check what the reopened log holds (and warm the cache).
    let (_, broker) = open_timed(dir)?;
    let (entries, pending, dead) = runtime.block_on(async {
        let info = broker
            .stream_info(STREAM)
            .await?
            .ok_or("the stream is missing after reopening")?;
        let group = broker.group_info(STREAM, STATE_GROUP).await?;
        Ok::<_, Box<dyn Error + Send + Sync>>((info.length, group.pending, group.dead_letters))
    })?;
    drop(broker);
    expect_count("entries after reopen", entries, options.entries)?;

    let mut rows = Vec::new();
    for compacted in [false, true] {
        if compacted {
            let (_, broker) = open_timed(dir)?;
            broker.compact()?;
            drop(broker);
        }
        let state_bytes = dir_bytes(&state_dir);
        let mut opens = Vec::with_capacity(options.reps);
        for _ in 0..options.reps {
            let (took, broker) = open_timed(dir)?;
            opens.push(took);
            drop(broker);
        }
        rows.push(ReopenRow {
            label: if compacted {
                "after compact()".to_owned()
            } else {
                "journal as left".to_owned()
            },
            open: median_duration(opens),
            state_bytes,
        });
    }

    let (mut read, mut read_crc) = (Vec::new(), Vec::new());
    for _ in 0..options.reps {
        let start = Instant::now();
        let mut bytes = 0;
        for path in &files {
            bytes += std::hint::black_box(fs::read(path)?).len();
        }
        std::hint::black_box(bytes);
        read.push(start.elapsed());

        let start = Instant::now();
        let mut records = 0;
        for path in &files {
            let bytes = fs::read(path)?;
            records += walk(path, &bytes, true)?;
        }
        read_crc.push(start.elapsed());
        expect_count("raw read+CRC", records, options.entries)?;
    }
    Ok(ReopenFigures {
        rows,
        read: median_duration(read),
        read_crc: median_duration(read_crc),
        entries,
        pending,
        dead,
    })
}

// ---- profiling entry ------------------------------------------------------------

/// The measured part of an `--only` run (callgrind toggles on this name).
#[inline(never)]
fn callgrind_region<T>(f: impl FnOnce() -> T) -> T {
    std::hint::black_box(f())
}

/// A fresh log in a temp dir named after `what`, with group 0 on the
/// stream from its beginning and `entries` entries published (not timed).
fn filled_log(
    runtime: &tokio::runtime::Runtime,
    what: &str,
    entries: u64,
) -> BenchResult<(TempDir, FileLogBroker)> {
    let dir = TempDir::new(what)?;
    let broker = FileLogBroker::open(dir.path())?;
    runtime.block_on(async {
        broker
            .ensure_group(STREAM, &group_name(0), StreamStart::Beginning)
            .await?;
        fill(&broker, entries).await
    })?;
    Ok((dir, broker))
}

/// Runs `consume` (of `expected` entries) in the callgrind region with
/// allocations counted, checks what it acked (`check` names it) and prints
/// the `row` line: messages, rate, allocations.
fn measured_consume(
    check: &str,
    row: &str,
    expected: u64,
    consume: impl FnOnce() -> Result<u64, BrokerError>,
) -> BenchResult<()> {
    counting::enable(true);
    let before = counting::allocations();
    let start = Instant::now();
    let acked = callgrind_region(consume)?;
    let elapsed = start.elapsed();
    let allocations = counting::allocations() - before;
    counting::enable(false);
    expect_count(check, acked, expected)?;
    println!(
        "{row}: {acked} messages in {:.3} s = {} msg/s, allocations={allocations}",
        elapsed.as_secs_f64(),
        thousands(acked as f64 / elapsed.as_secs_f64())
    );
    Ok(())
}

fn only(runtime: &tokio::runtime::Runtime, options: &Options, which: Only) -> BenchResult<()> {
    match which {
        Only::Publish | Only::Interval => {
            let sync = if which == Only::Publish {
                SyncPolicy::EveryPublish
            } else {
                SyncPolicy::Interval(INTERVAL)
            };
            let run = framework_publish(
                runtime,
                sync,
                options.publishers,
                options.batch,
                options.run,
            )?;
            println!(
                "publish {sync:?}, {} publishers, batch {}: {} messages in {:.3} s = {} msg/s, \
                 device flushes {}, per publisher {}",
                options.publishers,
                options.batch,
                run.messages,
                run.elapsed.as_secs_f64(),
                thousands(run.rate()),
                run.flushes
                    .map(|f| f.to_string())
                    .unwrap_or_else(|| "n/a".into()),
                run.spread
                    .map(|(fewest, most)| format!("{fewest} to {most}"))
                    .unwrap_or_else(|| "n/a".into())
            );
        }
        Only::Consume => {
            let (_dir, broker) = filled_log(runtime, "only-consume", options.entries)?;
            measured_consume("consume", "consume+ack", options.entries, || {
                runtime.block_on(consume(&broker, &group_name(0)))
            })?;
            drop(broker);
        }
        Only::Raw => {
            let run = raw_publish(
                SyncPolicy::EveryPublish,
                options.publishers,
                options.batch,
                options.run,
                options.gather,
            )?;
            println!(
                "raw group commit, {} writers, batch {}, gather {:?}: {} msg/s, {} syncs/s",
                options.publishers,
                options.batch,
                options.gather,
                thousands(run.rate()),
                opt(run.per_second(run.syncs))
            );
        }
        Only::Reopen => {
            let (dir, broker) = filled_log(runtime, "only-reopen", options.entries)?;
            runtime.block_on(consume(&broker, &group_name(0)))?;
            drop(broker);
            let start = Instant::now();
            let broker = callgrind_region(|| FileLogBroker::open(dir.path()))?;
            let elapsed = start.elapsed();
            println!(
                "reopen of {} entries (one group read and acked them all, journal {:.1} MB): \
                 {:.0} ms",
                thousands(options.entries as f64),
                dir_bytes(&dir.path().join("state")) as f64 / 1e6,
                elapsed.as_secs_f64() * 1e3
            );
            drop(broker);
        }
        Only::Table => publish_table(runtime, options)?,
        Only::ConsumeEngine => {
            let mut engine = Engine::new();
            let clock = Clock::new();
            let group = group_name(0);
            engine.ensure_group(STREAM, &group, StreamStart::Beginning, clock.now_ms());
            let mut left = options.entries;
            while left > 0 {
                let n = left.min(FILL_BATCH as u64);
                engine.publish(STREAM, (0..n).map(|_| message()), clock.now_ms());
                left -= n;
            }
            measured_consume("engine consume", "engine read+ack", options.entries, || {
                consume_engine(&mut engine, clock, &group)
            })?;
        }
    }
    Ok(())
}

/// Sections 1 and 2: the publish table, its ceiling and targets.
fn publish_table(runtime: &tokio::runtime::Runtime, options: &Options) -> BenchResult<()> {
    println!();
    println!("1. Durable publish (SyncPolicy::EveryPublish) and 2. SyncPolicy::Interval(10 ms):");
    println!();
    print_publish_header();
    let mut rows = Vec::new();
    for (sync, publishers, batch) in [
        (SyncPolicy::EveryPublish, 1, 1),
        (SyncPolicy::EveryPublish, 16, 1),
        (SyncPolicy::EveryPublish, 16, PUBLISH_BATCH),
        (SyncPolicy::EveryPublish, 64, 1),
        (SyncPolicy::EveryPublish, 256, 1),
        (SyncPolicy::Interval(INTERVAL), 1, 1),
        (SyncPolicy::Interval(INTERVAL), 16, 1),
        (SyncPolicy::Interval(INTERVAL), 16, PUBLISH_BATCH),
    ] {
        let row = measure_publish(runtime, options, sync, publishers, batch)?;
        print_publish_row(&row);
        rows.push(row);
    }
    println!();
    let naive = &rows[0];
    let naive_syncs = PublishRow::median_of(&naive.raw, |r| r.per_second(r.syncs));
    if let Some(syncs) = naive_syncs {
        println!(
            "fdatasync here: the naive loop does {} append+fdatasync per second, {:.0} us each. \
             P publishers with one message in flight each can have at most P messages per \
             sync: \"ceiling\" is P x the fsyncs per second of the naive loop run just before and \
             after each framework run (half as long each time), \"of ceil\" the median of each \
             run's share of its ceiling.",
            thousands(syncs),
            1e6 / syncs,
        );
    }
    if let Some((ceiling, share)) = rows[1].ceiling() {
        println!(
            "Target (issue 15): 16 durable publishers >= 0.6 of the ceiling: {} ({:.2} of {} \
             msg/s).",
            met(share >= 0.6),
            share,
            thousands(ceiling)
        );
    }
    let interval_16 = &rows[6];
    let interval_ratio = interval_16.framework_rate() / interval_16.raw_rate();
    println!(
        "Target (issue 15): 16 publishers with Interval(10 ms) >= 0.8 of raw appends: {} ({:.2}).",
        met(interval_ratio >= 0.8),
        interval_ratio
    );
    let mut gathered = Vec::with_capacity(options.reps);
    for _ in 0..options.reps {
        gathered.push(raw_publish(
            SyncPolicy::EveryPublish,
            16,
            1,
            options.run,
            Some(GATHER),
        )?);
    }
    println!(
        "Raw group commit, 16 writers, whose leader first waits up to {} us for all 16 to have \
         written: {} msg/s, {} syncs/s (median of {}).",
        GATHER.as_micros(),
        thousands(median(gathered.iter().map(PublishRun::rate).collect())),
        opt(PublishRow::median_of(&gathered, |r| r.per_second(r.syncs))),
        options.reps
    );
    let sixteen = rows[1].framework_rate();
    let sixteen_batched = rows[2].framework_rate();
    println!(
        "Target: 16 concurrent publishers >= {} durable msg/s: {} ({} msg/s; with \
         publish_batch of {PUBLISH_BATCH}: {} msg/s).",
        thousands(TARGET_PUBLISH_16),
        met(sixteen >= TARGET_PUBLISH_16),
        thousands(sixteen),
        thousands(sixteen_batched),
    );

    Ok(())
}

// ---- main -----------------------------------------------------------------------

fn main() -> BenchResult<()> {
    let options = parse_options()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Some(which) = options.only {
        return only(&runtime, &options, which);
    }

    let probe = TempDir::new("probe")?;
    let device = Flushes::for_dir(probe.path());
    println!(
        "ruststream file-log broker against raw appends to a plain file, same disk, same run."
    );
    println!(
        "Payload {} bytes, no headers. Temp dir {} (device {}). Publish rows: median of {} runs \
         of {:.1} s; tokio multi-thread runtime, 2 workers.",
        PAYLOAD.len(),
        std::env::temp_dir().display(),
        device.map(|d| d.name()).unwrap_or_else(|| "unknown".into()),
        options.reps,
        options.run.as_secs_f64()
    );
    drop(probe);

    publish_table(&runtime, &options)?;

    println!();
    println!(
        "3. Consume+ack: {} entries published first (not timed); one consumer reads \
         ReadMode::New, count {READ_COUNT}, acks each batch. Median of {} groups.",
        thousands(options.entries as f64),
        options.reps
    );
    let (consume, dir) = measure_consume(&runtime, &options)?;
    println!();
    println!(
        "| {:<32} | {:>12} | {:>5} | {:>10} |",
        "path", "msg/s", "ratio", "allocs/msg"
    );
    println!("|{:-<34}|{:->14}|{:->7}|{:->12}|", ":", ":", ":", ":");
    println!(
        "| {:<32} | {:>12} | {:>5.2} | {:>10.3} |",
        "FileLogBroker read+ack",
        thousands(consume.framework_rate),
        1.0,
        consume.framework_allocs
    );
    println!(
        "| {:<32} | {:>12} | {:>5.2} | {:>10.3} |",
        "Engine read+ack (no I/O)",
        thousands(consume.engine_rate),
        consume.framework_rate / consume.engine_rate,
        consume.engine_allocs
    );
    println!(
        "| {:<32} | {:>12} | {:>5.2} | {:>10} |",
        "raw sequential segment read",
        thousands(consume.raw_read_rate),
        consume.framework_rate / consume.raw_read_rate,
        "-"
    );
    println!(
        "(ratio: the file log's rate / that row's; segments {:.1} MB)",
        consume.segment_bytes as f64 / 1e6
    );
    println!(
        "Target: consume+ack >= {} msg/s: {} ({} msg/s).",
        thousands(TARGET_CONSUME),
        met(consume.framework_rate >= TARGET_CONSUME),
        thousands(consume.framework_rate)
    );

    println!();
    println!("4. Reopen (warm page cache: dropping it needs root):");
    let reopen = measure_reopen(&runtime, &options, dir.path())?;
    println!(
        "  log: {} entries in {:.1} MB of segments; group {STATE_GROUP:?} with {} pending and \
         {} dead letters, {} drained groups",
        thousands(reopen.entries as f64),
        consume.segment_bytes as f64 / 1e6,
        thousands(reopen.pending as f64),
        thousands(reopen.dead as f64),
        options.reps + 1
    );
    println!();
    println!(
        "| {:<44} | {:>9} | {:>13} | {:>14} |",
        "what", "time (ms)", "state (MB)", "entries/s"
    );
    println!("|{:-<46}|{:->11}|{:->15}|{:->16}|", ":", ":", ":", ":");
    for row in &reopen.rows {
        println!(
            "| {:<44} | {:>9.0} | {:>13.1} | {:>14} |",
            format!("FileLogBroker::open, {}", row.label),
            row.open.as_secs_f64() * 1e3,
            row.state_bytes as f64 / 1e6,
            thousands(reopen.entries as f64 / row.open.as_secs_f64())
        );
    }
    for (label, took) in [
        ("fs::read of the segment files", reopen.read),
        ("fs::read + CRC-32 of every record", reopen.read_crc),
    ] {
        println!(
            "| {:<44} | {:>9.0} | {:>13} | {:>14} |",
            label,
            took.as_secs_f64() * 1e3,
            "-",
            thousands(reopen.entries as f64 / took.as_secs_f64())
        );
    }
    let worst = reopen.rows.iter().map(|r| r.open).max().unwrap_or_default();
    let scaled = worst.mul_f64(TARGET_REOPEN_ENTRIES as f64 / reopen.entries.max(1) as f64);
    println!(
        "Target: reopen of {} entries < {:.0} s: {} ({:.0} ms{}).",
        thousands(TARGET_REOPEN_ENTRIES as f64),
        TARGET_REOPEN.as_secs_f64(),
        met(scaled < TARGET_REOPEN),
        worst.as_secs_f64() * 1e3,
        if reopen.entries == TARGET_REOPEN_ENTRIES {
            String::new()
        } else {
            format!(
                " for {} entries, scaled linearly",
                thousands(reopen.entries as f64)
            )
        }
    );
    drop(dir);
    Ok(())
}
