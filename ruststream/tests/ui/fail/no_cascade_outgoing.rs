//! A `#[derive(Outgoing)]` with a mistake reports it and nothing else: the
//! `reply` subscriber returning the type and the code publishing it still
//! compile.

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(stream = "payments.screened")]
struct Screened {
    payment_id: u64,
}

#[subscriber(RedisStream::new("payments").group("fraud"), reply)]
async fn screen_payment(payment: &Payment) -> Screened {
    Screened {
        payment_id: payment.id,
    }
}

#[allow(dead_code)]
async fn screen_by_hand(publisher: &Publisher) -> Result<(), ruststream::PublishError> {
    publisher.publish(&Screened { payment_id: 1 }).await?;
    Ok(())
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(screen_payment).out_reply(Publish);
    })
}
