//! Fault injection: [`FaultyBroker`] wraps any broker and makes its calls
//! fail, lose their replies, stall, or lose a consumer group, on a seeded
//! and reproducible schedule, so a test can check that an app keeps the
//! guarantees of `docs/guarantees.md` when the broker misbehaves.
//!
//! ```
//! use std::sync::Arc;
//! use ruststream_core::Broker;
//! use ruststream_memory::MemoryBroker;
//! use ruststream_testkit::faults::{CallKind, Fault, FaultyBroker};
//!
//! let faults = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 42));
//! // One ack in ten fails before it reaches the broker, one in ten after.
//! faults.set_rate(&[CallKind::Ack], Fault::Before, 0.1);
//! faults.set_rate(&[CallKind::Ack], Fault::After, 0.1);
//! // The third read is applied, and its reply lost.
//! faults.script(CallKind::Read, 3, Fault::After);
//! let app_broker: Arc<dyn Broker> = faults.clone();
//! # let _ = app_broker;
//! ```
//!
//! # The faults
//!
//! - [`Fault::Before`]: the call fails before it reaches the inner broker
//!   (nothing is applied), with a transient
//!   [`BrokerError::Connection`] from broker `"faults"`.
//! - [`Fault::After`]: the call is made and applied, then its reply is lost:
//!   the caller gets the same kind of error.
//! - [`Fault::Delay`]: the call waits (`tokio::time::sleep`, so it follows a
//!   paused test clock), then goes through.
//! - [`Fault::LoseGroup`]: the call's consumer group is lost, as a Redis
//!   restart without persistence loses it (see [`FaultyBroker::lose_group`]),
//!   and the call fails.
//!
//! Faults are chosen per [`CallKind`], by rate ([`FaultyBroker::set_rate`]),
//! by script ([`FaultyBroker::script`]: "the 3rd ack fails after") or for a
//! stretch of time ([`FaultyBroker::outage`]). Rate decisions depend only on
//! the seed, the kind and the call's number within its kind, so a run with
//! the same seed and the same sequence of calls injects the same faults.
//! [`FaultyBroker::set_enabled`] turns injection off and on at run time;
//! [`FaultyBroker::injected`] counts what was injected, per kind.
//!
//! # Lost groups
//!
//! After a group `G` is lost, the wrapper sends every call naming `G` to a
//! fresh inner group `G~1` (then `G~2`, ...), which does not exist yet: reads,
//! settles and inspections fail with [`BrokerError::NoGroup`] naming `G`
//! until `ensure_group(G, start)` creates `G~1` at `start`. A recreation at
//! [`StreamStart::New`](ruststream_core::StreamStart::New) therefore passes
//! over the entries published in between, exactly as on a restarted
//! server. Calls on `G` in flight when it is lost fail (a blocking read at
//! once), as the restart would drop their connections.
//!
//! # Read-ahead accounting
//!
//! The wrapper tracks, per consumer, the entries a read handed out (and
//! whose reply arrived) that no settle call has confirmed since:
//! [`FaultyBroker::held`] and its high-water mark
//! [`FaultyBroker::held_high_water`]. Entries left pending on purpose (a
//! retry on a claiming subscription makes no call) stay counted until a read
//! hands them out again.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ruststream_core::{
    Broker, BrokerError, BrokerResult, EntryId, ReadBatch, ReadRequest, Retry, broker_methods,
    delegate_broker,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// The name the wrapper gives in the errors it injects.
const NAME: &str = "faults";

/// Declares [`CallKind`] from one list of its kinds, in order, each with
/// its short name: the enum, [`CallKind::ALL`], [`CallKind::as_str`] and
/// `KINDS`, their number.
macro_rules! call_kinds {
    ($($(#[$doc:meta])* $kind:ident => $name:literal,)+) => {
        /// The kinds of broker call, as faults are chosen for them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CallKind {
            $($(#[$doc])* $kind,)+
        }

        const KINDS: usize = [$(stringify!($kind)),+].len();

        impl CallKind {
            /// Every kind.
            pub const ALL: [CallKind; KINDS] = [$(CallKind::$kind),+];

            /// A short name for reports: `"ack"`, `"retry (copy)"`, ...
            pub fn as_str(self) -> &'static str {
                match self {
                    $(CallKind::$kind => $name,)+
                }
            }
        }
    };
}

call_kinds! {
    /// [`Broker::check_mode`].
    CheckMode => "check_mode",
    /// [`Broker::publish`] and [`Broker::publish_batch`].
    Publish => "publish",
    /// [`Broker::ensure_group`].
    EnsureGroup => "ensure_group",
    /// [`Broker::set_group_position`].
    SetGroupPosition => "set_group_position",
    /// [`Broker::read`], every mode.
    Read => "read",
    /// [`Broker::ack`].
    Ack => "ack",
    /// [`Broker::retry`] with [`Retry::Copy`].
    RetryCopy => "retry (copy)",
    /// [`Broker::retry`] with [`Retry::After`].
    RetryAfter => "retry (after)",
    /// [`Broker::dead_letter`].
    DeadLetter => "dead_letter",
    /// [`Broker::redrive`].
    Redrive => "redrive",
    /// [`Broker::discard`].
    Discard => "discard",
    /// [`Broker::group_info`].
    GroupInfo => "group_info",
    /// [`Broker::consumers`].
    Consumers => "consumers",
    /// [`Broker::pending`].
    Pending => "pending",
    /// [`Broker::dead_letters`].
    DeadLetters => "dead_letters",
    /// [`Broker::range`].
    Range => "range",
    /// [`Broker::stream_info`].
    StreamInfo => "stream_info",
    /// [`Broker::trim`].
    Trim => "trim",
    /// [`Broker::extend_claim`]. Last, so that adding it kept every other
    /// kind's number, and so the faults a seed draws for them.
    ExtendClaim => "extend_claim",
    /// [`Broker::delete_consumer`]. After `ExtendClaim`, for the same
    /// reason.
    DeleteConsumer => "delete_consumer",
    /// [`Broker::streams`]. After `DeleteConsumer`, for the same reason.
    Streams => "streams",
    /// [`Broker::count_deliveries`]. Last, for the same reason.
    CountDeliveries => "count_deliveries",
}

impl CallKind {
    /// The calls that settle entries a read handed out, the one that
    /// keeps their claims and the one that counts their re-runs (an outage
    /// of the settles stalls those too).
    pub const SETTLES: [CallKind; 6] = [
        CallKind::Ack,
        CallKind::RetryCopy,
        CallKind::RetryAfter,
        CallKind::DeadLetter,
        CallKind::ExtendClaim,
        CallKind::CountDeliveries,
    ];

    /// The calls that only look (admin and monitoring reads).
    pub const INSPECTIONS: [CallKind; 6] = [
        CallKind::GroupInfo,
        CallKind::Consumers,
        CallKind::Pending,
        CallKind::DeadLetters,
        CallKind::Range,
        CallKind::StreamInfo,
    ];

    /// The kind of a retry `how`.
    pub fn of_retry(how: Retry) -> CallKind {
        match how {
            Retry::Copy => CallKind::RetryCopy,
            Retry::After(_) => CallKind::RetryAfter,
        }
    }

    /// Whether calls of this kind name a consumer group (and so go through
    /// the lost-group mapping).
    pub fn takes_group(self) -> bool {
        matches!(
            self,
            CallKind::EnsureGroup
                | CallKind::SetGroupPosition
                | CallKind::Read
                | CallKind::Ack
                | CallKind::RetryCopy
                | CallKind::RetryAfter
                | CallKind::DeadLetter
                | CallKind::ExtendClaim
                | CallKind::CountDeliveries
                | CallKind::DeleteConsumer
                | CallKind::Redrive
                | CallKind::Discard
                | CallKind::GroupInfo
                | CallKind::Consumers
                | CallKind::Pending
                | CallKind::DeadLetters
        )
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fault to inject into one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail before the call reaches the inner broker: nothing is applied.
    Before,
    /// Make the call (it is applied), then lose the reply: the caller gets
    /// an error all the same.
    After,
    /// Wait this long, then make the call. Scripted, the delay is exactly
    /// this; as a rate ([`FaultyBroker::set_rate`]), each delay is drawn
    /// from the seed, uniformly up to this.
    Delay(Duration),
    /// Lose the call's consumer group (as [`FaultyBroker::lose_group`]),
    /// then fail the call. Ignored on calls that name no group.
    LoseGroup,
}

impl Fault {
    /// Which kind of fault this is.
    pub fn kind(self) -> FaultKind {
        match self {
            Fault::Before => FaultKind::Before,
            Fault::After => FaultKind::After,
            Fault::Delay(_) => FaultKind::Delay,
            Fault::LoseGroup => FaultKind::LoseGroup,
        }
    }
}

/// The kinds of [`Fault`], without their parameters: what
/// [`FaultCounts`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// [`Fault::Before`].
    Before,
    /// [`Fault::After`].
    After,
    /// [`Fault::Delay`].
    Delay,
    /// [`Fault::LoseGroup`].
    LoseGroup,
}

impl FaultKind {
    /// A short name for reports: `"before"`, `"after"`, `"delay"`,
    /// `"lose group"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Before => "before",
            FaultKind::After => "after",
            FaultKind::Delay => "delay",
            FaultKind::LoseGroup => "lose group",
        }
    }
}

