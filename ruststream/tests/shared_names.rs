//! Shared consumer names: a process starting under a name another live
//! process uses takes none of the entries that process still works on (it
//! keeps their claims fresh), warns, and takes them over only once they go
//! stale; a crashed predecessor's entries are taken back once the live
//! window has passed. And the opt-in pruning of idle, empty consumers.
//! All on the paused clock with the memory broker.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};

use ruststream::prelude::*;
use ruststream::{Handled, Observer, ReadMode, ReadRequest, StreamStart};
use support::keep_claims_fresh;

const STREAM: &str = "shared";
const GROUP: &str = "g";
const NAME: &str = "ruststream-0";
/// The default keep-alive (5 s) makes the live window 15 s.
const WINDOW: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize)]
struct Job {
    n: u32,
}

#[subscriber(RedisStream::new("shared").group("g").consumer("ruststream-0"))]
async fn worker(job: &Job) {
    let _ = job.n;
}

/// Records (payload number, deliveries before) of every handled delivery.
#[derive(Default)]
struct Seen(Mutex<Vec<(u32, u32)>>);

impl Observer for Seen {
    fn handled(&self, event: &Handled<'_>) {
        let job: serde_json::Value =
            serde_json::from_slice(event.delivery.entry.payload()).unwrap();
        let n = u32::try_from(job["n"].as_u64().unwrap()).unwrap();
        self.0
            .lock()
            .unwrap()
            .push((n, event.delivery.delivery_count));
    }
}

impl Seen {
    fn numbers(&self) -> Vec<u32> {
        let mut n: Vec<u32> = self.0.lock().unwrap().iter().map(|(n, _)| *n).collect();
        n.sort_unstable();
        n
    }

    fn count_of(&self, n: u32) -> Vec<u32> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(m, _)| *m == n)
            .map(|(_, c)| *c)
            .collect()
    }
}

/// A broker with `jobs` published to the stream and its group at the
/// start.
async fn broker_with(jobs: std::ops::Range<u32>) -> MemoryBroker {
    let broker = MemoryBroker::new();
    broker
        .ensure_group(STREAM, GROUP, StreamStart::Beginning)
        .await
        .unwrap();
    for n in jobs {
        let payload = serde_json::to_vec(&serde_json::json!({ "n": n })).unwrap();
        broker
            .publish(STREAM, ruststream::Message::new(payload))
            .await
            .unwrap();
    }
    broker
}

/// What another process under the same name holds: `count` entries read
/// as `NAME`.
async fn read_as_twin(broker: &MemoryBroker, count: usize) -> Vec<ruststream::EntryId> {
    let batch = broker
        .read(ReadRequest::new(STREAM, GROUP, NAME, ReadMode::New, count))
        .await
        .unwrap();
    batch.deliveries.iter().map(|d| d.id()).collect()
}

async fn start(broker: &MemoryBroker, seen: &Arc<Seen>) -> ruststream::Running {
    RustStream::new(AppInfo::new("svc", "0"))
        .observe(Arc::clone(seen) as Arc<dyn Observer>)
        .with_broker(broker.clone(), |b| {
            b.include(worker);
        })
        .start()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn entries_a_live_twin_keeps_fresh_are_never_taken_until_it_stops() {
    let broker = broker_with(0..10).await;
    let twins = read_as_twin(&broker, 3).await;
    // The twin keeps its claims fresh, as a running process does.
    let refresher = keep_claims_fresh(broker.clone(), (STREAM, GROUP, NAME), twins.clone());
    let seen = Arc::new(Seen::default());
    let app = start(&broker, &seen).await;
    tokio::time::sleep(WINDOW * 4).await;
    assert_eq!(
        seen.numbers(),
        (3..10).collect::<Vec<_>>(),
        "the twin's 0..3 untouched"
    );
    let stats = app.stats().await;
    assert!(stats[0].consumer_name_shared, "{stats:?}");

    // The twin stops (crashes): its entries go stale and are taken over,
    // counted as redeliveries.
    refresher.abort();
    tokio::time::sleep(WINDOW * 3).await;
    assert_eq!(seen.numbers(), (0..10).collect::<Vec<_>>());
    for n in 0..3 {
        assert_eq!(
            seen.count_of(n),
            [1],
            "entry {n}: delivered once to the twin before"
        );
    }
    assert!(!app.stats().await[0].consumer_name_shared);
    app.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_crashed_predecessors_entries_come_back_after_the_live_window() {
    let broker = broker_with(0..6).await;
    // Held 20 s ago by a process that died then: stale at start, re-read at
    // once by the own-pending recovery.
    read_as_twin(&broker, 2).await;
    tokio::time::sleep(WINDOW + Duration::from_secs(5)).await;
    // Held a moment ago by a process that just crashed: fresh at start.
    read_as_twin(&broker, 2).await;
    let seen = Arc::new(Seen::default());
    let app = start(&broker, &seen).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        seen.numbers(),
        [0, 1, 4, 5],
        "stale ones at once, fresh ones wait"
    );
    tokio::time::sleep(WINDOW * 2).await;
    assert_eq!(seen.numbers(), [0, 1, 2, 3, 4, 5]);
    for n in 0..4 {
        assert_eq!(seen.count_of(n), [1], "entry {n}");
    }
    app.shutdown().await;
    assert_eq!(
        broker.group_info(STREAM, GROUP).await.unwrap().pending,
        0,
        "nothing stranded"
    );
}

#[tokio::test(start_paused = true)]
async fn pruning_deletes_only_idle_consumers_that_hold_nothing() {
    let broker = broker_with(0..2).await;
    for name in ["old-empty", "old-holding"] {
        let count = usize::from(name == "old-holding");
        let req = ReadRequest::new(STREAM, GROUP, name, ReadMode::New, count.max(1));
        let batch = broker.read(req).await.unwrap();
        if name == "old-empty" {
            let ids: Vec<_> = batch.deliveries.iter().map(|d| d.id()).collect();
            broker.ack(STREAM, GROUP, &ids).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    // A consumer that read a moment ago (holding nothing) is kept too.
    broker
        .read(ReadRequest::new(STREAM, GROUP, "recent", ReadMode::New, 1))
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let app = RustStream::new(AppInfo::new("svc", "0"))
        .prune_idle_consumers(Duration::from_secs(3600))
        .observe(Arc::clone(&seen) as Arc<dyn Observer>)
        .with_broker(broker.clone(), |b| {
            b.include(worker);
        })
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let names: Vec<String> = broker
        .consumers(STREAM, GROUP)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["old-holding", "recent", NAME]);
    app.shutdown().await;
}
