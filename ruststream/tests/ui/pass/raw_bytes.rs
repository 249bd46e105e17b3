//! Raw payloads, not decoded: `&[u8]` (borrowed) and `Vec<u8>` (a copy).

use ruststream::prelude::*;

#[path = "../support.rs"]
mod support;

#[subscriber(RedisStream::new("blobs").group("a"))]
async fn slice(bytes: &[u8]) {
    assert_eq!(bytes, b"not json");
}

#[subscriber(RedisStream::new("blobs").group("b"))]
async fn slice_with_context(bytes: &[u8], ctx: &mut Context<'_>) -> Result<(), String> {
    // The payload stays usable while the context is borrowed mutably.
    let id = ctx.id();
    if bytes.is_empty() {
        return Err(format!("entry {id} is empty"));
    }
    Ok(())
}

#[subscriber(RedisStream::new("blobs").group("c"))]
async fn vec(bytes: Vec<u8>) -> HandlerOutcome {
    assert_eq!(bytes, b"not json".to_vec());
    HandlerOutcome::ack()
}

#[subscriber(RedisStream::new("blobs").group("d"))]
async fn vec_with_context(mut bytes: std::vec::Vec<u8>, _ctx: &mut Context<'_>) {
    bytes.push(b'!');
}

fn main() {
    let blob = || ruststream::Message::new(b"not json".to_vec());
    assert_eq!(support::deliver(&slice, blob()), support::acked());
    assert_eq!(
        support::deliver(&slice_with_context, blob()),
        support::acked()
    );
    assert_eq!(
        support::deliver(&slice_with_context, ruststream::Message::new(Vec::new())),
        ruststream::Settle::Failed("entry 1-0 is empty".into())
    );
    assert_eq!(support::deliver(&vec, blob()), support::acked());
    assert_eq!(
        support::deliver(&vec_with_context, blob()),
        support::acked()
    );
}
