//! Apps: brokers, the subscribers each one runs, start-up and shutdown.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream_core::{Broker, BrokerError, Counts, EntryId, NameKind, check_name};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::health::{Health, Problem};
use crate::observe::Observer;
use crate::runtime::{self, Env, Metrics};
use crate::{Publisher, ReplyTarget, Subscriber, SubscriberInfo, Subscription, SubscriptionStats};

/// The name and version of an app, for logs and consumer bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppInfo {
    name: String,
    version: String,
}

impl AppInfo {
    /// An app called `name` at `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        AppInfo {
            name: name.into(),
            version: version.into(),
        }
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The app's version.
    pub fn version(&self) -> &str {
        &self.version
    }
}

/// Something that can be run as a ruststream app: what `fn app() -> impl
/// App` returns. [`RustStream`] is the one implementation.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an app",
    label = "not an app: build one with `RustStream::new(AppInfo::new(..))`",
    note = "for an app whose building can fail, write `main` yourself instead of `#[ruststream::app]`: `fn main() {{ ruststream::run_main_with(async {{ app() }}) }}` prints an `Err` and exits with status 1"
)]
pub trait App: Send + 'static {
    /// The app's brokers and subscribers.
    fn into_rust_stream(self) -> RustStream;
}

/// A subscriber as the app holds it: its type erased.
pub(crate) trait Runner: Send + Sync + 'static {
    fn info(&self) -> SubscriberInfo;
    fn subscription(&self) -> Subscription;
    fn replies(&self) -> bool;
    fn spawn(self: Arc<Self>, env: Env) -> JoinHandle<()>;
}

impl<S: Subscriber> Runner for S {
    fn info(&self) -> SubscriberInfo {
        Subscriber::info(self)
    }

    fn subscription(&self) -> Subscription {
        Subscriber::subscription(self)
    }

    fn replies(&self) -> bool {
        Subscriber::replies(self)
    }

    fn spawn(self: Arc<Self>, env: Env) -> JoinHandle<()> {
        tokio::spawn(runtime::run_subscription(self, env))
    }
}

struct Included {
    runner: Arc<dyn Runner>,
    reply: ReplyTarget,
}

struct BrokerSetup {
    broker: Arc<dyn Broker>,
    subscribers: Vec<Included>,
}

/// An app: brokers and the subscribers each one runs.
///
/// ```
/// use ruststream::prelude::*;
///
/// #[derive(Debug, Deserialize, Serialize)]
/// struct Ping { n: u64 }
///
/// #[subscriber(RedisStream::new("pings").group("pong"))]
/// async fn pong(ping: &Ping) {
///     let _ = ping.n;
/// }
///
/// fn app() -> impl App {
///     RustStream::new(AppInfo::new("pinger", "0.1.0"))
///         .with_broker(MemoryBroker::new(), |b| {
///             b.include(pong);
///         })
/// }
/// # let _ = app();
/// ```
pub struct RustStream {
    info: AppInfo,
    brokers: Vec<BrokerSetup>,
    shutdown_deadline: Duration,
    observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for RustStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RustStream")
            .field("info", &self.info)
            .field("subscribers", &self.subscribers().collect::<Vec<_>>())
            .finish()
    }
}

/// The subscribers included on one broker: the argument of the closure
/// given to [`RustStream::with_broker`].
pub struct BrokerScope<'a> {
    subscribers: &'a mut Vec<Included>,
}

impl BrokerScope<'_> {
    /// Runs `subscriber` on this broker.
    pub fn include<S: Subscriber>(&mut self, subscriber: S) -> Include<'_> {
        self.subscribers.push(Included {
            runner: Arc::new(subscriber),
            reply: ReplyTarget::OwnStream,
        });
        let last = self.subscribers.len() - 1;
        Include {
            included: &mut self.subscribers[last],
        }
    }
}

/// Options of one included subscriber.
pub struct Include<'a> {
    included: &'a mut Included,
}

impl Include<'_> {
    /// Where a `reply` subscriber's values go: `Publish` (the reply type's
    /// stream), `Publish::to(stream)` or `ReplyTarget::Discard`.
    pub fn out_reply(self, target: impl Into<ReplyTarget>) -> Self {
        self.included.reply = target.into();
        self
    }
}

/// The default time running handlers get to finish at shutdown.
pub const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(30);

