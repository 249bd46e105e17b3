//! A batch of payloads is a `Vec`, not a slice.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payment-batches").group("ledger"))]
async fn post_batch(payments: &[Payment]) {
    for payment in payments {
        let _ = payment.id;
    }
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(post_batch);
    })
}
