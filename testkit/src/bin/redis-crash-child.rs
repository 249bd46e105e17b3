//! The child process of the Redis crash test
//! (`testkit/tests/crash_redis.rs`): it publishes and consumes on the Redis
//! server at the URL given as its argument until it is killed, and reports
//! on stdout what it published and handled (see `crash_child`).
//!
//! Group `workers` runs as on a server without claiming reads (Redis 7):
//! a `new` subscription beside a `reclaim` one. Group `audit` is a `new`
//! subscription alone. Consumer names are stable, so a restarted child
//! first handles what its predecessor held.
//!
//! With `--drain` after the URL it publishes nothing: it handles what is
//! left, shuts down gracefully once both groups have nothing left, and
//! exits with success.

use std::process::ExitCode;
use std::sync::Arc;

use ruststream::prelude::*;
use ruststream::{Broker, RedisBroker};

mod crash_child;

use crash_child::STREAM;

/// Entries idle this long are taken over by `take_over`: long enough that
/// a live consumer's read-ahead is rarely taken from it, short enough that
/// a dead one's comes back within a child's life.
const MIN_IDLE: Duration = Duration::from_millis(500);

/// The read-ahead is explicit: it bounds what a kill can make the group
/// handle twice (entries read, handled and not yet acked).
#[subscriber(
    RedisStream::new(STREAM).group("workers").consumer("workers-new").start_id(StreamStart::Beginning),
    workers(4),
    prefetch(32)
)]
async fn work(_payload: &[u8], ctx: &mut Context<'_>) {
    crash_child::handled(ctx.id());
}

#[subscriber(
    RedisStream::reclaim(STREAM, MIN_IDLE).group("workers").consumer("workers-reclaim").start_id(StreamStart::Beginning),
    workers(2),
    prefetch(32)
)]
async fn take_over(_payload: &[u8], ctx: &mut Context<'_>) {
    crash_child::handled(ctx.id());
}

/// A `new` subscription: nothing but its own restart recovery hands out
/// again what a killed predecessor held.
#[subscriber(
    RedisStream::new(STREAM).group("audit").consumer("audit").start_id(StreamStart::Beginning),
    workers(2),
    prefetch(32)
)]
async fn audit(_payload: &[u8], ctx: &mut Context<'_>) {
    crash_child::audited(ctx.id()).await;
}

fn main() -> ExitCode {
    crash_child::main(
        "redis-crash-child URL [--drain]",
        |url| Ok(Arc::new(RedisBroker::standalone(url)) as Arc<dyn Broker>),
        |b| {
            b.include(work);
            b.include(take_over);
            b.include(audit);
        },
    )
}
