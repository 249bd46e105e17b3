use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"), workers(8), prefetch(4))]
async fn starved(_: &Payment) {}

fn main() {}
