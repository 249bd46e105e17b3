//! Declarative retry backoff (`backoff(..)` on `#[subscriber]`): the
//! policy, its rules and its math, in one place. The `#[subscriber]` macro
//! reads the option's literals with [`BackoffPolicy::duration_literal`] and
//! applies the `check_*` rules at compile time, each error on the argument
//! that breaks it; a [`BackoffPolicy`] built by hand goes through the same
//! rules in its constructors, so an invalid one cannot exist.
//!
//! The delay of a retry comes from the entry's delivery count (see
//! `docs/semantics.md`, Headers), which the broker keeps: it survives a
//! restart and a hand-over to another consumer.

use std::time::Duration;

use crate::EntryId;

/// The units a duration of `backoff(..)` is written in (`100ms`, `30s`,
/// `5min`, `1h`), and what one of each is.
pub const DURATION_UNITS: &[(&str, Duration)] = &[
    ("ms", Duration::from_millis(1)),
    ("s", Duration::from_secs(1)),
    ("min", Duration::from_secs(60)),
    ("h", Duration::from_secs(3600)),
];

/// How long a retry waits, before jitter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BackoffCurve {
    /// The same delay for every retry.
    Fixed(Duration),
    /// `base * factor^delivery_count`, capped at `max`.
    Exponential {
        /// The delay of the first retry (delivery count 0).
        base: Duration,
        /// What each delivery multiplies the delay by (at least 1).
        factor: f64,
        /// The longest delay.
        max: Duration,
    },
}

/// A retry backoff: a failed delivery (`retry()`, `Err`, a panic, a reply
/// that could not be published) is retried after
/// [`delay`](BackoffPolicy::delay)`(id, delivery_count)` instead of at once.
///
/// With jitter, each delay is drawn uniformly from `[d/2, d]` (`d/2` plus
/// a whole number of milliseconds), where `d` is the curve's delay, by a generator seeded with the entry's id and
/// delivery count: entries that fail together spread out, and the same
/// delivery of the same entry always waits the same time (so tests are
/// deterministic, and a delay does not depend on which consumer computes
/// it).
///
/// ```
/// use std::time::Duration;
/// use ruststream_core::{BackoffPolicy, EntryId};
///
/// let policy = BackoffPolicy::exponential(
///     Duration::from_millis(100),
///     2.0,
///     Duration::from_secs(1),
/// )?;
/// let id = EntryId::new(1, 0);
/// assert_eq!(policy.delay(id, 0), Duration::from_millis(100));
/// assert_eq!(policy.delay(id, 3), Duration::from_millis(800));
/// assert_eq!(policy.delay(id, 4), Duration::from_secs(1)); // capped
///
/// let jittered = policy.with_jitter().delay(id, 3);
/// assert!(jittered >= Duration::from_millis(400) && jittered <= Duration::from_millis(800));
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffPolicy {
    curve: BackoffCurve,
    jitter: bool,
}

// The factor is never NaN (the constructors refuse it), so equality is an
// equivalence and `Subscription` can stay `Eq`.
impl Eq for BackoffPolicy {}

impl BackoffPolicy {
    /// The same `delay` before every retry. A zero delay is refused.
    pub fn fixed(delay: Duration) -> Result<Self, String> {
        Self::check_delay("the delay", delay)?;
        Ok(BackoffPolicy {
            curve: BackoffCurve::Fixed(delay),
            jitter: false,
        })
    }

    /// `base * factor^delivery_count`, capped at `max`. Refused: a zero
    /// `base`, a `factor` below 1 (or not finite), a `max` below `base`.
    pub fn exponential(base: Duration, factor: f64, max: Duration) -> Result<Self, String> {
        Self::check_delay("the base delay", base)?;
        Self::check_factor(factor)?;
        Self::check_max(base, max)?;
        Ok(BackoffPolicy {
            curve: BackoffCurve::Exponential { base, factor, max },
            jitter: false,
        })
    }

