//! `batch(..)` beside the options it cannot go with: `by_key` (per-key
//! order), `reply`, and a `prefetch` smaller than one batch.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Job {}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "done")]
struct Done {}

#[subscriber(RedisStream::new("jobs").group("a"), workers(4, by_key), batch(max = 100, wait = 10ms))]
async fn keyed(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("b"), reply, batch(max = 100, wait = 10ms))]
async fn replying(_: Vec<Job>) -> Done {
    Done {}
}

#[subscriber(RedisStream::new("jobs").group("c"), prefetch(50), batch(max = 100, wait = 10ms))]
async fn small_prefetch(_: Vec<Job>) {}

app_including!(keyed, replying, small_prefetch);

#[allow(dead_code)]
async fn unit_test() {
    let _: Done = replying::handler(Vec::new()).await;
}
