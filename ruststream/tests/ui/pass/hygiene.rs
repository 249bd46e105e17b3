//! The generated code neither collides with nor is changed by the names
//! around it, and it is warning-free under strict lints.

#![forbid(unsafe_code)]
#![deny(
    warnings,
    rust_2018_idioms,
    unreachable_pub,
    missing_debug_implementations
)]

use ruststream::prelude::*;

#[allow(unreachable_pub)]
#[path = "../support.rs"]
mod support;

// Constants named like the parameters and locals of the generated code
// would turn its bindings into patterns if it used these names. (They do
// the same to the user's own parameters, hence `p` and `c` below.)
#[allow(non_upper_case_globals, dead_code)]
mod shadows {
    pub(crate) const ctx: u8 = 0;
    pub(crate) const payload: u8 = 0;
    pub(crate) const value: u8 = 0;
    pub(crate) const error: u8 = 0;
    pub(crate) const out: u8 = 0;
}
#[allow(unused_imports)]
use shadows::*;

// Items named like the generated ones.
#[allow(dead_code)]
const INFO: &str = "mine";
#[allow(dead_code)]
fn subscription() {}
#[allow(dead_code)]
struct Subscriber;
#[allow(dead_code)]
type Result<T> = std::result::Result<T, ()>;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("payments").group("ledger"), workers(2))]
async fn ledger(p: &Payment, c: &mut Context<'_>) -> HandlerOutcome {
    let _ = c.id();
    if p.id > 0 {
        HandlerOutcome::ack()
    } else {
        HandlerOutcome::retry()
    }
}

#[subscriber(RedisStream::new("payments").group("sum"))]
async fn r#type(p: Payment) -> std::result::Result<(), String> {
    let _ = p.id;
    Ok(())
}

fn main() {
    assert_eq!(
        support::deliver(&ledger, support::json(r#"{"id":1}"#)),
        support::acked()
    );
    assert_eq!(
        support::deliver(&r#type, support::json(r#"{"id":1}"#)),
        support::acked()
    );
    assert_eq!(ruststream::Subscriber::info(&r#type).name, "type");
}
