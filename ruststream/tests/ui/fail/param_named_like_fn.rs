//! The function's name becomes a unit struct, so a parameter named like it
//! would be a pattern matching that struct.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn payment(payment: &Payment) {
    let _ = payment.id;
}

app_including!(payment);

#[allow(dead_code)]
async fn unit_test() {
    payment::handler(&Payment { id: 0 }).await;
}
