//! Running a handler on one delivery and deciding how to settle it.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use ruststream_core::{Delivery, EntryId, Message};

use crate::metrics::ErrorKind;

use super::lanes::Started;
use super::settle::{Decided, Decision};
use super::{Backoff, Counters, Env};
use crate::observe::{Handled, Settlement};
use crate::{Context, HandlerOutcome, ReplyTarget, Settle, Subscriber};

/// Logs a `warn!`/`error!` about a delivery inside its context: the
/// delivery's own span when that is enabled (debug), else an info-level
/// span made for this event alone, so the common path creates no span at
/// info level.
macro_rules! report {
    ($pipeline:expr, $delivery:expr, $($event:tt)+) => {{
        if tracing::Span::current().is_disabled() {
            $pipeline
                .context_span($delivery.id(), $delivery.delivery_count)
                .in_scope(|| tracing::$($event)+);
        } else {
            tracing::$($event)+;
        }
    }};
}

/// How long a reply whose publish fails for a transient reason is
/// published again in place before its entry is retried instead (the
/// handler then runs again). Long enough for a Redis Cluster failover.
const REPLY_RETRY_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

/// One subscription as its task runs it: the user's subscriber and the
/// environment it runs in. (`workers(n)` are its lanes, see `lanes`.)
pub(super) struct Pipeline<S> {
    pub(super) subscriber: Arc<S>,
    pub(super) env: Env,
    /// A batch subscriber's batches (`batch(..)`); `None`: one entry at a
    /// time.
    pub(super) batches: Option<super::batch::Batches>,
}

impl<S: Subscriber> Pipeline<S> {
    /// The outcome of a handler that panicked: retried, and logged.
    pub(super) fn panicked(&self, entry: &Started, panic: &(dyn Any + Send)) -> Decided {
        self.env.counters.handler_failed(ErrorKind::Panic);
        let message = panic_message(panic);
        report!(
            self,
            entry,
            error!(panic = %message, "handler panicked; entry will be retried")
        );
        self.retry(
            entry.id,
            entry.delivery_count,
            Some(format!("handler panicked: {message}")),
        )
    }

    #[inline]
    pub(super) fn observe(&self, delivery: &Delivery, settlement: Settlement) {
        if let Some(observer) = &self.env.observer {
            let event = Handled {
                subscriber: self.env.name,
                stream: self.env.stream(),
                group: self.env.group(),
                consumer: &self.env.consumer,
                delivery,
                settlement: &settlement,
            };
            // An observer is user code: its panic is logged, and the
            // subscription goes on.
            let called = std::panic::catch_unwind(AssertUnwindSafe(|| observer.handled(&event)));
            if let Err(panic) = called {
                tracing::error!(
                    subscriber = self.env.name,
                    id = %delivery.id(),
                    panic = %panic_message(&*panic),
                    "observer panicked"
                );
            }
        }
    }

    /// The span a delivery's handler runs in, if any: the delivery span
    /// when `traced` (the level filter lets debug through) and it is
    /// enabled.
    ///
    /// With the `opentelemetry` feature, a delivery whose headers carry a
    /// valid trace context runs in an info-level span (the same fields as
    /// the delivery span) whose parent is that context, so the handler's
    /// work joins the publisher's trace (`docs/operations.md`, "Trace
    /// propagation"). Other deliveries, and every delivery without the
    /// feature, cost what they did: one header check with the feature, not
    /// even that without it.
    #[inline]
    pub(super) fn lane_span(&self, delivery: &Delivery, traced: bool) -> Option<tracing::Span> {
        #[cfg(feature = "opentelemetry")]
        if crate::trace_context::carries_context(delivery.entry.headers()) {
            let span =
                crate::trace_context::span_with_remote_parent(delivery.entry.headers(), || {
                    self.context_span(delivery.id(), delivery.delivery_count)
                });
            if span.is_some() {
                return span;
            }
        }
        if traced {
            self.delivery_span(delivery)
        } else {
            None
        }
    }

