//! A delayed retry applied at the broker whose reply is lost: the settler
//! makes it again only for the entries this consumer still holds at the
//! count it decided at. The entry the first attempt made owed was handed
//! out again since (here to this consumer; to another one as well), which
//! runs it: made owed again, it would be taken from its holder and run
//! twice. On the memory broker behind a
//! [`FaultyBroker`] (for the consumer whose retry loses its reply), on the
//! paused clock.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Message, Running};
use ruststream_testkit::{CallKind, Fault, FaultyBroker};

#[derive(Debug, Deserialize)]
struct Job {
    #[allow(dead_code)]
    n: u64,
}

/// Runs after the first: (consumer, delivery count, started, ended).
type Runs = Vec<(
    String,
    u32,
    tokio::time::Instant,
    Option<tokio::time::Instant>,
)>;

static RUNS: Mutex<Runs> = Mutex::new(Vec::new());

#[subscriber(RedisStream::new("retry-twice").group("g").consumer("a"))]
async fn on_a(_job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    run(ctx).await
}

#[subscriber(RedisStream::new("retry-twice").group("g").consumer("b"))]
async fn on_b(_job: &Job, ctx: &mut Context<'_>) -> HandlerOutcome {
    run(ctx).await
}

/// The first delivery asks for a retry in 5 ms; later ones take 2 s.
async fn run(ctx: &mut Context<'_>) -> HandlerOutcome {
    let count = ctx.delivery_count();
    if count == 0 {
        return HandlerOutcome::retry_after(Duration::from_millis(5));
    }
    let at = {
        let mut runs = RUNS.lock().unwrap();
        let started = tokio::time::Instant::now();
        runs.push((ctx.consumer().to_owned(), count, started, None));
        runs.len() - 1
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    RUNS.lock().unwrap()[at].3 = Some(tokio::time::Instant::now());
    HandlerOutcome::ack()
}

async fn app(name: &str, broker: Arc<dyn Broker>, b: bool) -> Running {
    RustStream::new(AppInfo::new(name, "0"))
        .with_shared_broker(broker, |scope| {
            if b {
                scope.include(on_b);
            } else {
                scope.include(on_a);
            }
        })
        .start()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_delayed_retry_made_again_leaves_an_entry_handed_out_since_to_its_holder() {
    let inner: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
    let faulty = Arc::new(FaultyBroker::new(Arc::clone(&inner), 1));
    // a's first delayed retry is applied, and its reply lost.
    faulty.script(CallKind::RetryAfter, 1, Fault::After);
    let a = app("retry-twice-a", faulty.clone(), false).await;
    inner
        .publish("retry-twice", Message::new(br#"{"n":1}"#.to_vec()))
        .await
        .unwrap();
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    let b = app("retry-twice-b", Arc::clone(&inner), true).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let runs = RUNS.lock().unwrap().clone();
    a.shutdown().await;
    b.shutdown().await;
    assert_eq!(runs.len(), 1, "one run after the retry: {runs:#?}");
    // The lost reply's retry was not made again: the listing showed the
    // entry delivered again since.
    assert_eq!(faulty.calls(CallKind::RetryAfter), 1);
    let info = inner.group_info("retry-twice", "g").await.unwrap();
    assert_eq!((info.pending, info.lag), (0, 0), "{info:?}");
}
