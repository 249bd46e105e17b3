//! A started app: its subscriptions' stats, health and readiness, and
//! shutdown. What the admin endpoint reports is the same [`AppView`] the
//! handle reads.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ruststream_core::Broker;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::app::AppInfo;
use crate::health::{Health, Problem};
use crate::readiness::{Readiness, ReadinessOptions};
use crate::runtime::Counters;
use crate::{Publisher, SubscriberInfo, Subscription, SubscriptionStats};

/// A started app. Call [`Running::shutdown`] for a graceful stop. Dropping
/// it stops the subscriptions without a grace period: handlers still
/// running are dropped, and their entries and those not yet started are
/// handed back for immediate redelivery.
pub struct Running {
    pub(crate) view: Arc<AppView>,
    pub(crate) signal: watch::Sender<Option<Duration>>,
    pub(crate) tasks: Vec<JoinHandle<()>>,
    pub(crate) publisher: Option<Publisher>,
    pub(crate) shutdown_deadline: Duration,
    /// Where the admin endpoint listens, if it was asked for.
    pub(crate) admin_addr: Option<std::net::SocketAddr>,
}

/// What a running app is, shared by its handle and its admin endpoint.
pub(crate) struct AppView {
    pub(crate) info: AppInfo,
    pub(crate) subscriptions: Vec<RunningSubscription>,
    /// Every broker of the app, in the order they were added.
    pub(crate) brokers: Vec<Arc<dyn Broker>>,
    pub(crate) readiness: ReadinessOptions,
}

/// What a running app keeps of each subscription.
pub(crate) struct RunningSubscription {
    pub(crate) info: SubscriberInfo,
    pub(crate) subscription: Subscription,
    pub(crate) consumer: String,
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) counters: Arc<Counters>,
}

impl fmt::Debug for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Running")
            .field("info", &self.view.info)
            .field("subscriptions", &self.view.subscriptions.len())
            .finish()
    }
}

impl Running {
    /// A publisher on the app's first broker.
    pub fn publisher(&self) -> Option<&Publisher> {
        self.publisher.as_ref()
    }

    /// Entries read from the brokers and not yet settled, over all
    /// subscriptions. Test support (the testkit's quiescence check), not
    /// part of the documented API.
    #[doc(hidden)]
    pub fn in_flight(&self) -> u64 {
        self.view
            .subscriptions
            .iter()
            .map(|s| s.counters.in_flight())
            .sum()
    }

    /// Whether the app can do its work: a problem for each subscription
    /// that stopped before shutdown (one of its tasks died; it says why),
    /// and for each broker of the app that has stopped taking writes
    /// ([`Broker::failure`]), whether subscriptions read from it or the app
    /// only publishes to it, naming the subscribers that read from it.
    pub fn health(&self) -> Health {
        self.view.health()
    }

    /// Whether the app's work is flowing: healthy, every subscription has
    /// read, and none of the readiness conditions holds (reads failing
    /// past a window, a handler past its deadline, a poison loop; see
    /// [`RustStream::readiness`](crate::RustStream::readiness)).
    pub fn readiness(&self) -> Readiness {
        self.view.readiness()
    }

    /// Where the admin endpoint listens, when the app serves one
    /// ([`RustStream::admin`](crate::RustStream::admin)).
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin_addr
    }

    /// Entries held on `by_key` lanes after a retry, waiting for their
    /// delay: in flight, but waiting on the clock. Test support (the
    /// testkit's quiescence check), not part of the documented API.
    #[doc(hidden)]
    pub fn waiting_on_the_clock(&self) -> u64 {
        self.view
            .subscriptions
            .iter()
            .map(|s| s.counters.held())
            .sum()
    }

    /// Entries read so far over all subscriptions: a progress counter for
    /// the testkit's quiescence check, not part of the documented API.
    #[doc(hidden)]
    pub fn read_so_far(&self) -> u64 {
        self.view
            .subscriptions
            .iter()
            .map(|s| s.counters.read_so_far())
            .sum()
    }

    /// The consumer name each subscriber reads as, by subscriber name.
    pub fn consumers(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.view
            .subscriptions
            .iter()
            .map(|s| (s.info.name, s.consumer.as_str()))
    }

    /// Counters of every subscription (delivered, acked, retried,
    /// dead-lettered, handler time) and, from the broker, its group's lag,
    /// pending count and oldest pending age.
    pub async fn stats(&self) -> Vec<SubscriptionStats> {
        self.view.stats().await
    }

    /// Stops reading, lets running handlers finish within the shutdown
    /// deadline and settles them, and hands entries that were read but
    /// never started back for immediate redelivery.
    pub async fn shutdown(self) {
        let deadline = self.shutdown_deadline;
        self.shutdown_within(deadline).await;
    }

    /// [`Running::shutdown`] with an explicit deadline.
    pub async fn shutdown_within(self, deadline: Duration) {
        self.signal.send_replace(Some(deadline));
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a subscription task ended abnormally");
            }
        }
    }
}

impl AppView {
    pub(crate) fn health(&self) -> Health {
        let mut health = Health::default();
        for s in &self.subscriptions {
            if let Some(detail) = s.counters.failure() {
                health.problems.push(Problem {
                    broker: s.broker.name(),
                    subscribers: vec![s.info.name],
                    detail: format!("subscriber `{}` stopped: {detail}", s.info.name),
                });
            }
        }
        // Every broker of the app, read from or only published to: one
        // that has stopped taking writes is not live either way.
        let mut seen: Vec<*const ()> = Vec::new();
        for broker in &self.brokers {
            let key = Arc::as_ptr(broker).cast::<()>();
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            if let Some(detail) = broker.failure() {
                let subscribers = self
                    .subscriptions
                    .iter()
                    .filter(|o| Arc::ptr_eq(&o.broker, broker))
                    .map(|o| o.info.name)
                    .collect();
                health.problems.push(Problem {
                    broker: broker.name(),
                    subscribers,
                    detail,
                });
            }
        }
        health
    }

    pub(crate) fn readiness(&self) -> Readiness {
        let mut readiness = Readiness::default();
        for problem in self.health().problems {
            readiness.reasons.push(problem.to_string());
        }
        for s in &self.subscriptions {
            s.counters
                .signals
                .check(s.info.name, &self.readiness, &mut readiness.reasons);
        }
        readiness
    }

    pub(crate) async fn stats(&self) -> Vec<SubscriptionStats> {
        let mut out = Vec::with_capacity(self.subscriptions.len());
        for s in &self.subscriptions {
            let mut stats = s.counters.snapshot(s.info.name, &s.consumer);
            let stream = s.subscription.stream.stream_name();
            let group = s.subscription.stream.group_name().unwrap_or_default();
            if let Ok(info) = s.broker.group_info(stream, group).await {
                stats.lag = Some(info.lag);
                stats.pending = Some(info.pending);
            }
            if let Ok(oldest) = s
                .broker
                .pending(stream, group, ruststream_core::EntryId::ZERO, 1, None)
                .await
            {
                stats.oldest_pending_ms = oldest.first().map(|p| p.idle_ms);
            }
            out.push(stats);
        }
        out
    }
}
