//! W3C trace context through message headers (feature `opentelemetry`,
//! `docs/operations.md`, "Trace propagation"): a handler's span sits in the
//! publisher's trace, on the memory broker and on a real Redis server
//! (`RUSTSTREAM_REDIS_URL`, default `redis://127.0.0.1:6379`).
//!
//! Every test here shares one global subscriber (`tracing` with the
//! OpenTelemetry layer) and one in-memory span exporter, set before any
//! span is made (tracing caches whether a callsite is enabled the first
//! time it is reached); each test finds its own spans by trace id or by
//! stream.
//!
//! Run it with `cargo test -p ruststream --features opentelemetry --test otel`.

#![cfg(feature = "opentelemetry")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use ruststream::prelude::*;
use ruststream::trace_context::{self, TRACEPARENT_HEADER, TRACESTATE_HEADER};
use ruststream::{Broker, Entry, Headers, Message};
use ruststream_redis::RedisBroker;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// The exporter every test's spans end in; the first call sets up the
/// global subscriber and the W3C propagator.
fn exporter() -> &'static InMemorySpanExporter {
    static SETUP: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    let (exporter, _provider) = SETUP.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let subscriber = tracing_subscriber::registry().with(
            tracing_opentelemetry::layer().with_tracer(provider.tracer("ruststream-otel-test")),
        );
        tracing::subscriber::set_global_default(subscriber).unwrap();
        (exporter, provider)
    });
    exporter
}

/// The trace id and span id of `span`'s OpenTelemetry context.
fn ids(span: &tracing::Span) -> (TraceId, SpanId) {
    let cx = span.context();
    let context = cx.span().span_context().clone();
    assert!(
        context.is_valid(),
        "span {span:?} has an OpenTelemetry context"
    );
    (context.trace_id(), context.span_id())
}

/// The `traceparent` a sampled span with these ids is written as.
fn traceparent(trace: TraceId, span: SpanId) -> String {
    format!("00-{trace}-{span}-01")
}

