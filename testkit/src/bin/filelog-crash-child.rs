//! The child process of the file log's crash test
//! (`testkit/tests/crash_filelog.rs`): it publishes and consumes on the file
//! log in the directory given as its argument until it is killed, and
//! reports on stdout, one line each, every publish acknowledged to it
//! (`PUBLISHED <id> <payload>`) and every entry its handler started
//! (`HANDLED <id>`), so that a checker can tell what must have survived.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Message};

/// Short, so entries a killed child held come back quickly after restart.
const MIN_IDLE: Duration = Duration::from_millis(300);

#[subscriber(RedisStream::claiming("jobs", MIN_IDLE).group("workers"), workers(4))]
async fn work(_payload: &[u8], ctx: &mut Context<'_>) {
    println!("HANDLED {}", ctx.id());
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
        eprintln!("usage: filelog-crash-child DIR");
        return ExitCode::from(2);
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
            },
        );
        let running = match app.start().await {
            Ok(running) => running,
            Err(e) => {
                eprintln!("cannot start: {e}");
                return ExitCode::FAILURE;
            }
        };
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