/// Faults injected so far, per call kind and fault kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    counts: BTreeMap<(CallKind, FaultKind), u64>,
}

impl FaultCounts {
    /// Faults of kind `fault` injected into calls of kind `call`.
    pub fn get(&self, call: CallKind, fault: FaultKind) -> u64 {
        self.counts.get(&(call, fault)).copied().unwrap_or(0)
    }

    /// Faults of kind `fault` injected into calls of any kind.
    pub fn of_fault(&self, fault: FaultKind) -> u64 {
        self.sum(|_, f| f == fault)
    }

    /// Faults of any kind injected into calls of kind `call`.
    pub fn of_call(&self, call: CallKind) -> u64 {
        self.sum(|c, _| c == call)
    }

    /// Faults injected into the calls `counted` picks, by call kind and
    /// fault kind.
    fn sum(&self, counted: impl Fn(CallKind, FaultKind) -> bool) -> u64 {
        self.counts
            .iter()
            .filter(|((c, f), _)| counted(*c, *f))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every fault injected.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

impl fmt::Display for FaultCounts {
    /// `ack: 3 before, 2 after; read: 1 delay` (or `none`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("none");
        }
        let mut last: Option<CallKind> = None;
        for ((call, fault), n) in &self.counts {
            if last == Some(*call) {
                write!(f, ", {n} {}", fault.as_str())?;
            } else {
                if last.is_some() {
                    f.write_str("; ")?;
                }
                write!(f, "{call}: {n} {}", fault.as_str())?;
            }
            last = Some(*call);
        }
        Ok(())
    }
}

/// One injected fault, for a test's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// The call's kind.
    pub call: CallKind,
    /// The call's number within its kind, from 1.
    pub nth: u64,
    /// What was injected.
    pub fault: Fault,
    /// The stream named in the call, if any.
    pub stream: Option<String>,
    /// The group named in the call (the caller's name), if any.
    pub group: Option<String>,
    /// The entries concerned: a settle's ids, or what a read whose reply
    /// was lost had handed out.
    pub ids: Vec<EntryId>,
}

impl fmt::Display for FaultEvent {
    /// `ack #57 after`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{} {}",
            self.call,
            self.nth,
            self.fault.kind().as_str()
        )
    }
}

/// A read that was applied but whose reply was lost: the entries it handed
/// out are pending under `consumer`, and the app never saw them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRead {
    /// The stream.
    pub stream: String,
    /// The group (the caller's name).
    pub group: String,
    /// The consumer the entries are pending under.
    pub consumer: String,
    /// The entries handed out.
    pub ids: Vec<EntryId>,
}

/// A group lost by [`FaultyBroker::lose_group`] or a
/// [`Fault::LoseGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupLoss {
    /// The stream.
    pub stream: String,
    /// The group, as callers name it.
    pub group: String,
    /// The inner group calls went to before the loss (it stays on the
    /// inner broker, abandoned, with its pending entries and dead letters).
    pub old_inner: String,
    /// The inner group calls go to from now on (created by the next
    /// `ensure_group`).
    pub new_inner: String,
    /// Entries a read had handed out to the app (reply received) and no
    /// settle had confirmed at the moment of the loss: the app held them.
    pub held: Vec<EntryId>,
}

#[derive(Clone, Copy, Debug, Default)]
struct GroupState {
    /// Losses so far; the inner group is `G` at 0, `G~n` after.
    generation: u32,
    /// Whether the inner group of this generation was created through the
    /// wrapper (always taken as true at generation 0).
    created: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    now: usize,
    max: usize,
}

type GroupKey = (String, String);

#[derive(Default)]
struct State {
    rates: Vec<Vec<(Fault, f64)>>,
    scripts: HashMap<(CallKind, u64), Fault>,
    outages: Vec<(Vec<CallKind>, Instant)>,
    calls: [u64; KINDS],
    injected: FaultCounts,
    events: Vec<FaultEvent>,
    groups: HashMap<GroupKey, GroupState>,
    losses: Vec<GroupLoss>,
    /// Per (stream, group): entries handed out and not confirmed settled,
    /// with the consumer holding each.
    held: HashMap<GroupKey, HashMap<EntryId, String>>,
    /// Per (stream, group, consumer).
    per_consumer: HashMap<(String, String, String), Held>,
    lost_reads: Vec<LostRead>,
}

