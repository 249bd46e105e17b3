use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"), workers(2), reply, workers(4))]
async fn twice(_: &Payment) {}

fn main() {}
