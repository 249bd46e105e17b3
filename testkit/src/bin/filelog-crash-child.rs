//! The child process of the file log's crash test
//! (`testkit/tests/crash_filelog.rs`): it publishes and consumes on the file
//! log in the directory given as its argument until it is killed, and
//! reports on stdout, one line each, every publish acknowledged to it
//! (`PUBLISHED <id> <payload>`) and every entry its handlers started
//! (`HANDLED <id>` for the claiming group `workers`, `AUDITED <id>` for the
//! `new` group `audit`), so that a checker can tell what must have
//! survived.
//!
//! With `--drain` after the directory it publishes nothing: it handles
//! what is left (what killed predecessors held included), shuts down
//! gracefully once both groups have nothing left, and exits with success.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Message};

/// Short, so entries a killed child held come back quickly after restart.
const MIN_IDLE: Duration = Duration::from_millis(300);

#[subscriber(RedisStream::claiming("jobs", MIN_IDLE).group("workers"), workers(4))]
async fn work(_payload: &[u8], ctx: &mut Context<'_>) {
    println!("HANDLED {}", ctx.id());
}

/// Set when draining: no handler stalls then.
static DRAINING: AtomicBool = AtomicBool::new(false);
static AUDITS: AtomicU64 = AtomicU64::new(0);

/// A `new` subscription: nothing but its own restart recovery hands out
/// again what a killed predecessor held. Every 40th entry stalls its lane
/// until the child is killed (unless draining), so that kills leave
/// entries held.
#[subscriber(RedisStream::new("jobs").group("audit"), workers(2))]
async fn audit(_payload: &[u8], ctx: &mut Context<'_>) {
    if !DRAINING.load(Ordering::Relaxed) && AUDITS.fetch_add(1, Ordering::Relaxed) % 40 == 39 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    println!("AUDITED {}", ctx.id());
}

/// Whether both groups have handled and settled everything.
async fn drained(broker: &dyn Broker) -> bool {
    for group in ["workers", "audit"] {
        match broker.group_info("jobs", group).await {
            Ok(info) if info.lag == 0 && info.pending == 0 => {}
            _ => return false,
        }
    }
    true
}

async fn produce(broker: Arc<dyn Broker>, producer: u64) {
    let mut n = 0u64;
    loop {
        let batch = 1 + (n % 7) as usize;
        let payloads: Vec<String> = (0..batch)
            .map(|i| format!("p{}-{producer}-{}", std::process::id(), n + i as u64))
            .collect();
        let messages = payloads
            .iter()
            .map(|p| Message::new(p.clone().into_bytes()))
            .collect();
        match broker.publish_batch("jobs", messages).await {
            Ok(ids) => {
                for (id, payload) in ids.iter().zip(&payloads) {
                    println!("PUBLISHED {id} {payload}");
                }
            }
            Err(e) => {
                eprintln!("publish failed: {e}");
                return;
            }
        }
        n += batch as u64;
        tokio::task::yield_now().await;
    }
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: filelog-crash-child DIR [--drain]");
        return ExitCode::from(2);
    };
    let drain = match std::env::args().nth(2).as_deref() {
        None => false,
        Some("--drain") => {
            DRAINING.store(true, Ordering::Relaxed);
            true
        }
        Some(other) => {
            eprintln!("unknown argument {other:?}; usage: filelog-crash-child DIR [--drain]");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let broker: Arc<dyn Broker> = match FileLogBroker::open(&dir) {
            Ok(broker) => Arc::new(broker),
            Err(e) => {
                eprintln!("cannot open {dir}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let app = RustStream::new(AppInfo::new("crash-child", "0")).with_shared_broker(
            Arc::clone(&broker),
            |b| {
                b.include(work);
                b.include(audit);
            },
        );
        let running = match app.start().await {
            Ok(running) => running,
            Err(e) => {
                eprintln!("cannot start: {e}");
                return ExitCode::FAILURE;
            }
        };
        if drain {
            for _ in 0..600 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if drained(&*broker).await {
                    running.shutdown().await;
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("not drained after 30 s");
            running.shutdown().await;
            return ExitCode::FAILURE;
        }
        let producers: Vec<_> = (0..4)
            .map(|p| tokio::spawn(produce(Arc::clone(&broker), p)))
            .collect();
        for producer in producers {
            let _ = producer.await;
        }
        running.shutdown().await;
        ExitCode::FAILURE
    })
}
