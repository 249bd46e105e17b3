//! Running a whole app in process, on tokio's paused clock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use ruststream::{
    App, Broker, DeadLetter, Entry, EntryId, Handled, MemoryBroker, Message, Observer,
    PendingEntry, PublishBuilder, PublishError, Publisher, Running, Settlement, StartError,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::watchdog::Watchdog;

/// Rounds of yielding [`TestApp::run_until_quiet`] allows before it calls
/// the service restless and fails the test.
pub const STEP_BUDGET: usize = 10_000;
/// How long, in real time, [`TestApp::advance`] waits for the paused clock
/// to reach its end before it fails the test (change it per app with
/// [`TestApp::set_advance_limit`]). The clock moves only while every task
/// waits: a service that never waits keeps it still.
pub const ADVANCE_REAL_TIME_LIMIT: Duration = Duration::from_secs(60);
/// Consecutive rounds without progress that count as quiet.
const QUIET_ROUNDS: usize = 3;
/// Yields per round: enough for every ready task to run.
const YIELDS_PER_ROUND: usize = 16;

/// One delivery a subscriber handled, as the testkit recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The subscriber's name (its function's name).
    pub subscriber: &'static str,
    /// The stream it was read from.
    pub stream: String,
    /// The group.
    pub group: String,
    /// The consumer it was delivered to.
    pub consumer: String,
    /// The entry's id.
    pub id: EntryId,
    /// The entry's headers and payload.
    pub message: Arc<Message>,
    /// Deliveries before this one (`DELIVERY_COUNT_HEADER`).
    pub delivery_count: u32,
    /// How the runtime settled it.
    pub settlement: Settlement,
}

impl Received {
    /// The payload decoded as JSON into `T`.
    ///
    /// # Panics
    ///
    /// If the payload is not a `T`: the message names the subscriber, the
    /// entry and the decode error.
    pub fn payload<T: DeserializeOwned>(&self) -> T {
        match serde_json::from_slice(&self.message.payload) {
            Ok(value) => value,
            Err(e) => panic!(
                "entry {} received by {} is not a {}: {e}; payload: {}",
                self.id,
                self.subscriber,
                std::any::type_name::<T>(),
                String::from_utf8_lossy(&self.message.payload)
            ),
        }
    }
}

#[derive(Default)]
struct Recorder {
    received: Mutex<Vec<Received>>,
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Vec<Received>> {
        self.received.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Observer for Recorder {
    fn handled(&self, event: &Handled<'_>) {
        self.lock().push(Received {
            subscriber: event.subscriber,
            stream: event.stream.to_owned(),
            group: event.group.to_owned(),
            consumer: event.consumer.to_owned(),
            id: event.delivery.entry.id,
            message: Arc::clone(&event.delivery.entry.message),
            delivery_count: event.delivery.delivery_count,
            settlement: event.settlement.clone(),
        });
    }
}

/// An app running in process on a [`MemoryBroker`], on tokio's paused
/// clock: every broker of the app is replaced by one memory broker, and
/// time moves only when the test says so.
///
/// ```
/// use ruststream::prelude::*;
/// use ruststream_testkit::TestApp;
///
/// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "greetings")]
/// struct Greeting { to: String }
///
/// #[subscriber(RedisStream::claiming("greetings", Duration::from_secs(30)).group("greeter"))]
/// async fn greet(greeting: &Greeting, ctx: &mut Context<'_>) -> HandlerOutcome {
///     if ctx.delivery_count() == 0 { HandlerOutcome::retry() } else { HandlerOutcome::ack() }
/// }
///
/// fn app() -> impl App {
///     RustStream::new(AppInfo::new("greeter", "1.0"))
///         .with_broker(MemoryBroker::new(), |b| { b.include(greet); })
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let tb = TestApp::start(app()).await.unwrap();
/// tb.publish(&Greeting { to: "ana".into() }).await.unwrap();
/// tb.run_until_quiet().await;
/// tb.advance(Duration::from_secs(30)).await;
/// let counts: Vec<u32> = tb.received("greet").iter().map(|r| r.delivery_count).collect();
/// assert_eq!(counts, [0, 1]);
/// tb.shutdown().await;
/// # }
/// ```
pub struct TestApp {
    running: Running,
    broker: MemoryBroker,
    publisher: Publisher,
    recorder: Arc<Recorder>,
    /// [`ADVANCE_REAL_TIME_LIMIT`] unless set, in milliseconds.
    advance_limit_ms: AtomicU64,
}

impl fmt::Debug for TestApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestApp")
            .field("running", &self.running)
            .field("received", &self.recorder.lock().len())
            .finish()
    }
}

