//! Payloads are decoded into owned values: they cannot borrow from the
//! entry. (A type borrowing through an elided lifetime is in
//! `payload_borrowed_elided.rs`.)

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(RedisStream::new("tags").group("a"))]
async fn borrowed_strings(tags: Vec<&str>) {
    let _ = tags;
}

#[subscriber(RedisStream::new("payments").group("b"))]
async fn lifetime_parameter<'a>(payment: &'a Payment) {
    let _ = payment.id;
}

#[subscriber(RedisStream::new("payments").group("c"))]
async fn static_payload(payment: &'static Payment) {
    let _ = payment.id;
}

#[ruststream::app]
fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(borrowed_strings);
        b.include(lifetime_parameter);
        b.include(static_payload);
    })
}
