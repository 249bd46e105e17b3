//! The README's service, as written there but on the memory broker
//! (`MemoryBroker::new()` in place of `RedisBroker::standalone(..)`), run
//! end to end: a payment is published, the ledger acks it, the fraud
//! screen replies.
//!
//! The service sits in a module because `#[ruststream::app]` writes a
//! `main` that runs until SIGINT/SIGTERM; this file's own `main` runs the
//! same app until the work is done.

use std::sync::Arc;

use ruststream::{Broker, EntryId};

#[allow(unused_variables)]
mod service {
    use ruststream::prelude::*; // subscriber, Outgoing, HandlerOutcome, Context, ...
    const MIN_IDLE: Duration = Duration::from_secs(30);

    #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
    #[outgoing(name = "payments")]
    pub struct Payment { pub id: u64, pub account: String, pub amount_cents: u64 }

    #[subscriber(RedisStream::claiming("payments", MIN_IDLE).group("ledger"), workers(8, by_key))]
    async fn post_payment(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
        let earlier = ctx.headers().get_str(DELIVERY_COUNT_HEADER).unwrap_or("0");
        if payment.account.starts_with("migrating-") { return HandlerOutcome::retry(); }
        HandlerOutcome::ack()
    }

    #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
    #[outgoing(name = "payments.screened")]
    struct Screened { payment_id: u64, suspicious: bool }

    #[subscriber(RedisStream::new("payments").group("fraud").start_id(StreamStart::Beginning), reply)]
    async fn screen_payment(payment: &Payment) -> Screened {
        Screened { payment_id: payment.id, suspicious: payment.amount_cents > 1_000_000 }
    }

    #[ruststream::app]
    pub fn app() -> impl App {
        RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
            MemoryBroker::new(),
            |b| {
                b.include(post_payment);
                b.include(screen_payment).out_reply(Publish);
            },
        )
    }
}

use ruststream::prelude::*;
use service::Payment;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let broker = Arc::new(MemoryBroker::new());
    let running = service::app()
        .into_rust_stream()
        .replace_brokers(broker.clone())
        .start()
        .await
        .expect("the service starts");

    let payment = Payment { id: 1, account: "acme".into(), amount_cents: 500 };
    Publisher::new(broker.clone())
        .publish(&payment)
        .partition_key(&payment.account)
        .await
        .expect("published");

    let done = async {
        loop {
            let screened = broker
                .range("payments.screened", EntryId::ZERO, EntryId::MAX, 10)
                .await
                .expect("a range read");
            let ledger = broker.group_info("payments", "ledger").await;
            let ledger_done = ledger.is_ok_and(|info| info.lag == 0 && info.pending == 0);
            if !screened.is_empty() && ledger_done {
                return screened;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let screened = tokio::time::timeout(Duration::from_secs(10), done)
        .await
        .expect("the ledger acks and the screen replies within 10 s");
    assert_eq!(screened.len(), 1);
    assert_eq!(screened[0].payload(), br#"{"payment_id":1,"suspicious":false}"#);
    running.shutdown().await;
}
