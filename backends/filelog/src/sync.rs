//! Group commit and fail-stop, run by a thread of the store's own (the
//! *sync thread*).
//!
//! Writers register the files they wrote and get a ticket; a durable
//! publish then waits until its ticket is synced. The sync thread owns
//! every `fdatasync`: once a waiter needs a sync, it first waits (a
//! bounded, adaptive commit delay, see [`crate::commit_delay`]) for the
//! waiters it expects to join, then syncs every file written so far,
//! records the new durable position and wakes exactly the waiters that
//! sync covered. No runtime worker thread blocks on the disk or hands its
//! core over: a waiter is a future that leaves its waker here (but a lone
//! waiter on a multi-thread runtime, with no one else expected, syncs in
//! place, as the thread would only add two hand-overs). The same
//! thread syncs the group state (with the next publish's sync, or within
//! 100 ms) and, with [`SyncPolicy::Interval`], everything every interval.
//! The first failed sync stops the store for good (`docs/guarantees.md`,
//! "Under faults").
//!
//! On a current-thread runtime the runtime's one thread runs the waiters
//! in turn, so they gather by yielding: the first waiter of a sync yields
//! for as long as others keep joining, then asks for the sync at once.
//! While a sync it asked for runs, a task on the blocking pool waits for
//! it, so that a paused clock (tests) does not jump ahead while the
//! runtime has nothing else to do.

use std::fs::File;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ruststream_core::{BrokerError, BrokerFuture, BrokerResult};
use ruststream_local::Durability;

use crate::commit_delay::CommitDelay;
use crate::options::SyncPolicy;

/// With [`SyncPolicy::EveryPublish`], the longest group state written
/// stays unsynced when no publish syncs it.
const GROUP_STATE_PERIOD: Duration = Duration::from_millis(100);

/// The shortest period of the sync thread's periodic sync (an
/// `Interval(0)` would otherwise spin).
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// How long the waiters a sync covered may wait for the first of them to
/// wake them (see [`SyncState::ready`]) before the sync thread does.
const RELAY_TIMEOUT: Duration = Duration::from_millis(1);

/// The error of every call once the store has stopped.
pub(crate) fn failed(detail: String) -> BrokerError {
    BrokerError::Failed {
        broker: "filelog",
        detail,
    }
}

/// Group commit, and the store's fail-stop state: the handle the store
/// and the broker share. Dropping the last one tells the sync thread to
/// end, which it does at once (after the sync it is running, if any): the
/// drop does not wait for it, as joining a thread waits for the scheduler
/// to run it, milliseconds on a busy machine (the file log's tests open and
/// drop thousands of brokers).
pub(crate) struct Syncer {
    shared: Arc<Shared>,
    policy: SyncPolicy,
}

/// What the sync thread and the waiters share.
struct Shared {
    state: Mutex<SyncState>,
    /// Wakes the sync thread: a sync is wanted, the waiters it gathers have
    /// joined, or the store stopped or closed.
    work: Condvar,
    /// Wakes the blocking-pool tasks of current-thread waiters after each
    /// sync.
    synced_now: Condvar,
    /// Set once the store has stopped: checked on every call without the
    /// lock.
    stopped: AtomicBool,
    /// Syncs finished (for tests).
    syncs: AtomicU64,
    /// Tells the sync thread, while it spins, that it has something to do.
    nudged: AtomicBool,
    /// Failures tests inject.
    failpoints: Failpoints,
}

/// What the sync thread is doing, so that waiters wake it only when it
/// waits for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Thread {
    /// Waiting for a sync to be wanted (or for the next periodic one).
    #[default]
    Idle,
    /// Waiting (the commit delay) for the waiters it expects to join.
    Gathering,
    /// Woken already, or syncing: it looks at the state before it waits
    /// again.
    Awake,
    /// Gathering right after a sync, spinning on [`Shared::nudged`] (and
    /// yielding its core to any other thread that can run) rather than
    /// sleeping.
    Spinning,
}

