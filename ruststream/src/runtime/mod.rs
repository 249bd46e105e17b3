//! Running one subscription: one task that reads and runs the handlers,
//! and a settler.
//!
//! ```text
//!   broker ──read──▶ [ queue ─▶ slot ] × n lanes ──decisions──▶ settler ──ack/retry/dead──▶ broker
//!                 (one task polls the read and every slot)
//! ```
//!
//! One file per stage:
//!
//! - `read`: what to read and when: the read-ahead bound (entries read and
//!   not yet settled at the broker), the re-read of the consumer's own
//!   pending list, backoff, and recreating a group the broker lost;
//! - `lanes`: the lanes entries wait and run on (`workers(n)`, `by_key`);
//! - `handle`: running a handler on a delivery and deciding how to settle
//!   it;
//! - `batch`: a batch subscriber's batches, gathered from its lanes' entries
//!   and run on `workers` at once;
//! - `settle`: decisions on their way to the broker, batched, and applied
//!   again until they land;
//! - `window`: the adaptive read-ahead (how much one read asks for);
//! - `claims`: keeping the claims on held entries fresh;
//! - `own_pending`: looks at the consumer's own pending list (another
//!   live process with the same name, strays a lost read left);
//! - `prune`: deleting the group's idle, empty consumers (opt-in);
//! - `driver`: the task's poll loop, one method per wake event;
//! - `stats`: counters, and the [`SubscriptionStats`] an app reports;
//! - `backoff`: jittered exponential backoff.

/// Logs a `tracing` event at `$level` about a subscription's group: the
/// subscriber's name, its stream and its group, then the fields and the
/// message given, as `tracing::$level!` takes them.
macro_rules! group_event {
    ($level:ident, $env:ident, $($rest:tt)+) => {
        tracing::$level!(
            subscriber = $env.name,
            stream = $env.stream(),
            group = $env.group(),
            $($rest)+
        )
    };
}

mod backoff;
mod batch;
mod claims;
mod driver;
mod handle;
mod lanes;
mod own_pending;
mod prune;
mod read;
mod room;
mod settle;
mod stats;
mod window;

use std::sync::Arc;
use std::time::Duration;

use ruststream_core::Broker;
use tokio::sync::watch;
use tracing::Instrument;

use crate::observe::Observer;
use crate::{Publisher, ReplyTarget, Subscriber, Subscription};

pub(crate) use backoff::Backoff;
pub(crate) use read::LastRead;
pub(crate) use stats::Counters;
pub use stats::SubscriptionStats;

/// Everything a subscription's tasks share.
#[derive(Clone)]
pub(crate) struct Env {
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) publisher: Publisher,
    pub(crate) consumer: String,
    pub(crate) name: &'static str,
    pub(crate) subscription: Subscription,
    pub(crate) reply: ReplyTarget,
    /// `None` while running; `Some(deadline)` once shutting down.
    pub(crate) shutdown: watch::Receiver<Option<Duration>>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// Where a group the broker loses (a server restart without
    /// persistence) is recreated from: shared by the app's subscriptions of
    /// the group.
    pub(crate) last_read: Arc<LastRead>,
    /// How often claims on held entries are refreshed at most
    /// ([`crate::RustStream::keep_alive`]).
    pub(crate) keep_alive: Duration,
    /// The shortest `min_idle` of the app's claiming and reclaim
    /// subscriptions of this group, this one's own included: entries idle
    /// that long can be claimed, so claims are refreshed three times as
    /// often (see `claims`).
    pub(crate) claimed_after: Option<Duration>,
    /// Delete other consumers idle this long and holding nothing, at start
    /// ([`crate::RustStream::prune_idle_consumers`]).
    pub(crate) prune_idle_consumers: Option<Duration>,
    /// The readiness bounds ([`crate::RustStream::readiness`]).
    pub(crate) readiness: crate::ReadinessOptions,
}

impl Env {
    fn stream(&self) -> &str {
        self.subscription.stream.stream_name()
    }

    fn group(&self) -> &str {
        self.subscription.stream.group_name().unwrap_or_default()
    }
}

