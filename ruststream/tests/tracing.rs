//! Tracing around deliveries.
//!
//! These tests sit in their own test binary: tracing caches whether a
//! callsite is enabled the first time any thread reaches it, judged by that
//! thread's subscriber when only one is registered. Among the runtime
//! tests, a thread with no subscriber could reach the delivery span first
//! and have it cached as disabled for everyone. Here every test sets its
//! subscriber before any delivery.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};

use ruststream::prelude::*;
use ruststream::{Broker, Message};
use support::{start_fresh, until};

#[derive(Debug, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "pings")]
struct Ping {
    n: u64,
}

/// Records the fields of every `delivery` span.
struct SpanFields(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanFields {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", field.name(), value));
            }
        }
        if attrs.metadata().name() == "delivery" {
            let mut fields = Fields(String::new());
            attrs.record(&mut fields);
            self.0.lock().unwrap().push(fields.0.trim_end().to_owned());
        }
    }
}

/// Counts `delivery` spans opened and closed.
#[derive(Clone, Default)]
struct SpanLife(Arc<Mutex<(usize, usize)>>);

impl<S> tracing_subscriber::Layer<S> for SpanLife
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "delivery" {
            self.0.lock().unwrap().0 += 1;
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if ctx.span(&id).is_some_and(|s| s.name() == "delivery") {
            self.0.lock().unwrap().1 += 1;
        }
    }
}

#[subscriber(RedisStream::new("span-life").group("g"))]
async fn span_life(_ping: &Ping) {}

/// A delivery's span closes when its handler finishes, not when the lane
/// next gets work.
#[tokio::test(start_paused = true)]
async fn a_delivery_span_closes_when_its_handler_finishes() {
    use tracing_subscriber::layer::SubscriberExt;
    let life = SpanLife::default();
    let subscriber = tracing_subscriber::registry().with(life.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let (broker, app) = start_fresh(span_life).await;
    broker
        .publish("span-life", Message::new(br#"{"n":1}"#.to_vec()))
        .await
        .unwrap();
    until("handled", async || app.stats().await[0].acked == 1).await;
    assert_eq!(*life.0.lock().unwrap(), (1, 1), "(opened, closed)");
    app.shutdown().await;
}

#[subscriber(RedisStream::new("traced").group("g").consumer("tracer"))]
async fn traced(_ping: &Ping) {}

#[tokio::test(start_paused = true)]
async fn every_delivery_runs_in_a_span_naming_stream_group_consumer_id_and_count() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(SpanFields(Arc::clone(&spans)));
    let _guard = tracing::subscriber::set_default(subscriber);

    let (broker, app) = start_fresh(traced).await;
    let id = broker
        .publish("traced", Message::new(br#"{"n":1}"#.to_vec()))
        .await
        .unwrap();
    until("span", async || !spans.lock().unwrap().is_empty()).await;
    assert_eq!(
        spans.lock().unwrap()[0],
        format!(
            r#"subscriber="traced" stream="traced" group="g" consumer=tracer id={id} delivery_count=0"#
        )
    );
    app.shutdown().await;
}