#[derive(Default)]
struct SyncState {
    /// Ticket of the last registered write.
    written: u64,
    /// Every write up to this ticket is durable.
    synced: u64,
    /// The highest ticket a waiter needs synced, the commit delay allowing.
    requested: u64,
    /// The highest ticket a waiter needs synced at once (its waiters have
    /// gathered already).
    requested_now: u64,
    thread: Thread,
    /// Files written since the last sync started.
    dirty: Vec<Arc<File>>,
    /// Files written since the last sync started with records that ask
    /// for no sync of their own ([`Syncer::register_lazy`]): synced with
    /// the next sync, which only `dirty` files start.
    lazy: Vec<Arc<File>>,
    /// Who waits, and how long the sync thread waits for them.
    delay: CommitDelay,
    /// The waiters, woken once their ticket is durable or the store stops.
    waiters: Vec<Waiting>,
    /// Waiters a finished sync covered, still to be woken. The sync thread
    /// wakes one of them; the first waiter polled then wakes the rest from
    /// its own thread (a runtime worker, where a wake is a push onto its
    /// queue, not a hand-over to another thread), or the sync thread does
    /// after [`RELAY_TIMEOUT`].
    ready: Vec<Waker>,
    /// Key of the next waiter.
    next_key: u64,
    /// A current-thread waiter is gathering the next sync's waiters.
    gathering: bool,
    /// The gathering waiter, while it waits for the running sync to end.
    gatherer: Option<Waker>,
    /// A sync runs (on the sync thread, or in place).
    syncing: bool,
    /// Blocking-pool tasks waiting on [`Shared::synced_now`].
    blocked: usize,
    /// Why the store stopped, once it has.
    failure: Option<String>,
    /// The syncer was dropped: the thread ends.
    closed: bool,
}

impl SyncState {
    /// Records everything up to `target` as durable, and moves the wakers
    /// of the waiters that covers to `ready`.
    fn synced_up_to(&mut self, target: u64) {
        self.synced = self.synced.max(target);
        self.ready.extend(
            self.waiters
                .extract_if(.., |w| w.ticket <= target)
                .map(|w| w.waker),
        );
    }

    /// Whether the sync thread gathering waiters should go on waiting (its
    /// time allowing): not once they have all joined, a sync is wanted at
    /// once, or the store stopped or closed.
    fn gathering_goes_on(&self) -> bool {
        !self.delay.gathered()
            && self.requested_now <= self.synced
            && self.failure.is_none()
            && !self.closed
    }
}

/// A waiter's waker, and the ticket it waits for.
struct Waiting {
    key: u64,
    ticket: u64,
    waker: Waker,
}

