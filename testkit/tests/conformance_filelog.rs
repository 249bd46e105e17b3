//! The conformance suite against the file-log broker, on a paused clock,
//! each test in a fresh directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ruststream_filelog::FileLogBroker;
use ruststream_testkit::conformance::Target;

fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ruststream-conformance-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn filelog() -> Target {
    let broker = FileLogBroker::open(fresh_dir()).expect("a fresh file log opens");
    Target::paused(Arc::new(broker))
}

ruststream_testkit::conformance_suite!(paused, filelog);

/// The suite again with no payload held in memory: every entry handed out
/// is read back from the segment files.
mod uncached {
    use super::*;
    use ruststream_filelog::FileLogOptions;

    async fn filelog_uncached() -> Target {
        let options = FileLogOptions {
            cache_bytes: 0,
            ..FileLogOptions::default()
        };
        let broker =
            FileLogBroker::open_with(fresh_dir(), options).expect("a fresh file log opens");
        Target::paused(Arc::new(broker))
    }

    ruststream_testkit::conformance_suite!(paused, filelog_uncached);
}