impl State {
    fn group(&self, stream: &str, group: &str) -> GroupState {
        self.groups
            .get(&(stream.to_owned(), group.to_owned()))
            .copied()
            .unwrap_or(GroupState {
                generation: 0,
                created: true,
            })
    }

    fn count(&mut self, event: FaultEvent) {
        *self
            .injected
            .counts
            .entry((event.call, event.fault.kind()))
            .or_default() += 1;
        self.events.push(event);
    }

    fn hold(&mut self, stream: &str, group: &str, consumer: &str, id: EntryId) {
        let key = (stream.to_owned(), group.to_owned());
        let previous = self
            .held
            .entry(key)
            .or_default()
            .insert(id, consumer.to_owned());
        if previous.as_deref() == Some(consumer) {
            return;
        }
        if let Some(previous) = previous {
            self.release_count(stream, group, &previous);
        }
        let held = self
            .per_consumer
            .entry((stream.to_owned(), group.to_owned(), consumer.to_owned()))
            .or_default();
        held.now += 1;
        held.max = held.max.max(held.now);
    }

    fn release(&mut self, stream: &str, group: &str, ids: &[EntryId]) {
        let key = (stream.to_owned(), group.to_owned());
        let Some(map) = self.held.get_mut(&key) else {
            return;
        };
        let gone: Vec<String> = ids.iter().filter_map(|id| map.remove(id)).collect();
        for consumer in gone {
            self.release_count(stream, group, &consumer);
        }
    }

    fn release_count(&mut self, stream: &str, group: &str, consumer: &str) {
        if let Some(held) =
            self.per_consumer
                .get_mut(&(stream.to_owned(), group.to_owned(), consumer.to_owned()))
        {
            held.now = held.now.saturating_sub(1);
        }
    }

    fn lose(&mut self, stream: &str, group: &str) -> GroupLoss {
        let before = self.group(stream, group);
        let after = GroupState {
            generation: before.generation + 1,
            created: false,
        };
        self.groups
            .insert((stream.to_owned(), group.to_owned()), after);
        let mut held: Vec<EntryId> = self
            .held
            .get(&(stream.to_owned(), group.to_owned()))
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        held.sort();
        let loss = GroupLoss {
            stream: stream.to_owned(),
            group: group.to_owned(),
            old_inner: inner_name(group, before.generation),
            new_inner: inner_name(group, after.generation),
            held,
        };
        self.losses.push(loss.clone());
        loss
    }
}

/// The inner group name of `group` after `generation` losses.
fn inner_name(group: &str, generation: u32) -> String {
    if generation == 0 {
        group.to_owned()
    } else {
        format!("{group}~{generation}")
    }
}

/// splitmix64's output function: a small, well-mixing hash of `z`, for
/// seeded decisions without a random-number dependency.
pub(crate) fn mix(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform number in `[0, 1)` from a hash.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// A broker wrapper that injects faults into calls to an inner broker. See
/// the [module documentation](self).
pub struct FaultyBroker {
    inner: Arc<dyn Broker>,
    seed: u64,
    enabled: AtomicBool,
    state: Mutex<State>,
    /// Bumped at every group loss, so that calls in flight notice.
    losses: watch::Sender<u64>,
}

impl fmt::Debug for FaultyBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyBroker")
            .field("inner", &self.inner.name())
            .field("seed", &self.seed)
            .field("enabled", &self.enabled())
            .field("injected", &self.injected().total())
            .finish()
    }
}

/// What a call was told to suffer, and its group as resolved.
struct Call {
    kind: CallKind,
    nth: u64,
    fault: Option<Fault>,
}

impl Call {
    /// The report of `fault` injected into this call on `target`.
    fn event(&self, target: Option<(&str, &str)>, fault: Fault) -> FaultEvent {
        FaultEvent {
            call: self.kind,
            nth: self.nth,
            fault,
            stream: target.map(|(s, _)| s.to_owned()),
            group: target.map(|(_, g)| g.to_owned()),
            ids: Vec::new(),
        }
    }
}

/// A call's group: the caller's name, where it goes, and when.
struct Resolved {
    stream: String,
    group: String,
    inner: String,
    generation: u32,
}

impl FaultyBroker {
    /// Wraps `inner`, injecting nothing until rates, scripts or outages are
    /// set. `seed` chooses every random decision.
    pub fn new(inner: Arc<dyn Broker>, seed: u64) -> Self {
        let state = State {
            rates: vec![Vec::new(); KINDS],
            ..State::default()
        };
        FaultyBroker {
            inner,
            seed,
            enabled: AtomicBool::new(true),
            state: Mutex::new(state),
            losses: watch::Sender::new(0),
        }
    }

    /// The wrapped broker: calls on it bypass every fault and the group
    /// mapping (use [`FaultyBroker::inner_group`] for the names).
    pub fn inner(&self) -> &Arc<dyn Broker> {
        &self.inner
    }

    /// The seed the faults are drawn from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Turns injection on or off (it starts on). Off, every call goes
    /// through untouched, except that lost groups stay lost (the mapping
    /// still applies).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Whether injection is on.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Injects `fault` into a share `rate` (0 to 1) of the calls of each of
    /// `kinds`, replacing any rate set before for that kind and kind of
    /// fault (0 removes it). The rates of one call kind add up: a call
    /// suffers at most one fault.
    pub fn set_rate(&self, kinds: &[CallKind], fault: Fault, rate: f64) {
        let rate = if rate.is_finite() {
            rate.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let mut state = self.lock();
        for kind in kinds {
            let rates = &mut state.rates[kind.index()];
            rates.retain(|(f, _)| f.kind() != fault.kind());
            if rate > 0.0 {
                rates.push((fault, rate));
                rates.sort_by_key(|(f, _)| f.kind());
            }
        }
    }

    /// Injects `fault` into the `nth` call (from 1) of kind `kind`, whatever
    /// the rates say. Calls are numbered whether injection is on or not.
    pub fn script(&self, kind: CallKind, nth: u64, fault: Fault) {
        self.lock().scripts.insert((kind, nth), fault);
    }

    /// Fails every call of `kinds` before it reaches the broker
    /// ([`Fault::Before`]) from now until `duration` has passed on tokio's
    /// clock: an outage.
    pub fn outage(&self, kinds: &[CallKind], duration: Duration) {
        let until = Instant::now() + duration;
        self.lock().outages.push((kinds.to_vec(), until));
    }

    /// Removes every rate, script and outage (lost groups stay lost).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.rates = vec![Vec::new(); KINDS];
        state.scripts.clear();
        state.outages.clear();
    }