impl Syncer {
    /// A syncer with its sync thread running.
    pub(crate) fn new(policy: SyncPolicy) -> std::io::Result<Arc<Self>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(SyncState::default()),
            work: Condvar::new(),
            synced_now: Condvar::new(),
            stopped: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            nudged: AtomicBool::new(false),
            failpoints: Failpoints::default(),
        });
        let period = match policy {
            SyncPolicy::EveryPublish => GROUP_STATE_PERIOD,
            SyncPolicy::Interval(period) => period.max(MIN_PERIOD),
        };
        {
            let shared = Arc::clone(&shared);
            // Detached: it ends once the syncer is dropped (see there).
            std::thread::Builder::new()
                .name("ruststream-filelog-sync".into())
                .spawn(move || shared.run(period))
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("cannot start the file log's sync thread: {e}"),
                    )
                })?;
        }
        Ok(Arc::new(Syncer { shared, policy }))
    }

    /// Failures tests inject.
    pub(crate) fn failpoints(&self) -> &Failpoints {
        &self.shared.failpoints
    }

    /// Stops the store for good (fail-stop) and returns the error for the
    /// call that found out. The first reason is kept.
    ///
    /// This is what follows an fsync failure: the kernel may already have
    /// dropped the pages it could not write and cleared the error, so a
    /// later fsync can succeed without them. Nothing written since the last
    /// good sync can be trusted to be on disk, and only a restart, which
    /// reads back what really is, makes the state certain again.
    pub(crate) fn fail_stop(&self, reason: String) -> BrokerError {
        self.shared.fail_stop(reason)
    }

    /// Why the store stopped, if it has.
    pub(crate) fn failure(&self) -> Option<String> {
        if !self.stopped() {
            return None;
        }
        self.shared.lock().failure.clone()
    }

    /// `Ok` while the store works; its failure once it has stopped.
    pub(crate) fn check(&self) -> BrokerResult<()> {
        match self.failure() {
            None => Ok(()),
            Some(reason) => Err(failed(reason)),
        }
    }

    /// Whether the store has stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.shared.stopped.load(Ordering::Acquire)
    }

    /// Records written files; returns the ticket that is durable once they
    /// are synced.
    pub(crate) fn register(&self, files: impl IntoIterator<Item = Arc<File>>) -> u64 {
        let mut state = self.shared.lock();
        state.written += 1;
        for file in files {
            if !state.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
                state.dirty.push(file);
            }
        }
        state.written
    }

    /// Records files written with records that need no sync of their own
    /// (a consumer's seen time, `GroupChange::Seen`): the next sync, which
    /// other writes start, covers them, and nothing waits for them. Returns
    /// the ticket of the last write registered (what a caller could wait
    /// for: nothing of its own).
    pub(crate) fn register_lazy(&self, files: impl IntoIterator<Item = Arc<File>>) -> u64 {
        let mut state = self.shared.lock();
        for file in files {
            if !state.lazy.iter().any(|f| Arc::ptr_eq(f, &file)) {
                state.lazy.push(file);
            }
        }
        state.written
    }

    /// Makes every write registered so far durable before it returns,
    /// from the calling thread: syncs the files written since the last sync
    /// began, then waits for a sync in progress (which covers the files
    /// written before it began). For compaction, under the store's lock: a
    /// snapshot must not reach the disk before the entries it describes.
    /// A failed sync stops the store, as the sync thread's does.
    pub(crate) fn sync_written_now(&self) -> BrokerResult<()> {
        self.check()?;
        let files = self.shared.lock().files_to_sync(false);
        let result = match self.shared.failpoints.fsync_error(&files) {
            Some(error) => Err(error),
            None => sync_files(&files),
        };
        if let Err(e) = result {
            return Err(self.fail_stop(format!("fsync failed: {e}")));
        }
        let mut state = self.shared.lock();
        state.blocked += 1;
        while state.syncing && state.failure.is_none() && !state.closed {
            state = self
                .shared
                .synced_now
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.blocked -= 1;
        drop(state);
        self.check()
    }

    /// The ticket that covers every write registered so far, lazily
    /// registered ones ([`Syncer::register_lazy`]) included: those become
    /// ordinary writes, which the next sync is for.
    pub(crate) fn written(&self) -> u64 {
        let mut state = self.shared.lock();
        if !state.lazy.is_empty() {
            let lazy = std::mem::take(&mut state.lazy);
            state.written += 1;
            for file in lazy {
                if !state.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
                    state.dirty.push(file);
                }
            }
        }
        state.written
    }

    /// How many syncs have finished.
    pub(crate) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Resolves once every write up to `ticket` is durable; fails if a sync
    /// failed first.
    pub(crate) fn wait_for(&self, ticket: u64) -> WaitFor<'_> {
        WaitFor {
            syncer: self,
            ticket,
            key: None,
            counted: false,
            gathering: None,
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        let (woken, dirty) = {
            let mut state = self.shared.lock();
            state.closed = true;
            self.shared.nudged.store(true, Ordering::Release);
            self.shared.work.notify_one();
            // None is left (a waiter borrows the syncer), but none may hang.
            let mut woken = std::mem::take(&mut state.ready);
            woken.extend(state.waiters.drain(..).map(|w| w.waker));
            // Files written since the last sync are closed here, unsynced,
            // as a dropped broker always left them (`FileLogBroker::sync`
            // makes them durable first).
            (woken, std::mem::take(&mut state.dirty))
        };
        woken.into_iter().for_each(Waker::wake);
        self.shared.synced_now.notify_all();
        drop(dirty);
    }
}

