//! A subscriber is a free function, not a method. The app's
//! `b.include(Ledger::post_payment)` still fails: a method cannot stand
//! for a subscriber, and the macro cannot write one inside an `impl`.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

struct Ledger;

impl Ledger {
    #[subscriber(RedisStream::new("payments").group("ledger"))]
    async fn post_payment(&self, payment: &Payment) {
        let _ = payment.id;
    }
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(Ledger::post_payment);
    })
}
