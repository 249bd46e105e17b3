use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber]
async fn nothing(_: &Payment) {}

#[subscriber(workers(4), RedisStream::new("payments").group("ledger"))]
async fn option_first(_: &Payment) {}

const LEDGER: &str = "ledger";

#[subscriber(LEDGER, workers(4))]
async fn not_a_descriptor(_: &Payment) {}

fn main() {}