impl SyncState {
    /// The files a sync starting now covers: those written since the last
    /// one started, lazily registered ones included; taken (the sync
    /// starts) or, without `take`, copied.
    fn files_to_sync(&mut self, take: bool) -> Vec<Arc<File>> {
        let (mut files, lazy) = if take {
            (
                std::mem::take(&mut self.dirty),
                std::mem::take(&mut self.lazy),
            )
        } else {
            (self.dirty.clone(), self.lazy.clone())
        };
        for file in lazy {
            if !files.iter().any(|f| Arc::ptr_eq(f, &file)) {
                files.push(file);
            }
        }
        files
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`Syncer::fail_stop`].
    fn fail_stop(&self, reason: String) -> BrokerError {
        let (detail, first, woken) = {
            let mut state = self.lock();
            let first = state.failure.is_none();
            let detail = state.failure.get_or_insert(reason).clone();
            self.stopped.store(true, Ordering::SeqCst);
            // The thread stops; waiters whose writes were not synced fail.
            self.nudged.store(true, Ordering::Release);
            self.work.notify_one();
            let mut woken = std::mem::take(&mut state.ready);
            woken.extend(state.waiters.drain(..).map(|w| w.waker));
            (detail, first, woken)
        };
        if first {
            tracing::error!(
                reason = %detail,
                "the file log has stopped: every call fails until the process restarts"
            );
        }
        woken.into_iter().for_each(Waker::wake);
        // After the wakes (see `run`).
        self.synced_now.notify_all();
        failed(detail)
    }

    /// A waiter (not on a current-thread runtime) needs `ticket` synced:
    /// wakes the thread if it waits for that.
    fn want(&self, state: &mut SyncState, ticket: u64) {
        state.requested = state.requested.max(ticket);
        let wake = match state.thread {
            Thread::Idle => true,
            Thread::Gathering | Thread::Spinning => state.delay.gathered(),
            Thread::Awake => false,
        };
        if wake {
            self.wake_thread(state);
        }
    }

    /// A current-thread waiter has gathered the waiters of the next sync:
    /// asks for it at once; returns the ticket it will cover.
    fn want_now(&self, state: &mut SyncState) -> u64 {
        state.gathering = false;
        let target = state.written;
        state.requested_now = state.requested_now.max(target);
        if state.thread != Thread::Awake {
            self.wake_thread(state);
        }
        target
    }

    /// Wakes the sync thread, which is waiting for waiters.
    fn wake_thread(&self, state: &mut SyncState) {
        if state.thread == Thread::Spinning {
            self.nudged.store(true, Ordering::Release);
        } else {
            self.work.notify_one();
        }
        state.thread = Thread::Awake;
    }

