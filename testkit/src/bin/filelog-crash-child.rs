//! The child process of the file log's crash test
//! (`testkit/tests/crash_filelog.rs`): it publishes and consumes on the file
//! log in the directory given as its argument until it is killed, and
//! reports on stdout what it published and handled (see `crash_child`).
//!
//! With `--drain` after the directory it publishes nothing: it handles
//! what is left (what killed predecessors held included), shuts down
//! gracefully once both groups have nothing left, and exits with success.

use std::process::ExitCode;
use std::sync::Arc;

use ruststream::prelude::*;
use ruststream::{Broker, FileLogBroker};

mod crash_child;

use crash_child::STREAM;

/// Short, so entries a killed child held come back quickly after restart.
const MIN_IDLE: Duration = Duration::from_millis(300);

/// The read-ahead is explicit: it bounds what a kill can make the group
/// handle twice (entries read, handled and not yet acked).
#[subscriber(RedisStream::claiming(STREAM, MIN_IDLE).group("workers"), workers(4), prefetch(32))]
async fn work(_payload: &[u8], ctx: &mut Context<'_>) {
    crash_child::handled(ctx.id());
}

/// A `new` subscription: nothing but its own restart recovery hands out
/// again what a killed predecessor held.
#[subscriber(RedisStream::new(STREAM).group("audit"), workers(2), prefetch(32))]
async fn audit(_payload: &[u8], ctx: &mut Context<'_>) {
    crash_child::audited(ctx.id()).await;
}

fn main() -> ExitCode {
    crash_child::main(
        "filelog-crash-child DIR [--drain]",
        |dir| {
            FileLogBroker::open(&dir)
                .map(|b| Arc::new(b) as Arc<dyn Broker>)
                .map_err(|e| format!("cannot open {dir}: {e}"))
        },
        |b| {
            b.include(work);
            b.include(audit);
        },
    )
}
