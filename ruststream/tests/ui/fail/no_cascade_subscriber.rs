//! A `#[subscriber]` with mistakes reports them and nothing else: the app
//! that includes it and the code that calls its handler still compile.

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

/// Posts payments to the ledger.
#[subscriber(RedisStream::new("payments"), workers(0))]
fn post_payment(payment: &Payment) -> HandlerOutcome {
    if payment.id == 0 {
        return HandlerOutcome::dead_letter("no id");
    }
    HandlerOutcome::ack()
}

app_including!(post_payment);

#[allow(dead_code)]
async fn unit_test() {
    let outcome = post_payment::handler(&Payment { id: 0 }).await;
    assert_eq!(outcome, HandlerOutcome::dead_letter("no id"));
}
