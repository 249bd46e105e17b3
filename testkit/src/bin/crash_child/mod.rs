//! Shared by the crash tests' child processes (`filelog-crash-child`,
//! `redis-crash-child`): everything but the broker and the subscriptions'
//! descriptors. The lines printed are read by `testkit/tests/support/crash.rs`.
//!
//! A child prints, one line each, its subscriptions at start
//! (`SUBSCRIPTION <group> <read-ahead>`), every publish acknowledged to it
//! (`PUBLISHED <id> <payload>`, printed only after the publish returned)
//! and every entry its handlers ran on (`HANDLED <id>` for group `workers`,
//! `AUDITED <id>` for group `audit`). Without `--drain` it publishes and
//! consumes until it is killed; with `--drain` it publishes nothing,
//! handles what is left (what killed predecessors held included), shuts
//! down gracefully once both groups have nothing left, and exits with
//! success.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ruststream::{AppInfo, Broker, BrokerScope, Message, RustStream};

/// The stream both groups read.
pub(crate) const STREAM: &str = "jobs";

/// Set when draining: no handler stalls then.
static DRAINING: AtomicBool = AtomicBool::new(false);
static AUDITS: AtomicU64 = AtomicU64::new(0);

/// The `workers` handlers' body.
pub(crate) fn handled(id: impl std::fmt::Display) {
    println!("HANDLED {id}");
}

/// The `audit` handler's body: every 40th entry stalls its lane until the
/// child is killed (unless draining), so that kills leave entries held
/// that only the restarted child's recovery of its own pending list hands
/// out again.
pub(crate) async fn audited(id: impl std::fmt::Display) {
    if !DRAINING.load(Ordering::Relaxed) && AUDITS.fetch_add(1, Ordering::Relaxed) % 40 == 39 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    println!("AUDITED {id}");
}

/// A child's whole `main`: parses its arguments (`usage`, see [`args`]),
/// then [`run`]s on the broker `broker` opens at the location they name.
pub(crate) fn main(
    usage: &str,
    broker: impl FnOnce(String) -> Result<Arc<dyn Broker>, String>,
    include: impl FnOnce(&mut BrokerScope<'_>),
) -> ExitCode {
    let (location, drain) = match args(usage) {
        Ok(args) => args,
        Err(code) => return code,
    };
    run(|| broker(location), include, drain)
}

/// Parses `<child> <WHERE> [--drain]`: the broker's location, and whether
/// to drain.
fn args(usage: &str) -> Result<(String, bool), ExitCode> {
    let Some(location) = std::env::args().nth(1) else {
        eprintln!("usage: {usage}");
        return Err(ExitCode::from(2));
    };
    match std::env::args().nth(2).as_deref() {
        None => Ok((location, false)),
        Some("--drain") => {
            DRAINING.store(true, Ordering::Relaxed);
            Ok((location, true))
        }
        Some(other) => {
            eprintln!("unknown argument {other:?}; usage: {usage}");
            Err(ExitCode::from(2))
        }
    }
}

/// Runs the child on `broker` with the subscribers `include` adds, until
/// it is killed (or, draining, until both groups are empty).
fn run(
    broker: impl FnOnce() -> Result<Arc<dyn Broker>, String>,
    include: impl FnOnce(&mut BrokerScope<'_>),
    drain: bool,
) -> ExitCode {
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
        let broker = match broker() {
            Ok(broker) => broker,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        // Restarted within milliseconds of a kill: a short keep-alive lets
        // it take back what its killed predecessor held at once, rather
        // than after the default live window of 15 s.
        let app = RustStream::new(AppInfo::new("crash-child", "0"))
            .keep_alive(Duration::from_millis(100))
            .with_shared_broker(Arc::clone(&broker), include);
        for (_, subscription) in app.subscribers() {
            println!(
                "SUBSCRIPTION {} {}",
                subscription.stream.group_name().unwrap_or_default(),
                subscription.read_ahead()
            );
        }
        let running = match app.start().await {
            Ok(running) => running,
            Err(e) => {
                eprintln!("cannot start: {e}");
                return ExitCode::FAILURE;
            }
        };
        // The groups exist from here on.
        println!("STARTED");
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

/// Whether both groups have handled and settled everything.
async fn drained(broker: &dyn Broker) -> bool {
    for group in ["workers", "audit"] {
        match broker.group_info(STREAM, group).await {
            Ok(info) if info.lag == 0 && info.pending == 0 => {}
            _ => return false,
        }
    }
    true
}

/// Publishes batches of 1 to 7 entries until a publish fails (a batch of 1
/// with `publish`, the call concurrent single publishes share).
async fn produce(broker: Arc<dyn Broker>, producer: u64) {
    let mut n = 0u64;
    loop {
        let batch = 1 + (n % 7) as usize;
        let payloads: Vec<String> = (0..batch)
            .map(|i| format!("p{}-{producer}-{}", std::process::id(), n + i as u64))
            .collect();
        let mut messages: Vec<Message> = payloads
            .iter()
            .map(|p| Message::new(p.clone().into_bytes()))
            .collect();
        let published = match messages.pop() {
            Some(message) if messages.is_empty() => {
                broker.publish(STREAM, message).await.map(|id| vec![id])
            }
            Some(last) => {
                messages.push(last);
                broker.publish_batch(STREAM, messages).await
            }
            None => Ok(Vec::new()),
        };
        match published {
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
