//! `#[ruststream::app]` at the crate root writes this binary's `main`: it
//! runs the app until SIGTERM, then shuts down and exits with status 0.
//! The app function sends the SIGTERM itself, as an operator would, once
//! the process handles it.

use std::process::Command;
use std::time::Instant;

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Ping {}

#[subscriber(RedisStream::new("pings").group("pong"))]
async fn pong(_: &Ping) {}

#[ruststream::app]
fn app() -> impl App {
    stop_once_sigterm_is_handled();
    RustStream::new(AppInfo::new("pings", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(pong);
    })
}

/// Sends this process SIGTERM as soon as it has a handler for it (before
/// that, SIGTERM would kill it), and fails the test if that never happens.
fn stop_once_sigterm_is_handled() {
    const SIGTERM: u32 = 15;
    std::thread::spawn(|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let caught = status
                .lines()
                .find_map(|line| line.strip_prefix("SigCgt:"))
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                .unwrap_or(0);
            if caught & (1 << (SIGTERM - 1)) != 0 {
                let pid = std::process::id().to_string();
                let sent = Command::new("kill").args(["-TERM", &pid]).status();
                assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid} failed");
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        eprintln!("the app never installed a SIGTERM handler");
        std::process::exit(3);
    });
}
