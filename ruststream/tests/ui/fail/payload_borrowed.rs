//! Payloads are decoded into owned values: they cannot borrow from the
//! entry. (A type borrowing through an elided lifetime is in
//! `payload_borrowed_elided.rs`.)

use ruststream::prelude::*;

include!("../app_including.rs");

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

app_including!(borrowed_strings, lifetime_parameter, static_payload);
