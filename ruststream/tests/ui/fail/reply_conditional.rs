//! `reply` publishes every value its handler returns: returning nothing,
//! maybe a value, or a value or an error is a mistake with its own way out.

use ruststream::prelude::*;

include!("../app_including.rs");

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

app_including!(returns_unit, returns_option, returns_result, returns_outcome);
