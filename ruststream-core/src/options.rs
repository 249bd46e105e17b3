//! The counts a subscription is given (`workers(n)`, `prefetch(n)`,
//! `max_deliveries(n)`): the one place their rules live. The
//! `#[subscriber]` macro applies them to literal arguments at compile time,
//! and an app applies them again at start-up to whatever it was given.

/// A count option of a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CountOption {
    /// `workers(n)`: how many handlers run at once.
    Workers,
    /// `prefetch(n)`: how many entries are read ahead of the handlers.
    Prefetch,
    /// `max_deliveries(n)`: how many deliveries an entry gets.
    MaxDeliveries,
}

impl CountOption {
    /// The option's name as written in `#[subscriber(..)]`.
    pub fn name(self) -> &'static str {
        match self {
            CountOption::Workers => "workers",
            CountOption::Prefetch => "prefetch",
            CountOption::MaxDeliveries => "max_deliveries",
        }
    }

    /// Checks that the count is at least 1, and says why it must be.
    ///
    /// ```
    /// use ruststream_core::CountOption;
    ///
    /// assert!(CountOption::Workers.check(8).is_ok());
    /// let err = CountOption::Workers.check(0).unwrap_err();
    /// assert_eq!(err, "`workers` must be at least 1: it is how many handlers run at once");
    /// ```
    pub fn check(self, n: u64) -> Result<(), String> {
        if n >= 1 {
            return Ok(());
        }
        let why = match self {
            CountOption::Workers => "it is how many handlers run at once",
            CountOption::MaxDeliveries => {
                "it is how many deliveries an entry gets; leave the option out for no bound"
            }
            CountOption::Prefetch => "it is how many entries are read ahead of the handlers",
        };
        Err(format!("`{}` must be at least 1: {why}", self.name()))
    }
}

/// A subscription's counts, checked together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `workers(n)`.
    pub workers: u64,
    /// `prefetch(n)`, if given.
    pub prefetch: Option<u64>,
    /// `max_deliveries(n)`, if given.
    pub max_deliveries: Option<u64>,
}

impl Counts {
    /// Checks every count, and that `prefetch` covers `workers` (a lane
    /// with nothing read ahead for it would sit idle). Returns the first
    /// rule broken.
    ///
    /// ```
    /// use ruststream_core::Counts;
    ///
    /// let counts = Counts { workers: 8, prefetch: Some(4), max_deliveries: None };
    /// assert_eq!(
    ///     counts.validate().unwrap_err(),
    ///     "`prefetch(4)` is less than `workers(8)`: read ahead at least one entry per worker"
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        CountOption::Workers.check(self.workers)?;
        if let Some(prefetch) = self.prefetch {
            CountOption::Prefetch.check(prefetch)?;
            check_prefetch_covers_workers(prefetch, self.workers)?;
        }
        if let Some(max) = self.max_deliveries {
            CountOption::MaxDeliveries.check(max)?;
        }
        Ok(())
    }
}

/// Checks that `prefetch` reads ahead at least one entry per worker.
pub fn check_prefetch_covers_workers(prefetch: u64, workers: u64) -> Result<(), String> {
    if prefetch < workers {
        return Err(format!(
            "`prefetch({prefetch})` is less than `workers({workers})`: read ahead at least one entry per worker"
        ));
    }
    Ok(())
}

/// Checks that `prefetch` reads ahead at least one whole batch of a
/// `batch(max = ..)` subscriber: with less, no batch could fill and every
/// one would wait out its `wait`.
///
/// ```
/// use ruststream_core::check_prefetch_covers_batch;
///
/// assert!(check_prefetch_covers_batch(500, 500).is_ok());
/// assert_eq!(
///     check_prefetch_covers_batch(100, 500).unwrap_err(),
///     "`prefetch(100)` is less than `batch(max = 500)`: read ahead at least one whole batch"
/// );
/// ```
pub fn check_prefetch_covers_batch(prefetch: u64, max: u64) -> Result<(), String> {
    if prefetch < max {
        return Err(format!(
            "`prefetch({prefetch})` is less than `batch(max = {max})`: read ahead at least one whole batch"
        ));
    }
    Ok(())
}

/// Why `batch(..)` and `workers(n, by_key)` do not go together: said by the
/// macro at compile time and by an app at start-up.
pub const BATCH_WITH_BY_KEY: &str = "`batch(..)` cannot be combined with `workers(n, by_key)`: a batch mixes keys and settles them together, so per-key order could not hold; use `workers(n)` (n batches run at once), or a subscriber without `batch` for per-key order";
