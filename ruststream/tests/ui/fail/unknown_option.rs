use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"), retries(3))]
async fn unknown(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("ledger"), worker(8))]
async fn misspelt(_: &Payment) {}

fn main() {}