    /// Loses `group` on `stream` now, as a server restarted without
    /// persistence would: calls naming it go to a fresh inner group that
    /// does not exist until the next `ensure_group`, and calls on it in
    /// flight fail. Works whether injection is on or not.
    pub fn lose_group(&self, stream: &str, group: &str) -> GroupLoss {
        let loss = self.lock().lose(stream, group);
        self.losses.send_modify(|n| *n += 1);
        loss
    }

    /// The inner group that calls naming `group` on `stream` go to now.
    pub fn inner_group(&self, stream: &str, group: &str) -> String {
        inner_name(group, self.lock().group(stream, group).generation)
    }

    /// Every inner group `group` on `stream` has had, oldest first (the
    /// last one is the current one).
    pub fn inner_groups(&self, stream: &str, group: &str) -> Vec<String> {
        let generation = self.lock().group(stream, group).generation;
        (0..=generation).map(|g| inner_name(group, g)).collect()
    }

    /// Every group loss so far, in order.
    pub fn losses(&self) -> Vec<GroupLoss> {
        self.lock().losses.clone()
    }

    /// Calls of kind `kind` so far, faulted or not.
    pub fn calls(&self, kind: CallKind) -> u64 {
        self.lock().calls[kind.index()]
    }

    /// Faults injected so far, per kind.
    pub fn injected(&self) -> FaultCounts {
        self.lock().injected.clone()
    }

    /// Every fault injected so far, in order.
    pub fn events(&self) -> Vec<FaultEvent> {
        self.lock().events.clone()
    }

    /// Every read whose reply was lost ([`Fault::After`] on a read).
    pub fn lost_reads(&self) -> Vec<LostRead> {
        self.lock().lost_reads.clone()
    }

    /// Entries handed out to `consumer` of `group` on `stream` by reads
    /// whose replies arrived, and not yet confirmed settled.
    pub fn held(&self, stream: &str, group: &str, consumer: &str) -> usize {
        self.held_counts(stream, group, consumer).now
    }

    /// The most entries [`FaultyBroker::held`] has counted at once.
    pub fn held_high_water(&self, stream: &str, group: &str, consumer: &str) -> usize {
        self.held_counts(stream, group, consumer).max
    }

