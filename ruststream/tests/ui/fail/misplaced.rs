use ruststream::prelude::*;

#[subscriber(RedisStream::new("payments").group("ledger"))]
struct Payment {}

struct Ledger;

impl Ledger {
    #[subscriber(RedisStream::new("payments").group("ledger"))]
    async fn post(&self, _: &u64) {}
}

fn main() {}
