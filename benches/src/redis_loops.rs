//! The consume loops the Redis benchmarks time: hand-written on any
//! redis-rs connection (one server's or a cluster's), and the same work
//! through a [`RedisBroker`].

use std::error::Error;
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::Value;
use redis::aio::ConnectionLike;
use ruststream::{AppInfo, Broker, BrokerScope, ReadMode, ReadRequest, RustStream, StreamStart};
use ruststream_redis::RedisBroker;
use serde::de::DeserializeOwned;

use crate::{Payment, Probe, batches, payload, run_stream};

/// What a loop returns.
pub type LoopResult = Result<(), Box<dyn Error>>;

/// Entries per `XREADGROUP` and per pipeline of `XADD`s.
pub const BATCH: usize = 500;

/// Fills `stream` with messages `0..n` ([`payload`]) by pipelines of
/// [`BATCH`] `XADD`s.
pub async fn hand_fill<C: ConnectionLike>(conn: &mut C, stream: &str, n: u64) -> LoopResult {
    hand_fill_with(conn, stream, n, payload).await
}

/// [`hand_fill`] with the payloads `payload(0..n)`.
pub async fn hand_fill_with<C: ConnectionLike>(
    conn: &mut C,
    stream: &str,
    n: u64,
    payload: impl Fn(u64) -> Vec<u8>,
) -> LoopResult {
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

/// Creates `group` on `stream`, its cursor at `start` (`"0"`: the
/// beginning; `"$"`: the end).
pub async fn create_group<C: ConnectionLike>(
    conn: &mut C,
    stream: &str,
    group: &str,
    start: &str,
) -> LoopResult {
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg(start)
        .arg("MKSTREAM")
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

/// One `XREADGROUP GROUP group consumer COUNT count [BLOCK ms] STREAMS
/// stream >`, its reply as redis-rs returns it (`Nil` when a blocking
/// read timed out).
pub async fn hand_read<C: ConnectionLike>(
    conn: &mut C,
    stream: &str,
    group: &str,
    consumer: &str,
    count: usize,
    block_ms: Option<u64>,
) -> Result<Value, Box<dyn Error>> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(group)
        .arg(consumer)
        .arg("COUNT")
        .arg(count);
    if let Some(ms) = block_ms {
        cmd.arg("BLOCK").arg(ms);
    }
    Ok(cmd
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(conn)
        .await?)
}

/// Calls `each(id, payload)` for every entry of an `XREADGROUP` reply
/// (`payload` empty when the entry has no `payload` field), parsed from
/// `redis::Value` directly (no `HashMap` per entry); returns how many.
pub fn visit_entries(
    reply: &Value,
    mut each: impl FnMut(&[u8], &[u8]) -> LoopResult,
) -> Result<u64, Box<dyn Error>> {
    let Value::Array(streams) = reply else {
        return Ok(0);
    };
    let mut seen = 0;
    for s in streams {
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
            let payload = fields
                .chunks_exact(2)
                .find(|pair| bytes(&pair[0]) == Some(b"payload"))
                .and_then(|pair| bytes(&pair[1]))
                .unwrap_or_default();
            each(id, payload)?;
            seen += 1;
        }
    }
    Ok(seen)
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
    hand_consume_as::<Payment, C>(conn, stream, group, n).await
}

/// [`hand_consume`], decoding each payload as a `T`.
pub async fn hand_consume_as<T: DeserializeOwned, C: ConnectionLike>(
    conn: &mut C,
    stream: &str,
    group: &str,
    n: u64,
) -> LoopResult {
    create_group(conn, stream, group, "0").await?;
    let mut done = 0u64;
    while done < n {
        let reply = hand_read(conn, stream, group, "hand-1", BATCH, None).await?;
        let mut ack = redis::cmd("XACK");
        ack.arg(stream).arg(group);
        let read = visit_entries(&reply, |id, payload| {
            let value: T = serde_json::from_str(std::str::from_utf8(payload)?)?;
            black_box(&value);
            ack.arg(id);
            Ok(())
        })?;
        if read == 0 {
            return Err("the stream ran dry before every message was read".into());
        }
        done += read;
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

/// How long an app run of [`app_consume`] may wait for its last message.
pub const APP_TIMEOUT: Duration = Duration::from_secs(300);

/// The `#[subscriber]` rows: sets [`run_stream`] to `stream`, starts an
/// app over `broker` with the subscribers `include` adds (which count in
/// `probe`), waits until `n` messages are handled and every ack has
/// landed, then shuts the app down. Returns the time from the app's start
/// to the last ack.
pub async fn app_consume(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    n: u64,
    probe: &Probe,
    include: impl FnOnce(&mut BrokerScope<'_>),
) -> Result<Duration, Box<dyn Error>> {
    probe.arm(n);
    run_stream::set(stream)?;
    let started = Instant::now();
    let app = RustStream::new(AppInfo::new("bench", "0.1.0")).with_broker(broker.clone(), include);
    let running = app.start().await?;
    if probe.handled.load(Ordering::SeqCst) < n {
        tokio::time::timeout(APP_TIMEOUT, probe.done.notified()).await?;
    }
    // Every entry handled; now every ack settled.
    until_settled(broker, stream, group).await?;
    let elapsed = started.elapsed();
    running.shutdown().await;
    Ok(elapsed)
}

/// Waits until `group` on `stream` has nothing pending and no lag, polling
/// every 200 µs: after an app's handlers ran on every entry, until every
/// ack has landed.
pub async fn until_settled(broker: &RedisBroker, stream: &str, group: &str) -> LoopResult {
    loop {
        let info = broker.group_info(stream, group).await?;
        if info.pending == 0 && info.lag == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}
