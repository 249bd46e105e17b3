use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"))]
fn post_payment(_: &Payment) -> HandlerOutcome {
    HandlerOutcome::ack()
}

fn main() {}
