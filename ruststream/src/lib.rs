//! ruststream: a declarative worker framework for Rust services that
//! consume streams through consumer groups.
//!
//! A service annotates async functions with [`#[subscriber(...)]`](subscriber);
//! the runtime reads a stream through a consumer group, runs each entry on a
//! worker lane and settles it by what the function returns:
//! [`HandlerOutcome::ack`], [`retry`](HandlerOutcome::retry),
//! [`retry_after`](HandlerOutcome::retry_after) or
//! [`dead_letter`](HandlerOutcome::dead_letter).
//!
//! ```
//! use ruststream::prelude::*;
//!
//! const MIN_IDLE: Duration = Duration::from_secs(30);
//!
//! #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
//! #[outgoing(name = "payments")]
//! struct Payment { id: u64, account: String, amount_cents: u64 }
//!
//! #[subscriber(RedisStream::claiming("payments", MIN_IDLE).group("ledger"), workers(8, by_key))]
//! async fn post_payment(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
//!     if payment.account.starts_with("migrating-") {
//!         return HandlerOutcome::retry();
//!     }
//!     HandlerOutcome::ack()
//! }
//!
//! fn app() -> impl App {
//!     RustStream::new(AppInfo::new("payments", "0.1.0"))
//!         .with_broker(MemoryBroker::new(), |b| {
//!             b.include(post_payment);
//!         })
//! }
//! # let _ = app();
//! ```
//!
//! This crate re-exports the core types and the [`Broker`] trait from
//! `ruststream-core`, the macros, and the built-in brokers behind features
//! (`memory` and `filelog` on by default, `redis` optional). The optional
//! `opentelemetry` feature carries W3C trace context through message
//! headers (see `trace_context`, and `docs/operations.md`).

#![forbid(unsafe_code)]

mod admin;
mod app;
mod batch;
mod context;
mod group_poll;
mod health;
pub mod metrics;
mod observe;
mod outcome;
mod outgoing;
mod readiness;
mod running;
mod runtime;
mod stream;
mod subscriber;
#[cfg(feature = "opentelemetry")]
pub mod trace_context;

pub use app::{
    ADMIN_ADDR_VAR, ADMIN_TOKEN_VAR, App, AppInfo, BrokerScope, DEFAULT_KEEP_ALIVE,
    DEFAULT_SHUTDOWN_DEADLINE, INSTANCE_VAR, Include, RustStream, StartError, termination,
};
pub use batch::{BatchSettle, EntryBatch, IntoBatchSettle};
pub use context::{
    Context, DELIVERY_COUNT_HEADER, HeaderView, IDLE_MS_HEADER, PARTITION_KEY_HEADER,
};
pub use health::{Health, Problem};
pub use observe::{Handled, Observer, Settlement};
pub use outcome::{HandlerOutcome, IntoSettle, Publish, ReplyTarget, Settle};
pub use outgoing::{Outgoing, PublishBuilder, PublishError, Publisher};
pub use readiness::{Readiness, ReadinessOptions};
pub use running::Running;
pub use runtime::SubscriptionStats;
pub use ruststream_core::*;
pub use ruststream_macros::{Outgoing, app, subscriber};
pub use stream::{Batch, DEFAULT_READ_AHEAD, Kind, RedisStream, Stream, Subscription};
pub use subscriber::{Registration, Subscriber, SubscriberInfo, registered_subscribers};

/// The memory broker's crate: [`memory::with_retention`] builds one with
/// a retention other than the default.
#[cfg(feature = "memory")]
pub use ruststream_memory as memory;
#[cfg(feature = "memory")]
pub use ruststream_memory::{MemoryBroker, MemoryRetention};

#[cfg(feature = "filelog")]
pub use ruststream_filelog::{FileLogBroker, FileLogOptions, Retention, SyncPolicy};

#[cfg(feature = "redis")]
pub use ruststream_redis::{RedisBroker, RedisConfig, RedisRetention, RedisTls, ReplicaAck};

/// Everything a service module needs: `use ruststream::prelude::*;`.
///
/// It brings serde's `Deserialize` and `Serialize` (the traits and their
/// derives), but the code `#[derive(Deserialize)]` writes names the crate
/// `serde`: a service that derives them depends on `serde` itself, with
/// `features = ["derive"]`. [`Broker`] is here so that a broker's own
/// calls (`broker.group_info(..)`, `broker.stream_info(..)`) work on a
/// `MemoryBroker` or `FileLogBroker` value.
pub mod prelude {
    #[cfg(feature = "filelog")]
    pub use crate::FileLogBroker;
    #[cfg(feature = "memory")]
    pub use crate::MemoryBroker;
    #[cfg(feature = "redis")]
    pub use crate::RedisBroker;
    pub use crate::{
        App, AppInfo, Broker, Context, DELIVERY_COUNT_HEADER, EntryId, HandlerOutcome,
        IDLE_MS_HEADER, Outgoing, PARTITION_KEY_HEADER, Publish, Publisher, RedisStream,
        RustStream, Stream, StreamStart, subscriber,
    };
    pub use serde::{Deserialize, Serialize};
    pub use std::time::Duration;
}

/// What the macros' generated code refers to. Not a public API: it may
/// change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::run_main;
    pub use crate::stream::checked_backoff;
    pub use crate::subscriber::{decode, reply};
    pub use crate::{
        App, Batch, BatchSettle, Context, EntryBatch, IntoBatchSettle, IntoSettle, Outgoing,
        Registration, Settle, Stream, Subscriber, SubscriberInfo, Subscription,
    };
    pub use inventory;
    pub use ruststream_core::BackoffPolicy;
    pub use serde;
}

/// The `main` of a `#[ruststream::app]` binary: a tokio runtime, tracing
/// from `RUST_LOG` (default `info`), the app until SIGINT or SIGTERM, then a
/// graceful shutdown. Exits with status 1 and the error on stderr if the app
/// cannot start.
///
/// `#[ruststream::app]` on `fn app()` writes `fn main() { ruststream::run_main(app) }`;
/// write that `main` by hand when the attribute does not fit (an app
/// function outside the crate root, or a `main` that does something first):
///
/// ```no_run
/// use ruststream::prelude::*;
///
/// fn app() -> impl App {
///     RustStream::new(AppInfo::new("payments", "0.1.0"))
///         .with_broker(MemoryBroker::new(), |_| {})
/// }
///
/// fn main() {
///     ruststream::run_main(app);
/// }
/// ```
pub fn run_main<A: App>(make_app: fn() -> A) {
    run_main_with(async move { Ok::<A, String>(make_app()) });
}

/// [`run_main`] for an app that is built inside the runtime (for example
/// after asking a broker what it can serve); an `Err` from `make_app` is
/// printed and the process exits with status 1. For a hand-written `main`.
///
/// ```no_run
/// use ruststream::prelude::*;
///
/// fn main() {
///     ruststream::run_main_with(async {
///         // Building the app can fail here: the error is printed, exit status 1.
///         let broker = FileLogBroker::open("payments-data").map_err(|e| e.to_string())?;
///         let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
///             .with_broker(broker, |_| {});
///         Ok::<_, String>(app)
///     });
/// }
/// ```
pub fn run_main_with<A, E>(make_app: impl std::future::Future<Output = Result<A, E>>)
where
    A: App,
    E: std::fmt::Display,
{
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(async move {
        match make_app.await {
            Ok(app) => match app.into_rust_stream().admin_from_env() {
                Ok(app) => app.run().await.map_err(|e| e.to_string()),
                Err(e) => Err(e),
            },
            Err(e) => Err(e.to_string()),
        }
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