impl TestApp {
    /// Starts `app` with its brokers replaced by a fresh memory broker, and
    /// lets it settle. Must run on a current-thread tokio runtime, best
    /// started paused (`#[tokio::test(start_paused = true)]`). The clock is
    /// paused here if it is not already, and moved (by less than a
    /// millisecond) onto the timers' millisecond grid, so that timers fire
    /// on time as on a runtime started paused.
    pub async fn start(app: impl App) -> Result<TestApp, StartError> {
        TestApp::start_on(app, MemoryBroker::new()).await
    }

    /// Like [`TestApp::start`], on a given memory broker (for example one
    /// already holding entries, or shared with a second app). Returns once
    /// nothing changes without moving the clock: a slow handler of an entry
    /// the broker held may still run (move the clock with
    /// [`TestApp::advance`]).
    pub async fn start_on(app: impl App, broker: MemoryBroker) -> Result<TestApp, StartError> {
        pause_clock().await;
        let recorder = Arc::new(Recorder::default());
        let shared: Arc<dyn Broker> = Arc::new(broker.clone());
        let running = app
            .into_rust_stream()
            .replace_brokers(Arc::clone(&shared))
            .observe(Arc::clone(&recorder) as Arc<dyn Observer>)
            .start()
            .await?;
        let tb = TestApp {
            running,
            broker,
            publisher: Publisher::new(shared),
            recorder,
            advance_limit_ms: AtomicU64::new(millis(ADVANCE_REAL_TIME_LIMIT)),
        };
        // Until nothing changes: a handler of an entry the broker already
        // held may be waiting on a timer, which only `advance` ends.
        tb.run_until(STEP_BUDGET, false).await;
        Ok(tb)
    }

    /// The memory broker the app runs on.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }

    /// The running app (stats, consumer names).
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// Publishes a typed value to its stream; add `.partition_key(..)`,
    /// `.header(..)` or `.to(stream)` before awaiting. Does not run the
    /// service: follow with [`TestApp::run_until_quiet`] or
    /// [`TestApp::advance`].
    pub fn publish<'a, T: ruststream::Outgoing + Serialize + ?Sized>(
        &'a self,
        value: &'a T,
    ) -> PublishBuilder<'a, T> {
        self.publisher.publish(value)
    }

    /// Publishes raw bytes and headers to `stream`.
    pub async fn publish_raw(
        &self,
        stream: &str,
        message: Message,
    ) -> Result<EntryId, PublishError> {
        Ok(self.broker.publish(stream, message).await?)
    }

    /// Lets the service run, without moving the clock, until nothing more
    /// can happen: every entry read has been settled (or waits on a
    /// `by_key` lane for a retry's delay, which only the clock can end)
    /// and no read returns anything new.
    ///
    /// # Panics
    ///
    /// If the service is still busy after [`STEP_BUDGET`] rounds (a handler
    /// waiting on real time, or a loop that never ends), with what it was
    /// doing.
    pub async fn run_until_quiet(&self) {
        self.run_until_quiet_within(STEP_BUDGET).await;
    }

    /// [`TestApp::run_until_quiet`] with a step budget of `rounds` instead
    /// of [`STEP_BUDGET`].
    ///
    /// # Panics
    ///
    /// If the service is still busy after `rounds` rounds.
    pub async fn run_until_quiet_within(&self, rounds: usize) {
        self.run_until(rounds, true).await;
    }

    /// Runs the service until nothing changes for [`QUIET_ROUNDS`] rounds
    /// and, with `settled`, every entry read is settled or waits on the
    /// clock; panics after `rounds` rounds.
    async fn run_until(&self, rounds: usize, settled: bool) {
        let mut last = (u64::MAX, usize::MAX, u64::MAX);
        let mut still = 0;
        for _ in 0..rounds {
            for _ in 0..YIELDS_PER_ROUND {
                tokio::task::yield_now().await;
            }
            let in_flight = self.running.in_flight();
            let now = (
                self.running.read_so_far(),
                self.recorder.lock().len(),
                in_flight,
            );
            let done = !settled || in_flight == self.running.waiting_on_the_clock();
            if done && now == last {
                still += 1;
                if still >= QUIET_ROUNDS {
                    return;
                }
            } else {
                still = 0;
            }
            last = now;
        }
        panic!(
            "the service did not quiet down within {rounds} steps: {} entries read and \
             not settled, {} read in all, {} handled. A handler may be waiting on a timer \
             (move the clock with tb.advance) or the service may feed itself endlessly.",
            self.running.in_flight(),
            self.running.read_so_far(),
            self.recorder.lock().len(),
        );
    }

    /// Moves the paused clock forward by `d`, letting every timer of the
    /// service (claims falling idle, delayed retries, handlers' sleeps) fire
    /// at its own time along the way, then runs until nothing more changes
    /// without moving the clock. A handler whose own timer ends after `d`
    /// is still running then: the next `advance` goes on from there, so a
    /// test can step through a slow handler.
    ///
    /// # Panics
    ///
    /// If the clock has not reached its end after
    /// [`ADVANCE_REAL_TIME_LIMIT`] of real time (or the limit set with
    /// [`TestApp::set_advance_limit`]): the service never waits, so the
    /// paused clock cannot move (a handler that publishes to the stream it
    /// reads feeds itself endlessly). If the service keeps changing for
    /// [`STEP_BUDGET`] rounds after the clock has moved (a loop that never
    /// ends).
    pub async fn advance(&self, d: Duration) {
        let limit = Duration::from_millis(self.advance_limit_ms.load(Ordering::Relaxed));
        let watchdog = Watchdog::start(limit);
        // Sleeping on a paused clock auto-advances it from timer to timer,
        // so the service sees time pass in order, as it would for real.
        tokio::select! {
            biased;
            () = tokio::time::sleep(d) => {}
            () = watchdog.fired() => panic!(
                "advance({d:?}) did not reach its end within {limit:?} of real time: the \
                 paused clock moves only while every task waits, and this service never \
                 waits ({} entries read and not settled, {} read in all, {} handled). A \
                 handler that publishes to the stream it reads feeds itself endlessly; a \
                 service that is only slow can be given more time with \
                 TestApp::set_advance_limit.",
                self.running.in_flight(),
                self.running.read_so_far(),
                self.recorder.lock().len(),
            ),
        }
        drop(watchdog);
        self.run_until(STEP_BUDGET, false).await;
    }

    /// Sets how long, in real time, [`TestApp::advance`] waits for the
    /// paused clock to reach its end before it fails the test (default
    /// [`ADVANCE_REAL_TIME_LIMIT`]).
    pub fn set_advance_limit(&self, limit: Duration) {
        self.advance_limit_ms
            .store(millis(limit), Ordering::Relaxed);
    }

    /// Every delivery `subscriber` handled, in order.
    pub fn received(&self, subscriber: &str) -> Vec<Received> {
        self.recorder
            .lock()
            .iter()
            .filter(|r| r.subscriber == subscriber)
            .cloned()
            .collect()
    }

    /// The payloads `subscriber` handled, decoded as `T`, in order.
    pub fn received_as<T: DeserializeOwned>(&self, subscriber: &str) -> Vec<T> {
        self.received(subscriber)
            .iter()
            .map(Received::payload)
            .collect()
    }

    /// Every delivery handled by any subscriber, in order.
    pub fn all_received(&self) -> Vec<Received> {
        self.recorder.lock().clone()
    }

    /// Every entry of `stream` (what was published to it, replies
    /// included).
    pub async fn published(&self, stream: &str) -> Vec<Entry> {
        self.broker
            .range(stream, EntryId::ZERO, EntryId::MAX, usize::MAX)
            .await
            .unwrap_or_default()
    }

    /// The entries of `stream` decoded as `T`.
    ///
    /// # Panics
    ///
    /// If an entry is not a `T`.
    pub async fn published_as<T: DeserializeOwned>(&self, stream: &str) -> Vec<T> {
        self.published(stream)
            .await
            .iter()
            .map(|e| match serde_json::from_slice(e.payload()) {
                Ok(v) => v,
                Err(err) => panic!(
                    "entry {} of stream {stream:?} is not a {}: {err}",
                    e.id,
                    std::any::type_name::<T>()
                ),
            })
            .collect()
    }

    /// How many entries `stream` holds.
    pub async fn stream_len(&self, stream: &str) -> u64 {
        match self.broker.stream_info(stream).await {
            Ok(Some(info)) => info.length,
            _ => 0,
        }
    }

    /// The pending list of `group` on `stream`.
    ///
    /// # Panics
    ///
    /// If there is no such group.
    pub async fn pending(&self, stream: &str, group: &str) -> Vec<PendingEntry> {
        match self
            .broker
            .pending(stream, group, EntryId::ZERO, usize::MAX, None)
            .await
        {
            Ok(p) => p,
            Err(e) => panic!("cannot list the pending entries: {e}"),
        }
    }

    /// The dead letters of `group` on `stream`.
    ///
    /// # Panics
    ///
    /// If there is no such group.
    pub async fn dead_letters(&self, stream: &str, group: &str) -> Vec<DeadLetter> {
        match self
            .broker
            .dead_letters(stream, group, EntryId::ZERO, usize::MAX)
            .await
        {
            Ok(d) => d,
            Err(e) => panic!("cannot list the dead letters: {e}"),
        }
    }

    /// Shuts the app down gracefully (handlers finish, unstarted entries are
    /// handed back) and runs the clock through the shutdown.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }
}

