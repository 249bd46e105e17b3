//! A handler written by hand that records every run: which payload, at
//! which delivery count, by whom and when, and whether a run of a payload
//! started while another run of it was still going. How long a run takes
//! and how it ends are given per payload.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::{Context, HandlerOutcome, Settle};
use ruststream_testkit::Handle;

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
