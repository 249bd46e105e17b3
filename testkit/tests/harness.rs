//! The test harness itself: quiet detection, the step budget, and time.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ruststream::prelude::*;
use ruststream::{Broker, Message, Settlement};
use ruststream_testkit::{HandWritten, Handle, TestApp};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "echo")]
struct Echo {
    n: u64,
}

/// A service that feeds itself: every entry it handles publishes another.
#[subscriber(RedisStream::new("echo").group("g"))]
async fn echo(message: &Echo, ctx: &mut Context<'_>) {
    let next = Echo { n: message.n + 1 };
    ctx.publisher().publish(&next).await.unwrap();
}

fn restless() -> impl App {
    RustStream::new(AppInfo::new("restless", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(echo);
    })
}

#[tokio::test]
#[should_panic(expected = "the service did not quiet down within 50 steps")]
async fn a_service_that_never_quiets_fails_the_test_instead_of_hanging() {
    let tb = TestApp::start(restless()).await.unwrap();
    tb.publish(&Echo { n: 0 }).await.unwrap();
    tb.run_until_quiet_within(50).await;
}

#[tokio::test]
#[should_panic(expected = "advance(1s) did not reach its end within 300ms of real time")]
async fn advance_on_a_service_that_never_waits_fails_the_test_instead_of_hanging() {
    let tb = TestApp::start(restless()).await.unwrap();
    tb.set_advance_limit(Duration::from_millis(300));
    tb.publish(&Echo { n: 0 }).await.unwrap();
    tb.advance(Duration::from_secs(1)).await;
}

#[subscriber(RedisStream::new("slow").group("g"))]
async fn slow(_echo: &Echo) {
    tokio::time::sleep(Duration::from_secs(10)).await;
}

fn slow_app() -> impl App {
    RustStream::new(AppInfo::new("slow", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(slow);
    })
}

#[tokio::test]
async fn advance_lets_handlers_sleep_through_simulated_time() {
    let tb = TestApp::start(slow_app()).await.unwrap();
    tb.publish(&Echo { n: 1 }).to("slow").await.unwrap();
    let started = tokio::time::Instant::now();
    tb.advance(Duration::from_secs(10)).await;
    let elapsed = started.elapsed();
    // tokio rounds timers up to the next millisecond.
    assert!(
        elapsed >= Duration::from_secs(10) && elapsed <= Duration::from_millis(10_002),
        "{elapsed:?}"
    );
    let received = tb.received("slow");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].settlement, Settlement::Acked);
    assert!(tb.pending("slow", "g").await.is_empty());
    tb.shutdown().await;
}

#[subscriber(RedisStream::new("raw").group("g"))]
async fn raw(bytes: &[u8]) -> HandlerOutcome {
    if bytes == b"bad" {
        HandlerOutcome::dead_letter("bad bytes")
    } else {
        HandlerOutcome::ack()
    }
}

#[tokio::test]
async fn raw_entries_and_dead_letters_are_visible() {
    let app = RustStream::new(AppInfo::new("raw", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(raw);
    });
    let tb = TestApp::start(app).await.unwrap();
    tb.publish_raw("raw", Message::new(b"bad".to_vec()))
        .await
        .unwrap();
    tb.publish_raw("raw", Message::new(b"good".to_vec()))
        .await
        .unwrap();
    tb.run_until_quiet().await;
    assert_eq!(tb.stream_len("raw").await, 2);
    assert_eq!(tb.received("raw").len(), 2);
    let dead = tb.dead_letters("raw", "g").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "bad bytes");
    assert_eq!(tb.broker().group_info("raw", "g").await.unwrap().pending, 0);
    tb.shutdown().await;
}

#[subscriber(RedisStream::new("slow-steps").group("g"))]
async fn sleeps_ten_seconds(_job: &Echo) {
    tokio::time::sleep(Duration::from_secs(10)).await;
}

/// `advance` steps through a handler whose own sleep lasts longer than one
/// step: the first five seconds leave it running (no panic: the clock did
/// move), the next five end it.
#[tokio::test(start_paused = true)]
async fn advance_steps_through_a_sleeping_handler() {
    let app =
        RustStream::new(AppInfo::new("slow-steps", "0")).with_broker(MemoryBroker::new(), |b| {
            b.include(sleeps_ten_seconds);
        });
    let tb = TestApp::start(app).await.unwrap();
    tb.publish(&Echo { n: 0 }).to("slow-steps").await.unwrap();
    tb.advance(Duration::from_secs(5)).await;
    assert!(tb.received("sleeps_ten_seconds").is_empty());
    tb.advance(Duration::from_secs(5)).await;
    assert_eq!(tb.received("sleeps_ten_seconds").len(), 1);
    assert!(tb.pending("slow-steps", "g").await.is_empty());
    tb.shutdown().await;
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "chain")]
struct Step {
    n: u64,
}

/// Retried three times, 10 s apart.
#[subscriber(RedisStream::new("chain").group("g"))]
async fn retried_thrice(_step: &Step, ctx: &mut Context<'_>) -> HandlerOutcome {
    if ctx.delivery_count() < 3 {
        HandlerOutcome::retry_after(Duration::from_secs(10))
    } else {
        HandlerOutcome::ack()
    }
}

/// A runtime not started paused: `TestApp` pauses the clock between two of
/// the time driver's milliseconds, and must move it onto their grid, or
/// every timer fires a millisecond late and one `advance` over a chain of
/// them stops short of its end.
#[tokio::test]
async fn a_chain_of_timers_keeps_time_on_a_clock_the_testkit_paused() {
    let app = RustStream::new(AppInfo::new("chain", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(retried_thrice);
    });
    let tb = TestApp::start(app).await.unwrap();
    tb.publish(&Step { n: 1 }).await.unwrap();
    tb.run_until_quiet().await;
    tb.advance(Duration::from_secs(30)).await;
    let counts: Vec<u32> = tb
        .received("retried_thrice")
        .iter()
        .map(|r| r.delivery_count)
        .collect();
    assert_eq!(counts, [0, 1, 2, 3]);
}

/// A hand-written handler that acks.
struct Acks;

impl Handle for Acks {
    async fn start(&self, _ctx: &mut Context<'_>) -> ruststream::Settle {
        ruststream::Settle::Outcome(HandlerOutcome::Ack)
    }
}

/// A hand-written subscriber that cannot start (a batch of none) is named
/// in the error with the file and line that made it, as a `#[subscriber]`
/// function is, not the testkit's own file.
#[tokio::test(start_paused = true)]
async fn a_hand_written_subscriber_that_cannot_start_names_where_it_was_made() {
    let (sub, line) = (
        HandWritten::new(
            "batch_of_none",
            ruststream::Subscription::new(RedisStream::new("hand").group("g"))
                .batch(ruststream::Batch::new(0, Duration::from_millis(1))),
            Acks,
        ),
        line!() - 6,
    );
    let app = RustStream::new(AppInfo::new("hand", "0")).with_broker(MemoryBroker::new(), |b| {
        b.include(sub);
    });
    let error = TestApp::start(app).await.unwrap_err().to_string();
    assert!(error.contains(&format!("{}:{line}", file!())), "{error}");
}
