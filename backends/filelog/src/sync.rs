//! Group commit and fail-stop: writers register the files they wrote;
//! whoever waits for durability first leads the next sync: it waits (a
//! bounded, adaptive commit delay, see [`crate::commit_delay`]) for the
//! waiters it expects to join, then syncs every file written so far, and
//! everyone whose writes that covered is released by the same sync. The
//! first failed fsync stops the store for good.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ruststream_core::{BrokerError, BrokerFuture, BrokerResult};
use ruststream_local::Durability;
use tokio::sync::Notify;

use crate::commit_delay::CommitDelay;
use crate::options::SyncPolicy;

/// The error of every call once the store has stopped.
pub(crate) fn failed(detail: String) -> BrokerError {
    BrokerError::Failed {
        broker: "filelog",
        detail,
    }
}

/// Group commit, and the store's fail-stop state (shared by the store, the
/// broker and the background sync thread).
pub(crate) struct Syncer {
    state: Mutex<SyncState>,
    synced_now: Notify,
    /// Wakes a leader waiting for waiters to join its sync, once they have
    /// (or the store stopped).
    gathered: Condvar,
    policy: SyncPolicy,
    /// Set once the store has stopped: checked on every call without the
    /// lock.
    stopped: AtomicBool,
    /// Syncs finished (for tests).
    syncs: AtomicU64,
    /// Failures tests inject.
    pub(crate) failpoints: Failpoints,
}

#[derive(Default)]
struct SyncState {
    /// Ticket of the last registered write.
    written: u64,
    /// Every write up to this ticket is durable.
    synced: u64,
    /// A sync is running, or its leader is waiting for waiters to join.
    syncing: bool,
    /// The leader is waiting on [`Syncer::gathered`].
    gathering: bool,
    /// Files written since the last sync started.
    dirty: Vec<Arc<File>>,
    /// Who waits, and how long a leader waits for them.
    delay: CommitDelay,
    /// Why the store stopped, once it has.
    failure: Option<String>,
}

impl Syncer {
    pub(crate) fn new(policy: SyncPolicy) -> Arc<Self> {
        let syncer = Arc::new(Syncer {
            state: Mutex::new(SyncState::default()),
            synced_now: Notify::new(),
            gathered: Condvar::new(),
            policy,
            stopped: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            failpoints: Failpoints::default(),
        });
        let period = match policy {
            SyncPolicy::EveryPublish => Duration::from_millis(100),
            SyncPolicy::Interval(period) => period,
        };
        let weak = Arc::downgrade(&syncer);
        let spawned = std::thread::Builder::new()
            .name("ruststream-filelog-sync".into())
            .spawn(move || background_sync(weak, period));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the file log's background sync thread");
        }
        syncer
    }

    fn lock(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        let mut state = self.lock();
        let first = state.failure.is_none();
        let detail = state.failure.get_or_insert(reason).clone();
        self.stopped.store(true, Ordering::SeqCst);
        drop(state);
        if first {
            tracing::error!(
                reason = %detail,
                "the file log has stopped: every call fails until the process restarts"
            );
        }
        // Waiters whose writes were not synced fail now, and a leader
        // waiting for company stops waiting.
        self.synced_now.notify_waiters();
        self.gathered.notify_all();
        failed(detail)
    }

    /// Why the store stopped, if it has.
    pub(crate) fn failure(&self) -> Option<String> {
        if !self.stopped.load(Ordering::Acquire) {
            return None;
        }
        self.lock().failure.clone()
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
        self.stopped.load(Ordering::Acquire)
    }

    /// Records written files; returns the ticket that is durable once they
    /// are synced.
    pub(crate) fn register(&self, files: impl IntoIterator<Item = Arc<File>>) -> u64 {
        let mut state = self.lock();
        state.written += 1;
        for file in files {
            if !state.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
                state.dirty.push(file);
            }
        }
        state.written
    }

    /// The ticket of the last write registered.
    pub(crate) fn written(&self) -> u64 {
        self.lock().written
    }

    /// Takes the files to sync and the ticket that sync will cover.
    fn start_sync(state: &mut SyncState) -> (Vec<Arc<File>>, u64) {
        state.syncing = true;
        state.delay.start(state.written);
        (std::mem::take(&mut state.dirty), state.written)
    }

    /// Syncs `files` (or fails as a test asked), timed.
    fn run_sync(&self, files: &[Arc<File>]) -> (std::io::Result<()>, Duration) {
        let started = Instant::now();
        let result = match self.failpoints.fsync_error(files) {
            Some(error) => Err(error),
            None => sync_files(files),
        };
        (result, started.elapsed())
    }

    /// How many syncs have finished.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn finish_sync(&self, target: u64, result: std::io::Result<()>, took: Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state.syncing = false;
        state.delay.finish(took);
        match result {
            Ok(()) => {
                state.synced = state.synced.max(target);
                drop(state);
            }
            Err(e) => {
                drop(state);
                self.fail_stop(format!("fsync failed: {e}"));
            }
        }
        self.synced_now.notify_waiters();
    }

    /// Syncs every dirty file now (blocking), unless a sync is running or
    /// the store has stopped (a sync after a failed one proves nothing).
    pub(crate) fn sync_blocking(&self) {
        let (files, target) = {
            let mut state = self.lock();
            if state.failure.is_some() || state.syncing || state.dirty.is_empty() {
                return;
            }
            Self::start_sync(&mut state)
        };
        let (result, took) = self.run_sync(&files);
        self.finish_sync(target, result, took);
    }

    /// Resolves once every write up to `ticket` is durable, leading a sync
    /// if no one else is; fails if a sync failed first.
    pub(crate) async fn wait_for(&self, ticket: u64) -> BrokerResult<()> {
        let mut waiter = Waiter {
            syncer: self,
            ticket,
            counted: false,
        };
        {
            let mut state = self.lock();
            if state.synced >= ticket {
                return Ok(());
            }
            state.delay.join(ticket, Instant::now());
            waiter.counted = true;
            if state.gathering && state.delay.gathered() {
                self.gathered.notify_one();
            }
        }
        loop {
            let notified = self.synced_now.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let lead = {
                let mut state = self.lock();
                // Durable before the failure: acknowledged, so a producer
                // does not publish it again.
                if state.synced >= ticket {
                    // Covered by a sync that started: counted there.
                    waiter.counted = false;
                    return Ok(());
                }
                if let Some(reason) = &state.failure {
                    return Err(failed(reason.clone()));
                }
                if state.syncing {
                    None
                } else {
                    state.syncing = true;
                    Some(state.delay.delay())
                }
            };
            match lead {
                Some(delay) => self.lead(delay).await,
                None => notified.await,
            }
        }
    }

    /// Leads one sync (the caller has set `syncing`): waits up to `delay`
    /// for the waiters expected to join, then syncs everything written.
    /// On a multi-thread runtime all of it runs in place
    /// ([`tokio::task::block_in_place`], measured faster than a hop to the
    /// blocking pool, and precise to the microsecond where tokio's timers
    /// are not); on a current-thread one the leader yields to let the
    /// others join, for as long as some do (no timer: a paused clock is
    /// never waited on), and the fsync runs on the blocking pool.
    async fn lead(&self, delay: Option<Duration>) {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let mut turn = Turn {
            syncer: self,
            files: Vec::new(),
            finished: false,
        };
        let in_place = match Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| turn.sync_in_place(delay));
                return;
            }
            Ok(_) => false,
            Err(_) => true,
        };
        if in_place {
            turn.sync_in_place(delay);
            return;
        }
        // Yields cost no time: a current-thread leader gathers whatever
        // the commit delay would allow.
        self.gather_yielding().await;
        let Some(target) = turn.start() else {
            return;
        };
        if let Some(error) = self.failpoints.fsync_error(&turn.files) {
            turn.finish(target, Err(error), Duration::ZERO);
            return;
        }
        // The turn keeps the files until the sync is done: dropped before
        // that, it hands them back to be synced by the next leader.
        let files = turn.files.clone();
        let synced = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let result = sync_files(&files);
            (result, started.elapsed())
        })
        .await;
        if let Ok((result, took)) = synced {
            turn.finish(target, result, took);
        }
    }

    /// A current-thread leader's wait for company: it yields while the
    /// waiters it expects have not all joined and the last yield brought
    /// one.
    async fn gather_yielding(&self) {
        loop {
            let seen = {
                let state = self.lock();
                if state.delay.gathered() || state.failure.is_some() {
                    return;
                }
                state.delay.joined()
            };
            tokio::task::yield_now().await;
            if self.lock().delay.joined() == seen {
                return;
            }
        }
    }
}

