use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::claim("payments", Duration::from_secs(30)).group("ledger"))]
async fn misspelt(_: &Payment) {}

#[subscriber(RedisStream::new("payments", Duration::from_secs(30)).group("ledger"))]
async fn wrong_arguments(_: &Payment) {}

#[subscriber(Queue::new("payments").group("ledger"))]
async fn not_a_stream(_: &Payment) {}

fn main() {}
