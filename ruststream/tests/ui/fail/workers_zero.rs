use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"), workers(0, by_key))]
async fn no_workers(_: &Payment) {}

fn main() {}
