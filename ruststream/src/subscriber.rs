//! The trait `#[subscriber]` implements, and the registry of subscribers.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{BatchSettle, Context, EntryBatch, Outgoing, Settle, Subscription};

/// Where a subscriber was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubscriberInfo {
    /// The handler function's name.
    pub name: &'static str,
    /// The module it is in.
    pub module: &'static str,
    /// The source file.
    pub file: &'static str,
    /// The line of the `#[subscriber]` attribute.
    pub line: u32,
}

/// A subscriber: a handler function and its subscription. `#[subscriber]`
/// implements this for a unit struct named after the function; write it by
/// hand only for something the attribute cannot express.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a subscriber: add `#[subscriber(..)]`",
    label = "not a subscriber",
    note = "`#[subscriber(RedisStream::new(\"stream\").group(\"group\"))]` on a free `async fn` makes its name a subscriber, which `b.include(..)` takes"
)]
pub trait Subscriber: Send + Sync + 'static {
    /// Where it was written.
    fn info(&self) -> SubscriberInfo;

    /// What it reads and its options.
    fn subscription(&self) -> Subscription;

    /// Whether it replies (`reply`): its handler returns a value that is
    /// published.
    fn replies(&self) -> bool {
        false
    }

    /// Decodes the delivery in `ctx`, runs the handler and says how to
    /// settle the entry.
    fn handle<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a;

    /// For a batch subscriber (`batch(max = n, wait = d)`, see
    /// `docs/batches.md`): decodes the batch's payloads, runs the handler
    /// on them and settles every entry in `batch`. The runtime calls this
    /// instead of [`Subscriber::handle`] when the subscription has a
    /// [`Batch`](crate::Batch). Without an implementation every entry is
    /// retried as failed: a subscription with a batch needs a subscriber
    /// that handles batches.
    fn handle_batch<'a>(
        &'a self,
        batch: &'a mut EntryBatch,
    ) -> impl Future<Output = ()> + Send + 'a {
        async move {
            batch.settle(BatchSettle::All(Settle::Failed(
                "this subscriber does not handle batches (no `handle_batch`)".to_owned(),
            )));
        }
    }
}

/// An entry of the registry of every `#[subscriber]` in a binary: tools
/// list them with [`registered_subscribers`]. Whether an app runs one is
/// still decided by `include`.
#[derive(Debug)]
pub struct Registration {
    /// Where it was written.
    pub info: SubscriberInfo,
    /// Its subscription (built on demand: descriptors may use constants).
    pub subscription: fn() -> Subscription,
}

inventory::collect!(Registration);

/// Every subscriber declared with `#[subscriber]` in this binary, in no
/// particular order.
///
/// ```
/// for registration in ruststream::registered_subscribers() {
///     let sub = (registration.subscription)();
///     println!("{} reads {}", registration.info.name, sub.stream.stream_name());
/// }
/// ```
pub fn registered_subscribers() -> impl Iterator<Item = &'static Registration> {
    inventory::iter::<Registration>.into_iter()
}

/// Decodes a JSON payload into `T`; the error text names the type.
///
/// JSON is UTF-8 text, so the payload is checked as UTF-8 once, whole, and
/// then parsed as a `str`: that is cheaper than `serde_json::from_slice`,
/// which checks every string it meets separately (measured: about 250
/// fewer instructions for a three-field struct, see BENCHMARKS.md). A
/// payload that is not UTF-8 as a whole is refused (JSON text must be
/// UTF-8), even where the bad bytes sit in a field `T` ignores.
///
/// An empty payload is no JSON value at all: it is what a Redis entry
/// written by another client without a `payload` field reads as, so the
/// error says that rather than serde's "EOF while parsing a value".
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, String> {
    let type_name = std::any::type_name::<T>;
    if payload.is_empty() {
        return Err(format!(
            "cannot decode the payload as {}: the entry has no `payload` field (or an empty one)",
            type_name()
        ));
    }
    let text = std::str::from_utf8(payload).map_err(|e| {
        format!(
            "cannot decode the payload as {}: not UTF-8 text ({e})",
            type_name()
        )
    })?;
    serde_json::from_str(text)
        .map_err(|e| format!("cannot decode the payload as {}: {e}", type_name()))
}

/// Encodes a `reply` handler's value for its type's stream.
pub fn reply<T: Outgoing + Serialize>(value: &T) -> Settle {
    match serde_json::to_vec(value) {
        Ok(payload) => Settle::Reply {
            stream: T::STREAM,
            payload,
        },
        Err(e) => Settle::ReplyUnencodable(format!(
            "cannot encode the reply {} for stream {:?}: {e}",
            std::any::type_name::<T>(),
            T::STREAM
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[derive(Debug, serde::Deserialize)]
    struct Payment {
        #[allow(dead_code)]
        id: u64,
    }

    #[test]
    fn an_empty_payload_is_reported_as_a_missing_payload_field() {
        let error = decode::<Payment>(b"").unwrap_err();
        assert!(
            error.contains("the entry has no `payload` field"),
            "{error}"
        );
        assert!(error.contains("Payment"), "{error}");
        assert!(!error.contains("EOF"), "{error}");
    }

    #[test]
    fn other_decode_errors_keep_serdes_words() {
        let error = decode::<Payment>(br#"{"id":"x"}"#).unwrap_err();
        assert!(error.starts_with("cannot decode the payload as"), "{error}");
        assert!(error.contains("invalid type"), "{error}");
        let error = decode::<Payment>(b"{").unwrap_err();
        assert!(error.contains("EOF"), "{error}");
        assert!(decode::<Payment>(br#"{"id":1}"#).is_ok());
    }
}