    /// The span a delivery's handler runs in, `None` when it is disabled.
    ///
    /// It is at debug level: at info level a span per delivery costs more
    /// than the rest of the path together (measured: about 15,000
    /// instructions and 7 allocations with the fmt subscriber). Warnings and
    /// errors about a delivery still carry its context (see [`report!`]).
    /// The task enters it around each poll of the handler rather than
    /// wrapping the handler in `Instrumented`: a disabled span then costs a
    /// check, where the wrapper cost about 10% of the throughput of a small
    /// handler (measured with the runtime benchmark).
    pub(super) fn delivery_span(&self, delivery: &Delivery) -> Option<tracing::Span> {
        let env = &self.env;
        let span = tracing::debug_span!(
            "delivery",
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            consumer = %env.consumer,
            id = %delivery.id(),
            delivery_count = delivery.delivery_count,
        );
        (!span.is_disabled()).then_some(span)
    }

    /// The delivery's context as an info-level span, made only when a
    /// warning or error about it is logged.
    pub(super) fn context_span(&self, id: EntryId, delivery_count: u32) -> tracing::Span {
        let env = &self.env;
        tracing::info_span!(
            "delivery",
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            consumer = %env.consumer,
            %id,
            delivery_count,
        )
    }

    /// Runs the handler on one delivery and decides how to settle it.
    pub(super) async fn handle(&self, delivery: Delivery) -> Decided {
        let delivery = &delivery;
        let env = &self.env;
        self.note_delivery(delivery);
        let outcome = {
            let mut ctx = Context::new(
                delivery,
                env.stream(),
                env.group(),
                &env.consumer,
                &env.publisher,
            );
            self.subscriber.handle(&mut ctx).await
        };
        match outcome {
            // The common outcome, settled without a call.
            Settle::Outcome(HandlerOutcome::Ack) => {
                Decided::new(Decision::Ack(delivery.id()), Settlement::Acked)
            }
            // Boxed: a publish's state would otherwise make every lane's
            // handler future larger (it is moved into the lane's slot per
            // entry), replies or not.
            Settle::Reply { stream, payload } => {
                Box::pin(self.publish_reply(delivery, stream, payload)).await
            }
            other => self.decide(&Started::of(delivery), other),
        }
    }

    /// What the runtime notes of every delivery before its handler runs:
    /// one delivered as often as readiness calls a poison loop.
    pub(super) fn note_delivery(&self, delivery: &Delivery) {
        if delivery.delivery_count >= self.env.readiness.poison_deliveries {
            self.env.counters.signals.poison_seen(delivery.id());
        }
    }

    /// How to settle `entry` as its handler decided (a reply is published
    /// first, by [`Pipeline::handle`]; a reply here is a bug and retried).
    pub(super) fn decide(&self, entry: &Started, outcome: Settle) -> Decided {
        let env = &self.env;
        let id = entry.id;
        match outcome {
            Settle::Outcome(HandlerOutcome::Ack) => {
                Decided::new(Decision::Ack(id), Settlement::Acked)
            }
            Settle::Outcome(HandlerOutcome::Retry) => {
                tracing::debug!("handler asked for a retry");
                self.retry(id, entry.delivery_count, None)
            }
            Settle::Outcome(HandlerOutcome::RetryAfter(delay)) => {
                tracing::debug!(?delay, "handler asked for a retry after a delay");
                Counters::add(&env.counters.retried, 1);
                let times = entry.delivery_count.saturating_add(1);
                Decided::new(
                    Decision::After(id, delay, times),
                    Settlement::RetriedAfter(delay),
                )
            }
            Settle::Outcome(HandlerOutcome::DeadLetter(reason)) => {
                report!(
                    self,
                    entry,
                    warn!(%reason, "handler dead-lettered the entry")
                );
                Decided::dead(id, reason)
            }
            Settle::Failed(error) => {
                env.counters.handler_failed(ErrorKind::Error);
                report!(
                    self,
                    entry,
                    warn!(%error, "handler failed; entry will be retried")
                );
                self.retry(id, entry.delivery_count, Some(error))
            }
            Settle::Undecodable(error) => {
                env.counters.handler_failed(ErrorKind::Decode);
                report!(
                    self,
                    entry,
                    warn!(%error, "payload cannot be decoded; entry dead-lettered")
                );
                Decided::dead(id, error)
            }
            // Encoding the same value fails the same way every time: a retry
            // would only loop.
            Settle::ReplyUnencodable(error) => {
                report!(
                    self,
                    entry,
                    error!(%error, "reply cannot be encoded; entry dead-lettered")
                );
                Decided::dead(id, format!("reply cannot be encoded: {error}"))
            }
            Settle::Reply { stream, .. } => {
                let error = format!(
                    "a reply to {stream:?} reached the settling of an entry that cannot publish it"
                );
                report!(self, entry, error!(%error, "entry will be retried"));
                self.retry(id, entry.delivery_count, Some(error))
            }
        }
    }

