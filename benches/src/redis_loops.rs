//! The consume loops the Redis benchmarks time: hand-written on any
//! redis-rs connection (one server's or a cluster's), and the same work
//! through a [`RedisBroker`].

use std::error::Error;
use std::hint::black_box;

use redis::Value;
use redis::aio::ConnectionLike;
use ruststream::{Broker, ReadMode, ReadRequest, StreamStart};
use ruststream_redis::RedisBroker;

use crate::{Payment, batches, payload};

/// What a loop returns.
pub type LoopResult = Result<(), Box<dyn Error>>;

/// Entries per `XREADGROUP` and per pipeline of `XADD`s.
pub const BATCH: usize = 500;

/// Fills `stream` with messages `0..n` ([`payload`]) by pipelines of
/// [`BATCH`] `XADD`s.
pub async fn hand_fill<C: ConnectionLike>(conn: &mut C, stream: &str, n: u64) -> LoopResult {
    for batch in batches(n, BATCH) {
        let mut pipe = redis::pipe();
        for j in batch {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("payload")
                .arg(payload(j))
                .ignore();
        }
        pipe.query_async::<()>(conn).await?;
    }
    Ok(())
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        _ => None,
    }
}

/// The hand-written consumer: creates `group` at the start of `stream`,
/// then `XREADGROUP COUNT 500`, decodes each payload (UTF-8 checked once,
/// then parsed as a str: the framework's decode), and one `XACK` per
/// batch, until `n` entries are done. Replies are parsed from
/// `redis::Value` directly (no `HashMap` per entry).
pub async fn hand_consume<C: ConnectionLike>(
    conn: &mut C,
    stream: &str,
    group: &str,
    n: u64,
) -> LoopResult {
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg("0")
        .query_async::<()>(conn)
        .await?;
    let mut done = 0u64;
    while done < n {
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(group)
            .arg("hand-1")
            .arg("COUNT")
            .arg(BATCH)
            .arg("STREAMS")
            .arg(stream)
            .arg(">")
            .query_async(conn)
            .await?;
        let Value::Array(streams) = reply else {
            return Err("the stream ran dry before every message was read".into());
        };
        let mut ack = redis::cmd("XACK");
        ack.arg(stream).arg(group);
        for s in &streams {
            let Value::Array(parts) = s else { continue };
            let Some(Value::Array(entries)) = parts.get(1) else {
                continue;
            };
            for entry in entries {
                let Value::Array(e) = entry else { continue };
                let (Some(id), Some(Value::Array(fields))) = (e.first().and_then(bytes), e.get(1))
                else {
                    continue;
                };
                for pair in fields.chunks_exact(2) {
                    if bytes(&pair[0]) == Some(b"payload")
                        && let Some(p) = bytes(&pair[1])
                    {
                        let payment: Payment = serde_json::from_str(std::str::from_utf8(p)?)?;
                        black_box(&payment);
                    }
                }
                ack.arg(id);
                done += 1;
            }
        }
        ack.query_async::<i64>(conn).await?;
    }
    Ok(())
}

/// [`hand_consume`] through the broker: `read` with `ReadMode::New`, count
/// [`BATCH`], decode each payload, then one `ack` per batch.
pub async fn broker_consume(broker: &RedisBroker, stream: &str, group: &str, n: u64) -> LoopResult {
    broker
        .ensure_group(stream, group, StreamStart::Beginning)
        .await?;
    let mut done = 0u64;
    while done < n {
        let request = ReadRequest::new(stream, group, "broker-1", ReadMode::New, BATCH);
        let batch = broker.read(request).await?;
        if batch.deliveries.is_empty() {
            return Err("the stream ran dry before every message was read".into());
        }
        let mut ids = Vec::with_capacity(batch.deliveries.len());
        for d in &batch.deliveries {
            let payment: Payment = serde_json::from_slice(d.entry.payload())?;
            black_box(&payment);
            ids.push(d.id());
        }
        broker.ack(stream, group, &ids).await?;
        done += ids.len() as u64;
    }
    Ok(())
}
