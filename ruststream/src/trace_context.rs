//! W3C trace context through message headers (feature `opentelemetry`):
//! a publish writes the current span's OpenTelemetry context into the
//! message's headers, and a delivery whose headers carry one runs its
//! handler in a span with that context as its parent. See
//! `docs/operations.md`, "Trace propagation".
//!
//! The headers are written and read by the global text-map propagator of
//! `opentelemetry` (`opentelemetry::global::set_text_map_propagator`): with
//! the W3C one installed (`TraceContextPropagator` of `opentelemetry_sdk`)
//! they are [`TRACEPARENT_HEADER`] and [`TRACESTATE_HEADER`]. The span
//! context comes from the `tracing` span through `tracing-opentelemetry`'s
//! layer. An app wires both once, at start-up:
//!
//! ```standalone_crate
//! use opentelemetry::trace::TracerProvider as _;
//! use opentelemetry_sdk::propagation::TraceContextPropagator;
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! // A real service adds its exporter here (`.with_batch_exporter(..)`).
//! let provider = SdkTracerProvider::builder().build();
//! // The header format: W3C `traceparent` / `tracestate`.
//! opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
//! // `tracing` spans become OpenTelemetry spans.
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("payments")));
//! tracing::subscriber::set_global_default(subscriber).expect("no subscriber set yet");
//!
//! // From here on, a publish inside a span carries its trace context.
//! let span = tracing::info_span!("checkout");
//! let mut headers = ruststream::Headers::new();
//! span.in_scope(|| ruststream::trace_context::inject(&mut headers));
//! assert!(headers.contains(ruststream::trace_context::TRACEPARENT_HEADER));
//! ```

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt as _;
use ruststream_core::Headers;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header with the trace id, the parent span's id and the trace
/// flags (`00-<trace id>-<span id>-<flags>`).
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The W3C header with vendors' trace state, written beside
/// [`TRACEPARENT_HEADER`] when it is not empty.
pub const TRACESTATE_HEADER: &str = "tracestate";

/// Writes the current `tracing` span's OpenTelemetry context into
/// `headers` through the global propagator. Does nothing when `headers`
/// already has a [`TRACEPARENT_HEADER`] (the caller set it on purpose),
/// when no span is current, or when the span has no OpenTelemetry context
/// (no `tracing-opentelemetry` layer, or the propagator writes nothing).
///
/// [`Publisher::publish`](crate::Publisher::publish),
/// [`Publisher::publish_raw`](crate::Publisher::publish_raw) and a `reply`
/// subscriber's reply call it; call it yourself before publishing through a
/// [`Broker`](crate::Broker) directly.
pub fn inject(headers: &mut Headers) {
    if headers.contains(TRACEPARENT_HEADER) {
        return;
    }
    let span = tracing::Span::current();
    if span.is_disabled() {
        // No span: its context would be empty, so there is nothing to write.
        return;
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&cx, &mut HeaderInjector(headers));
    });
}

/// The remote parent `headers` name: the context the global propagator
/// reads from them, when it holds a valid span context. `None` for headers
/// with no trace context or a malformed one.
///
/// Reading starts from an empty context, not the current one, so headers
/// that say nothing never hand back the reader's own span.
pub fn extract(headers: &Headers) -> Option<Context> {
    let cx = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract_with_context(&Context::new(), &HeaderExtractor(headers))
    });
    cx.span().span_context().is_valid().then_some(cx)
}

/// Whether a delivery with these headers may carry a trace context: a
/// check of one header, made before anything costlier.
#[inline]
pub(crate) fn carries_context(headers: &Headers) -> bool {
    headers.contains(TRACEPARENT_HEADER)
}

/// The handler's span for a delivery whose headers hold a valid trace
/// context: `make()`'s span with that context as its parent. `None` when
/// the headers hold none, or the span made is disabled.
///
/// A span whose parent cannot be set (no `tracing-opentelemetry` layer) is
/// still returned: it is enabled, so it is what the handler's logs carry.
pub(crate) fn span_with_remote_parent(
    headers: &Headers,
    make: impl FnOnce() -> tracing::Span,
) -> Option<tracing::Span> {
    let parent = extract(headers)?;
    let span = make();
    if span.is_disabled() {
        return None;
    }
    // An error only says the span is not an OpenTelemetry one (no layer):
    // it then has no parent to take, and runs as it would without one.
    let _ = span.set_parent(parent);
    Some(span)
}

/// Headers as the propagator writes them.
struct HeaderInjector<'a>(&'a mut Headers);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says no more than none at all.
        if key == TRACESTATE_HEADER && value.is_empty() {
            return;
        }
        self.0.insert(key, value);
    }
}

/// Headers as the propagator reads them.
struct HeaderExtractor<'a>(&'a Headers);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get_str(key)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(key, _)| key).collect()
    }
}