    /// Retry as the subscription says: after its `backoff(..)` delay if it
    /// has one, else as its kind says: leave pending (claiming, reclaim:
    /// the next claiming read takes it once idle) or copy (new).
    ///
    /// The delay comes from the delivery count the broker keeps, not from
    /// state here, so it is the same after a restart or on another
    /// consumer (`docs/semantics.md`, Outcomes).
    pub(super) fn retry(
        &self,
        id: EntryId,
        delivery_count: u32,
        reason: Option<String>,
    ) -> Decided {
        Counters::add(&self.env.counters.retried, 1);
        if let Some(policy) = &self.env.subscription.backoff {
            let delay = policy.delay(id, delivery_count);
            tracing::debug!(?delay, "retry after the subscription's backoff");
            let times = delivery_count.saturating_add(1);
            return Decided::new(
                Decision::After(id, delay, times),
                Settlement::RetriedAfter(delay),
            );
        }
        let decision = if self.env.subscription.stream.retries_in_place() {
            Decision::Leave(id)
        } else {
            Decision::Copy(id)
        };
        Decided::new(decision, Settlement::Retried { reason })
    }

    async fn publish_reply(
        &self,
        delivery: &Delivery,
        own: &'static str,
        payload: Vec<u8>,
    ) -> Decided {
        let id = delivery.id();
        let stream = match &self.env.reply {
            ReplyTarget::Discard => return Decided::new(Decision::Ack(id), Settlement::Acked),
            ReplyTarget::OwnStream => own,
            ReplyTarget::Stream(s) => s.as_str(),
        };
        // A transient failure is the broker's (a failover, a lost
        // connection): the reply is published again here, with backoff, for
        // up to `REPLY_RETRY_WINDOW`, rather than running the handler again
        // for it. The entry stays in flight meanwhile (its claim kept
        // alive), and so does the lane: replies that cannot be published
        // hold the subscription back, as settles that cannot be applied do.
        let mut retrying: Option<(Backoff, tokio::time::Instant)> = None;
        let published = loop {
            // The span the handler ran in, if any, is current here: the
            // reply joins its trace (`publish_raw` adds its context).
            let attempt = Message::new(payload.clone());
            match self.env.publisher.publish_raw(stream, attempt).await {
                Err(error) if error.is_transient() => {
                    let (backoff, since) = retrying
                        .get_or_insert_with(|| (Backoff::new(), tokio::time::Instant::now()));
                    if since.elapsed() >= REPLY_RETRY_WINDOW {
                        break Err(error);
                    }
                    let delay = backoff.next_delay();
                    report!(
                        self,
                        delivery,
                        warn!(reply_stream = stream, %error, retry_in = ?delay, "reply not published; publishing it again")
                    );
                    tokio::time::sleep(delay).await;
                }
                other => break other,
            }
        };
        match published {
            Ok(reply_id) => {
                tracing::debug!(reply_stream = stream, %reply_id, "reply published");
                let settlement = Settlement::Replied {
                    stream: stream.to_owned(),
                };
                Decided::new(Decision::Ack(id), settlement)
            }
            Err(error) if error.is_transient() => {
                report!(
                    self,
                    delivery,
                    error!(reply_stream = stream, %error, "reply not published for {REPLY_RETRY_WINDOW:?}; entry will be retried")
                );
                self.retry(
                    id,
                    delivery.delivery_count,
                    Some(format!("reply not published: {error}")),
                )
            }
            // The broker refuses this reply (a bad stream name, an oversized
            // record): it would refuse it again, so a retry would loop.
            Err(error) => {
                report!(
                    self,
                    delivery,
                    error!(reply_stream = stream, %error, "reply refused by the broker; entry dead-lettered")
                );
                Decided::dead(id, format!("reply refused by the broker: {error}"))
            }
        }
    }
}

pub(super) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
