//! Crash test on Redis: a child process publishes and consumes on a
//! private `redis-server` (its own port and directory, never the shared
//! server), and is killed with SIGKILL at random moments, over and over; a
//! new child then starts and goes on. Group `workers` runs `new` +
//! `reclaim` (Redis 7 has no claiming reads), group `audit` a `new`
//! subscription alone, both with stable consumer names, so a restarted
//! child first handles what its predecessor held.
//!
//! After each kill the checker verifies that every publish acknowledged to
//! a child is in the stream (0 lost) and that neither group skipped
//! anything up to its cursor (0 skipped); at the end a draining child
//! handles what is left and every published entry was handled by both
//! groups. Entries handled more than once are reported per kill, and no
//! kill may cause more than the read-ahead of the group's subscriptions
//! (see `support::crash::Seen::report_duplicates`).
//!
//! Real processes are killed, so this runs in real time (about 20 s).

#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;
use std::time::Duration;

use ruststream::RedisBroker;
use support::crash::{Lcg, Seen, run_and_kill, run_to_exit};
use support::redis_server::{Persistence, RedisServer};

const KILLS: usize = 24;

fn child(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-crash-child"));
    command.arg(url);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_on_redis_loses_nothing_and_skips_nothing() {
    let started = std::time::Instant::now();
    // The server is never killed here, only the children: no persistence.
    let server = RedisServer::start("crash", Persistence::None);
    let url = server.url();
    let broker = RedisBroker::standalone(&url);
    let (mut rng, seed) = Lcg::seeded();
    println!("seed {seed} (set RUSTSTREAM_CRASH_SEED to replay); server {url}");
    let mut seen = Seen::default();
    for round in 0..KILLS {
        let life = Duration::from_millis(100 + rng.below(400));
        let out = run_and_kill(&mut child(&url), life).await;
        seen.take(&out, round);
        seen.check_kill(&broker, round, life).await;
    }
    seen.assert_published_enough("the children");

    // A last child drains both groups: what killed children held comes
    // back to it through its own pending lists (and `reclaim`).
    let (status, out) = run_to_exit(child(&url).arg("--drain"), Duration::from_secs(45)).await;
    assert!(
        status.success(),
        "the draining child failed: {status}; server log:\n{}",
        server.log_tail()
    );
    seen.take(&out, KILLS);
    let (entries, pending) = seen.check_all(&broker, KILLS).await;
    assert_eq!(pending, 0, "entries still pending after the drain");
    seen.assert_all_handled();
    println!(
        "seed {seed}: {KILLS} kills, {} acknowledged publishes ({entries} entries), 0 lost, \
         0 skipped, {:?}",
        seen.published.len(),
        started.elapsed()
    );
    seen.report_duplicates(seed, KILLS);
}
