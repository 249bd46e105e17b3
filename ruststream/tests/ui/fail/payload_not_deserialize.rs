use ruststream::prelude::*;

struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn post_payment(_: &Payment) {}

fn main() {}