    /// Blocks until `target` is durable, the store stops or closes (the
    /// blocking-pool task of [`hold_clock`]).
    fn block_until(&self, target: u64) {
        let mut state = self.lock();
        state.blocked += 1;
        while state.synced < target && state.failure.is_none() && !state.closed {
            state = self
                .synced_now
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.blocked -= 1;
    }

    /// The sync thread: waits for a sync to be wanted (or due), gathers the
    /// waiters it expects, syncs and wakes whom the sync covered, until the
    /// store stops or the syncer is dropped.
    fn run(&self, period: Duration) {
        // A panic here (a bug) must not leave waiters hanging.
        let _stop_on_panic = StopOnPanic(self);
        let mut last_sync = Instant::now();
        // When the waiters of the last sync were left to the first of them
        // to wake, until they all are.
        let mut relayed: Option<Instant> = None;
        // The waiters of the next sync were gathered right after the last.
        let mut gathered = false;
        let mut state = self.lock();
        loop {
            let mut eager = false;
            loop {
                if state.closed || state.failure.is_some() {
                    return;
                }
                if state.syncing {
                    // A lone waiter syncs in place: it tells the thread if
                    // it wants another sync when done.
                    state.thread = Thread::Idle;
                    state = self.sleep(state, Instant::now() + period, &mut relayed);
                    continue;
                }
                if state.requested_now > state.synced {
                    eager = true;
                    break;
                }
                if state.requested > state.synced {
                    break;
                }
                let now = Instant::now();
                let due = last_sync + period;
                if now >= due {
                    // Group state, or the interval's writes: synced at once.
                    if !state.dirty.is_empty() {
                        eager = true;
                        break;
                    }
                    last_sync = now;
                    continue;
                }
                state.thread = Thread::Idle;
                state = self.sleep(state, due, &mut relayed);
            }
            state.thread = Thread::Awake;
            if !eager && !gathered {
                if let Some(delay) = state.delay.delay() {
                    state = self.gather(state, Instant::now() + delay, &mut relayed);
                }
                if state.closed || state.failure.is_some() {
                    continue;
                }
            }
            let files = state.files_to_sync(true);
            let target = state.written;
            state.delay.start(target);
            state.syncing = true;
            drop(state);
            let started = Instant::now();
            let result = match self.failpoints.fsync_error(&files) {
                Some(error) => Err(error),
                None => sync_files(&files),
            };
            let took = started.elapsed();
            drop(files);
            // The next periodic sync is a period after this one ended, as
            // with the sleeping thread before it (syncing every period from
            // its start measured slower for `Interval` appends).
            last_sync = Instant::now();
            self.syncs.fetch_add(1, Ordering::Relaxed);
            state = self.lock();
            state.syncing = false;
            state.delay.finish(took);
            let gatherer = state.gatherer.take();
            if let Err(e) = result {
                drop(state);
                if let Some(gatherer) = gatherer {
                    gatherer.wake();
                }
                self.fail_stop(format!("fsync failed: {e}"));
                state = self.lock();
                continue;
            }
            state.synced_up_to(target);
            let first = state.ready.pop();
            if !state.ready.is_empty() {
                relayed = Some(Instant::now());
            }
            let blocked = state.blocked > 0;
            let after = state.delay.after_sync();
            drop(state);
            if let Some(first) = first {
                first.wake();
            }
            if let Some(gatherer) = gatherer {
                gatherer.wake();
            }
            // Only once a waiter is woken: a current-thread runtime must
            // find it runnable as soon as its blocking task ends, or a
            // paused clock jumps ahead (see `hold_clock`).
            if blocked {
                self.synced_now.notify_all();
            }
            state = self.lock();
            gathered = false;
            if let Some(wait) = after {
                state = self.gather_after_sync(state, Instant::now() + wait, &mut relayed);
                gathered = state.requested > state.synced;
            }
        }
    }

    /// Right after a sync, waits (the commit delay) until the waiters of the
    /// next sync are back, or `until` (at most one sync). It spins,
    /// yielding its core, rather than sleep: only the last waiter back tells
    /// it, with a store to [`Shared::nudged`], and the sync starts at once,
    /// where a sleeping thread would first have to be woken and scheduled
    /// (measured at 15 to 25 us a sync on the 2-core VM of BENCHMARKS.md).
    fn gather_after_sync<'a>(
        &'a self,
        mut state: MutexGuard<'a, SyncState>,
        until: Instant,
        relayed: &mut Option<Instant>,
    ) -> MutexGuard<'a, SyncState> {
        // They may all be back already (and then told no one).
        if !state.gathering_goes_on() {
            return state;
        }
        state.thread = Thread::Spinning;
        self.nudged.store(false, Ordering::Relaxed);
        drop(state);
        while !self.nudged.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::yield_now();
        }
        // Nudged or not, it looks again (and sleeps if time is left).
        self.gather(self.lock(), until, relayed)
    }

    /// The commit delay: waits until the waiters the next sync expects have
    /// joined, or `until`, or until a sync is wanted at once.
    fn gather<'a>(
        &'a self,
        mut state: MutexGuard<'a, SyncState>,
        until: Instant,
        relayed: &mut Option<Instant>,
    ) -> MutexGuard<'a, SyncState> {
        while state.gathering_goes_on() && Instant::now() < until {
            state.thread = Thread::Gathering;
            state = self.sleep(state, until, relayed);
        }
        state.thread = Thread::Awake;
        state
    }

    /// Waits on [`Shared::work`] until `until` at most, and sooner while
    /// the waiters of the last sync are left to wake (`relayed`): if they
    /// still are after [`RELAY_TIMEOUT`], wakes them itself.
    fn sleep<'a>(
        &'a self,
        state: MutexGuard<'a, SyncState>,
        until: Instant,
        relayed: &mut Option<Instant>,
    ) -> MutexGuard<'a, SyncState> {
        let relay_by = relayed.map(|at| at + RELAY_TIMEOUT);
        let wake_at = relay_by.map_or(until, |by| by.min(until));
        let timeout = wake_at.saturating_duration_since(Instant::now());
        let mut state = self
            .work
            .wait_timeout(state, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        let Some(by) = relay_by else {
            return state;
        };
        if state.ready.is_empty() {
            *relayed = None;
        } else if Instant::now() >= by {
            *relayed = None;
            let ready = std::mem::take(&mut state.ready);
            drop(state);
            ready.into_iter().for_each(Waker::wake);
            state = self.lock();
        }
        state
    }
}