/// Runs one subscription until shutdown.
///
/// If either of its two tasks dies (a panic in a broker call, say), the
/// subscription stops, says why at error level, and the app's health
/// reports it: a subscription that silently stopped reading, or stopped
/// settling while it went on reading, would strand entries unseen.
pub(crate) async fn run_subscription<S: Subscriber>(subscriber: Arc<S>, env: Env) {
    if env.prune_idle_consumers.is_some() {
        // Housekeeping beside the subscription, never in its way.
        tokio::spawn(prune::prune_idle_consumers(env.clone()));
    }
    let outbox = Arc::new(settle::Outbox::default());
    let last_read = Arc::clone(&env.last_read);
    let mut settler = tokio::spawn(settle::settle_loop(
        env.clone(),
        Arc::clone(&outbox),
        Arc::clone(&last_read),
    ));
    let pipeline = handle::Pipeline {
        subscriber,
        env: env.clone(),
        batches: env.subscription.batch.map(|batch| {
            batch::Batches::new(batch, env.subscription.workers, Arc::clone(&env.counters))
        }),
    };
    let span = tracing::debug_span!("subscription", subscriber = env.name);
    let drive = async {
        // Closes the outbox however the task ends, a panic included, so the
        // settler always applies what it has and stops.
        let _close = settle::CloseOnDrop(&outbox);
        driver::drive(&pipeline, &outbox, &last_read)
            .instrument(span)
            .await;
    };
    let mut drive = std::pin::pin!(drive);
    let driven = std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drive.as_mut().poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(())) => std::task::Poll::Ready(None),
            Err(panic) => std::task::Poll::Ready(Some(format!(
                "its task panicked: {}",
                handle::panic_message(&*panic)
            ))),
        }
    });
    let failure = tokio::select! {
        failure = driven => {
            if failure.is_some() {
                // The outbox is closed by now: the settler applies what it
                // has, then ends.
                outbox.close();
            }
            let settled = (&mut settler).await;
            failure.or_else(|| settled.err().map(|e| format!("its settler failed: {e}")))
        }
        settled = &mut settler => Some(match settled {
            Ok(()) => "its settler stopped".to_owned(),
            Err(e) => format!("its settler failed: {e}"),
        }),
    };
    match failure {
        Some(detail) => {
            tracing::error!(subscriber = env.name, %detail, "subscriber stopped");
            env.counters.set_failure(detail);
        }
        None => {
            hand_back_strays(&env).await;
            tracing::info!(subscriber = env.name, "subscriber stopped");
        }
    }
}

/// How long the last look at the pending list may take at shutdown.
const STRAYS_TIMEOUT: Duration = Duration::from_secs(2);

/// After a stop, hands back what a `new` subscription still holds at the
/// broker: entries a read handed out whose reply never came, because the
/// task abandoned the read when it stopped (on Redis an `XREADGROUP`
/// already sent is applied). Owed again at once, another consumer takes
/// them now rather than after this consumer's restart. Every entry the task
/// saw has been settled or handed back by then. (Claiming and reclaim
/// subscriptions leave their retries pending on purpose, and their readers
/// take strays once idle.) Bounded in time; a failure is only logged.
async fn hand_back_strays(env: &Env) {
    if env.subscription.stream.retries_in_place() {
        return;
    }
    if env.counters.name_shared() {
        // The strays may be the entries another live process with this
        // name runs: handing them back would run them twice. What an
        // abandoned read handed out stays pending under the name instead,
        // for the look of whichever process runs on (or restarts) once it
        // has gone stale.
        tracing::info!(
            subscriber = env.name,
            consumer = %env.consumer,
            "another live process seems to share this consumer name: its entries are left to it at shutdown"
        );
        return;
    }
    // Every entry the task saw is settled or handed back by now: it holds
    // nothing.
    let look = own_pending::hand_back_own_strays(env, &[], None);
    match tokio::time::timeout(STRAYS_TIMEOUT, look).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => {
            env.counters
                .settled_as(crate::metrics::Outcome::HandedBack, n);
            group_event!(
                info,
                env,
                entries = n,
                "handed back entries a read abandoned at shutdown had handed out"
            );
        }
        Ok(Err(error)) => group_event!(
            warn,
            env,
            %error,
            "could not look for entries an abandoned read handed out; a restart re-reads them"
        ),
        Err(_) => group_event!(
            warn,
            env,
            "the broker did not answer the last look at the pending list; a restart re-reads it"
        ),
    }
}
