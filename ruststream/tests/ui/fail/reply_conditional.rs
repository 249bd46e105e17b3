//! `reply` publishes every value its handler returns: returning nothing,
//! maybe a value, or a value or an error is a mistake with its own way out.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: u64,
}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "payments.flagged")]
struct Flagged {
    payment_id: u64,
}

#[subscriber(RedisStream::new("payments").group("a"), reply)]
async fn returns_unit(_: &Payment) -> () {}

#[subscriber(RedisStream::new("payments").group("b"), reply)]
async fn returns_option(payment: &Payment) -> Option<Flagged> {
    (payment.amount_cents > 1_000_000).then(|| Flagged {
        payment_id: payment.id,
    })
}

#[subscriber(RedisStream::new("payments").group("c"), reply)]
async fn returns_result(payment: &Payment) -> Result<Flagged, String> {
    if payment.id == 0 {
        return Err("no id".to_owned());
    }
    Ok(Flagged {
        payment_id: payment.id,
    })
}

#[subscriber(RedisStream::new("payments").group("d"), reply)]
async fn returns_outcome(_: &Payment) -> HandlerOutcome {
    HandlerOutcome::ack()
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(returns_unit);
        b.include(returns_option);
        b.include(returns_result);
        b.include(returns_outcome);
    })
}