/// Waits (real time: Redis keeps its own clock) until `what` holds.
async fn wait_for<T>(what: &str, mut find: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..400 {
        if let Some(found) = find().await {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Waits until a finished span matching `pick` has been exported.
async fn exported(what: &str, pick: impl Fn(&SpanData) -> bool) -> SpanData {
    wait_for(what, async || {
        exporter()
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .find(|span| pick(span))
    })
    .await
}

/// Whether `span` has the attribute `key` with the text `value`.
fn has_attribute(span: &SpanData, key: &str, value: &str) -> bool {
    span.attributes
        .iter()
        .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
}

/// Waits until `stream` holds at least one entry, and returns the first.
async fn first_entry(broker: &dyn Broker, stream: &str) -> Entry {
    wait_for(&format!("an entry on {stream}"), async || {
        broker
            .range(stream, EntryId::ZERO, EntryId::MAX, 1)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await
}

#[derive(Debug, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "otel-orders")]
struct Order {
    n: u64,
}

#[derive(Debug, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "otel-receipts")]
struct Receipt {
    n: u64,
}

/// The span context each handler ran in, by order number.
static SEEN: Mutex<Vec<(u64, TraceId, SpanId)>> = Mutex::new(Vec::new());

/// Notes the span context the handler runs in.
fn note(order: &Order) {
    let cx = tracing::Span::current().context();
    let context = cx.span().span_context().clone();
    SEEN.lock()
        .unwrap()
        .push((order.n, context.trace_id(), context.span_id()));
}

fn seen(n: u64) -> Option<(TraceId, SpanId)> {
    SEEN.lock()
        .unwrap()
        .iter()
        .find(|(seen, ..)| *seen == n)
        .map(|&(_, trace, span)| (trace, span))
}

async fn start(
    broker: Arc<dyn Broker>,
    include: impl FnOnce(&mut ruststream::BrokerScope<'_>),
) -> ruststream::Running {
    RustStream::new(AppInfo::new("otel", "0"))
        .with_shared_broker(broker, include)
        .start()
        .await
        .unwrap()
}

// ---- the memory broker -----------------------------------------------------

#[subscriber(RedisStream::new("otel-orders").group("g").start_id(StreamStart::Beginning), reply)]
async fn take_order(order: &Order) -> Receipt {
    note(order);
    Receipt { n: order.n }
}

/// The handler's span is a child of the publishing span, in its trace, and
/// the reply it publishes is a child of the handler's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_runs_inside_the_publishers_trace_and_its_reply_too() {
    exporter();
    let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
    let app = start(Arc::clone(&broker), |b| {
        b.include(take_order).out_reply(Publish);
    })
    .await;
    let publisher = Publisher::new(Arc::clone(&broker));

    let checkout = tracing::info_span!("checkout");
    let (trace, checkout_id) = ids(&checkout);
    let id = async { publisher.publish(&Order { n: 1 }).await }
        .instrument(checkout.clone())
        .await
        .unwrap();
    drop(checkout);

    let sent = broker.range("otel-orders", id, id, 1).await.unwrap();
    let expected = traceparent(trace, checkout_id);
    assert_eq!(
        sent[0].headers().get_str(TRACEPARENT_HEADER),
        Some(expected.as_str())
    );
    assert!(
        !sent[0].headers().contains(TRACESTATE_HEADER),
        "an empty trace state is not written"
    );

    let delivery = exported("the handler's span", |span| {
        span.name == "delivery" && span.span_context.trace_id() == trace
    })
    .await;
    assert_eq!(delivery.parent_span_id, checkout_id);
    assert!(delivery.parent_span_is_remote);
    assert!(has_attribute(&delivery, "stream", "otel-orders"));
    assert!(has_attribute(&delivery, "subscriber", "take_order"));
    let handler_id = delivery.span_context.span_id();
    assert_eq!(seen(1), Some((trace, handler_id)), "the handler ran in it");

    let reply = first_entry(&*broker, "otel-receipts").await;
    let expected = traceparent(trace, handler_id);
    assert_eq!(
        reply.headers().get_str(TRACEPARENT_HEADER),
        Some(expected.as_str()),
        "the reply is a child of the handler's span"
    );
    app.shutdown().await;
}

// ---- the Redis broker ------------------------------------------------------

fn redis_url() -> String {
    std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A stream name no other test or run uses.
fn redis_orders() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| format!("rs-test:{}:otel-orders", ruststream_redis::unique_token()))
        .clone()
}

#[subscriber(RedisStream::new(redis_orders()).group("g").start_id(StreamStart::Beginning))]
async fn take_redis_order(order: &Order) {
    note(order);
}

/// The same across a real Redis server: the headers go through `XADD` and
/// come back with the entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_runs_inside_the_publishers_trace_across_redis() {
    exporter();
    let broker: Arc<dyn Broker> = Arc::new(RedisBroker::standalone(redis_url()));
    let app = start(Arc::clone(&broker), |b| {
        b.include(take_redis_order);
    })
    .await;
    let publisher = Publisher::new(Arc::clone(&broker));

    let checkout = tracing::info_span!("checkout");
    let (trace, checkout_id) = ids(&checkout);
    let id = async { publisher.publish(&Order { n: 2 }).to(redis_orders()).await }
        .instrument(checkout.clone())
        .await
        .unwrap();
    drop(checkout);

    let sent = broker.range(&redis_orders(), id, id, 1).await.unwrap();
    let expected = traceparent(trace, checkout_id);
    assert_eq!(
        sent[0].headers().get_str(TRACEPARENT_HEADER),
        Some(expected.as_str())
    );

    let delivery = exported("the handler's span", |span| {
        span.name == "delivery" && span.span_context.trace_id() == trace
    })
    .await;
    assert_eq!(delivery.parent_span_id, checkout_id);
    assert!(delivery.parent_span_is_remote);
    assert!(has_attribute(&delivery, "stream", &redis_orders()));
    assert_eq!(
        seen(2),
        Some((trace, delivery.span_context.span_id())),
        "the handler ran in it"
    );
    app.shutdown().await;
    broker
        .trim(&redis_orders(), ruststream::Trim::MaxLen(0))
        .await
        .unwrap();
}

// ---- no context, the caller's context, a malformed context -----------------

/// With no span current there is no context to carry: no header is added,
/// by `publish` or by `publish_raw`.
#[tokio::test]
async fn a_publish_with_no_active_context_adds_no_headers() {
    exporter();
    let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
    let publisher = Publisher::new(Arc::clone(&broker));
    let id = publisher.publish(&Order { n: 3 }).await.unwrap();
    let raw = publisher
        .publish_raw("otel-orders", Message::new(br#"{"n":4}"#.to_vec()))
        .await
        .unwrap();
    let sent = broker.range("otel-orders", id, raw, 10).await.unwrap();
    assert_eq!(sent.len(), 2);
    for entry in &sent {
        assert!(entry.headers().is_empty(), "{:?}", entry.headers());
    }
}

/// A `traceparent` the caller set is sent as it is, inside a span too.
#[tokio::test]
async fn a_traceparent_set_by_the_caller_is_kept() {
    exporter();
    let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
    let publisher = Publisher::new(Arc::clone(&broker));
    let theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let span = tracing::info_span!("checkout");
    let (id, raw) = async {
        let id = publisher
            .publish(&Order { n: 5 })
            .header(TRACEPARENT_HEADER, theirs)
            .await
            .unwrap();
        let raw = publisher
            .publish_raw(
                "otel-orders",
                Message::new(br#"{"n":6}"#.to_vec()).with_header(TRACEPARENT_HEADER, theirs),
            )
            .await
            .unwrap();
        (id, raw)
    }
    .instrument(span)
    .await;
    let sent = broker.range("otel-orders", id, raw, 10).await.unwrap();
    assert_eq!(sent.len(), 2);
    for entry in &sent {
        let headers: Vec<_> = entry.headers().iter().collect();
        assert_eq!(headers, [(TRACEPARENT_HEADER, theirs)]);
    }
}

#[subscriber(RedisStream::new("otel-malformed").group("g").start_id(StreamStart::Beginning))]
async fn take_malformed(order: &Order) {
    note(order);
}

/// An entry whose `traceparent` cannot be read is handled all the same:
/// its handler's span just has no remote parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_with_a_malformed_traceparent_is_still_handled() {
    exporter();
    let malformed = [
        "garbage",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
    ];
    for value in malformed {
        let headers: Headers = [(TRACEPARENT_HEADER, value)].into_iter().collect();
        assert!(trace_context::extract(&headers).is_none(), "{value}");
    }

    let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
    let app = start(Arc::clone(&broker), |b| {
        b.include(take_malformed);
    })
    .await;
    let publisher = Publisher::new(Arc::clone(&broker));
    publisher
        .publish(&Order { n: 7 })
        .to("otel-malformed")
        .header(TRACEPARENT_HEADER, "garbage")
        .await
        .unwrap();
    let (trace, _) = wait_for("the handler", async || seen(7)).await;
    assert_ne!(trace, TraceId::INVALID);
    let delivery = exported("the handler's span", |span| {
        span.name == "delivery" && has_attribute(span, "stream", "otel-malformed")
    })
    .await;
    assert!(!delivery.parent_span_is_remote, "{delivery:?}");
    assert_eq!(delivery.span_context.trace_id(), trace);
    let info = wait_for("the entry acked", async || {
        let info = broker.group_info("otel-malformed", "g").await.unwrap();
        (info.pending == 0).then_some(info)
    })
    .await;
    assert_eq!(info.dead_letters, 0);
    app.shutdown().await;
}
