use std::rc::Rc;

use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

async fn save() {}

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn holds_an_rc(_: &Payment) {
    let shared = Rc::new(1);
    save().await;
    drop(shared);
}

fn main() {}
