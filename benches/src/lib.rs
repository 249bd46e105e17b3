//! What the benchmark programs in `src/bin/` share.
//!
//! - [`counting`]: the counting global allocator behind every
//!   "allocations per message" figure. Linking this crate installs it as
//!   the program's global allocator; it counts only while switched on.
//! - [`Probe`]: how a benchmark's handlers tell the timing task that the
//!   last message was handled.
//! - [`Payment`] and [`payload`]: the message the runtime and Redis
//!   benchmarks send; [`batches`] to send it in; [`median`] and
//!   [`thousands`] for their reports.
//! - [`counted::Counted`]: a memory broker that counts its reads and
//!   acks.
//! - [`Stopwatch`]: wall-clock and CPU time of a run (CPU time over all
//!   the process's threads, which other processes do not inflate).
//! - [`redis_loops`]: the consume loops of the Redis benchmarks, by hand
//!   and through the broker; [`memory_loops`]: the fill and the hand loop
//!   of the memory-broker benchmarks.
//! - [`cpu`]: CPU time of a Redis server.
//! - [`run_stream`]: the stream a Redis benchmark's subscribers read,
//!   set per run, and the plain subscriber ([`run_stream::ledger`]) they
//!   share.

pub mod cpu;
pub mod memory_loops;
pub mod redis_loops;
pub mod run_stream;

use std::time::{Duration, Instant};

/// Counts heap allocations while switched on.
///
/// ```text
/// counting::enable(true);
/// let before = counting::allocations();
/// // ... the code under measurement ...
/// let made = counting::allocations() - before;
/// counting::enable(false);
/// ```
pub mod counting {
    // The workspace forbids unsafe code; this crate only denies it, and this
    // module alone allows it, because a global allocator can only be written
    // as an `unsafe impl GlobalAlloc`. It forwards every call to the system
    // allocator unchanged and only bumps a counter.
    #![allow(unsafe_code)]

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    static ENABLED: AtomicBool = AtomicBool::new(false);
    static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

    /// The system allocator, counting allocations and reallocations while
    /// [`enable`] is on. Off, it costs one relaxed load per call.
    struct CountingAllocator;

    #[global_allocator]
    static GLOBAL: CountingAllocator = CountingAllocator;

    fn count() {
        if ENABLED.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }

    // SAFETY: every method forwards its arguments unchanged to `System`,
    // which upholds the `GlobalAlloc` contract; counting touches no memory
    // handed out by the allocator.
    unsafe impl GlobalAlloc for CountingAllocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: the caller's guarantees for `layout` are passed on.
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: as for `alloc`.
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count();
            // SAFETY: `ptr` was allocated by `System` (every allocation
            // goes through this type) with `layout`, as the caller
            // guarantees.
            unsafe { System.realloc(ptr, layout, new_size) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as for `realloc`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    /// Switches counting on or off. The switch is global: allocations on
    /// every thread are counted while it is on.
    pub fn enable(on: bool) {
        ENABLED.store(on, Ordering::Relaxed);
    }

    /// Allocations counted so far.
    pub fn allocations() -> u64 {
        ALLOCATIONS.load(Ordering::Relaxed)
    }
}

/// Counts handled messages and wakes the timing task at the last one, so
/// that nothing polls while a run is timed.
#[derive(Debug)]
pub struct Probe {
    /// Messages handled since [`Probe::arm`].
    pub handled: std::sync::atomic::AtomicU64,
    target: std::sync::atomic::AtomicU64,
    /// Notified once `target` messages have been handled.
    pub done: tokio::sync::Notify,
}

impl Probe {
    /// A probe that is not counting towards anything yet.
    pub const fn new() -> Self {
        Probe {
            handled: std::sync::atomic::AtomicU64::new(0),
            target: std::sync::atomic::AtomicU64::new(u64::MAX),
            done: tokio::sync::Notify::const_new(),
        }
    }

    /// Starts counting towards `target` handled messages.
    pub fn arm(&self, target: u64) {
        use std::sync::atomic::Ordering;
        self.handled.store(0, Ordering::SeqCst);
        self.target.store(target, Ordering::SeqCst);
    }

