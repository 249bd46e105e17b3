//! Blocking reads on the memory broker at the edges of their block time.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ruststream_core::{Broker, Message, ReadMode, ReadRequest, StreamStart};
use ruststream_memory::MemoryBroker;

/// A block time too long to add to the clock (`Duration::MAX`) waits for
/// an entry, as a very long one does, rather than panicking.
#[tokio::test]
async fn a_block_time_too_long_for_the_clock_waits_for_an_entry() {
    let b = MemoryBroker::new();
    b.ensure_group("s", "g", StreamStart::New).await.unwrap();
    let reader = b.clone();
    let read = tokio::spawn(async move {
        let request = ReadRequest::new("s", "g", "c", ReadMode::New, 1).block(Duration::MAX);
        reader
            .read(request)
            .await
            .map(|batch| batch.deliveries.len())
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    b.publish("s", Message::new(b"x".to_vec())).await.unwrap();
    assert_eq!(read.await.expect("the read panicked").unwrap(), 1);
}
