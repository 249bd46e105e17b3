//! The one clock brokers read: wall-clock milliseconds that follow tokio's
//! clock, so a paused test clock moves claims, delays and block timeouts
//! together.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds that advance with [`tokio::time::Instant`].
///
/// At creation it pins the current wall-clock time to the current tokio
/// instant; afterwards `now_ms` adds the tokio time elapsed since. Under a
/// paused tokio clock (`tokio::time::pause`, `#[tokio::test(start_paused =
/// true)]`) time therefore stands still until the test advances it, and
/// every broker on this clock sees the same time. Values are still
/// wall-clock milliseconds, fit to be persisted and compared across
/// restarts.
///
/// ```
/// use ruststream_core::Clock;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = Clock::new();
/// let before = clock.now_ms();
/// tokio::time::advance(std::time::Duration::from_secs(30)).await;
/// assert_eq!(clock.now_ms() - before, 30_000);
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    wall_base_ms: u64,
    tokio_base: tokio::time::Instant,
}

impl Clock {
    /// A clock starting at the current wall-clock time.
    pub fn new() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Clock::starting_at(u64::try_from(wall.as_millis()).unwrap_or(u64::MAX))
    }

    /// A clock that reads `wall_ms` now (tests use this for readable ids).
    pub fn starting_at(wall_ms: u64) -> Self {
        Clock {
            wall_base_ms: wall_ms,
            tokio_base: tokio::time::Instant::now(),
        }
    }

    /// The current time in wall-clock milliseconds.
    pub fn now_ms(&self) -> u64 {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.tokio_base);
        self.wall_base_ms
            .saturating_add(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }

    /// The tokio instant at which this clock will read `wall_ms` (now, if
    /// that time has passed). Brokers sleep until such instants.
    pub fn instant_at(&self, wall_ms: u64) -> tokio::time::Instant {
        let offset = wall_ms.saturating_sub(self.wall_base_ms);
        self.tokio_base + Duration::from_millis(offset)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
