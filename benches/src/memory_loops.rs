//! The loops the memory-broker benchmarks time by hand, through the same
//! [`Broker`] calls the framework makes.

use std::error::Error;
use std::hint::black_box;

use ruststream::{Broker, EntryId, Message, ReadMode, ReadRequest, StreamStart};
use serde::de::DeserializeOwned;

/// What a loop returns.
pub type LoopResult = Result<(), Box<dyn Error>>;

/// Messages per `publish_batch` of [`fill`].
const FILL_CHUNK: u64 = 512;

/// Publishes the messages `payload(0..n)` to `stream`, in batches of 512.
pub async fn fill(
    broker: &dyn Broker,
    stream: &str,
    n: u64,
    payload: impl Fn(u64) -> Vec<u8>,
) -> LoopResult {
    let mut next = 0;
    while next < n {
        let end = (next + FILL_CHUNK).min(n);
        let batch: Vec<Message> = (next..end).map(|i| Message::new(payload(i))).collect();
        broker.publish_batch(stream, batch).await?;
        next = end;
    }
    Ok(())
}

/// The hand-written consumer: creates `group` at the start of `stream`,
/// then reads `count` entries at a time (`ReadMode::New`, not blocking),
/// decodes each payload as a `T` the framework's way (`std::str::from_utf8`
/// once, then `serde_json::from_str`), `black_box`es it and acks the batch,
/// until `n` entries are acked. Returns how many were acked.
pub async fn hand_consume_as<T: DeserializeOwned>(
    broker: &dyn Broker,
    stream: &str,
    group: &str,
    count: usize,
    n: u64,
) -> Result<u64, Box<dyn Error>> {
    broker
        .ensure_group(stream, group, StreamStart::Beginning)
        .await?;
    let mut ids: Vec<EntryId> = Vec::with_capacity(count);
    let mut acked = 0;
    while acked < n {
        let request = ReadRequest::new(stream, group, "hand-1", ReadMode::New, count);
        let batch = broker.read(request).await?;
        if batch.deliveries.is_empty() {
            return Err(format!("hand loop: {stream} drained after {acked} of {n}").into());
        }
        ids.clear();
        for delivery in &batch.deliveries {
            let value: T = serde_json::from_str(std::str::from_utf8(delivery.entry.payload())?)?;
            black_box(&value);
            ids.push(delivery.id());
        }
        acked += broker.ack(stream, group, &ids).await?;
    }
    Ok(acked)
}
