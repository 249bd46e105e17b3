//! Group commit and fail-stop: writers register the files they wrote;
//! whoever waits for durability first syncs every file written so far, and
//! everyone whose writes that covered is released by the same sync. The
//! first failed fsync stops the store for good.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ruststream_core::{BrokerError, BrokerFuture, BrokerResult};
use ruststream_local::Durability;
use tokio::sync::Notify;

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
    policy: SyncPolicy,
    /// Set once the store has stopped: checked on every call without the
    /// lock.
    stopped: AtomicBool,
    /// Failures tests inject.
    pub(crate) failpoints: Failpoints,
}

#[derive(Default)]
struct SyncState {
    /// Ticket of the last registered write.
    written: u64,
    /// Every write up to this ticket is durable.
    synced: u64,
    /// A sync is running.
    syncing: bool,
    /// Files written since the last sync started.
    dirty: Vec<Arc<File>>,
    /// Why the store stopped, once it has.
    failure: Option<String>,
}

impl Syncer {
    pub(crate) fn new(policy: SyncPolicy) -> Arc<Self> {
        let syncer = Arc::new(Syncer {
            state: Mutex::new(SyncState::default()),
            synced_now: Notify::new(),
            policy,
            stopped: AtomicBool::new(false),
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
        // Waiters whose writes were not synced fail now.
        self.synced_now.notify_waiters();
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
        (std::mem::take(&mut state.dirty), state.written)
    }

    fn finish_sync(&self, target: u64, result: std::io::Result<()>) {
        let mut state = self.lock();
        state.syncing = false;
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
        let result = match self.failpoints.fsync_error(&files) {
            Some(error) => Err(error),
            None => sync_files(&files),
        };
        self.finish_sync(target, result);
    }

    /// Resolves once every write up to `ticket` is durable, syncing if no
    /// one else is; fails if a sync failed first.
    pub(crate) async fn wait_for(&self, ticket: u64) -> BrokerResult<()> {
        loop {
            let notified = self.synced_now.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let job = {
                let mut state = self.lock();
                // Durable before the failure: acknowledged, so a producer
                // does not publish it again.
                if state.synced >= ticket {
                    return Ok(());
                }
                if let Some(reason) = &state.failure {
                    return Err(failed(reason.clone()));
                }
                if state.syncing {
                    None
                } else {
                    Some(Self::start_sync(&mut state))
                }
            };
            match job {
                Some((files, target)) => {
                    let result = match self.failpoints.fsync_error(&files) {
                        Some(error) => Err(error),
                        None => sync_off_the_executor(files).await,
                    };
                    self.finish_sync(target, result);
                }
                None => notified.await,
            }
        }
    }
}

/// Runs the fsyncs without stalling other tasks: in place on a
/// multi-thread runtime (measured faster than a hop to the blocking pool),
/// on the blocking pool on a current-thread one.
async fn sync_off_the_executor(files: Vec<Arc<File>>) -> std::io::Result<()> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        return tokio::task::block_in_place(|| sync_files(&files));
    }
    match tokio::task::spawn_blocking(move || sync_files(&files)).await {
        Ok(result) => result,
        Err(e) => Err(std::io::Error::other(e.to_string())),
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
            SyncPolicy::Interval(_) => Box::pin(std::future::ready(Ok(()))),
        }
    }

    fn failure(&self) -> Option<String> {
        Syncer::failure(self)
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