    /// The same policy with jitter: each delay uniform in `[d/2, d]`.
    #[must_use]
    pub fn with_jitter(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// The curve.
    pub fn curve(&self) -> BackoffCurve {
        self.curve
    }

    /// Whether delays are jittered.
    pub fn has_jitter(&self) -> bool {
        self.jitter
    }

    /// The curve's delay after a delivery with `delivery_count` earlier
    /// deliveries, before jitter: the most a retry waits.
    pub fn ceiling(&self, delivery_count: u32) -> Duration {
        match self.curve {
            BackoffCurve::Fixed(delay) => delay,
            BackoffCurve::Exponential { base, factor, max } => {
                // In nanoseconds, where the usual bases (whole milliseconds)
                // times powers of the usual factors are exact in an f64.
                let exponent = i32::try_from(delivery_count).unwrap_or(i32::MAX);
                let grown = base.as_nanos() as f64 * factor.powi(exponent);
                let cap = max.as_nanos() as f64;
                if grown >= cap || grown >= u64::MAX as f64 || grown.is_nan() {
                    max
                } else {
                    Duration::from_nanos(grown.round() as u64)
                }
            }
        }
    }

    /// How long the retry of entry `id` after a delivery with
    /// `delivery_count` earlier deliveries waits: the
    /// [`ceiling`](Self::ceiling), or with jitter a time in
    /// `[ceiling/2, ceiling]` drawn from a seed made of `id` and
    /// `delivery_count`.
    pub fn delay(&self, id: EntryId, delivery_count: u32) -> Duration {
        let ceiling = self.ceiling(delivery_count);
        if !self.jitter {
            return ceiling;
        }
        let seed = id.ms
            ^ id.seq.rotate_left(32)
            ^ u64::from(delivery_count).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let half = ceiling / 2;
        // Whole milliseconds past `half`, uniform, both ends in: brokers
        // keep due times in milliseconds, so finer steps would be lost.
        let steps = (ceiling - half).as_millis() + 1;
        let offset = u128::from(splitmix64(seed)) % steps;
        // `offset` is at most `ceiling - half` in milliseconds, so it fits.
        half + Duration::from_millis(u64::try_from(offset).unwrap_or(u64::MAX))
    }

    /// A duration written as `value` and a unit of [`DURATION_UNITS`]
    /// (`100ms` is `(100, "ms")`); an error says how to write it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ruststream_core::BackoffPolicy;
    ///
    /// assert_eq!(BackoffPolicy::duration_literal(5, "min"), Ok(Duration::from_secs(300)));
    /// assert!(BackoffPolicy::duration_literal(5, "").unwrap_err().contains("`5ms`"));
    /// ```
    pub fn duration_literal(value: u64, unit: &str) -> Result<Duration, String> {
        let units = "`ms`, `s`, `min` or `h`";
        if unit.is_empty() {
            return Err(format!(
                "a backoff duration needs a unit ({units}): `{value}ms`, `{value}s`"
            ));
        }
        let Some((_, one)) = DURATION_UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(format!(
                "unknown unit `{unit}` in `{value}{unit}`: write durations in {units}, e.g. `100ms`, `5min`"
            ));
        };
        let seconds = one.as_secs().checked_mul(value);
        let nanos = u64::from(one.subsec_nanos()).checked_mul(value);
        match (seconds, nanos) {
            (Some(seconds), Some(nanos)) => Duration::from_secs(seconds)
                .checked_add(Duration::from_nanos(nanos))
                .ok_or_else(|| format!("`{value}{unit}` is too long a duration")),
            _ => Err(format!("`{value}{unit}` is too long a duration")),
        }
    }

    /// A delay (`what`: "the delay", "the base delay", "`max`") must be
    /// more than zero: a zero backoff retries at once, which is what
    /// leaving the option out does.
    pub fn check_delay(what: &str, delay: Duration) -> Result<(), String> {
        if delay.is_zero() {
            return Err(format!(
                "{what} of a backoff must be more than zero; leave `backoff` out to retry at once"
            ));
        }
        Ok(())
    }

    /// An exponential factor must be a finite number of at least 1: below
    /// 1 each retry would wait less than the one before.
    pub fn check_factor(factor: f64) -> Result<(), String> {
        if factor.is_finite() && factor >= 1.0 {
            return Ok(());
        }
        Err(format!(
            "the factor of an exponential backoff must be at least 1, not {factor}: each retry waits at least as long as the one before (`fixed(..)` for the same delay)"
        ))
    }

