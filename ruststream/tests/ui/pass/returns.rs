//! Every return type a subscriber without `reply` may have.

use std::fmt;

use ruststream::prelude::*;
use ruststream::{IntoSettle, Settle};

#[path = "../support.rs"]
mod support;

#[derive(Debug, Deserialize)]
struct Job {
    fail: bool,
}

#[subscriber(RedisStream::new("jobs").group("unit"))]
async fn nothing(_job: &Job) {}

#[subscriber(RedisStream::new("jobs").group("explicit-unit"))]
async fn explicit_unit(_job: &Job) -> () {}

#[subscriber(RedisStream::new("jobs").group("outcome"))]
async fn outcome(job: &Job) -> HandlerOutcome {
    if job.fail {
        HandlerOutcome::dead_letter("asked to fail")
    } else {
        HandlerOutcome::retry_after(Duration::from_secs(5))
    }
}

#[subscriber(RedisStream::new("jobs").group("string-error"))]
async fn string_error(job: &Job) -> Result<(), String> {
    if job.fail {
        Err("asked to fail".to_owned())
    } else {
        Ok(())
    }
}

#[derive(Debug)]
struct JobError(u32);

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job error {}", self.0)
    }
}

#[subscriber(RedisStream::new("jobs").group("custom-error"))]
async fn custom_error(job: &Job) -> Result<(), JobError> {
    if job.fail { Err(JobError(42)) } else { Ok(()) }
}

#[subscriber(RedisStream::new("jobs").group("io-error"))]
async fn io_error(_job: &Job) -> std::io::Result<()> {
    Err(std::io::Error::other("disk on fire"))
}

#[subscriber(RedisStream::new("jobs").group("opaque"))]
async fn opaque(_job: &Job) -> impl IntoSettle {
    HandlerOutcome::ack()
}

fn main() {
    let ok = || support::json(r#"{"fail":false}"#);
    let fail = || support::json(r#"{"fail":true}"#);
    assert_eq!(support::deliver(&nothing, ok()), support::acked());
    assert_eq!(support::deliver(&explicit_unit, ok()), support::acked());
    assert_eq!(
        support::deliver(&outcome, ok()),
        Settle::Outcome(HandlerOutcome::RetryAfter(Duration::from_secs(5)))
    );
    assert_eq!(
        support::deliver(&outcome, fail()),
        Settle::Outcome(HandlerOutcome::DeadLetter("asked to fail".into()))
    );
    assert_eq!(support::deliver(&string_error, ok()), support::acked());
    assert_eq!(
        support::deliver(&string_error, fail()),
        Settle::Failed("asked to fail".into())
    );
    assert_eq!(
        support::deliver(&custom_error, fail()),
        Settle::Failed("job error 42".into())
    );
    assert_eq!(
        support::deliver(&io_error, ok()),
        Settle::Failed("disk on fire".into())
    );
    assert_eq!(support::deliver(&opaque, ok()), support::acked());
}