impl RustStream {
    /// An app with no brokers yet.
    pub fn new(info: AppInfo) -> Self {
        RustStream {
            info,
            brokers: Vec::new(),
            shutdown_deadline: DEFAULT_SHUTDOWN_DEADLINE,
            observer: None,
        }
    }

    /// Adds a broker and the subscribers it runs.
    pub fn with_broker<B: Broker>(
        self,
        broker: B,
        include: impl FnOnce(&mut BrokerScope<'_>),
    ) -> Self {
        self.with_shared_broker(Arc::new(broker), include)
    }

    /// Adds a broker already behind an `Arc` and the subscribers it runs.
    pub fn with_shared_broker(
        mut self,
        broker: Arc<dyn Broker>,
        include: impl FnOnce(&mut BrokerScope<'_>),
    ) -> Self {
        let mut subscribers = Vec::new();
        include(&mut BrokerScope {
            subscribers: &mut subscribers,
        });
        self.brokers.push(BrokerSetup {
            broker,
            subscribers,
        });
        self
    }

    /// How long running handlers get to finish at shutdown (default 30 s).
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.shutdown_deadline = deadline;
        self
    }

    /// Calls `observer` with every delivery once it is settled (the
    /// testkit records deliveries this way; a demo can print them).
    pub fn observe(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The app's name and version.
    pub fn info(&self) -> &AppInfo {
        &self.info
    }

    /// Every included subscriber with its subscription.
    pub fn subscribers(&self) -> impl Iterator<Item = (SubscriberInfo, Subscription)> + '_ {
        self.brokers
            .iter()
            .flat_map(|b| b.subscribers.iter())
            .map(|i| (i.runner.info(), i.runner.subscription()))
    }

    /// The app's brokers, in the order they were added.
    pub fn brokers(&self) -> impl Iterator<Item = &Arc<dyn Broker>> + '_ {
        self.brokers.iter().map(|b| &b.broker)
    }

    /// Replaces every broker with `broker`, keeping the subscribers: how the
    /// testkit runs an app on its memory broker. Test support, not part of
    /// the documented API.
    #[doc(hidden)]
    pub fn replace_brokers(mut self, broker: Arc<dyn Broker>) -> Self {
        for setup in &mut self.brokers {
            setup.broker = Arc::clone(&broker);
        }
        self
    }

    /// Validates every subscription, creates the groups and starts reading.
    ///
    /// Nothing is read unless every subscription can be served: a missing
    /// group name, bad options, or a read mode the broker cannot serve stop
    /// the start with an error naming the subscriber.
    pub async fn start(self) -> Result<Running, StartError> {
        let mut plans = Vec::new();
        for setup in &self.brokers {
            for included in &setup.subscribers {
                let plan = Plan::new(setup, included)?;
                setup
                    .broker
                    .check_mode(plan.subscription.stream.read_mode())
                    .await
                    .map_err(|source| StartError::Unsupported {
                        subscriber: plan.describe(),
                        source,
                    })?;
                plans.push(plan);
            }
        }
        let mut floors = Vec::with_capacity(plans.len());
        for plan in &plans {
            floors.push(plan.prepare_group().await?);
        }
        let (signal, watch) = watch::channel(None);
        let mut tasks = Vec::new();
        let mut subscriptions = Vec::new();
        for (plan, resume_floor) in plans.into_iter().zip(floors) {
            let metrics = Arc::new(Metrics::default());
            let env = Env {
                broker: Arc::clone(&plan.broker),
                publisher: Publisher::new(Arc::clone(&plan.broker)),
                consumer: plan.consumer.clone(),
                name: plan.info.name,
                subscription: plan.subscription.clone(),
                reply: plan.reply.clone(),
                shutdown: watch.clone(),
                metrics: Arc::clone(&metrics),
                observer: self.observer.clone(),
                resume_floor,
            };
            tracing::info!(
                subscriber = plan.info.name,
                stream = plan.subscription.stream.stream_name(),
                group = plan.group(),
                consumer = %plan.consumer,
                workers = plan.subscription.workers,
                replies = plan.runner.replies(),
                "subscriber started"
            );
            tasks.push(Arc::clone(&plan.runner).spawn(env));
            subscriptions.push(RunningSubscription {
                info: plan.info,
                subscription: plan.subscription,
                consumer: plan.consumer,
                broker: plan.broker,
                metrics,
            });
        }
        let publisher = self
            .brokers
            .first()
            .map(|b| Publisher::new(Arc::clone(&b.broker)));
        Ok(Running {
            info: self.info,
            signal,
            tasks,
            subscriptions,
            publisher,
            shutdown_deadline: self.shutdown_deadline,
        })
    }