/// Stops the store if the sync thread panics, so that no waiter waits for
/// it for ever.
struct StopOnPanic<'a>(&'a Shared);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .fail_stop("the file log's sync thread panicked".into());
        }
    }
}

/// Whether the caller runs on a current-thread tokio runtime.
fn on_current_thread_runtime() -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    matches!(Handle::try_current(), Ok(h) if h.runtime_flavor() == RuntimeFlavor::CurrentThread)
}

/// On a current-thread runtime, keeps a task on the blocking pool until
/// `target` is durable: tokio does not move a paused clock while one runs,
/// so a test's timers do not fire early while the runtime waits for the
/// sync thread with nothing else to do.
fn hold_clock(shared: &Arc<Shared>, target: u64) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let shared = Arc::clone(shared);
        // Not awaited: it ends with the sync (or the store).
        drop(handle.spawn_blocking(move || shared.block_until(target)));
    }
}

/// The future of [`Syncer::wait_for`].
pub(crate) struct WaitFor<'a> {
    syncer: &'a Syncer,
    ticket: u64,
    /// Its key among the waiters, while it is one.
    key: Option<u64>,
    /// Counted by the commit delay as joining the next sync: dropped
    /// before that sync started, it is no longer expected.
    counted: bool,
    /// On a current-thread runtime, while it gathers the next sync's
    /// waiters: how many had joined at its last yield.
    gathering: Option<usize>,
}

impl Future for WaitFor<'_> {
    type Output = BrokerResult<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let shared = &this.syncer.shared;
        let mut state = shared.lock();
        // The first waiter polled after a sync wakes the others it covered.
        let relay = if state.ready.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut state.ready)
        };
        let (poll, then) = this.poll_locked(&mut state, cx);
        drop(state);
        relay.into_iter().for_each(Waker::wake);
        match then {
            Then::Nothing => poll,
            Then::HoldClock(target) => {
                hold_clock(shared, target);
                poll
            }
            Then::SyncInPlace(files, target) => this.sync_in_place(files, target),
        }
    }
}

/// What a [`WaitFor`] poll leaves to do once the lock is released.
enum Then {
    Nothing,
    /// A sync was asked for at once, whose end a blocking-pool task must
    /// await ([`hold_clock`]).
    HoldClock(u64),
    /// A lone waiter syncs these files, up to this ticket, itself.
    SyncInPlace(Vec<Arc<File>>, u64),
}

type Polled = (Poll<BrokerResult<()>>, Then);

