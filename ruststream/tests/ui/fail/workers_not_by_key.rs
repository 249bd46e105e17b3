use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"), workers(8, by_account))]
async fn keyed(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("ledger"), workers(8, by_key, ordered))]
async fn too_many(_: &Payment) {}

fn main() {}
