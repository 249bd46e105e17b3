//! Every shape of a batch subscriber (`batch(max = n, wait = d)`): the
//! entries as `Vec<T>`, `&[T]` or raw bytes, and one outcome for the whole
//! batch or one per entry. Each is run on a batch with one payload that
//! does not decode.

use std::sync::Arc;

use ruststream::prelude::*;
use ruststream::{Batch, Delivery, Entry, EntryBatch, Message, Settle, Subscriber};

#[derive(Debug, Deserialize)]
struct Job {
    n: u64,
}

#[subscriber(RedisStream::new("jobs").group("whole"), batch(max = 500, wait = 10ms))]
async fn whole(jobs: Vec<Job>) {
    assert_eq!(jobs.len(), 2);
}

#[subscriber(
    RedisStream::new("jobs").group("each"),
    workers(4),
    batch(max = 100, wait = 1s),
    prefetch(400)
)]
async fn each(jobs: &[Job]) -> Vec<HandlerOutcome> {
    jobs.iter()
        .map(|job| {
            if job.n % 2 == 0 {
                HandlerOutcome::ack()
            } else {
                HandlerOutcome::dead_letter("odd")
            }
        })
        .collect()
}

#[subscriber(RedisStream::new("jobs").group("fallible"), batch(max = 10, wait = 5ms))]
async fn fallible(jobs: Vec<Job>) -> Result<(), String> {
    Err(format!("{} jobs, the ledger is down", jobs.len()))
}

#[subscriber(RedisStream::new("jobs").group("results"), batch(max = 10, wait = 5ms))]
async fn results(jobs: Vec<Job>) -> Vec<Result<(), std::io::Error>> {
    jobs.iter().map(|_| Ok(())).collect()
}

#[subscriber(RedisStream::new("jobs").group("raw"), batch(max = 10, wait = 5ms))]
async fn raw(payloads: Vec<Vec<u8>>) -> HandlerOutcome {
    assert_eq!(payloads.len(), 3);
    HandlerOutcome::retry()
}

fn delivery(n: u64, payload: &str) -> Delivery {
    Delivery {
        entry: Entry {
            id: EntryId::new(1, n),
            message: Arc::new(Message::new(payload.as_bytes().to_vec())),
        },
        delivery_count: 0,
        idle_ms: 0,
    }
}

fn run<S: Subscriber>(subscriber: &S) -> Vec<Settle> {
    let mut batch = EntryBatch::new(vec![
        delivery(0, r#"{"n":2}"#),
        delivery(1, "not json"),
        delivery(2, r#"{"n":3}"#),
    ]);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(subscriber.handle_batch(&mut batch));
    batch.into_settles()
}

fn main() {
    let ack = Settle::Outcome(HandlerOutcome::Ack);
    let settles = run(&whole);
    assert_eq!(settles[0], ack);
    assert!(matches!(settles[1], Settle::Undecodable(_)));
    assert_eq!(settles[2], ack);

    let settles = run(&each);
    assert_eq!(settles[0], ack);
    assert_eq!(settles[2], Settle::Outcome(HandlerOutcome::dead_letter("odd")));
    assert_eq!(
        each.subscription().batch,
        Some(Batch::new(100, Duration::from_secs(1)))
    );
    assert_eq!(each.subscription().lanes(), 400);

    let settles = run(&fallible);
    assert_eq!(settles[0], Settle::Failed("2 jobs, the ledger is down".into()));

    assert_eq!(run(&results)[2], ack);
    // Raw bytes are never undecodable.
    assert!(run(&raw).iter().all(|s| *s == Settle::Outcome(HandlerOutcome::Retry)));

    let _ = whole::handler(Vec::new());
}
