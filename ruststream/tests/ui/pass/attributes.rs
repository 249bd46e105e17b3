//! What happens to the function's attributes and visibility: docs go on
//! the subscriber, the handler stays callable (for unit tests), and other
//! attributes stay on the handler.

use ruststream::Subscriber;
use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

mod service {
    use ruststream::prelude::*;

    /// Posts payments to the ledger.
    ///
    /// Retries payments of accounts being migrated.
    #[subscriber(RedisStream::new("payments").group("ledger"))]
    #[allow(clippy::needless_return)]
    #[inline]
    pub async fn post_payment(payment: &super::Payment) -> HandlerOutcome {
        if payment.id == 0 {
            return HandlerOutcome::dead_letter("no id");
        }
        return HandlerOutcome::ack();
    }

    #[cfg(any())]
    #[subscriber(RedisStream::new("payments").group("never-compiled"))]
    pub async fn never_compiled(payment: &NoSuchType) {}

    #[subscriber(RedisStream::new("payments").group("crate-visible"))]
    pub(crate) async fn crate_visible(_: &super::Payment) {}
}

// The subscriber is a unit struct: copyable, debuggable, default.
fn takes_subscriber<S: Subscriber + Copy + std::fmt::Debug + Default>(s: S) -> S {
    s
}

fn main() {
    let sub = takes_subscriber(service::post_payment);
    assert_eq!(format!("{sub:?}"), "post_payment");
    let _ = takes_subscriber(service::crate_visible);

    // The handler as written, called directly.
    let outcome = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(service::post_payment::handler(&Payment { id: 0 }));
    assert_eq!(outcome, HandlerOutcome::dead_letter("no id"));
}
