//! A real-time limit on a wait for the paused clock.
//!
//! On a paused clock, tokio moves time forward only when every task
//! waits. A service that never waits (a handler publishing to the stream
//! it reads) keeps the clock where it is, so a sleep on that clock never
//! ends, and nothing inside the runtime can tell. A [`Watchdog`] is a
//! thread outside it: once `limit` of real time has passed, it wakes the
//! future returned by [`Watchdog::fired`].

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use tokio::sync::Notify;

/// Fires once `limit` of real time has passed, unless dropped first
/// (dropping it ends its thread at once).
pub(crate) struct Watchdog {
    fired: Arc<Notify>,
    /// Dropped with the watchdog: the thread sees the channel close and
    /// ends without firing.
    _armed: mpsc::Sender<()>,
}

impl Watchdog {
    /// Starts the thread that fires after `limit`.
    pub(crate) fn start(limit: Duration) -> Self {
        let fired = Arc::new(Notify::new());
        let (armed, disarmed) = mpsc::channel::<()>();
        let notify = Arc::clone(&fired);
        std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = disarmed.recv_timeout(limit) {
                // Kept as a permit if nothing waits yet.
                notify.notify_one();
            }
        });
        Watchdog {
            fired,
            _armed: armed,
        }
    }

    /// Ends once the limit has passed.
    pub(crate) async fn fired(&self) {
        self.fired.notified().await;
    }
}
