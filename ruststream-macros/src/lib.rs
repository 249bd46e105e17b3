//! Procedural macros of ruststream: [`#[subscriber]`](macro@subscriber),
//! [`#[derive(Outgoing)]`](derive@Outgoing) and
//! [`#[ruststream::app]`](macro@app).
//!
//! Use them through `ruststream` (`use ruststream::prelude::*;`), not
//! directly: the code they write names `::ruststream`.
//!
//! The examples here are marked `ignore` because the doctests of a
//! proc-macro crate cannot depend on `ruststream` (which depends on this
//! crate). The same code is built and run by `ruststream`'s UI tests
//! (`ruststream/tests/ui/pass`), and every mistake listed below has a case
//! in `ruststream/tests/ui/fail` with the exact error it gets.
//!
//! The crate is laid out like `tracing-attributes`: `parse.rs` reads the
//! macros' inputs into typed values, `expand.rs` writes the code, and
//! `ctxt.rs` collects errors (as serde_derive's `Ctxt` does) so that one
//! build reports every mistake, each spanned on the token at fault. On a
//! mistake the item is still emitted as written, so the IDE keeps working.

mod ctxt;
mod expand;
mod parse;

use proc_macro::TokenStream;

/// Declares a subscriber: an async function that handles the entries of a
/// stream, read through a consumer group.
///
/// ```ignore
/// use ruststream::prelude::*;
///
/// const MIN_IDLE: Duration = Duration::from_secs(30);
///
/// #[derive(Debug, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "payments")]
/// struct Payment { id: u64, account: String, amount_cents: u64 }
///
/// /// Posts payments to the ledger, in order per account.
/// #[subscriber(RedisStream::claiming("payments", MIN_IDLE).group("ledger"), workers(8, by_key))]
/// async fn post_payment(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
///     if payment.account.starts_with("migrating-") {
///         return HandlerOutcome::retry();
///     }
///     HandlerOutcome::ack()
/// }
/// ```
///
/// # Arguments
///
/// First the stream descriptor: `RedisStream::new(stream)`,
/// `RedisStream::claiming(stream, min_idle)` or
/// `RedisStream::reclaim(stream, min_idle)` (`Stream::` works too),
/// followed by `.group(name)` (required) and optionally `.consumer(name)`,
/// `.start_id(start)` and `.start_at(start)`, each once. The descriptor is
/// an ordinary expression evaluated when the app starts, so constants and
/// calls may appear in it. Then, in any order, each at most once:
///
/// | option | meaning |
/// |---|---|
/// | `workers(n)` | up to `n` handlers of this subscriber run at once (default 1) |
/// | `workers(n, by_key)` | the same, and entries with the same partition key go to one lane, in stream order |
/// | `reply` | the handler returns a value that is published (see below) |
/// | `max_deliveries(n)` | an entry delivered `n` times is dead-lettered instead of delivered again (default: no bound) |
/// | `prefetch(n)` | at most `n` entries are read ahead of the handlers (at least `workers`) |
///
/// A count is an integer literal (checked here: at least 1, and `prefetch`
/// at least `workers`) or any expression (checked when the app starts).
///
/// # The function
///
/// `async`, not generic, no `self`. Parameters: the payload first, then
/// optionally `ctx: &mut Context<'_>`.
///
/// | payload | meaning |
/// |---|---|
/// | `&T` or `T` | decoded from JSON; `T: Deserialize`. A payload that cannot be decoded is dead-lettered with the decode error |
/// | `&[u8]` | the raw bytes |
/// | `Vec<u8>` | a copy of the raw bytes |
///
/// Return types: `()` (ack), `HandlerOutcome`, `Result<(), E>` with
/// `E: Display` (`Ok` acks, `Err` retries and is logged); with `reply`, a
/// `T: Outgoing + Serialize`, published to `T`'s stream before the entry is
/// acked:
///
/// ```ignore
/// #[derive(Debug, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "payments.screened")]
/// struct Screened { payment_id: u64, suspicious: bool }
///
/// #[subscriber(RedisStream::new("payments").group("fraud").start_id(StreamStart::Beginning), reply)]
/// async fn screen_payment(payment: &Payment) -> Screened {
///     Screened { payment_id: payment.id, suspicious: payment.amount_cents > 1_000_000 }
/// }
/// ```
///
/// A payload type that is not `Deserialize`, or a return type that is not
/// one of these, is a type error on that type.
///
/// # What it writes
///
/// The function becomes a unit struct of the same name (carrying the
/// function's doc comments) that implements `ruststream::Subscriber`, so
/// the app includes it by name: `b.include(post_payment)`. The function
/// as written stays callable as `post_payment::handler(..)`, for unit
/// tests. The subscriber is also registered in the binary's list of
/// subscribers (`ruststream::registered_subscribers()`).
///
/// Because the name is now a unit struct, a `let post_payment = ..` in the
/// same scope is a pattern matching it, not a new variable: give locals
/// other names.
#[proc_macro_attribute]
pub fn subscriber(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::subscriber(attr.into(), item.into()).into()
}

/// Turns `fn app() -> impl App` into the binary's entry point.
///
/// ```ignore
/// use ruststream::prelude::*;
///
/// #[ruststream::app]
/// fn app() -> impl App {
///     RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
///         b.include(post_payment);
///         b.include(screen_payment).out_reply(Publish);
///     })
/// }
/// ```
///
/// The function stays as written (tests call it to build the app) and a
/// `fn main` is added beside it that starts a tokio runtime, installs a
/// tracing subscriber configured by `RUST_LOG`, runs the app until SIGINT
/// or SIGTERM and then shuts it down gracefully. If the app cannot start,
/// `main` prints the error and exits with status 1.
///
/// The function takes no parameters and is neither `async` nor generic,
/// and the attribute takes no arguments.
#[proc_macro_attribute]
pub fn app(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::app(attr.into(), item.into()).into()
}

/// Names the stream a type is published to: implements
/// `ruststream::Outgoing` with `#[outgoing(name = "...")]` as its `STREAM`.
///
/// ```ignore
/// use ruststream::prelude::*;
///
/// #[derive(Serialize, Outgoing)]
/// #[outgoing(name = "payments")]
/// struct Payment { id: u64, account: String, amount_cents: u64 }
///
/// assert_eq!(Payment::STREAM, "payments");
/// // broker.publish(&payment).partition_key(&payment.account).await?;
/// ```
///
/// Generic types work (`impl<T> Outgoing for Envelope<T>`: every
/// instance goes to the same stream). The name is a non-empty string
/// literal, given once.
#[proc_macro_derive(Outgoing, attributes(outgoing))]
pub fn derive_outgoing(item: TokenStream) -> TokenStream {
    expand::derive_outgoing(item.into()).into()
}
