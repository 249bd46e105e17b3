use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger").group("audit"))]
async fn duplicate_group(_: &Payment) {}

#[subscriber(RedisStream::new("payments").groupe("ledger"))]
async fn misspelt_group(_: &Payment) {}

#[subscriber(RedisStream::new("payments").group("ledger").block(Duration::from_secs(1)))]
async fn unknown_method(_: &Payment) {}

fn main() {}
