//! Shared by the pass cases (`#[path = "../support.rs"] mod support;`):
//! runs a subscriber's generated `handle` on one delivery.

#![allow(dead_code)]

use std::sync::Arc;

use ruststream::{
    Context, Delivery, Entry, EntryId, MemoryBroker, Message, Publisher, Settle, Subscriber,
};

/// A message whose payload is `json`.
pub fn json(json: &str) -> Message {
    Message::new(json.as_bytes().to_vec())
}

/// Runs `subscriber` on a first delivery of `message` and returns how it
/// settles the entry.
pub fn deliver<S: Subscriber>(subscriber: &S, message: Message) -> Settle {
    let delivery = Delivery {
        entry: Entry {
            id: EntryId::new(1, 0),
            message: Arc::new(message),
        },
        delivery_count: 0,
        idle_ms: 0,
    };
    let publisher = Publisher::new(Arc::new(MemoryBroker::new()));
    let subscription = subscriber.subscription();
    let mut ctx = Context::new(
        &delivery,
        subscription.stream.stream_name(),
        subscription.stream.group_name().unwrap_or_default(),
        "test-consumer",
        &publisher,
    );
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(subscriber.handle(&mut ctx))
}

/// The `Settle` of an acked entry.
pub fn acked() -> Settle {
    Settle::Outcome(ruststream::HandlerOutcome::Ack)
}

/// Asserts that `settle` dead-letters an undecodable payload and that the
/// reason names `type_name`.
pub fn assert_undecodable(settle: Settle, type_name: &str) {
    match settle {
        Settle::Undecodable(reason) => assert!(
            reason.contains(type_name),
            "the reason {reason:?} does not name {type_name}"
        ),
        other => panic!("expected Undecodable, got {other:?}"),
    }
}
