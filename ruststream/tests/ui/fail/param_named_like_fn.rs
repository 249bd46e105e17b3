//! The function's name becomes a unit struct, so a parameter named like it
//! would be a pattern matching that struct.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn payment(payment: &Payment) -> HandlerOutcome {
    if payment.id == 0 {
        return HandlerOutcome::dead_letter("no id");
    }
    HandlerOutcome::ack()
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(payment);
    })
}

#[allow(dead_code)]
async fn unit_test() {
    let outcome = payment::handler(&Payment { id: 0 }).await;
    assert_eq!(outcome, HandlerOutcome::dead_letter("no id"));
}
