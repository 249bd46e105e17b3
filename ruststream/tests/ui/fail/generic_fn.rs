use ruststream::prelude::*;

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn generic<T: serde::de::DeserializeOwned>(_: T) {}

fn main() {}
