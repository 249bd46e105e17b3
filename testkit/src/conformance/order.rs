//! Per-key order through retries: a whole app with `workers(8, by_key)`
//! on every broker.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::{
    AppInfo, Context, HandlerOutcome, PARTITION_KEY_HEADER, RustStream, Settle, Stream,
    Subscription,
};
use ruststream_core::Message;

use super::Target;
use crate::faults::mix;
use crate::hand_written::{HandWritten, Handle};

const KEYS: u32 = 100;
const WORKERS: usize = 8;
const MIN_IDLE: Duration = Duration::from_millis(300);
const GROUP_NEW: &str = "ordered-new";
const GROUP_CLAIMING: &str = "ordered-claiming";

/// What the handler does with one delivery of entry `n` (deliveries before
/// it: `count`): 5% of entries are retried once and 1% three times, each
/// retry by `retry()`, `retry_after(d)` or an error; everything else, and
/// the last attempt, is acked. A function of `n` and `count` alone, so
/// every run decides the same.
fn decide(n: u32, count: u32) -> Option<Settle> {
    let h = mix(u64::from(n) ^ 0x0DE7_0A11);
    let retries = match h % 100 {
        0 => 3,
        1..=5 => 1,
        _ => 0,
    };
    if count >= retries {
        return None;
    }
    let how = mix(h ^ u64::from(count));
    Some(match how % 3 {
        0 => Settle::Outcome(HandlerOutcome::retry()),
        1 => Settle::Outcome(HandlerOutcome::retry_after(Duration::from_millis(
            1 + how % 40,
        ))),
        _ => Settle::Failed(format!("order: entry {n} fails attempt {count}")),
    })
}

/// Per key, the sequence numbers of its entries in the order their
/// handlers acked them, and every delivery seen.
#[derive(Default)]
struct Log {
    acked: BTreeMap<u32, Vec<u32>>,
    deliveries: u64,
}

/// The handler of each group's subscriber: logs what it acks.
struct Ordered {
    log: Arc<Mutex<Log>>,
}

impl Handle for Ordered {
    fn start<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        let parsed = std::str::from_utf8(ctx.payload()).ok().and_then(|text| {
            let mut parts = text.split(':');
            let n: u32 = parts.next()?.parse().ok()?;
            let key: u32 = parts.next()?.parse().ok()?;
            let seq: u32 = parts.next()?.parse().ok()?;
            Some((n, key, seq))
        });
        let count = ctx.delivery_count();
        let pause = parsed.map_or(Duration::ZERO, |(n, ..)| {
            Duration::from_micros(mix(u64::from(n) ^ u64::from(count)) % 3_000)
        });
        let log = Arc::clone(&self.log);
        async move {
            let Some((n, key, seq)) = parsed else {
                return Settle::Undecodable("not an entry of this test".to_owned());
            };
            // Handlers of different keys interleave; of one key, never.
            tokio::time::sleep(pause).await;
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            log.deliveries += 1;
            match decide(n, count) {
                Some(retry) => retry,
                None => {
                    log.acked.entry(key).or_default().push(seq);
                    Settle::Outcome(HandlerOutcome::ack())
                }
            }
        }
    }
}

/// On a `workers(8, by_key)` subscription, a retry (`retry()`,
/// `retry_after`, an error) holds the entry on its lane and runs it again
/// there before the later entries of its key: every key's entries complete
/// in stream order, with random handler times, 5% of entries retried once
/// and 1% three times, on a `new` subscription and (where the broker has
/// claiming reads) a `claiming` one. No retry copy is appended, and nothing
/// is left pending.
pub async fn by_key_order_survives_retries(t: Target) {
    let s = t.stream("keyed-order");
    let entries: u32 = 10_000;
    let mut groups = vec![(GROUP_NEW, Stream::new(&s).group(GROUP_NEW))];
    if t.claiming_reads {
        groups.push((
            GROUP_CLAIMING,
            Stream::claiming(&s, MIN_IDLE).group(GROUP_CLAIMING),
        ));
    }
    let logs: Vec<Arc<Mutex<Log>>> = groups.iter().map(|_| Arc::default()).collect();
    let subscribers: Vec<HandWritten<Ordered>> = groups
        .iter()
        .zip(&logs)
        .map(|((group, stream), log)| {
            HandWritten::new(
                group,
                Subscription::new(stream.clone()).workers(WORKERS).by_key(),
                Ordered {
                    log: Arc::clone(log),
                },
            )
        })
        .collect();
    let app = RustStream::new(AppInfo::new("order", "0"))
        .with_shared_broker(Arc::clone(&t.broker), |b| {
            for subscriber in subscribers {
                b.include(subscriber);
            }
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("the app under test does not start: {e}"));

    let mut next_seq = vec![0u32; KEYS as usize];
    let mut batch = Vec::new();
    for n in 0..entries {
        let key = (mix(u64::from(n)) % u64::from(KEYS)) as u32;
        let seq = next_seq[key as usize];
        next_seq[key as usize] += 1;
        batch.push(
            Message::new(format!("{n}:{key}:{seq}").into_bytes())
                .with_header(PARTITION_KEY_HEADER, format!("key-{key}")),
        );
        if batch.len() == 200 {
            t.broker
                .publish_batch(&s, std::mem::take(&mut batch))
                .await
                .unwrap_or_else(|e| panic!("publish failed: {e}"));
            // A sleep, not `advance`: on a paused clock it waits for the
            // runtime to be idle (a file log's syncs included).
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    if !batch.is_empty() {
        t.broker
            .publish_batch(&s, batch)
            .await
            .unwrap_or_else(|e| panic!("publish failed: {e}"));
    }

    // Drain: every entry acked in every group, nothing pending.
    let step = if t.paused {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(100)
    };
    let limit = if t.paused { 2_000 } else { 600 };
    let done = |log: &Arc<Mutex<Log>>| {
        let log = log.lock().unwrap_or_else(PoisonError::into_inner);
        log.acked.values().map(Vec::len).sum::<usize>() == entries as usize
    };
    for _ in 0..limit {
        if logs.iter().all(done) {
            break;
        }
        tokio::time::sleep(step).await;
    }
    app.shutdown().await;

    for ((group, _), log) in groups.iter().zip(&logs) {
        {
            let log = log.lock().unwrap_or_else(PoisonError::into_inner);
            let acked: usize = log.acked.values().map(Vec::len).sum();
            assert_eq!(
                acked, entries as usize,
                "group {group}: {acked} of {entries} entries acked ({} deliveries)",
                log.deliveries
            );
            for (key, seqs) in &log.acked {
                let in_order = seqs.windows(2).all(|w| w[0] < w[1]);
                assert!(
                    in_order && seqs.len() == next_seq[*key as usize] as usize,
                    "group {group}: key {key} completed out of stream order: {seqs:?}"
                );
            }
        }
        let info = t
            .broker
            .group_info(&s, group)
            .await
            .unwrap_or_else(|e| panic!("group info of {group}: {e}"));
        assert_eq!(info.pending, 0, "group {group}: entries left pending");
    }
    let length = t
        .broker
        .stream_info(&s)
        .await
        .ok()
        .flatten()
        .map_or(0, |info| info.length);
    assert_eq!(
        length,
        u64::from(entries),
        "a retry on a by_key lane appends no copy"
    );
}