impl WaitFor<'_> {
    /// The poll, under the lock, and what is left to do after it.
    fn poll_locked(&mut self, state: &mut SyncState, cx: &mut Context<'_>) -> Polled {
        // Durable before a failure: acknowledged, so that a producer does
        // not publish it again. A sync that covered it started: it counted
        // there. Either way the thread took it off the waiters.
        if state.synced >= self.ticket {
            self.key = None;
            self.counted = false;
            // Covered before it asked for a sync (by a periodic one): it
            // asks for the others it was gathering.
            let then = match self.gathering.take() {
                Some(_) => Then::HoldClock(self.syncer.shared.want_now(state)),
                None => Then::Nothing,
            };
            return (Poll::Ready(Ok(())), then);
        }
        if let Some(reason) = &state.failure {
            self.key = None;
            return (Poll::Ready(Err(failed(reason.clone()))), Then::Nothing);
        }
        if state.closed {
            self.key = None;
            return (
                Poll::Ready(Err(BrokerError::Closed { broker: "filelog" })),
                Then::Nothing,
            );
        }
        let shared = &self.syncer.shared;
        match self.key {
            None => {
                let key = state.next_key;
                state.next_key += 1;
                state.waiters.push(Waiting {
                    key,
                    ticket: self.ticket,
                    waker: cx.waker().clone(),
                });
                self.key = Some(key);
                state.delay.join(self.ticket, Instant::now());
                self.counted = true;
                if !on_current_thread_runtime() {
                    if let Some(sync) = Self::alone(state) {
                        return (Poll::Pending, sync);
                    }
                    shared.want(state, self.ticket);
                } else if !state.gathering {
                    state.gathering = true;
                    self.gathering = Some(usize::MAX);
                }
            }
            Some(key) => {
                if let Some(waiting) = state.waiters.iter_mut().find(|w| w.key == key)
                    && !waiting.waker.will_wake(cx.waker())
                {
                    waiting.waker = cx.waker().clone();
                }
            }
        }
        let Some(seen) = self.gathering else {
            return (Poll::Pending, Then::Nothing);
        };
        if state.syncing {
            // The waiters the running sync releases come back after it:
            // this one gathers them too, once the thread wakes it as the
            // sync ends (yielding meanwhile would split the waiters into two
            // groups taking turns).
            state.gatherer = Some(cx.waker().clone());
            self.gathering = Some(usize::MAX);
            return (Poll::Pending, Then::Nothing);
        }
        // Gathering: yields cost no time, so it waits for as long as the
        // last yield brought someone (and the waiters expected are not all
        // there).
        let joined = state.delay.joined();
        if state.delay.gathered() || joined == seen {
            self.gathering = None;
            return (Poll::Pending, Then::HoldClock(shared.want_now(state)));
        }
        self.gathering = Some(joined);
        cx.waker().wake_by_ref();
        (Poll::Pending, Then::Nothing)
    }

    /// A waiter that is alone (no other waiter, none expected, the thread
    /// idle, not on a current-thread runtime) syncs in place: the thread
    /// would only add two hand-overs between threads to its wait (one
    /// publisher through the thread ran at 0.81 to 0.84 of the naive
    /// append+fdatasync loop, 0.94 to 1.05 in place; BENCHMARKS.md). It
    /// takes the files to sync, and the thread keeps off until it is done.
    fn alone(state: &mut SyncState) -> Option<Then> {
        let alone = state.thread == Thread::Idle
            && !state.syncing
            && state.waiters.len() == 1
            && state.delay.gathered()
            && state.requested_now <= state.synced;
        if !alone {
            return None;
        }
        state.syncing = true;
        let target = state.written;
        state.delay.start(target);
        Some(Then::SyncInPlace(state.files_to_sync(true), target))
    }

    /// Syncs `files` in place (in [`tokio::task::block_in_place`] on a
    /// multi-thread runtime), then releases whom the sync covered, itself
    /// included, and wakes the thread if others want a sync meanwhile.
    fn sync_in_place(&mut self, files: Vec<Arc<File>>, target: u64) -> Poll<BrokerResult<()>> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let shared = &self.syncer.shared;
        let started = Instant::now();
        let run = || match shared.failpoints.fsync_error(&files) {
            Some(error) => Err(error),
            None => sync_files(&files),
        };
        let result = match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(run)
            }
            _ => run(),
        };
        let took = started.elapsed();
        drop(files);
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        let mut state = shared.lock();
        state.syncing = false;
        state.delay.finish(took);
        // Itself: not to be woken.
        if let Some(key) = self.key.take()
            && let Some(i) = state.waiters.iter().position(|w| w.key == key)
        {
            state.waiters.remove(i);
        }
        if let Err(e) = result {
            drop(state);
            return Poll::Ready(Err(shared.fail_stop(format!("fsync failed: {e}"))));
        }
        self.counted = false;
        state.synced_up_to(target);
        let woken = std::mem::take(&mut state.ready);
        let wanted = state.requested > state.synced || state.requested_now > state.synced;
        if wanted && state.thread == Thread::Idle {
            state.thread = Thread::Awake;
            shared.work.notify_one();
        }
        let blocked = state.blocked > 0;
        drop(state);
        woken.into_iter().for_each(Waker::wake);
        if blocked {
            shared.synced_now.notify_all();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for WaitFor<'_> {
    fn drop(&mut self) {
        if self.key.is_none() && !self.counted && self.gathering.is_none() {
            return;
        }
        let shared = &self.syncer.shared;
        let mut state = shared.lock();
        if let Some(key) = self.key
            && let Some(i) = state.waiters.iter().position(|w| w.key == key)
        {
            state.waiters.remove(i);
        }
        if self.counted {
            state.delay.leave(self.ticket);
        }
        // Woken to wake the others, or gathering the waiters of the next
        // sync, it must not leave them waiting for it.
        let relay = std::mem::take(&mut state.ready);
        if self.gathering.is_some() {
            state.gatherer = None;
        }
        let hold =
            (self.gathering.is_some() && state.gathering).then(|| shared.want_now(&mut state));
        drop(state);
        relay.into_iter().for_each(Waker::wake);
        if let Some(target) = hold {
            hold_clock(shared, target);
        }
    }
}

