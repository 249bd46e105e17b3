//! Apps: brokers, the subscribers each one runs, start-up and shutdown.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ruststream_core::Broker;
use tokio::task::JoinHandle;

use crate::admin::AdminOptions;
pub use crate::admin::{ADMIN_ADDR_VAR, ADMIN_TOKEN_VAR};
use crate::observe::Observer;
use crate::readiness::ReadinessOptions;
use crate::runtime::{self, Env};
use crate::{ReplyTarget, Subscriber, SubscriberInfo, Subscription};

mod error;
mod start;

pub use error::StartError;

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
    instance: Option<String>,
    keep_alive: Duration,
    prune_idle_consumers: Option<Duration>,
    readiness: ReadinessOptions,
    admin: Option<AdminOptions>,
    /// The write routes' token set in code ([`RustStream::admin_token`]):
    /// it wins over one from the environment.
    admin_token: Option<String>,
    group_metrics: bool,
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

/// How often, by default, a subscription refreshes the claims on the
/// entries it holds ([`RustStream::keep_alive`]).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(5);

impl RustStream {
    /// An app with no brokers yet.
    pub fn new(info: AppInfo) -> Self {
        RustStream {
            info,
            brokers: Vec::new(),
            shutdown_deadline: DEFAULT_SHUTDOWN_DEADLINE,
            observer: None,
            instance: None,
            keep_alive: DEFAULT_KEEP_ALIVE,
            prune_idle_consumers: None,
            readiness: ReadinessOptions::default(),
            admin: None,
            admin_token: None,
            group_metrics: false,
        }
    }

    /// Names this instance of the app: generated consumer names become
    /// `{instance}-ruststream-0`, `{instance}-ruststream-1`, ..., so that
    /// two processes of one service reading one group have consumers of
    /// their own (they share pending lists otherwise), and the broker's
    /// consumer lists (`XINFO CONSUMERS`) tell instances apart. Without it
    /// the environment variable [`INSTANCE_VAR`] is used when set. Names
    /// given with `.consumer(..)` are kept as they are. Use a name that
    /// stays the same across restarts of one instance (a host name, a pod
    /// name of a stateful set), so a restarted instance recovers what it
    /// held.
    ///
    /// ```
    /// use ruststream::prelude::*;
    ///
    /// let app = RustStream::new(AppInfo::new("payments", "0.1.0")).instance("host-a");
    /// # let _ = app;
    /// ```
    pub fn instance(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// How often a subscription refreshes the claims on the entries it
    /// holds (default [`DEFAULT_KEEP_ALIVE`]; a claiming or reclaim
    /// subscription refreshes at least three times per `min_idle`).
    ///
    /// The same interval tells a restarted consumer which entries under its
    /// name are still worked on: at start-up it re-reads only its own
    /// pending entries left unrefreshed for three intervals, and leaves
    /// fresher ones to the live process that seems to share its name. So a
    /// shorter interval lets a process that crashed take back its entries
    /// sooner after a restart, for one broker call per interval while
    /// entries are held. See `docs/guarantees.md`, "Shared consumer names".
    ///
    /// ```
    /// use ruststream::prelude::*;
    ///
    /// let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
    ///     .keep_alive(Duration::from_secs(1));
    /// # let _ = app;
    /// ```
    pub fn keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = every;
        self
    }

    /// Opt-in: at start-up, each subscription deletes the other consumers
    /// of its group that hold no entries and have been idle for at least
    /// `idle` (Redis `XGROUP DELCONSUMER`), so the names of replaced
    /// instances do not pile up in the group's consumer list. A consumer
    /// holding entries is never deleted, and the check and the delete are
    /// one atomic step at the broker.
    ///
    /// ```
    /// use ruststream::prelude::*;
    ///
    /// let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
    ///     .prune_idle_consumers(Duration::from_secs(7 * 24 * 3600));
    /// # let _ = app;
    /// ```
    pub fn prune_idle_consumers(mut self, idle: Duration) -> Self {
        self.prune_idle_consumers = Some(idle);
        self
    }

