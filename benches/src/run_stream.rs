//! The stream a Redis benchmark's subscribers read, set per run: a
//! subscriber's stream is named when its app starts, so each run sets it
//! just before. Also the group they read as, the [`Probe`] they report to,
//! and [`ledger`], the plain subscriber every Redis benchmark runs.

use std::sync::Mutex;

use ruststream::prelude::*;

use crate::{Payment, Probe};

/// The consumer group the Redis benchmarks read as.
pub const GROUP: &str = "ledger";

/// Counts what the Redis benchmarks' subscribers handle.
pub static PROBE: Probe = Probe::new();

/// The plain `#[subscriber]` of the Redis benchmarks: [`name`] read from
/// its beginning as [`GROUP`] with `workers(8)` and the default read-ahead,
/// each payment counted by [`PROBE`].
#[subscriber(
    RedisStream::new(name()).group(GROUP).start_id(StreamStart::Beginning),
    workers(8)
)]
pub async fn ledger(payment: &Payment) {
    PROBE.handled(payment);
}

static STREAM: Mutex<String> = Mutex::new(String::new());

/// The stream set by the last [`set`] (empty before any).
pub fn name() -> String {
    STREAM.lock().map(|s| s.clone()).unwrap_or_default()
}

/// Makes `stream` the one apps started from now on read.
pub fn set(stream: &str) -> Result<(), &'static str> {
    *STREAM.lock().map_err(|_| "poisoned")? = stream.to_owned();
    Ok(())
}
