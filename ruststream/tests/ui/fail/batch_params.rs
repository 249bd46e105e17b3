//! A batch handler's signature: it takes `Vec<T>` or `&[T]` and nothing
//! else, and returns something that settles a batch. Each mistake is
//! reported on the type at fault.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Job {}

#[subscriber(RedisStream::new("jobs").group("a"), batch(max = 10, wait = 10ms))]
async fn single(_: &Job) {}

#[subscriber(RedisStream::new("jobs").group("b"), batch(max = 10, wait = 10ms))]
async fn bytes(_: Vec<u8>) {}

#[subscriber(RedisStream::new("jobs").group("c"), batch(max = 10, wait = 10ms))]
async fn with_context(_: Vec<Job>, _: &mut Context<'_>) {}

#[subscriber(RedisStream::new("jobs").group("d"), batch(max = 10, wait = 10ms))]
async fn borrowed(_: Vec<&str>) {}

#[subscriber(RedisStream::new("jobs").group("e"), batch(max = 10, wait = 10ms))]
async fn counts(jobs: Vec<Job>) -> usize {
    jobs.len()
}

#[subscriber(RedisStream::new("jobs").group("f"), batch(max = 10, wait = 10ms))]
async fn nested(_: Vec<Vec<HandlerOutcome>>) {}

app_including!(single, bytes, with_context, borrowed, counts, nested);

#[allow(dead_code)]
async fn unit_test() {
    let _: usize = counts::handler(Vec::new()).await;
}
