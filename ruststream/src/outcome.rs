//! What a handler's return value means for its entry.

use std::fmt;
use std::time::Duration;

/// How a handler settles its entry. See `docs/semantics.md` (Outcomes) for
/// what each does on a claiming or reclaim subscription and on a new one.
///
/// ```
/// use std::time::Duration;
/// use ruststream::HandlerOutcome;
///
/// let outcomes = [
///     HandlerOutcome::ack(),
///     HandlerOutcome::retry(),
///     HandlerOutcome::retry_after(Duration::from_secs(30)),
///     HandlerOutcome::dead_letter("amount is negative"),
/// ];
/// assert_eq!(outcomes[0], HandlerOutcome::Ack);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// Done: the entry leaves the pending list.
    Ack,
    /// Try again. On a claiming or reclaim subscription the entry stays
    /// pending under its own id and the next claiming read takes it once it
    /// has been idle `min_idle`; on a new subscription a copy is appended
    /// (and the original acked) and delivered again at once, behind entries
    /// added meanwhile.
    Retry,
    /// Try again after this delay, not before.
    RetryAfter(Duration),
    /// Give up: the entry is recorded as a dead letter with this reason.
    DeadLetter(String),
}

impl HandlerOutcome {
    /// [`HandlerOutcome::Ack`].
    pub fn ack() -> Self {
        HandlerOutcome::Ack
    }

    /// [`HandlerOutcome::Retry`].
    pub fn retry() -> Self {
        HandlerOutcome::Retry
    }

    /// [`HandlerOutcome::RetryAfter`].
    pub fn retry_after(delay: Duration) -> Self {
        HandlerOutcome::RetryAfter(delay)
    }

    /// [`HandlerOutcome::DeadLetter`].
    pub fn dead_letter(reason: impl Into<String>) -> Self {
        HandlerOutcome::DeadLetter(reason.into())
    }
}

/// What the runtime does with an entry once its handler is done: the
/// handler's outcome, or what went wrong around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settle {
    /// The handler returned an outcome.
    Outcome(HandlerOutcome),
    /// The handler returned an error (`Result::Err`): retried, and logged.
    Failed(String),
    /// The payload could not be decoded: dead-lettered at once.
    Undecodable(String),
    /// A `reply` handler's value, encoded: published to `stream`, then the
    /// entry is acked.
    Reply {
        /// The stream the reply goes to (the reply type's `#[outgoing]`).
        stream: &'static str,
        /// The encoded reply.
        payload: Vec<u8>,
    },
    /// The reply could not be encoded: retried, and logged.
    ReplyUnencodable(String),
}

/// Turns a handler's return value into a [`Settle`]. Implemented for
/// [`HandlerOutcome`], `()` (ack) and `Result<(), E>` (`Ok` acks, `Err`
/// retries and is logged).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot settle an entry",
    label = "a subscriber returns `()`, `HandlerOutcome` or `Result<(), E: Display>`",
    note = "to publish the returned value instead, add `reply` to #[subscriber(...)] and derive `Outgoing` on it"
)]
pub trait IntoSettle {
    /// The settle decision for this value.
    fn into_settle(self) -> Settle;
}

impl IntoSettle for HandlerOutcome {
    fn into_settle(self) -> Settle {
        Settle::Outcome(self)
    }
}

impl IntoSettle for () {
    fn into_settle(self) -> Settle {
        Settle::Outcome(HandlerOutcome::Ack)
    }
}

impl<E: fmt::Display> IntoSettle for Result<(), E> {
    fn into_settle(self) -> Settle {
        match self {
            Ok(()) => Settle::Outcome(HandlerOutcome::Ack),
            Err(e) => Settle::Failed(e.to_string()),
        }
    }
}

/// Where a `reply` subscriber's values go: `.out_reply(Publish)` publishes
/// them to the reply type's own stream (its `#[outgoing(name)]`), which is
/// also what happens when `out_reply` is not called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Publish;

impl Publish {
    /// Publish replies to `stream` instead of the reply type's own stream.
    pub fn to(stream: impl Into<String>) -> ReplyTarget {
        ReplyTarget::Stream(stream.into())
    }
}

/// Where replies go. See [`Publish`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReplyTarget {
    /// The reply type's own stream.
    #[default]
    OwnStream,
    /// A named stream.
    Stream(String),
    /// Nowhere: the reply is dropped and the entry acked.
    Discard,
}

impl From<Publish> for ReplyTarget {
    fn from(_: Publish) -> Self {
        ReplyTarget::OwnStream
    }
}
