//! The stream a Redis benchmark's subscribers read, set per run: a
//! subscriber's stream is named when its app starts, so each run sets it
//! just before.

use std::sync::Mutex;

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