    /// An exponential backoff's `max` must be at least its base.
    pub fn check_max(base: Duration, max: Duration) -> Result<(), String> {
        if max >= base {
            return Ok(());
        }
        Err(format!(
            "`max` ({max:?}) is below the base delay ({base:?}): the cap must be at least the first delay"
        ))
    }
}

/// splitmix64: a small, well-mixing generator; the jitter needs no more.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_grows_by_the_factor_and_stops_at_max() {
        let policy =
            BackoffPolicy::exponential(100 * MS, 2.0, Duration::from_secs(5)).expect("valid");
        let ceilings: Vec<Duration> = (0..8).map(|n| policy.ceiling(n)).collect();
        let ms = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
        assert_eq!(ceilings, ms.map(|m| m * MS));
        assert_eq!(policy.ceiling(u32::MAX), Duration::from_secs(5));
        let id = EntryId::new(7, 1);
        assert_eq!(policy.delay(id, 2), 400 * MS, "no jitter: the ceiling");

        let slow = BackoffPolicy::exponential(Duration::from_secs(1), 1.5, Duration::from_secs(60))
            .expect("valid");
        assert_eq!(slow.ceiling(2), 2250 * MS);
        let flat = BackoffPolicy::exponential(Duration::from_secs(1), 1.0, Duration::from_secs(1))
            .expect("valid");
        assert_eq!(flat.ceiling(40), Duration::from_secs(1));
    }

    #[test]
    fn fixed_is_the_same_every_time() {
        let policy = BackoffPolicy::fixed(Duration::from_secs(1)).expect("valid");
        assert!((0..50).all(|n| policy.ceiling(n) == Duration::from_secs(1)));
    }

    #[test]
    fn jitter_stays_within_half_to_full_and_is_seeded() {
        let policy = BackoffPolicy::exponential(100 * MS, 2.0, Duration::from_secs(300))
            .expect("valid")
            .with_jitter();
        let mut spread = std::collections::HashSet::new();
        for seq in 0..200 {
            let id = EntryId::new(1_700_000_000_000, seq);
            for count in 0..15 {
                let ceiling = policy.ceiling(count);
                let delay = policy.delay(id, count);
                assert!(
                    delay >= ceiling / 2 && delay <= ceiling,
                    "{delay:?} outside [{:?}, {ceiling:?}]",
                    ceiling / 2
                );
                assert_eq!(
                    delay,
                    policy.delay(id, count),
                    "the same seed, the same delay"
                );
                if count == 3 {
                    spread.insert(delay);
                }
            }
        }
        assert!(spread.len() > 150, "entries spread out: {}", spread.len());
        let one = policy.delay(EntryId::new(5, 0), 3);
        let two = policy.delay(EntryId::new(5, 0), 4) / 2;
        assert_ne!(one, two, "each delivery draws anew");
    }

    #[test]
    fn bad_policies_are_refused_with_the_rule() {
        let s = Duration::from_secs(1);
        assert!(
            BackoffPolicy::fixed(Duration::ZERO)
                .unwrap_err()
                .contains("more than zero")
        );
        assert!(
            BackoffPolicy::exponential(Duration::ZERO, 2.0, s)
                .unwrap_err()
                .starts_with("the base delay")
        );
        for factor in [0.5, -2.0, f64::NAN, f64::INFINITY] {
            assert!(
                BackoffPolicy::exponential(s, factor, s)
                    .unwrap_err()
                    .contains("at least 1"),
                "{factor}"
            );
        }
        assert!(
            BackoffPolicy::exponential(s, 2.0, 500 * MS)
                .unwrap_err()
                .contains("below the base")
        );
    }

    #[test]
    fn duration_literals() {
        assert_eq!(BackoffPolicy::duration_literal(100, "ms"), Ok(100 * MS));
        assert_eq!(
            BackoffPolicy::duration_literal(2, "h"),
            Ok(Duration::from_secs(7200))
        );
        assert!(
            BackoffPolicy::duration_literal(3, "us")
                .unwrap_err()
                .contains("unknown unit `us`")
        );
        assert!(
            BackoffPolicy::duration_literal(u64::MAX, "h")
                .unwrap_err()
                .contains("too long")
        );
    }
}