    /// Starts the app, runs until `stop` resolves, then shuts down
    /// gracefully within the shutdown deadline.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Result<(), StartError> {
        let running = self.start().await?;
        stop.await;
        tracing::info!("shutting down");
        running.shutdown().await;
        Ok(())
    }

    /// Starts the app and runs until SIGINT or SIGTERM.
    pub async fn run(self) -> Result<(), StartError> {
        self.run_until(termination()).await
    }
}

impl App for RustStream {
    fn into_rust_stream(self) -> RustStream {
        self
    }
}

/// Resolves on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
pub async fn termination() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

static NEXT_CONSUMER: AtomicUsize = AtomicUsize::new(0);

/// A subscriber ready to start.
struct Plan {
    broker: Arc<dyn Broker>,
    runner: Arc<dyn Runner>,
    info: SubscriberInfo,
    subscription: Subscription,
    reply: ReplyTarget,
    consumer: String,
}

impl Plan {
    fn new(setup: &BrokerSetup, included: &Included) -> Result<Self, StartError> {
        let info = included.runner.info();
        let subscription = included.runner.subscription();
        let invalid = |detail: String| StartError::Invalid {
            subscriber: describe(&info, &subscription),
            detail,
        };
        let Some(group) = subscription.stream.group_name() else {
            return Err(invalid(
                "it names no consumer group: add .group(\"name\") to its stream descriptor".into(),
            ));
        };
        // The names' rules live in one place, the core; every broker checks
        // them again on each call.
        let names = check_name(NameKind::Stream, subscription.stream.stream_name())
            .and_then(|()| check_name(NameKind::Group, group))
            .and_then(|()| {
                subscription
                    .stream
                    .consumer_name()
                    .map_or(Ok(()), |c| check_name(NameKind::Consumer, c))
            });
        if let Err(error) = names {
            return Err(invalid(error.to_string()));
        }
        if let ReplyTarget::Stream(stream) = &included.reply
            && let Err(error) = check_name(NameKind::Stream, stream)
        {
            return Err(invalid(format!("its replies go to a bad stream: {error}")));
        }
        // The counts' rules live in the core, where the macro applies them
        // to literals at compile time.
        let counts = Counts {
            workers: subscription.workers as u64,
            prefetch: subscription.prefetch.map(|p| p as u64),
            max_deliveries: subscription.max_deliveries.map(u64::from),
        };
        if let Err(detail) = counts.validate() {
            return Err(invalid(detail));
        }
        let consumer = match subscription.stream.consumer_name() {
            Some(name) => name.to_owned(),
            None => format!(
                "ruststream-{}",
                NEXT_CONSUMER.fetch_add(1, Ordering::Relaxed)
            ),
        };
        Ok(Plan {
            broker: Arc::clone(&setup.broker),
            runner: Arc::clone(&included.runner),
            info,
            subscription,
            reply: included.reply.clone(),
            consumer,
        })
    }

    fn group(&self) -> &str {
        self.subscription.stream.group_name().unwrap_or_default()
    }

    fn describe(&self) -> String {
        describe(&self.info, &self.subscription)
    }

    /// Creates the group if needed, moves its cursor if asked, and returns
    /// the group's last delivered id: the point a group lost later (a
    /// server restart) is recreated from, until the subscription reads
    /// past it.
    async fn prepare_group(&self) -> Result<EntryId, StartError> {
        let stream = self.subscription.stream.stream_name();
        let failed = |source| StartError::Broker {
            subscriber: self.describe(),
            source,
        };
        let created = self
            .broker
            .ensure_group(stream, self.group(), self.subscription.stream.start())
            .await
            .map_err(failed)?;
        if created {
            tracing::info!(stream, group = self.group(), "consumer group created");
        }
        if let Some(position) = self.subscription.stream.moved_to() {
            self.broker
                .set_group_position(stream, self.group(), position)
                .await
                .map_err(failed)?;
            tracing::info!(
                stream,
                group = self.group(),
                ?position,
                "group cursor moved (start_at)"
            );
        }
        let info = self
            .broker
            .group_info(stream, self.group())
            .await
            .map_err(failed)?;
        Ok(info.last_delivered)
    }
}

