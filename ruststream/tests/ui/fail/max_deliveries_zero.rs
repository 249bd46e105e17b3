use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"), max_deliveries(0))]
async fn never(_: &Payment) {}

fn main() {}