    /// The bounds [`Running::readiness`](crate::Running::readiness) judges
    /// by (reads failing, handler deadline, poison loops).
    ///
    /// ```
    /// use ruststream::prelude::*;
    /// use ruststream::ReadinessOptions;
    ///
    /// let app = RustStream::new(AppInfo::new("payments", "0.1.0")).readiness(ReadinessOptions {
    ///     handler_deadline: Duration::from_secs(60),
    ///     ..ReadinessOptions::default()
    /// });
    /// # let _ = app;
    /// ```
    pub fn readiness(mut self, options: ReadinessOptions) -> Self {
        self.readiness = options;
        self
    }

    /// Serves the admin endpoint on `addr` while the app runs: Prometheus
    /// metrics, liveness and readiness, the subscribers, and group routes
    /// (see `docs/operations.md`). Bind it to loopback unless something in
    /// front of it controls access. Write routes (redrive, discard) are off
    /// unless [`RustStream::admin_token`] sets a token.
    ///
    /// `#[ruststream::app]` binaries (and [`run_main`](crate::run_main))
    /// also serve it when [`ADMIN_ADDR_VAR`] is set (`PORT` means
    /// `127.0.0.1:PORT`), and take the token from [`ADMIN_TOKEN_VAR`]
    /// unless [`RustStream::admin_token`] sets one.
    ///
    /// ```
    /// use ruststream::prelude::*;
    ///
    /// let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
    ///     .admin(([127, 0, 0, 1], 9464).into());
    /// # let _ = app;
    /// ```
    pub fn admin(mut self, addr: std::net::SocketAddr) -> Self {
        self.admin = Some(AdminOptions { addr, token: None });
        self
    }

    /// Polls the group gauges (lag, pending, oldest pending age, dead
    /// letters, consumers; `docs/operations.md`) every 5 seconds. On by
    /// itself with [`RustStream::admin`]; call this when the process
    /// installs a metrics recorder of its own. Each poll asks the broker
    /// about every group the app reads (on the local brokers, working out
    /// the lag walks the group's backlog).
    pub fn group_metrics(mut self) -> Self {
        self.group_metrics = true;
        self
    }

    /// The token the admin endpoint's write routes require, sent as
    /// `Authorization: Bearer <token>`; without one they are off. Called
    /// before or after [`RustStream::admin`] alike; it wins over
    /// [`ADMIN_TOKEN_VAR`].
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.admin_token = Some(token.into());
        self
    }

    /// What `run_main` does: serves the admin endpoint if [`ADMIN_ADDR_VAR`]
    /// asks for one (and none was set in code), and takes the write routes'
    /// token from [`ADMIN_TOKEN_VAR`] (unless one was set in code), whether
    /// the address came from code or from the environment.
    pub(crate) fn admin_from_env(mut self) -> Result<Self, String> {
        match &mut self.admin {
            Some(admin) => admin.token = AdminOptions::token_from_env(),
            None => self.admin = AdminOptions::from_env()?,
        }
        Ok(self)
    }

    /// The admin endpoint's options, with the token set in code, if any,
    /// in place of one from the environment.
    pub(crate) fn admin_options(&self) -> Option<AdminOptions> {
        let mut options = self.admin.clone()?;
        if let Some(token) = &self.admin_token {
            options.token = Some(token.clone());
        }
        Some(options)
    }

    /// Adds a broker and the subscribers it runs (a group's subscriptions
    /// belong in one call, see [`RustStream::with_shared_broker`]).
    pub fn with_broker<B: Broker>(
        self,
        broker: B,
        include: impl FnOnce(&mut BrokerScope<'_>),
    ) -> Self {
        self.with_shared_broker(Arc::new(broker), include)
    }

    /// Adds a broker already behind an `Arc` and the subscribers it runs.
    ///
    /// Subscriptions of one group (a `new` one and a `reclaim` one, say)
    /// belong on the same `Arc`, in one call: the app then treats them as
    /// one group, and if the broker loses the group, whichever finds it
    /// lost recreates it after everything either read. Added through two
    /// calls (two `Arc`s, even of clones of one client), each recreates it
    /// from what it alone read, and may hand out again what the other read
    /// (`docs/guarantees.md`, "Under faults").
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

/// The environment variable naming an app's instance when
/// [`RustStream::instance`] is not called.
pub const INSTANCE_VAR: &str = "RUSTSTREAM_INSTANCE";