    /// A benchmark handler's whole work: keeps `payment` from being
    /// optimised away and counts it handled (see [`Probe::handled_one`]).
    pub fn handled(&self, payment: &Payment) {
        std::hint::black_box(payment);
        self.handled_one();
    }

    /// Waits until `target` messages have been handled since
    /// [`Probe::arm`], for at most `timeout`; the error says how many were.
    /// A wake-up left over from an earlier run (its last message handled
    /// with no one waiting) is consumed and the count checked again.
    pub async fn wait(&self, target: u64, timeout: Duration) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.handled.load(Ordering::SeqCst) >= target {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, self.done.notified())
                .await
                .is_err()
            {
                return Err(format!(
                    "handled {} of {target} messages in {timeout:?}",
                    self.handled.load(Ordering::SeqCst)
                ));
            }
        }
    }

    /// One message handled; the last one wakes the timing task.
    pub fn handled_one(&self) {
        use std::sync::atomic::Ordering;
        let n = self.handled.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.target.load(Ordering::Relaxed) {
            self.done.notify_one();
        }
    }
}

impl Default for Probe {
    fn default() -> Self {
        Probe::new()
    }
}

/// The message: decoded by both sides, as `&Payment` in the handler.
#[derive(Debug, serde::Deserialize)]
pub struct Payment {
    /// The payment's id.
    pub id: u64,
    /// The account it is for.
    pub account: String,
    /// Its amount, in cents.
    pub amount_cents: u64,
}

/// The `i`th message's payload, e.g.
/// `{"id":1000042,"account":"acct-000042","amount_cents":4299}`.
pub fn payload(i: u64) -> Vec<u8> {
    format!(
        r#"{{"id":{},"account":"acct-{:06}","amount_cents":{}}}"#,
        1_000_000 + i,
        i % 1_000_000,
        100 + (i * 7919) % 100_000
    )
    .into_bytes()
}

/// The messages `0..n` in batches of `size` (the last one may be shorter),
/// in order.
///
/// ```
/// let all: Vec<_> = ruststream_benches::batches(5, 2).collect();
/// assert_eq!(all, [0..2, 2..4, 4..5]);
/// ```
pub fn batches(n: u64, size: usize) -> impl Iterator<Item = std::ops::Range<u64>> {
    let size = size.max(1) as u64;
    (0..n)
        .step_by(size as usize)
        .map(move |i| i..(i + size).min(n))
}

/// Runs every row of `rows` once on `warm_up` messages (run number
/// `usize::MAX`: connections, scripts loaded, allocator), then `reps`
/// rounds of every row in turn on `n` messages (run numbers `0..reps`), so
/// that the rows' runs are interleaved. `run(row, messages, run)` measures
/// one run. Returns each row's samples, in the order of `rows`.
pub async fn warm_up_and_interleave<R: Copy, T, E>(
    rows: &[R],
    warm_up: u64,
    n: u64,
    reps: usize,
    mut run: impl AsyncFnMut(R, u64, usize) -> Result<T, E>,
) -> Result<Vec<Vec<T>>, E> {
    for &row in rows {
        run(row, warm_up, usize::MAX).await?;
    }
    let mut samples: Vec<Vec<T>> = rows.iter().map(|_| Vec::with_capacity(reps)).collect();
    for round in 0..reps {
        for (i, &row) in rows.iter().enumerate() {
            samples[i].push(run(row, n, round).await?);
        }
    }
    Ok(samples)
}

/// The median of `values` (the upper one of an even count); panics on none.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{value:.0}");
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A memory broker that counts its `read` and `ack` calls, for the
/// benchmarks' untimed passes (messages per read, per ack).
pub mod counted {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use ruststream::{
        Broker, BrokerResult, EntryId, MemoryBroker, ReadBatch, ReadRequest, broker_methods,
        forward_broker,
    };

    /// Counts of the broker calls a run made.
    #[derive(Debug, Default)]
    pub struct Calls {
        /// `read` calls.
        pub reads: AtomicU64,
        /// `ack` calls.
        pub acks: AtomicU64,
    }

    impl Calls {
        /// `(reads, acks)` so far.
        pub fn snapshot(&self) -> (u64, u64) {
            (
                self.reads.load(Ordering::SeqCst),
                self.acks.load(Ordering::SeqCst),
            )
        }
    }

