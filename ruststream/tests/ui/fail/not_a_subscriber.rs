//! A function included without `#[subscriber]`.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

async fn post_payment(payment: &Payment) -> HandlerOutcome {
    let _ = payment.id;
    HandlerOutcome::ack()
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(post_payment);
    })
}
