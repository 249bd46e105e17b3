//! One function, one subscriber.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payments").group("ledger"))]
#[subscriber(RedisStream::new("refunds").group("ledger"))]
async fn post_payment(payment: &Payment) {
    let _ = payment.id;
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(post_payment);
    })
}