/// `d` in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Pauses tokio's clock if it is not paused yet, then moves it onto the
/// time driver's millisecond grid (see [`align_to_the_grid`]).
async fn pause_clock() {
    let before = tokio::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1));
    if tokio::time::Instant::now() != before {
        tokio::time::pause();
        align_to_the_grid().await;
    }
}

/// Moves a paused clock forward, by less than a millisecond, to the next
/// instant on the time driver's grid. The driver counts whole milliseconds
/// since it started, and a paused clock that runs ahead to a timer moves by
/// whole milliseconds from where it stands: paused between two of them, it
/// would reach every timer one millisecond late, and a chain of timers (a
/// retry after a retry) would slip a millisecond a step.
///
/// The driver fires a timer once the clock's whole milliseconds reach the
/// timer's (its deadline rounded up), so a timer due just after the pause
/// fires exactly at the next grid instant: found in steps of a
/// microsecond, then, past the one after it, of a nanosecond.
async fn align_to_the_grid() {
    /// Moves the clock in `step`s until `timer` has fired.
    async fn step_until_fired(timer: Pin<&mut tokio::time::Sleep>, step: Duration) {
        let mut timer = timer;
        while !std::future::poll_fn(|cx| Poll::Ready(timer.as_mut().poll(cx).is_ready())).await {
            tokio::time::advance(step).await;
        }
    }
    let (micro, nano) = (Duration::from_micros(1), Duration::from_nanos(1));
    let paused = tokio::time::Instant::now();
    let next = std::pin::pin!(tokio::time::sleep_until(paused + nano));
    step_until_fired(next, micro).await;
    // The grid instant just reached lies within the last microsecond
    // stepped; the one after it, a millisecond later, is then reached
    // exactly in steps of a nanosecond from just before it.
    let stepped = tokio::time::Instant::now() - paused;
    let before_next = paused + stepped - micro + Duration::from_millis(1);
    tokio::time::advance(before_next - tokio::time::Instant::now()).await;
    let after = std::pin::pin!(tokio::time::sleep_until(before_next + nano));
    step_until_fired(after, nano).await;
}