/// A waiter of [`Syncer::wait_for`] that stops waiting (its future dropped)
/// before its sync started is no longer expected by the next leader.
struct Waiter<'a> {
    syncer: &'a Syncer,
    ticket: u64,
    counted: bool,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.syncer.lock().delay.leave(self.ticket);
        }
    }
}

/// A leader's turn: while it lasts no one else syncs. Ended before its sync
/// finished (its future dropped, or the store stopped while it waited for
/// company), it hands back the files it took and wakes the waiters, so that
/// another one leads.
struct Turn<'a> {
    syncer: &'a Syncer,
    files: Vec<Arc<File>>,
    finished: bool,
}

impl Turn<'_> {
    /// Waits (blocking) up to `delay` for the expected waiters, then syncs.
    fn sync_in_place(&mut self, delay: Option<Duration>) {
        if let Some(delay) = delay {
            self.gather_blocking(delay);
        }
        let Some(target) = self.start() else {
            return;
        };
        let (result, took) = self.syncer.run_sync(&self.files);
        self.finish(target, result, took);
    }

    /// Waits until the expected waiters have joined, for at most `delay`.
    fn gather_blocking(&self, delay: Duration) {
        let syncer = self.syncer;
        let until = Instant::now() + delay;
        let mut state = syncer.lock();
        state.gathering = true;
        while !state.delay.gathered() && state.failure.is_none() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            state = syncer
                .gathered
                .wait_timeout(state, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.gathering = false;
    }

    /// Takes the files to sync and returns the ticket the sync covers, or
    /// `None` if the store has stopped (the turn then ends unsynced).
    fn start(&mut self) -> Option<u64> {
        let mut state = self.syncer.lock();
        if state.failure.is_some() {
            return None;
        }
        let (files, target) = Syncer::start_sync(&mut state);
        self.files = files;
        Some(target)
    }

    /// The sync ran: releases whom it covered (or stops the store).
    fn finish(&mut self, target: u64, result: std::io::Result<()>, took: Duration) {
        self.finished = true;
        self.files.clear();
        self.syncer.finish_sync(target, result, took);
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.syncer.lock();
        state.syncing = false;
        state.gathering = false;
        for file in self.files.drain(..) {
            if !state.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
                state.dirty.push(file);
            }
        }
        drop(state);
        self.syncer.synced_now.notify_waiters();
    }
}

fn sync_files(files: &[Arc<File>]) -> std::io::Result<()> {
    for file in files {
        file.sync_data()?;
    }
    Ok(())
}

fn background_sync(syncer: Weak<Syncer>, period: Duration) {
    loop {
        std::thread::sleep(period);
        let Some(syncer) = syncer.upgrade() else {
            return;
        };
        if syncer.stopped() {
            return;
        }
        syncer.sync_blocking();
    }
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