    /// A memory broker that counts `read` and `ack` calls (for the untimed
    /// passes): each call is forwarded as is, with the inner future, so the
    /// count costs no allocation.
    #[derive(Clone, Debug)]
    pub struct Counted {
        /// The broker.
        pub inner: MemoryBroker,
        /// Its calls so far.
        pub calls: Arc<Calls>,
    }

    /// The body of a counted call of [`Counted`]: counted under `calls.$count`,
    /// then passed on with the inner future.
    macro_rules! counted {
        ($this:ident, [$count:ident] $method:ident($($param:ident),*)) => {{
            $this.calls.$count.fetch_add(1, Ordering::Relaxed);
            $this.inner.$method($($param),*)
        }};
    }

    impl Broker for Counted {
        broker_methods!(counted: read[reads], ack[acks]);

        fn read_now(
            &self,
            request: &ReadRequest<'_>,
            batch: &mut ReadBatch,
        ) -> Option<BrokerResult<()>> {
            let answer = self.inner.read_now(request, batch);
            // An empty answer is followed by a `read` (the runtime waits
            // with one), which counts itself: counted once, not twice.
            if !(batch.deliveries.is_empty() && batch.dead_lettered.is_empty()) {
                self.calls.reads.fetch_add(1, Ordering::Relaxed);
            }
            answer
        }

        fn ack_now(&self, stream: &str, group: &str, ids: &[EntryId]) -> Option<BrokerResult<u64>> {
            self.calls.acks.fetch_add(1, Ordering::Relaxed);
            self.inner.ack_now(stream, group, ids)
        }

        // Everything else passes through unchanged.
        forward_broker!(
            inner: name, check_mode, publish, publish_batch, ensure_group, set_group_position,
            retry, dead_letter, redrive, discard, group_info, consumers, pending, dead_letters,
            range, stream_info, trim,
            extend_claim, count_deliveries,
        );
    }
}

/// Runs shorter than this report no CPU time (it can lag by a tick).
pub const MIN_CPU_WINDOW: Duration = Duration::from_millis(100);

/// The on-CPU time of every thread of this process so far, from
/// `/proc/self/task/*/schedstat` (Linux; nanoseconds, as the scheduler
/// accounts it). `None` where that cannot be read. A running thread's
/// figure is brought up to date only at the scheduler's tick or when it is
/// switched out, so it can lag by a few milliseconds: see
/// [`MIN_CPU_WINDOW`].
pub fn cpu_time() -> Option<Duration> {
    let mut total: u64 = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let mut path = task.ok()?.path();
        path.push("schedstat");
        // A thread may end between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

/// How long a run took: wall-clock, and CPU time over all threads (which
/// other processes on a shared machine do not inflate).
#[derive(Clone, Copy, Debug)]
pub struct Elapsed {
    /// Wall-clock time.
    pub wall: Duration,
    /// CPU time over all threads, if it could be read and the run was
    /// long enough ([`MIN_CPU_WINDOW`]).
    pub cpu: Option<Duration>,
}

/// Measures wall-clock and CPU time from its start.
#[derive(Debug)]
pub struct Stopwatch {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Stopwatch {
    /// Starts measuring.
    pub fn start() -> Self {
        let cpu = cpu_time();
        Stopwatch {
            wall: Instant::now(),
            cpu,
        }
    }

    /// The time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Elapsed {
        let wall = self.wall.elapsed();
        let cpu = match (self.cpu, cpu_time()) {
            (Some(before), Some(after)) if wall >= MIN_CPU_WINDOW => after.checked_sub(before),
            _ => None,
        };
        Elapsed { wall, cpu }
    }
}

/// The workload of the file-log benchmarks (`filelog`, `filelog_memory`):
/// one stream, one consumer, a 100-byte JSON payload, reads of 512.
pub mod filelog_workload {
    /// The stream.
    pub const STREAM: &str = "orders";
    /// The consumer.
    pub const CONSUMER: &str = "worker-1";
    /// The payload of every message: 100 bytes of JSON.
    pub const PAYLOAD: &[u8] = br#"{"order_id":1234567,"customer":"acme-corp","amount_cents":4999,"currency":"EUR","region":"eu-west1"}"#;
    /// The consumer's read size.
    pub const READ_COUNT: usize = 512;
}
