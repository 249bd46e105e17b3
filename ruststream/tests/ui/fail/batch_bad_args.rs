//! `batch(..)` with arguments its rules refuse: each is reported on the
//! argument at fault, and the app and the handlers' callers still compile.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Job {}

const MAX: u64 = 10;

#[subscriber(RedisStream::new("jobs").group("a"), batch(max = 0, wait = 10ms))]
async fn zero(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("b"), batch(max = 10))]
async fn no_wait(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("c"), batch(max = 10, wait = 10))]
async fn no_unit(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("d"), batch(mx = 10, wait = 1s))]
async fn misspelt(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("e"), batch(10, 1s))]
async fn positional(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("f"), batch)]
async fn bare(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("g"), batch(max = MAX, wait = 1s))]
async fn not_a_literal(_: Vec<Job>) {}

#[subscriber(RedisStream::new("jobs").group("h"), batch(max = 1000000, wait = 0ms))]
async fn too_big(_: Vec<Job>) {}

app_including!(zero, no_wait, no_unit, misspelt, positional, bare, not_a_literal, too_big);

#[allow(dead_code)]
async fn unit_test() {
    zero::handler(Vec::new()).await;
    bare::handler(vec![Job {}]).await;
}