fn describe(info: &SubscriberInfo, subscription: &Subscription) -> String {
    format!(
        "subscriber `{}` ({}:{}, stream {:?}, group {:?})",
        info.name,
        info.file,
        info.line,
        subscription.stream.stream_name(),
        subscription.stream.group_name().unwrap_or("<none>"),
    )
}

/// Why an app did not start. Each names the subscriber concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A subscription is misconfigured.
    #[error("{subscriber} cannot start: {detail}")]
    Invalid {
        /// The subscriber, where it was written and what it reads.
        subscriber: String,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// The broker cannot serve the subscription's read mode.
    #[error("{subscriber} cannot start: {source}")]
    Unsupported {
        /// The subscriber, where it was written and what it reads.
        subscriber: String,
        /// The broker's explanation.
        #[source]
        source: BrokerError,
    },
    /// The broker failed while the subscription was being prepared.
    #[error("{subscriber} cannot start: {source}")]
    Broker {
        /// The subscriber, where it was written and what it reads.
        subscriber: String,
        /// The broker's error.
        #[source]
        source: BrokerError,
    },
}

/// A started app. Call [`Running::shutdown`] for a graceful stop. Dropping
/// it stops the subscriptions without a grace period: handlers still
/// running are dropped, and their entries and those not yet started are
/// handed back for immediate redelivery.
pub struct Running {
    info: AppInfo,
    signal: watch::Sender<Option<Duration>>,
    tasks: Vec<JoinHandle<()>>,
    subscriptions: Vec<RunningSubscription>,
    publisher: Option<Publisher>,
    shutdown_deadline: Duration,
}

struct RunningSubscription {
    info: SubscriberInfo,
    subscription: Subscription,
    consumer: String,
    broker: Arc<dyn Broker>,
    metrics: Arc<Metrics>,
}

impl fmt::Debug for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Running")
            .field("info", &self.info)
            .field("subscriptions", &self.subscriptions.len())
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
        self.subscriptions
            .iter()
            .map(|s| s.metrics.in_flight())
            .sum()
    }

    /// Whether the app can do its work: a problem for each subscription
    /// that stopped before shutdown (one of its tasks died; it says why),
    /// and for each broker that has stopped taking writes
    /// ([`Broker::failure`]), naming the subscribers that read from it.
    pub fn health(&self) -> Health {
        let mut health = Health::default();
        for s in &self.subscriptions {
            if let Some(detail) = s.metrics.failure() {
                health.problems.push(Problem {
                    broker: s.broker.name(),
                    subscribers: vec![s.info.name],
                    detail: format!("subscriber `{}` stopped: {detail}", s.info.name),
                });
            }
        }
        let mut seen: Vec<*const ()> = Vec::new();
        for s in &self.subscriptions {
            let key = Arc::as_ptr(&s.broker).cast::<()>();
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            if let Some(detail) = s.broker.failure() {
                let subscribers = self
                    .subscriptions
                    .iter()
                    .filter(|o| Arc::ptr_eq(&o.broker, &s.broker))
                    .map(|o| o.info.name)
                    .collect();
                health.problems.push(Problem {
                    broker: s.broker.name(),
                    subscribers,
                    detail,
                });
            }
        }
        health
    }

    /// Entries read so far over all subscriptions: a progress counter for
    /// the testkit's quiescence check, not part of the documented API.
    #[doc(hidden)]
    pub fn read_so_far(&self) -> u64 {
        self.subscriptions
            .iter()
            .map(|s| s.metrics.read_so_far())
            .sum()
    }

    /// The consumer name each subscriber reads as, by subscriber name.
    pub fn consumers(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.subscriptions
            .iter()
            .map(|s| (s.info.name, s.consumer.as_str()))
    }

    /// Counters of every subscription (delivered, acked, retried,
    /// dead-lettered, handler time) and, from the broker, its group's lag,
    /// pending count and oldest pending age.
    pub async fn stats(&self) -> Vec<SubscriptionStats> {
        let mut out = Vec::with_capacity(self.subscriptions.len());
        for s in &self.subscriptions {
            let mut stats = s.metrics.snapshot(s.info.name, &s.consumer);
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
