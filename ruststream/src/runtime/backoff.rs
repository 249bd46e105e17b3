//! Exponential backoff with jitter, for reads and settles that fail.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Exponential backoff with jitter: 50 ms doubling up to 5 s, each delay
/// drawn from the upper half of its ceiling so that subscriptions failing
/// together do not retry in step.
pub(crate) struct Backoff {
    attempt: u32,
    seed: u64,
}

impl Backoff {
    const BASE: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        static SEEDS: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Backoff {
            attempt: 0,
            seed: SEEDS.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ u64::from(nanos),
        }
    }

    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The next delay: uniform in [ceiling/2, ceiling], where the ceiling
    /// doubles per attempt up to the maximum.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = Self::BASE
            .saturating_mul(1u32 << self.attempt.min(16))
            .min(Self::MAX);
        self.attempt = self.attempt.saturating_add(1);
        // splitmix64: a tiny, good-enough generator for jitter.
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let half = ceiling / 2;
        let jitter_ms = z % (half.as_millis() as u64 + 1);
        half + Duration::from_millis(jitter_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stays_bounded() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..12).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(25) && delays[0] <= Duration::from_millis(50));
        assert!(delays[3] >= Duration::from_millis(200) && delays[3] <= Duration::from_millis(400));
        assert!(delays.iter().all(|d| *d <= Backoff::MAX));
        assert!(delays[11] >= Backoff::MAX / 2);
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(50));
    }
}
