//! A handler written by hand that records every run: which payload, at
//! which delivery count, by whom and when, and whether a run of a payload
//! started while another run of it was still going. How long a run takes
//! and how it ends are given per payload.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::{AppInfo, Context, HandlerOutcome, Running, RustStream, Settle, Subscription};
use ruststream_core::Broker;
use ruststream_memory::MemoryBroker;
use ruststream_testkit::{HandWritten, Handle};

/// One run: the payload (as text), its delivery count, who ran it, and
/// when it started (since the recorder's start).
pub type Run = (String, u32, &'static str, Duration);

/// What the runs of one test left, shared by its recorders.
#[derive(Clone, Default)]
pub struct Record {
    runs: Arc<Mutex<Vec<Run>>>,
    running: Arc<Mutex<Vec<String>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
}

impl Record {
    /// Every run so far, in the order they started.
    pub fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }

    /// `(payload, delivery count)` of every run so far.
    pub fn texts(&self) -> Vec<(String, u32)> {
        self.runs().into_iter().map(|(t, c, _, _)| (t, c)).collect()
    }

    /// The runs that started while another run of the same payload still
    /// went on.
    pub fn overlaps(&self) -> Vec<String> {
        self.overlaps.lock().unwrap().clone()
    }

    /// Fails unless no run overlapped another of its payload, with `what`
    /// went wrong, the overlaps and every run.
    #[track_caller]
    pub fn assert_no_overlaps(&self, what: &str) {
        let overlaps = self.overlaps();
        assert!(
            overlaps.is_empty(),
            "{what}: {overlaps:?}; runs {:?}",
            self.runs()
        );
    }
}

/// A memory broker, an empty run record, and the instant runs are timed
/// from.
pub fn fresh() -> (MemoryBroker, Record, tokio::time::Instant) {
    (
        MemoryBroker::new(),
        Record::default(),
        tokio::time::Instant::now(),
    )
}

/// Records each run into a [`Record`].
pub struct Recorder {
    /// Who runs (in the record).
    pub who: &'static str,
    /// When runs are timed from.
    pub t0: tokio::time::Instant,
    /// How long a run of each payload takes.
    pub takes: fn(&str) -> Duration,
    /// How a run of a payload ends, by its delivery count.
    pub outcome: fn(&str, u32) -> HandlerOutcome,
    /// Where the runs go.
    pub record: Record,
}

impl Recorder {
    /// Starts an app (instance `who`) on `broker` whose one subscriber,
    /// on `subscription`, is this recorder.
    pub async fn start_on(self, broker: Arc<dyn Broker>, subscription: Subscription) -> Running {
        let who = self.who;
        let sub = HandWritten::new("recorder", subscription, self);
        start_one(who, broker, sub).await
    }
}

/// Starts an app (instance `who`) on `broker` with the one subscriber
/// `sub`.
pub async fn start_one(
    who: &'static str,
    broker: Arc<dyn Broker>,
    sub: HandWritten<Recorder>,
) -> Running {
    let app = RustStream::new(AppInfo::new("recorded", "0")).instance(who);
    super::start_alone(app, broker, sub).await
}

/// Acks every run.
pub fn ack(_: &str, _: u32) -> HandlerOutcome {
    HandlerOutcome::ack()
}

impl Handle for Recorder {
    fn start<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        let text = String::from_utf8(ctx.payload().to_vec()).unwrap();
        let count = ctx.delivery_count();
        let takes = (self.takes)(&text);
        let outcome = (self.outcome)(&text, count);
        let (who, at, record) = (self.who, self.t0.elapsed(), self.record.clone());
        async move {
            record
                .runs
                .lock()
                .unwrap()
                .push((text.clone(), count, who, at));
            {
                let mut running = record.running.lock().unwrap();
                if running.contains(&text) {
                    let overlap = format!("{text} (count {count}, {who})");
                    record.overlaps.lock().unwrap().push(overlap);
                }
                running.push(text.clone());
            }
            tokio::time::sleep(takes).await;
            let mut running = record.running.lock().unwrap();
            if let Some(at) = running.iter().position(|t| t == &text) {
                running.remove(at);
            }
            Settle::Outcome(outcome)
        }
    }
}
