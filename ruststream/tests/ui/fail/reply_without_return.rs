use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("fraud"), reply)]
async fn screen(_: &Payment) {}

fn main() {}
