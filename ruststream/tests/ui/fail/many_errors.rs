//! Every mistake is reported in one build, each on its own token.
use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(
    RedisStream::new("payments"),
    workers(0),
    max_deliveries(0),
    timeout(5),
    reply
)]
fn post_payment<T>(_: &Payment, _: T) {}

fn main() {}
