//! The payload as `T`, decoded from JSON and given to the handler.

use std::collections::BTreeMap;

use ruststream::prelude::*;

#[path = "../support.rs"]
mod support;

#[derive(Debug, Deserialize)]
struct Refund {
    payment_id: u64,
}

#[subscriber(RedisStream::new("refunds").group("ledger"))]
async fn owned(refund: Refund) {
    assert_eq!(refund.payment_id, 3);
}

#[subscriber(RedisStream::new("refunds").group("audit"))]
async fn owned_with_context(mut refund: Refund, ctx: &mut Context<'_>) -> HandlerOutcome {
    refund.payment_id += u64::from(ctx.delivery_count());
    assert_eq!(refund.payment_id, 3);
    HandlerOutcome::ack()
}

// Standard types and destructuring patterns work too.
#[subscriber(RedisStream::new("totals").group("ledger"))]
async fn map(totals: BTreeMap<String, u64>) {
    assert_eq!(totals["acme"], 12);
}

#[subscriber(RedisStream::new("pairs").group("ledger"))]
async fn tuple((id, amount): (u64, i64)) {
    assert_eq!((id, amount), (1, -5));
}

#[subscriber(RedisStream::new("notes").group("ledger"))]
async fn text(note: String, _ctx: &mut Context<'_>) {
    assert_eq!(note, "hello");
}

fn main() {
    assert_eq!(
        support::deliver(&owned, support::json(r#"{"payment_id":3}"#)),
        support::acked()
    );
    assert_eq!(
        support::deliver(&owned_with_context, support::json(r#"{"payment_id":3}"#)),
        support::acked()
    );
    assert_eq!(
        support::deliver(&map, support::json(r#"{"acme":12}"#)),
        support::acked()
    );
    assert_eq!(
        support::deliver(&tuple, support::json("[1,-5]")),
        support::acked()
    );
    assert_eq!(
        support::deliver(&text, support::json(r#""hello""#)),
        support::acked()
    );
    support::assert_undecodable(support::deliver(&text, support::json("12")), "String");
}