fn sync_files(files: &[Arc<File>]) -> std::io::Result<()> {
    for file in files {
        file.sync_data()?;
    }
    Ok(())
}

impl Durability for Syncer {
    fn wait(&self, ticket: u64) -> BrokerFuture<'_, ()> {
        match self.policy {
            SyncPolicy::EveryPublish => Box::pin(self.wait_for(ticket)),
            SyncPolicy::Interval(_) => Box::pin(Acknowledged),
        }
    }

    fn failure(&self) -> Option<String> {
        Syncer::failure(self)
    }
}

/// What [`SyncPolicy::Interval`] waits for: nothing. Boxing it allocates
/// nothing, as it has no size (a `std::future::ready` would be boxed on
/// every publish).
struct Acknowledged;

impl std::future::Future for Acknowledged {
    type Output = BrokerResult<()>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Failures injected by tests (through the broker's hidden `inject_*`
/// methods): a disk that fails on demand, which no test can get from a real
/// one (root ignores permissions, and fsync errors need a failing device).
#[derive(Default)]
pub(crate) struct Failpoints {
    /// Any write failure is armed (so writes check the target only then).
    write_armed: AtomicBool,
    /// The next write to this target fails: `Some(stream)` for a stream's
    /// segment, `None` for the journal.
    write: Mutex<Option<Option<String>>>,
    /// The next sync of at least one file fails.
    fsync: AtomicBool,
}

impl Failpoints {
    /// Makes the next group-commit sync fail.
    pub(crate) fn fail_next_fsync(&self) {
        self.fsync.store(true, Ordering::SeqCst);
    }

    /// Makes the next write to `stream`'s segment (`None`: to the journal)
    /// write half its bytes, then fail.
    pub(crate) fn fail_next_write(&self, stream: Option<&str>) {
        *self.write.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream.map(str::to_owned));
        self.write_armed.store(true, Ordering::SeqCst);
    }

    /// The injected error for a sync of `files`, if one is armed.
    fn fsync_error(&self, files: &[Arc<File>]) -> Option<std::io::Error> {
        (!files.is_empty() && self.fsync.swap(false, Ordering::SeqCst))
            .then(|| std::io::Error::other("injected fsync failure"))
    }

    /// Whether the write about to go to `target` must fail (then disarmed).
    pub(crate) fn take_write(&self, target: Option<&str>) -> bool {
        if !self.write_armed.load(Ordering::Relaxed) {
            return false;
        }
        let mut armed = self.write.lock().unwrap_or_else(|p| p.into_inner());
        if armed.as_ref().is_some_and(|t| t.as_deref() == target) {
            *armed = None;
            self.write_armed.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }
}

/// Appends `bytes` to `file`, or, when a test armed a failure for `target`,
/// half of them and then an error.
pub(crate) fn write_or_inject(
    failpoints: &Failpoints,
    target: Option<&str>,
    mut file: &File,
    bytes: &[u8],
    path: &Path,
) -> BrokerResult<()> {
    use std::io::Write;
    let io = |e| crate::store::io_error(path, e);
    if failpoints.take_write(target) {
        file.write_all(&bytes[..bytes.len() / 2]).map_err(io)?;
        return Err(io(std::io::Error::other("injected write failure")));
    }
    file.write_all(bytes).map_err(io)
}
