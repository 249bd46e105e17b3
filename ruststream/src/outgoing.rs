//! Publishing typed values.

use crate::metrics::PublishMetrics;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;

use ruststream_core::{Broker, BrokerError, EntryId, Headers, Message};
use serde::Serialize;

use crate::PARTITION_KEY_HEADER;

/// A type that is published to a stream: `#[derive(Outgoing)]` with
/// `#[outgoing(name = "...")]` implements it.
///
/// ```
/// use ruststream::Outgoing;
///
/// struct Screened;
/// impl Outgoing for Screened {
///     const STREAM: &'static str = "payments.screened";
/// }
/// assert_eq!(Screened::STREAM, "payments.screened");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` names no stream to be published to",
    label = "not `Outgoing`",
    note = "add `#[derive(Outgoing)]` and `#[outgoing(name = \"stream\")]` to the type"
)]
pub trait Outgoing {
    /// The stream values of this type are published to.
    const STREAM: &'static str;
}

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The value could not be encoded as JSON.
    #[error("cannot encode a message for stream {stream:?}: {source}")]
    Encode {
        /// The stream it was meant for.
        stream: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The broker refused or failed.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Publishes typed values (as JSON) through a broker.
///
/// ```
/// use std::sync::Arc;
/// use ruststream::{MemoryBroker, Outgoing, Publisher, PARTITION_KEY_HEADER};
/// use serde::Serialize;
///
/// #[derive(Serialize)]
/// struct Payment { id: u64, account: String }
/// impl Outgoing for Payment { const STREAM: &'static str = "payments"; }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ruststream::PublishError> {
/// let broker = Publisher::new(Arc::new(MemoryBroker::new()));
/// let payment = Payment { id: 1, account: "acme".into() };
/// let id = broker.publish(&payment).partition_key(&payment.account).await?;
/// let stored = broker.broker().range("payments", id, id, 1).await?;
/// assert_eq!(stored[0].headers().get_str(PARTITION_KEY_HEADER), Some("acme"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Publisher {
    broker: Arc<dyn Broker>,
    metrics: PublishMetrics,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("broker", &self.broker.name())
            .finish()
    }
}

impl Publisher {
    /// A publisher on `broker`.
    pub fn new(broker: Arc<dyn Broker>) -> Self {
        Publisher {
            broker,
            metrics: PublishMetrics::default(),
        }
    }

    /// The same publisher, its metrics labelled with `app`.
    pub(crate) fn for_app(mut self, app: &str) -> Self {
        self.metrics = PublishMetrics::for_app(app);
        self
    }

    /// Publishes `message` to `stream`, counted and timed in the metrics.
    async fn send(&self, stream: &str, message: Message) -> Result<EntryId, BrokerError> {
        let started = tokio::time::Instant::now();
        let id = self.broker.publish(stream, message).await?;
        self.metrics.published(stream, 1, started.elapsed());
        Ok(id)
    }

    /// The broker it publishes to.
    pub fn broker(&self) -> &Arc<dyn Broker> {
        &self.broker
    }

    /// Publishes `value` to its type's stream. Add steps before awaiting:
    /// `.partition_key(..)`, `.header(..)`, `.to(stream)`. Resolves to the
    /// new entry's id once the broker has accepted it.
    ///
    /// With the `opentelemetry` feature, the trace context of the span
    /// current where the publish is awaited is added to the headers, unless
    /// a `traceparent` was set with `.header(..)` (see `docs/operations.md`,
    /// "Trace propagation").
    pub fn publish<'a, T: Outgoing + Serialize + ?Sized>(
        &'a self,
        value: &'a T,
    ) -> PublishBuilder<'a, T> {
        PublishBuilder {
            publisher: self,
            value,
            stream: None,
            headers: Headers::new(),
        }
    }

    /// Publishes raw bytes and headers to `stream`.
    ///
    /// With the `opentelemetry` feature, the current span's trace context
    /// is added to the headers unless they already have a `traceparent`
    /// (see `docs/operations.md`, "Trace propagation").
    pub async fn publish_raw(
        &self,
        stream: &str,
        message: Message,
    ) -> Result<EntryId, BrokerError> {
        #[cfg(feature = "opentelemetry")]
        let message = {
            let mut message = message;
            crate::trace_context::inject(&mut message.headers);
            message
        };
        self.send(stream, message).await
    }
}

/// A publish being prepared; await it to send. See [`Publisher::publish`].
#[must_use = "a publish does nothing until it is awaited"]
pub struct PublishBuilder<'a, T: ?Sized> {
    publisher: &'a Publisher,
    value: &'a T,
    stream: Option<String>,
    headers: Headers,
}

impl<T: ?Sized> PublishBuilder<'_, T> {
    /// Sets the partition key ([`PARTITION_KEY_HEADER`]): subscribers with
    /// `workers(n, by_key)` handle entries with the same key in order.
    pub fn partition_key(mut self, key: impl fmt::Display) -> Self {
        self.headers.insert(PARTITION_KEY_HEADER, key.to_string());
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key, value);
        self
    }

    /// Publishes to `stream` instead of the type's own stream.
    pub fn to(mut self, stream: impl Into<String>) -> Self {
        self.stream = Some(stream.into());
        self
    }
}

impl<'a, T: Outgoing + Serialize + ?Sized + Sync> IntoFuture for PublishBuilder<'a, T> {
    type Output = Result<EntryId, PublishError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let stream = self.stream.unwrap_or_else(|| T::STREAM.to_owned());
        let encoded = serde_json::to_vec(self.value);
        let publisher = self.publisher;
        let headers = self.headers;
        // Here, not in the future: the span current where the publish is
        // awaited is the one whose context it carries.
        #[cfg(feature = "opentelemetry")]
        let headers = {
            let mut headers = headers;
            crate::trace_context::inject(&mut headers);
            headers
        };
        Box::pin(async move {
            let payload = encoded.map_err(|source| PublishError::Encode {
                stream: stream.clone(),
                source,
            })?;
            Ok(publisher
                .send(&stream, Message { headers, payload })
                .await?)
        })
    }
}
