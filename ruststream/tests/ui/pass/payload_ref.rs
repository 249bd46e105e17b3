//! The payload as `&T`, decoded from JSON and lent to the handler.

use ruststream::prelude::*;

#[path = "../support.rs"]
mod support;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
    account: String,
}

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn payment_only(payment: &Payment) {
    assert_eq!((payment.id, payment.account.as_str()), (7, "acme"));
}

#[subscriber(RedisStream::new("payments").group("audit"))]
async fn payment_and_context(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
    assert_eq!((ctx.stream(), ctx.group()), ("payments", "audit"));
    assert_eq!(ctx.headers().get_str(DELIVERY_COUNT_HEADER), Some("0"));
    if payment.account.starts_with("migrating-") {
        return HandlerOutcome::retry();
    }
    HandlerOutcome::ack()
}

// A context named anything, with an explicit path and `_` patterns.
#[subscriber(RedisStream::new("payments").group("noop"))]
async fn ignores_everything(_: &Payment, _: &mut ruststream::Context<'_>) {}

fn main() {
    let payment = || support::json(r#"{"id":7,"account":"acme"}"#);
    assert_eq!(support::deliver(&payment_only, payment()), support::acked());
    assert_eq!(
        support::deliver(&payment_and_context, payment()),
        support::acked()
    );
    assert_eq!(
        support::deliver(
            &payment_and_context,
            support::json(r#"{"id":8,"account":"migrating-acme"}"#)
        ),
        ruststream::Settle::Outcome(HandlerOutcome::Retry)
    );
    assert_eq!(
        support::deliver(&ignores_everything, payment()),
        support::acked()
    );
    support::assert_undecodable(
        support::deliver(&payment_only, support::json(r#"{"id":"seven"}"#)),
        "Payment",
    );
}
