//! A start retried after a failure reads under the consumer names its
//! predecessor had. Alone in its test binary: generated names are numbered
//! per process, and other tests starting apps would take numbers.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, BrokerFuture, StreamStart, forward_broker};
use support::{Job, advance, group_with_jobs, read_new_as, refused};

/// A memory broker that refuses the first `ensure_group`: a broker not up
/// yet when the app first starts.
#[derive(Clone, Default)]
struct NotYet {
    inner: MemoryBroker,
    refused: Arc<AtomicBool>,
}

impl Broker for NotYet {
    fn ensure_group<'a>(
        &'a self,
        stream: &'a str,
        group: &'a str,
        start: StreamStart,
    ) -> BrokerFuture<'a, bool> {
        Box::pin(async move {
            if !self.refused.swap(true, Ordering::SeqCst) {
                return Err(refused("not-yet"));
            }
            self.inner.ensure_group(stream, group, start).await
        })
    }

    forward_broker!(
        inner: name, check_mode, publish, publish_batch, read, ack, set_group_position, retry,
        dead_letter, redrive, discard, group_info, consumers, pending, dead_letters, range,
        stream_info, trim, extend_claim, count_deliveries,
    );
}

static RETRIED_SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[subscriber(RedisStream::new("retried").group("g"))]
async fn retried(job: &Job) {
    RETRIED_SEEN.lock().unwrap().push(job.n);
}

/// A start that fails (the broker is not up yet) takes no consumer number:
/// the start retried in the same process reads under the generated name a
/// first start would have (`ruststream-0`), the name its crashed
/// predecessor read under, and handles what that one left pending.
#[tokio::test(start_paused = true)]
async fn a_retried_start_reads_under_the_name_its_predecessor_had() {
    let broker = NotYet::default();
    group_with_jobs(&broker.inner, "retried", 0..2).await;
    // The predecessor read both under the first generated name, then died.
    read_new_as(&broker.inner, "retried", "ruststream-0", 2).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let start = || {
        RustStream::new(AppInfo::new("svc", "0"))
            .with_broker(broker.clone(), |b| {
                b.include(retried);
            })
            .start()
    };
    assert!(start().await.is_err(), "the broker is not up yet");
    let app = start().await.unwrap();
    let names: Vec<String> = app.consumers().map(|(_, c)| c.to_owned()).collect();
    assert_eq!(names, ["ruststream-0"]);
    advance(Duration::from_secs(1), 5).await;
    assert_eq!(*RETRIED_SEEN.lock().unwrap(), [0, 1]);
    app.shutdown().await;
}
