use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").consumer("ledger-1"), workers(2))]
async fn post_payment(_: &Payment) {}

fn main() {}
