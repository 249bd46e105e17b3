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
//! macros' inputs into typed values (options with `syn::custom_keyword!`),
//! `expand.rs` writes the code, and `ctxt.rs` collects errors (as
//! serde_derive's `Ctxt` does): each expansion has one, passed through
//! every check, so that one build reports every mistake, each spanned on
//! the token at fault. On a mistake the macros still write what the rest
//! of the program uses (a subscriber's struct, `handler` and `Subscriber`
//! impl, the app's `main`, a type's `Outgoing` impl), as thiserror does, so
//! that the macro's errors are the only ones and the IDE keeps working.

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
/// | `backoff(POLICY)`, `backoff(POLICY, jitter)` | a failed delivery is retried after the policy's delay instead of at once (see below) |
/// | `batch(max = n, wait = d)` | the handler takes up to `n` entries at once, gathered for at most `d` (see below) |
///
/// A count is an integer literal (checked here: at least 1, and `prefetch`
/// at least `workers`) or any expression (checked when the app starts).
///
/// ## `backoff`
///
/// `backoff(..)` turns `retry()`, an `Err`, a panic and a reply that could
/// not be published into `retry_after(delay)`, where the delay comes from
/// the entry's delivery count (`DELIVERY_COUNT_HEADER`: 0 on the first
/// delivery), which the broker keeps, so it holds across restarts and
/// consumers. An explicit `retry_after(d)` still waits `d`.
///
/// | policy | delay after a delivery with `count` earlier ones |
/// |---|---|
/// | `fixed(d)` | `d` |
/// | `exponential(base, factor, max = cap)` | `base * factor^count`, at most `cap` |
///
/// Durations are integer literals with a unit: `ms`, `s`, `min` or `h`
/// (`250ms`, `30s`, `5min`, `1h`); the factor is a number (`2`, `1.5`).
/// `jitter` draws each delay uniformly from `[delay/2, delay]` (in whole
/// milliseconds), from a seed made of the entry's id and delivery count:
/// entries failing together spread out, and a given delivery always waits
/// the same time. All of it is checked here: an unknown policy or unit, a
/// missing argument, a zero or negative duration, a factor below 1 or a
/// `max` below the base is a compile error on that argument.
///
/// ```ignore
/// #[subscriber(
///     RedisStream::claiming("payments", MIN_IDLE).group("ledger"),
///     backoff(exponential(100ms, 2.0, max = 5min), jitter),
///     max_deliveries(12),
/// )]
/// async fn post_payment(payment: &Payment) -> Result<(), LedgerError> { .. }
/// ```
///
/// ## `batch`
///
/// `batch(max = n, wait = d)` makes a batch handler: it takes `Vec<T>` or
/// `&[T]` (one value per entry, decoded from JSON; `Vec<Vec<u8>>` for the
/// raw payloads) and nothing else, and runs once `n` entries are gathered
/// or `d` after the first arrived, whichever comes first. It returns one
/// outcome for the whole batch (`()`, `HandlerOutcome`, `Result<(), E>`) or
/// one per entry (`Vec<HandlerOutcome>`, `Vec<Result<(), E>>`, in the order
/// of the values it got; a `Vec` of another length retries the whole batch
/// with an error saying so). An entry whose payload does not decode is
/// dead-lettered on its own and the rest run. Each entry is settled,
/// retried, dead-lettered and counted as a single entry is. `workers(w)`
/// runs up to `w` batches at once; `by_key` and `reply` are refused, and a
/// literal `prefetch` must hold a whole batch. `n` is an integer literal
/// (1 to 100000), `d` a duration literal as in `backoff`. The rules are in
/// `docs/batches.md` (whose example is a doctest of `ruststream`).
///
/// ```ignore
/// #[subscriber(RedisStream::new("payments").group("ledger"), workers(2), batch(max = 500, wait = 10ms))]
/// async fn post_payments(payments: Vec<Payment>) -> Vec<HandlerOutcome> {
///     payments.iter().map(|_| HandlerOutcome::ack()).collect()
/// }
/// ```
///
/// # The function
///
/// A free `async fn` (not a method), not generic, with one
/// `#[subscriber]`. Parameters: the payload first, then optionally
/// `ctx: &mut Context<'_>`. No parameter may be named like the function
/// (its name becomes a unit struct, which the parameter would match).
///
/// | payload | meaning |
/// |---|---|
/// | `&T` or `T` | decoded from JSON; `T: Deserialize`. A payload that cannot be decoded is dead-lettered with the decode error |
/// | `&[u8]` | the raw bytes |
/// | `Vec<u8>` | a copy of the raw bytes |
///
/// Payloads are decoded into owned values: a payload type cannot hold a
/// reference (`Vec<&str>`: take `Vec<String>`) or borrow from the entry,
/// the function takes no lifetime parameters, and a JSON array is a
/// `Vec<T>`, not a `&[T]`.
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
/// `reply` publishes every value the handler returns, so a `reply`
/// handler does not return `()`, `Option<T>`, `Result<T, E>` or
/// `HandlerOutcome`. To reply only for some entries, leave `reply` out,
/// publish with `ctx.publisher().publish(&value).await` and return
/// `HandlerOutcome` or `Result<(), E>`.
///
/// A payload type that is not `Deserialize`, or a return type that is not
/// one of these, is a type error on that type.
///
/// # What it writes
///
/// The function becomes a unit struct of the same name that implements
/// `ruststream::Subscriber`, so the app includes it by name:
/// `b.include(post_payment)`. The struct carries the function's doc
/// comments and a generated line saying what it reads (stream, group,
/// mode, workers). The function as written, with its doc comments (so
/// that lints such as `missing_errors_doc` read them), stays callable as
/// `post_payment::handler(..)`, for unit tests. The subscriber is also
/// registered in the binary's list of subscribers
/// (`ruststream::registered_subscribers()`).
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
/// and the attribute takes no arguments. It goes at the crate root of a
/// binary (`src/main.rs`), where `main` must be: in a module of a binary
/// whose root has no `main`, it is an error. (In a module of a crate that
/// has its own `main`, as in tests, the `main` it writes is unused.) For
/// an app whose building can fail, write `main` yourself with
/// `ruststream::run_main_with`.
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