    fn held_counts(&self, stream: &str, group: &str, consumer: &str) -> Held {
        self.lock()
            .per_consumer
            .get(&(stream.to_owned(), group.to_owned(), consumer.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers a call and decides its fault.
    fn begin(&self, kind: CallKind) -> Call {
        let mut state = self.lock();
        state.calls[kind.index()] += 1;
        let nth = state.calls[kind.index()];
        let fault = if self.enabled() {
            self.choose(&state, kind, nth)
        } else {
            None
        };
        let fault = fault.filter(|f| *f != Fault::LoseGroup || kind.takes_group());
        Call { kind, nth, fault }
    }

    fn choose(&self, state: &State, kind: CallKind, nth: u64) -> Option<Fault> {
        if let Some(fault) = state.scripts.get(&(kind, nth)) {
            return Some(*fault);
        }
        let now = Instant::now();
        if state
            .outages
            .iter()
            .any(|(kinds, until)| now < *until && kinds.contains(&kind))
        {
            return Some(Fault::Before);
        }
        let draw =
            |salt: u64| mix(self.seed ^ mix(((kind.index() as u64) << 56) ^ nth ^ mix(salt)));
        let u = unit(draw(0));
        let mut sum = 0.0;
        for (fault, rate) in &state.rates[kind.index()] {
            sum += rate;
            if u < sum {
                return Some(match fault {
                    Fault::Delay(max) => Fault::Delay(max.mul_f64(unit(draw(1)))),
                    other => *other,
                });
            }
        }
        None
    }

    /// Runs what comes before the inner call: a delay, an injected error,
    /// a group loss; then resolves the group (a lost group not yet
    /// recreated is `NoGroup`, except for `ensure_group`).
    async fn enter(
        &self,
        call: &Call,
        target: Option<(&str, &str)>,
    ) -> BrokerResult<Option<Resolved>> {
        if let Some(Fault::Delay(d)) = call.fault {
            self.lock().count(call.event(target, Fault::Delay(d)));
            tokio::time::sleep(d).await;
        }
        self.enter_now(call, target)
    }

    /// [`FaultyBroker::enter`] without the delay: for a call answered on
    /// the spot, whose caller checked that it has none.
    fn enter_now(
        &self,
        call: &Call,
        target: Option<(&str, &str)>,
    ) -> BrokerResult<Option<Resolved>> {
        let event = |fault: Fault| call.event(target, fault);
        match call.fault {
            Some(Fault::Before) => {
                self.lock().count(event(Fault::Before));
                return Err(self.injected_error(call, "before the call: nothing was applied"));
            }
            Some(Fault::LoseGroup) => {
                if let Some((stream, group)) = target {
                    self.lock().count(event(Fault::LoseGroup));
                    self.lose_group(stream, group);
                    return Err(self
                        .injected_error(call, "the server restarted and lost the consumer group"));
                }
            }
            Some(Fault::After | Fault::Delay(_)) | None => {}
        }
        let Some((stream, group)) = target else {
            return Ok(None);
        };
        let state = self.lock().group(stream, group);
        if !state.created && call.kind != CallKind::EnsureGroup {
            return Err(BrokerError::no_group(stream, group));
        }
        Ok(Some(Resolved {
            stream: stream.to_owned(),
            group: group.to_owned(),
            inner: inner_name(group, state.generation),
            generation: state.generation,
        }))
    }

    /// Takes the inner call's result: a group lost meanwhile fails it, an
    /// inner `NoGroup` names the caller's group, and a [`Fault::After`]
    /// loses the reply of a call that was applied. `applied` runs for a
    /// call the inner broker applied (its group still current), told
    /// whether the reply reaches the caller, and returns the ids concerned
    /// (for the report).
    fn leave<T>(
        &self,
        call: &Call,
        resolved: Option<&Resolved>,
        result: BrokerResult<T>,
        applied: impl FnOnce(&mut State, &T, bool) -> Vec<EntryId>,
    ) -> BrokerResult<T> {
        let mut state = self.lock();
        if let Some(r) = resolved
            && state.group(&r.stream, &r.group).generation != r.generation
        {
            return Err(self.injected_error(
                call,
                "the consumer group was lost while the call was in flight",
            ));
        }
        let value = match (result, resolved) {
            (Err(BrokerError::NoGroup { .. }), Some(r)) => {
                return Err(BrokerError::no_group(&r.stream, &r.group));
            }
            (Err(e), _) => return Err(e),
            (Ok(value), _) => value,
        };
        let lost = call.fault == Some(Fault::After);
        let ids = applied(&mut state, &value, !lost);
        if lost {
            state.count(FaultEvent {
                call: call.kind,
                nth: call.nth,
                fault: Fault::After,
                stream: resolved.map(|r| r.stream.clone()),
                group: resolved.map(|r| r.group.clone()),
                ids,
            });
            return Err(self.injected_error(call, "after the call: it was applied, the reply lost"));
        }
        Ok(value)
    }

    fn injected_error(&self, call: &Call, what: &str) -> BrokerError {
        BrokerError::Connection {
            broker: NAME,
            detail: format!(
                "injected fault on {} #{} (seed {:#x}): {what}",
                call.kind, call.nth, self.seed
            ),
        }
    }

    /// Resolves when `group`'s generation is no longer `generation`.
    async fn group_lost(&self, stream: &str, group: &str, generation: u32) {
        let mut losses = self.losses.subscribe();
        loop {
            losses.borrow_and_update();
            if self.lock().group(stream, group).generation != generation {
                return;
            }
            if losses.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// A settle-like call: `ids` leave the held list once confirmed.
    async fn settle(
        &self,
        kind: CallKind,
        stream: &str,
        group: &str,
        ids: &[EntryId],
        inner: impl AsyncFnOnce(&str) -> BrokerResult<u64>,
    ) -> BrokerResult<u64> {
        let call = self.begin(kind);
        let resolved = self.enter(&call, Some((stream, group))).await?;
        let r = resolved.as_ref();
        let result = match r {
            Some(r) => inner(&r.inner).await,
            None => inner(group).await,
        };
        self.leave(&call, r, result, |state, _, confirmed| {
            if confirmed {
                state.release(stream, group, ids);
            }
            ids.to_vec()
        })
    }

    /// A call that changes or reads nothing the wrapper tracks.
    async fn plain<T>(
        &self,
        kind: CallKind,
        target: Option<(&str, &str)>,
        inner: impl AsyncFnOnce(&str) -> BrokerResult<T>,
    ) -> BrokerResult<T> {
        let call = self.begin(kind);
        let resolved = self.enter(&call, target).await?;
        let result = match (&resolved, target) {
            (Some(r), _) => inner(&r.inner).await,
            (None, Some((_, group))) => inner(group).await,
            (None, None) => inner("").await,
        };
        self.leave(&call, resolved.as_ref(), result, |_, _, _| Vec::new())
    }
}

/// The body of a [`Broker`] method that names no group and changes or
/// reads nothing the wrapper tracks: [`FaultyBroker::plain`] over the same
/// call to the inner broker, as a call of kind `CallKind::$kind`.
macro_rules! plain_call {
    ($this:ident, [$kind:ident] $method:ident($($param:ident),*)) => {
        Box::pin(async move {
            let call = async |_: &str| $this.inner.$method($($param),*).await;
            $this.plain(CallKind::$kind, None, call).await
        })
    };
}

/// The body of a [`Broker`] method on a group (its first two parameters
/// the stream and the group) that changes or reads nothing the wrapper
/// tracks: [`FaultyBroker::plain`] over the same call to the inner
/// broker, on the group's inner name.
macro_rules! plain_group_call {
    ($this:ident, [$kind:ident] $method:ident($stream:ident, $group:ident $(, $param:ident)*)) => {
        Box::pin(async move {
            let call = async |g: &str| $this.inner.$method($stream, g $(, $param)*).await;
            $this.plain(CallKind::$kind, Some(($stream, $group)), call).await
        })
    };
}

/// The body of a [`Broker`] method that settles entries (its parameters
/// the stream, the group, the ids, then any others):
/// [`FaultyBroker::settle`] over the same call to the inner broker, on the
/// group's inner name; `retry`'s kind is the one of its [`Retry`].
macro_rules! settle_call {
    ($this:ident, [] retry($stream:ident, $group:ident, $ids:ident, $how:ident)) => {
        settle_call!(@kind CallKind::of_retry($how), $this, retry($stream, $group, $ids, $how))
    };
    ($this:ident, [$kind:ident] $method:ident($($param:ident),*)) => {
        settle_call!(@kind CallKind::$kind, $this, $method($($param),*))
    };
    (@kind $kind:expr, $this:ident, $method:ident($stream:ident, $group:ident, $ids:ident $(, $param:ident)*)) => {
        Box::pin(async move {
            let call = async |g: &str| $this.inner.$method($stream, g, $ids $(, $param)*).await;
            $this.settle($kind, $stream, $group, $ids, call).await
        })
    };
}

impl Broker for FaultyBroker {
    delegate_broker!(tracked: ensure_group, read, extend_claim, count_deliveries, group_info, stream_info);

    /// Faulted as `read` is, where the inner broker answers on the spot;
    /// a call drawn to be delayed is left to `read` (`None`), which then
    /// draws its own fault.
    fn read_now(
        &self,
        request: &ReadRequest<'_>,
        batch: &mut ReadBatch,
    ) -> Option<BrokerResult<()>> {
        let answer = tracked::read_now(self, request, batch)?;
        if answer.is_err() {
            batch.deliveries.clear();
            batch.dead_lettered.clear();
        }
        Some(answer)
    }

    /// Faulted as `ack` is, where the inner broker answers on the spot
    /// (a delayed call is left to `ack`, as for `read_now`).
    fn ack_now(&self, stream: &str, group: &str, ids: &[EntryId]) -> Option<BrokerResult<u64>> {
        let call = self.begin(CallKind::Ack);
        if matches!(call.fault, Some(Fault::Delay(_))) {
            return None;
        }
        let resolved = match self.enter_now(&call, Some((stream, group))) {
            Ok(resolved) => resolved,
            Err(error) => return Some(Err(error)),
        };
        let inner_group = resolved.as_ref().map_or(group, |r| r.inner.as_str());
        let result = self.inner.ack_now(stream, inner_group, ids)?;
        Some(
            self.leave(&call, resolved.as_ref(), result, |state, _, confirmed| {
                if confirmed {
                    state.release(stream, group, ids);
                }
                ids.to_vec()
            }),
        )
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    broker_methods!(plain_call: check_mode[CheckMode], publish[Publish], publish_batch[Publish]);
    broker_methods!(plain_call: range[Range], trim[Trim], streams[Streams]);
    broker_methods!(plain_group_call: set_group_position[SetGroupPosition], redrive[Redrive]);
    broker_methods!(plain_group_call: discard[Discard], delete_consumer[DeleteConsumer]);
    broker_methods!(plain_group_call: consumers[Consumers], pending[Pending]);
    broker_methods!(plain_group_call: dead_letters[DeadLetters]);
    broker_methods!(settle_call: ack[Ack], retry, dead_letter[DeadLetter]);
}

/// The `Broker` methods the wrapper does more for than pass the call on
/// (`delegate_broker!` writes them): it tracks the groups they create and
/// the entries they hand out, or names the caller's groups in their
/// answers.
mod tracked {
    use ruststream_core::{
        BrokerResult, EntryId, GroupInfo, ReadBatch, ReadRequest, StreamInfo, StreamStart,
    };

    use super::{CallKind, FaultyBroker, LostRead, inner_name};

    /// `Broker::ensure_group` on the group's inner name; recreating a lost
    /// group is recorded.
    pub(super) async fn ensure_group(
        broker: &FaultyBroker,
        stream: &str,
        group: &str,
        start: StreamStart,
    ) -> BrokerResult<bool> {
        let call = broker.begin(CallKind::EnsureGroup);
        let resolved = broker.enter(&call, Some((stream, group))).await?;
        let Some(r) = resolved else {
            return broker.inner.ensure_group(stream, group, start).await;
        };
        let result = broker.inner.ensure_group(stream, &r.inner, start).await;
        broker.leave(&call, Some(&r), result, |state, _, _| {
            if let Some(g) = state.groups.get_mut(&(stream.to_owned(), group.to_owned())) {
                g.created = true;
            }
            Vec::new()
        })
    }

    /// `Broker::read` on the group's inner name, failing when the group is
    /// lost while it is in flight; what it hands out is held by its
    /// consumer, or recorded as a `LostRead` when its reply is lost.
    pub(super) async fn read(
        broker: &FaultyBroker,
        request: ReadRequest<'_>,
    ) -> BrokerResult<ReadBatch> {
        let (stream, group) = (request.stream, request.group);
        let call = broker.begin(CallKind::Read);
        let resolved = broker.enter(&call, Some((stream, group))).await?;
        let Some(r) = resolved else {
            return broker.inner.read(request).await;
        };
        let inner = ReadRequest {
            group: &r.inner,
            ..request
        };
        let result = tokio::select! {
            result = broker.inner.read(inner) => result,
            () = broker.group_lost(stream, group, r.generation) => Err(broker.injected_error(
                &call,
                "the consumer group was lost while the read was in flight",
            )),
        };
        broker.leave(&call, Some(&r), result, |state, batch, confirmed| {
            took(state, &request, batch, confirmed)
        })
    }

    /// `Broker::read_now` faulted as [`read`] is (a read answered on the
    /// spot has no time in flight, so no group is lost during it); `None`
    /// where the inner broker does not answer so, or the call was drawn to
    /// be delayed.
    pub(super) fn read_now(
        broker: &FaultyBroker,
        request: &ReadRequest<'_>,
        batch: &mut ReadBatch,
    ) -> Option<BrokerResult<()>> {
        let call = broker.begin(CallKind::Read);
        if matches!(call.fault, Some(super::Fault::Delay(_))) {
            return None;
        }
        let resolved = match broker.enter_now(&call, Some((request.stream, request.group))) {
            Ok(resolved) => resolved,
            Err(error) => return Some(Err(error)),
        };
        let Some(r) = resolved else {
            return broker.inner.read_now(request, batch);
        };
        let inner = ReadRequest {
            group: &r.inner,
            ..*request
        };
        let result = broker.inner.read_now(&inner, batch)?;
        Some(
            broker.leave(&call, Some(&r), result, |state, (), confirmed| {
                took(state, request, batch, confirmed)
            }),
        )
    }

    /// What a read handed out: held by its consumer once the reply is
    /// confirmed, else recorded as a [`LostRead`]; what it dead-lettered
    /// leaves the held list. Returns the ids handed out.
    fn took(
        state: &mut super::State,
        request: &ReadRequest<'_>,
        batch: &ReadBatch,
        confirmed: bool,
    ) -> Vec<EntryId> {
        let (stream, group, consumer) = (request.stream, request.group, request.consumer);
        let ids: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
        state.release(stream, group, &batch.dead_lettered);
        if confirmed {
            for id in &ids {
                state.hold(stream, group, consumer, *id);
            }
        } else if !ids.is_empty() {
            state.lost_reads.push(LostRead {
                stream: stream.to_owned(),
                group: group.to_owned(),
                consumer: consumer.to_owned(),
                ids: ids.clone(),
            });
        }
        ids
    }

    /// `Broker::extend_claim`, faulted like a settle.
    pub(super) async fn extend_claim(
        broker: &FaultyBroker,
        stream: &str,
        group: &str,
        consumer: &str,
        ids: &[EntryId],
    ) -> BrokerResult<u64> {
        let call = async |g: &str| broker.inner.extend_claim(stream, g, consumer, ids).await;
        kept_held(
            broker,
            CallKind::ExtendClaim,
            stream,
            group,
            || ids.to_vec(),
            call,
        )
        .await
    }

    /// `Broker::count_deliveries`, faulted like [`extend_claim`].
    pub(super) async fn count_deliveries(
        broker: &FaultyBroker,
        stream: &str,
        group: &str,
        consumer: &str,
        counts: &[(EntryId, u32)],
    ) -> BrokerResult<u64> {
        let call = async |g: &str| {
            broker
                .inner
                .count_deliveries(stream, g, consumer, counts)
                .await
        };
        let ids = || counts.iter().map(|(id, _)| *id).collect();
        kept_held(broker, CallKind::CountDeliveries, stream, group, ids, call).await
    }

    /// A call on entries a consumer holds that leaves them held (`inner`,
    /// given the group's inner name): faulted like a settle, a lost reply
    /// reporting `ids`, but nothing leaves the read-ahead accounting.
    async fn kept_held(
        broker: &FaultyBroker,
        kind: CallKind,
        stream: &str,
        group: &str,
        ids: impl FnOnce() -> Vec<EntryId>,
        inner: impl AsyncFnOnce(&str) -> BrokerResult<u64>,
    ) -> BrokerResult<u64> {
        let call = broker.begin(kind);
        let resolved = broker.enter(&call, Some((stream, group))).await?;
        let inner_group = resolved.as_ref().map_or(group, |r| r.inner.as_str());
        let result = inner(inner_group).await;
        broker.leave(&call, resolved.as_ref(), result, |_, _, _| ids())
    }

    /// `Broker::group_info`, the answer naming the caller's group.
    pub(super) async fn group_info(
        broker: &FaultyBroker,
        stream: &str,
        group: &str,
    ) -> BrokerResult<GroupInfo> {
        let mut info = broker
            .plain(CallKind::GroupInfo, Some((stream, group)), async |g| {
                broker.inner.group_info(stream, g).await
            })
            .await?;
        info.name = group.to_owned();
        Ok(info)
    }

    /// `Broker::stream_info`, current inner group names read as the
    /// callers' names.
    pub(super) async fn stream_info(
        broker: &FaultyBroker,
        stream: &str,
    ) -> BrokerResult<Option<StreamInfo>> {
        let mut info = broker
            .plain(CallKind::StreamInfo, None, async |_| {
                broker.inner.stream_info(stream).await
            })
            .await?;
        if let Some(info) = &mut info {
            // Current inner names read as the callers' names.
            let state = broker.lock();
            for name in &mut info.groups {
                let current = state.groups.iter().find(|((s, g), st)| {
                    s == stream && st.generation > 0 && inner_name(g, st.generation) == *name
                });
                if let Some(((_, group), _)) = current {
                    name.clone_from(group);
                }
            }
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use ruststream_core::{Message, ReadMode, ReadRequest, StreamStart};
    use ruststream_memory::MemoryBroker;

    use super::*;

    const S: &str = "jobs";
    const G: &str = "g";

    fn faulty(seed: u64) -> (Arc<dyn Broker>, FaultyBroker) {
        let inner: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
        let faults = FaultyBroker::new(Arc::clone(&inner), seed);
        (inner, faults)
    }

    /// [`faulty`], with group `G` created and one entry published and
    /// read by consumer `c`, so that `c` holds it.
    async fn faulty_holding_one(seed: u64) -> (Arc<dyn Broker>, FaultyBroker, EntryId) {
        let (inner, faults) = faulty(seed);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        let a = faults.publish(S, msg("a")).await.unwrap();
        assert_eq!(read(&faults, 10).await.unwrap(), [a]);
        (inner, faults, a)
    }

    fn msg(text: &str) -> Message {
        Message::new(text.as_bytes().to_vec())
    }

    async fn len(broker: &dyn Broker) -> u64 {
        broker.stream_info(S).await.unwrap().map_or(0, |i| i.length)
    }

    async fn read(broker: &dyn Broker, count: usize) -> BrokerResult<Vec<EntryId>> {
        let batch = broker
            .read(ReadRequest::new(S, G, "c", ReadMode::New, count))
            .await?;
        Ok(batch.deliveries.iter().map(|d| d.id()).collect())
    }

    fn is_injected(e: &BrokerError) -> bool {
        matches!(e, BrokerError::Connection { broker: "faults", detail } if detail.contains("injected"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_fault_before_applies_nothing() {
        let (inner, faults) = faulty(1);
        faults.script(CallKind::Publish, 1, Fault::Before);
        let err = faults.publish(S, msg("a")).await.unwrap_err();
        assert!(is_injected(&err) && err.is_transient(), "{err}");
        assert_eq!(len(&*inner).await, 0, "nothing applied");
        faults.publish(S, msg("a")).await.unwrap();
        assert_eq!(len(&*inner).await, 1);
        assert_eq!(
            faults.injected().get(CallKind::Publish, FaultKind::Before),
            1
        );
        assert_eq!(faults.calls(CallKind::Publish), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fault_after_applies_the_call_and_loses_the_reply() {
        let (inner, faults) = faulty(1);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        faults.publish(S, msg("a")).await.unwrap();
        let ids = read(&faults, 10).await.unwrap();
        assert_eq!(faults.held(S, G, "c"), 1);
        faults.script(CallKind::Ack, 1, Fault::After);
        let err = faults.ack(S, G, &ids).await.unwrap_err();
        assert!(is_injected(&err), "{err}");
        assert_eq!(inner.group_info(S, G).await.unwrap().pending, 0, "applied");
        assert_eq!(faults.held(S, G, "c"), 1, "not confirmed to the caller");
        assert_eq!(
            faults.ack(S, G, &ids).await.unwrap(),
            0,
            "the retry is a no-op"
        );
        assert_eq!(faults.held(S, G, "c"), 0);
        let events = faults.events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].ids, ids);
        assert_eq!(events[0].to_string(), "ack #1 after");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_whose_reply_is_lost_leaves_its_entries_pending_and_is_recorded() {
        let (inner, faults) = faulty(1);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        faults.publish(S, msg("a")).await.unwrap();
        faults.script(CallKind::Read, 1, Fault::After);
        assert!(read(&faults, 10).await.is_err());
        let pending = inner
            .pending(S, G, EntryId::ZERO, 10, Some("c"))
            .await
            .unwrap();
        assert_eq!(pending.len(), 1);
        let lost = faults.lost_reads();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].ids, [pending[0].id]);
        assert_eq!(lost[0].consumer, "c");
        assert_eq!(faults.held(S, G, "c"), 0, "the app never saw it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delay_follows_the_paused_clock() {
        let (inner, faults) = faulty(1);
        faults.script(CallKind::Publish, 1, Fault::Delay(Duration::from_secs(30)));
        let started = Instant::now();
        faults.publish(S, msg("a")).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert_eq!(len(&*inner).await, 1);
        assert_eq!(
            faults.injected().get(CallKind::Publish, FaultKind::Delay),
            1
        );
    }

    /// Which of `n` acks fail, with the given seed and rates.
    async fn pattern(seed: u64, n: usize) -> Vec<Option<FaultKind>> {
        let (_, faults) = faulty(seed);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        faults.set_rate(&[CallKind::Ack], Fault::Before, 0.1);
        faults.set_rate(&[CallKind::Ack], Fault::After, 0.1);
        faults.set_rate(
            &[CallKind::Ack],
            Fault::Delay(Duration::from_millis(5)),
            0.1,
        );
        let mut out = Vec::new();
        for _ in 0..n {
            let before = faults.injected();
            let _ = faults.ack(S, G, &[]).await;
            let after = faults.injected();
            out.push(
                [FaultKind::Before, FaultKind::After, FaultKind::Delay]
                    .into_iter()
                    .find(|k| after.get(CallKind::Ack, *k) > before.get(CallKind::Ack, *k)),
            );
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn rates_are_reproducible_under_a_seed() {
        let a = pattern(7, 1000).await;
        assert_eq!(a, pattern(7, 1000).await, "same seed, same faults");
        assert_ne!(a, pattern(8, 1000).await, "another seed, other faults");
        for kind in [FaultKind::Before, FaultKind::After, FaultKind::Delay] {
            let n = a.iter().filter(|f| **f == Some(kind)).count();
            assert!((60..=140).contains(&n), "{kind:?}: {n} of 1000 at 10%");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn scripts_pick_the_nth_call_and_switching_off_stops_everything() {
        let (inner, faults) = faulty(3);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        faults.script(CallKind::Ack, 3, Fault::Before);
        assert!(faults.ack(S, G, &[]).await.is_ok());
        assert!(faults.ack(S, G, &[]).await.is_ok());
        assert!(faults.ack(S, G, &[]).await.is_err(), "the 3rd ack fails");
        assert!(faults.ack(S, G, &[]).await.is_ok());

        faults.set_rate(&CallKind::ALL, Fault::Before, 1.0);
        assert!(faults.publish(S, msg("a")).await.is_err());
        faults.set_enabled(false);
        let counted = faults.injected().total();
        for _ in 0..10 {
            faults.publish(S, msg("a")).await.unwrap();
        }
        assert_eq!(faults.injected().total(), counted);
        assert_eq!(len(&*inner).await, 10);
        faults.set_enabled(true);
        faults.clear();
        faults.publish(S, msg("a")).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_fails_calls_for_its_duration() {
        let (_, faults) = faulty(3);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        faults.outage(&CallKind::SETTLES, Duration::from_secs(2));
        assert!(faults.ack(S, G, &[]).await.is_err());
        assert!(faults.retry(S, G, &[], Retry::Copy).await.is_err());
        assert!(
            faults.publish(S, msg("a")).await.is_ok(),
            "not in the outage"
        );
        tokio::time::sleep(Duration::from_millis(1999)).await;
        assert!(faults.dead_letter(S, G, &[], "r").await.is_err());
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(faults.ack(S, G, &[]).await.is_ok(), "over");
        assert_eq!(faults.injected().of_fault(FaultKind::Before), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_extended_claim_is_faulted_like_a_settle_and_keeps_its_entries_held() {
        let (inner, faults, a) = faulty_holding_one(4).await;
        faults.script(CallKind::ExtendClaim, 1, Fault::Before);
        faults.script(CallKind::ExtendClaim, 2, Fault::After);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let idle = async || inner.pending(S, G, a, 1, None).await.unwrap()[0].idle_ms;

        let before = faults.extend_claim(S, G, "c", &[a]).await.unwrap_err();
        assert!(is_injected(&before), "{before:?}");
        assert_eq!(idle().await, 100, "nothing applied");
        let after = faults.extend_claim(S, G, "c", &[a]).await.unwrap_err();
        assert!(is_injected(&after), "{after:?}");
        assert_eq!(idle().await, 0, "applied, reply lost");
        assert_eq!(faults.events()[1].ids, [a]);
        assert_eq!(faults.extend_claim(S, G, "c", &[a]).await.unwrap(), 1);
        assert_eq!(faults.held(S, G, "c"), 1, "a refreshed entry is still held");

        faults.outage(&CallKind::SETTLES, Duration::from_secs(1));
        assert!(faults.extend_claim(S, G, "c", &[a]).await.is_err());
        tokio::time::sleep(Duration::from_secs(1)).await;

        faults.lose_group(S, G);
        let lost = faults.extend_claim(S, G, "c", &[a]).await.unwrap_err();
        assert!(
            matches!(&lost, BrokerError::NoGroup { group, .. } if group == G),
            "{lost:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_group_is_missing_until_recreated_and_a_recreation_at_new_skips() {
        let (inner, faults, a) = faulty_holding_one(5).await;

        let loss = faults.lose_group(S, G);
        assert_eq!(
            (loss.old_inner.as_str(), loss.new_inner.as_str()),
            ("g", "g~1")
        );
        assert_eq!(loss.held, [a], "the app held a at the loss");
        let b = faults.publish(S, msg("b")).await.unwrap();
        for err in [
            read(&faults, 10).await.unwrap_err(),
            faults.ack(S, G, &[a]).await.unwrap_err(),
            faults.group_info(S, G).await.unwrap_err(),
            faults
                .set_group_position(S, G, StreamStart::New)
                .await
                .unwrap_err(),
        ] {
            match err {
                BrokerError::NoGroup { stream, group } => {
                    assert_eq!((stream.as_str(), group.as_str()), (S, G))
                }
                other => panic!("expected NoGroup naming {G}, got {other}"),
            }
        }
        assert_eq!(faults.inner_group(S, G), "g~1");
        assert!(
            faults.ensure_group(S, G, StreamStart::New).await.unwrap(),
            "created anew"
        );
        assert!(!faults.ensure_group(S, G, StreamStart::New).await.unwrap());
        let c = faults.publish(S, msg("c")).await.unwrap();
        assert_eq!(
            read(&faults, 10).await.unwrap(),
            [c],
            "b was skipped, as on a restarted server"
        );
        assert!(b < c);
        assert_eq!(
            faults.ack(S, G, &[a]).await.unwrap(),
            0,
            "a is not pending in g~1"
        );
        let info = faults.group_info(S, G).await.unwrap();
        assert_eq!((info.name.as_str(), info.pending), (G, 1));
        // The old group is still on the inner broker, holding a.
        assert_eq!(inner.group_info(S, "g").await.unwrap().pending, 1);
        assert_eq!(faults.inner_groups(S, G), ["g", "g~1"]);
        let groups = faults.stream_info(S).await.unwrap().unwrap().groups;
        assert!(groups.contains(&"g".to_owned()), "{groups:?}");

        // A recreation at an earlier position delivers what came between.
        faults.lose_group(S, G);
        faults.ensure_group(S, G, StreamStart::Id(a)).await.unwrap();
        assert_eq!(read(&faults, 10).await.unwrap(), [b, c]);
        assert_eq!(faults.losses().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_loss_ends_a_blocking_read_at_once() {
        let (_, faults) = faulty(5);
        let faults = Arc::new(faults);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        let reader = {
            let faults = Arc::clone(&faults);
            tokio::spawn(async move {
                let started = Instant::now();
                let request =
                    ReadRequest::new(S, G, "c", ReadMode::New, 1).block(Duration::from_secs(60));
                (faults.read(request).await, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        faults.lose_group(S, G);
        let (result, waited) = reader.await.unwrap();
        let err = result.unwrap_err();
        assert!(is_injected(&err) && err.is_transient(), "{err}");
        assert_eq!(waited, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lose_group_fault_loses_the_group_of_its_call() {
        let (_, faults) = faulty(5);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        faults.script(CallKind::Read, 1, Fault::LoseGroup);
        faults.script(CallKind::Publish, 1, Fault::LoseGroup);
        assert!(is_injected(&read(&faults, 1).await.unwrap_err()));
        assert!(matches!(
            read(&faults, 1).await,
            Err(BrokerError::NoGroup { .. })
        ));
        faults.publish(S, msg("a")).await.unwrap();
        assert_eq!(faults.losses().len(), 1, "a publish names no group");
        assert_eq!(faults.injected().of_fault(FaultKind::LoseGroup), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn held_entries_are_counted_per_consumer_with_a_high_water_mark() {
        let (_, faults) = faulty(9);
        faults.ensure_group(S, G, StreamStart::New).await.unwrap();
        for i in 0..5 {
            faults.publish(S, msg(&i.to_string())).await.unwrap();
        }
        let ids = read(&faults, 5).await.unwrap();
        assert_eq!(faults.held(S, G, "c"), 5);
        faults.ack(S, G, &ids[..2]).await.unwrap();
        faults
            .retry(S, G, &ids[2..3], Retry::After(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(faults.held(S, G, "c"), 2);
        let other = faults
            .read(ReadRequest::new(S, G, "d", ReadMode::New, 5))
            .await
            .unwrap();
        assert_eq!(other.deliveries.len(), 1, "the nacked entry, owed");
        assert_eq!(faults.held(S, G, "d"), 1);
        assert_eq!(faults.held(S, G, "c"), 2);
        assert_eq!(faults.held_high_water(S, G, "c"), 5);
    }
}
