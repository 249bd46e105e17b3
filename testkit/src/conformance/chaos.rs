//! [`survives_injected_faults`]: a whole app on the target's broker wrapped
//! in a [`FaultyBroker`], checked against what its handlers decided.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::future::Future;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use ruststream::{
    AppInfo, Context, HandlerOutcome, Running, RustStream, Settle, Stream, Subscription,
};
use ruststream_core::{Broker, BrokerError, DeadLetter, EntryId, Message, PendingEntry};
use tokio::time::Instant;

use super::Target;
use crate::faults::{CallKind, Fault, FaultKind, FaultyBroker, GroupLoss, mix};
use crate::hand_written::{HandWritten, Handle};

/// The environment variable that sets the fault seed: a number (decimal or
/// `0x` hex), or `random` for a fresh one.
pub const FAULT_SEED_VAR: &str = "RUSTSTREAM_FAULT_SEED";
const DEFAULT_SEED: u64 = 0x5EED_FA17;

const WORKERS: usize = 4;
/// The read-ahead of the subscriptions whose bound is checked.
const PREFETCH: usize = 16;
const MIN_IDLE: Duration = Duration::from_millis(500);
/// A group read by a `new` subscription, never lost.
const PLAIN: &str = "plain";
/// A group read by a `new` subscription, lost once.
const LOSSY: &str = "lossy";
/// A group read by a `claiming` subscription (or `new` plus `reclaim`),
/// lost once.
const CLAIM: &str = "claim";
const PLAIN_CONSUMER: &str = "plain-0";
const LOSSY_CONSUMER: &str = "lossy-0";
/// The consumer of group `claim`'s `new` subscription, where a broker has
/// no claiming reads.
const CLAIM_NEW_CONSUMER: &str = "claim-new";
/// The consumers of `new` subscriptions: a retry there is a copy.
const NEW_CONSUMERS: [&str; 3] = [PLAIN_CONSUMER, LOSSY_CONSUMER, CLAIM_NEW_CONSUMER];
/// Handlers' panics start with this, so that the panic hook keeps quiet
/// about them.
const PANIC_MARK: &str = "chaos: injected panic";
/// Problems listed per category in a report; the rest are counted.
const LISTED: usize = 12;
/// How long the app's handlers get to finish at each shutdown (they take
/// milliseconds).
const SHUTDOWN: Duration = Duration::from_secs(2);
/// How far back a drain that ran out looks to tell a slow app from a
/// stalled one (see [`Findings::earlier`]).
const PROGRESS_WINDOW: Duration = Duration::from_secs(10);

/// How a run is paced: sizes and times.
struct Pace {
    entries: u32,
    chunk: u32,
    gap: Duration,
    outage_at: u32,
    outage: Duration,
    losses: [(u32, &'static str); 2],
    live_drain: Duration,
    final_drain: Duration,
    poll: Duration,
}

impl Pace {
    /// On a paused clock time is free: more entries, a longer outage.
    fn paused() -> Pace {
        Pace {
            entries: 600,
            chunk: 10,
            gap: Duration::from_millis(100),
            outage_at: 15,
            outage: Duration::from_secs(3),
            losses: [(40, LOSSY), (46, CLAIM)],
            live_drain: Duration::from_secs(60),
            final_drain: Duration::from_secs(60),
            poll: Duration::from_secs(1),
        }
    }

    /// In real time (a server): well under a minute even when it fails.
    /// The live drain allows for a loaded machine (2 cores, CI's other
    /// tests beside it): at 10 s it ran out 1 to 2 times in 10 there, and
    /// at 20 s once on the cluster (20.5 s) while builds ran beside it. A
    /// drain ends as soon as everything is settled, so the bound costs a
    /// passing run nothing.
    fn real_time() -> Pace {
        Pace {
            entries: 300,
            chunk: 10,
            gap: Duration::from_millis(100),
            outage_at: 6,
            outage: Duration::from_secs(2),
            losses: [(20, LOSSY), (24, CLAIM)],
            live_drain: Duration::from_secs(40),
            final_drain: Duration::from_secs(3),
            poll: Duration::from_millis(250),
        }
    }

    fn chunks(&self) -> u32 {
        self.entries.div_ceil(self.chunk)
    }
}

/// One publish attempt: entry `n`, attempt `attempt`. A retried publish is
/// a new attempt, so a duplicate made by a lost reply is an entry of its
/// own. Retry copies carry their original's payload, so they have its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    n: u32,
    attempt: u32,
}

impl Key {
    fn payload(self) -> Vec<u8> {
        format!("{}:{}", self.n, self.attempt).into_bytes()
    }

    fn parse(payload: &[u8]) -> Option<Key> {
        let text = std::str::from_utf8(payload).ok()?;
        let (n, attempt) = text.split_once(':')?;
        Some(Key {
            n: n.parse().ok()?,
            attempt: attempt.parse().ok()?,
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry n={} attempt={}", self.n, self.attempt)
    }
}

/// What a handler decided for one delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Ack,
    Retry,
    RetryAfter(Duration),
    Dead(String),
    Fail,
    Panic,
}

impl Decision {
    /// Whether the entry is done with after this (no further delivery is
    /// owed).
    fn terminal(&self) -> bool {
        matches!(self, Decision::Ack | Decision::Dead(_))
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Ack => f.write_str("ack"),
            Decision::Retry => f.write_str("retry"),
            Decision::RetryAfter(d) => write!(f, "retry_after({d:?})"),
            Decision::Dead(reason) => write!(f, "dead_letter({reason:?})"),
            Decision::Fail => f.write_str("Err"),
            Decision::Panic => f.write_str("panic"),
        }
    }
}

/// The decision for delivery `count` of `key` in `group`: random, but a
/// function of the seed, so a replay decides the same.
fn decide(seed: u64, group: &str, key: Key, count: u32) -> Decision {
    let salt = group.bytes().fold(0, |h, b| mix(h ^ u64::from(b)));
    let entry = (u64::from(key.n) << 32) | u64::from(key.attempt);
    let h = mix(seed ^ mix(salt ^ mix(entry ^ mix(u64::from(count)))));
    let dead = || Decision::Dead(format!("chaos: {key} delivery {count} in {group}"));
    if is_wide(key.n) {
        // A wide entry is retried (a copy, on a new subscription), then
        // dead-lettered: the multi-step changes it must survive.
        return if count == 0 { Decision::Retry } else { dead() };
    }
    if count >= 5 {
        // Bounded: every entry is done with after a few deliveries.
        return if h.is_multiple_of(5) {
            dead()
        } else {
            Decision::Ack
        };
    }
    match h % 100 {
        0..40 => Decision::Ack,
        40..50 => dead(),
        50..62 => Decision::Retry,
        62..74 => Decision::RetryAfter(Duration::from_millis(20 + (h >> 8) % 180)),
        74..87 => Decision::Fail,
        _ => Decision::Panic,
    }
}

/// One delivery a handler saw, in the order handlers started.
#[derive(Clone, Debug)]
struct Seen {
    group: &'static str,
    key: Key,
    id: EntryId,
    count: u32,
    consumer: String,
    decision: Decision,
}

/// What the handlers share: the seed and the record of deliveries.
struct Chaos {
    seed: u64,
    seen: Mutex<Vec<Seen>>,
}

impl Chaos {
    fn record(&self, seen: Seen) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(seen);
    }

    fn snapshot(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The handler of each group's subscriber (written by hand: it carries
/// state), deciding each delivery's outcome with [`decide`] and recording
/// it.
struct Handler {
    group: &'static str,
    chaos: Arc<Chaos>,
}

impl Handle for Handler {
    fn start<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        let count = ctx.delivery_count();
        let decided = Key::parse(ctx.payload()).map(|key| {
            let decision = decide(self.chaos.seed, self.group, key, count);
            self.chaos.record(Seen {
                group: self.group,
                key,
                id: ctx.id(),
                count,
                consumer: ctx.consumer().to_owned(),
                decision: decision.clone(),
            });
            (key, decision)
        });
        let pause = Duration::from_millis(mix(self.chaos.seed ^ u64::from(count)) % 4);
        async move {
            let Some((key, decision)) = decided else {
                return Settle::Undecodable("not an entry of this test".to_owned());
            };
            tokio::time::sleep(pause).await;
            match decision {
                Decision::Ack => Settle::Outcome(HandlerOutcome::ack()),
                Decision::Retry => Settle::Outcome(HandlerOutcome::retry()),
                Decision::RetryAfter(d) => Settle::Outcome(HandlerOutcome::retry_after(d)),
                Decision::Dead(reason) => Settle::Outcome(HandlerOutcome::dead_letter(reason)),
                Decision::Fail => Settle::Failed(format!("chaos: injected error for {key}")),
                Decision::Panic => panic!("{PANIC_MARK} for {key}"),
            }
        }
    }
}

/// The groups under test.
const GROUPS: [&str; 3] = [PLAIN, LOSSY, CLAIM];

/// The app's subscribers: groups `plain` and `lossy` read with a `new`
/// subscription alone; group `claim` with a `claiming` one, or where the
/// broker has no claiming reads (Redis before 8.4), with `new` plus
/// `reclaim`.
fn handlers(stream: &str, claiming: bool, chaos: &Arc<Chaos>) -> Vec<HandWritten<Handler>> {
    let handler = |name, group, stream: Stream, workers, prefetch| {
        HandWritten::new(
            name,
            Subscription::new(stream)
                .workers(workers)
                .prefetch(prefetch),
            Handler {
                group,
                chaos: Arc::clone(chaos),
            },
        )
    };
    let mut all = vec![
        handler(
            "chaos_plain",
            PLAIN,
            Stream::new(stream).group(PLAIN).consumer(PLAIN_CONSUMER),
            WORKERS,
            PREFETCH,
        ),
        handler(
            "chaos_lossy",
            LOSSY,
            Stream::new(stream).group(LOSSY).consumer(LOSSY_CONSUMER),
            WORKERS,
            PREFETCH,
        ),
    ];
    if claiming {
        all.push(handler(
            "chaos_claim",
            CLAIM,
            Stream::claiming(stream, MIN_IDLE)
                .group(CLAIM)
                .consumer("claim-0"),
            WORKERS,
            PREFETCH,
        ));
    } else {
        all.push(handler(
            "chaos_claim_new",
            CLAIM,
            Stream::new(stream)
                .group(CLAIM)
                .consumer(CLAIM_NEW_CONSUMER),
            WORKERS,
            PREFETCH,
        ));
        all.push(handler(
            "chaos_claim_reclaim",
            CLAIM,
            Stream::reclaim(stream, MIN_IDLE)
                .group(CLAIM)
                .consumer("claim-reclaim"),
            2,
            8,
        ));
    }
    all
}

async fn start_app(broker: &Arc<dyn Broker>, handlers: Vec<HandWritten<Handler>>) -> Running {
    RustStream::new(AppInfo::new("chaos", "0"))
        .with_shared_broker(Arc::clone(broker), |b| {
            for handler in handlers {
                b.include(handler);
            }
        })
        .shutdown_deadline(Duration::from_secs(5))
        .start()
        .await
        .unwrap_or_else(|e| panic!("the app under test does not start: {e}"))
}

/// The fault seed: [`FAULT_SEED_VAR`] if set, else a fixed default.
fn seed() -> u64 {
    let Ok(text) = std::env::var(FAULT_SEED_VAR) else {
        return DEFAULT_SEED;
    };
    let text = text.trim();
    if text == "random" {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return mix(nanos ^ u64::from(std::process::id()));
    }
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.unwrap_or_else(|e| {
        panic!("{FAULT_SEED_VAR}={text:?} is not a seed (a number, or random): {e}")
    })
}

/// Keeps the panic hook quiet about the handlers' injected panics (there
/// are hundreds); every other panic is reported as before.
fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let text = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied());
            if !text.is_some_and(|t| t.starts_with(PANIC_MARK)) {
                previous(info);
            }
        }));
    });
}

/// A group loss and what the test knew at that moment.
struct Loss {
    chunk: u32,
    loss: GroupLoss,
    /// Keys whose last decision in the group so far asked for another
    /// delivery (a retry copy unread, an entry left pending or owed): the
    /// loss took that with it.
    unfinished: BTreeSet<Key>,
    /// Keys whose entry another consumer took over (an idle claim) while a
    /// retry copy decided before still had to reach the broker. The two
    /// settles race, and the copy's may land first: the original is acked,
    /// the takeover's settle finds nothing pending, and the copy, addressed
    /// by name to the group the loss renamed, is never read by its
    /// successor (a real loss keeps the name). Which settle won cannot be
    /// told from the stream (a copy does not show which group it is for),
    /// so these are excused like `unfinished`.
    taken_over: BTreeSet<Key>,
}

/// The keys of `group` whose entry was delivered to another consumer after
/// a consumer of a `new` subscription decided to retry it (a copy), with
/// the same id: a takeover while the copy's settle was outstanding (once
/// it lands, the original is acked and cannot be claimed). See
/// [`Loss::taken_over`].
fn taken_over(seen: &[Seen], group: &str) -> BTreeSet<Key> {
    let copies = |s: &Seen| {
        NEW_CONSUMERS.contains(&s.consumer.as_str())
            && matches!(
                s.decision,
                Decision::Retry | Decision::Fail | Decision::Panic
            )
    };
    let in_group: Vec<&Seen> = seen.iter().filter(|s| s.group == group).collect();
    let mut keys = BTreeSet::new();
    for (i, first) in in_group.iter().enumerate() {
        if copies(first)
            && in_group[i + 1..]
                .iter()
                .any(|later| later.id == first.id && later.consumer != first.consumer)
        {
            keys.insert(first.key);
        }
    }
    keys
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Category {
    /// Never delivered to a group.
    Skipped,
    /// Still pending after the drain.
    Pending,
    /// Ended acked or dead-lettered against the handler's last decision.
    WrongEnd,
    /// The last decision owed another delivery that never came.
    Unfinished,
    /// The broker could not be inspected, or the stream is not what was
    /// published.
    Broker,
}

impl Category {
    fn heading(self) -> &'static str {
        match self {
            Category::Skipped => "never delivered (skipped)",
            Category::Pending => "still pending in a consumer's list after the drain",
            Category::WrongEnd => "ended against the handler's last decision",
            Category::Unfinished => "owed another delivery that never came",
            Category::Broker => "broker state",
        }
    }
}

struct Problem {
    category: Category,
    group: &'static str,
    text: String,
}

#[derive(Default)]
struct Findings {
    problems: Vec<Problem>,
    /// Per group: deliveries beyond what retries explain (a delivery after
    /// the entry's handler had acked or dead-lettered it).
    duplicates: BTreeMap<&'static str, usize>,
    /// Per group: deliveries seen.
    deliveries: BTreeMap<&'static str, usize>,
    /// Per group: entries excused from the last-decision check by a loss.
    excused: BTreeMap<&'static str, usize>,
    /// Distinct entries in the stream (publish attempts that landed).
    entries: usize,
    /// Entries never delivered to a group because a read reply carrying
    /// them was lost and then their group too.
    lost_with_group: usize,
    /// How long the drain took (on the broker's clock).
    took: Duration,
    /// For a drain that ran out: the problems counted at the last look at
    /// least [`PROGRESS_WINDOW`] before its end, and how long before. More
    /// then than at the end: the app was still resolving them (slow, under
    /// load); no more: it was stuck, or an entry ended in a way no drain
    /// changes.
    earlier: Option<(usize, Duration)>,
}

/// How an entry ended in a group.
#[derive(Debug)]
enum End {
    Acked,
    Dead(Vec<String>),
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Acked => f.write_str("acked (neither pending nor dead-lettered)"),
            End::Dead(reasons) => write!(f, "dead-lettered with {reasons:?}"),
        }
    }
}

impl End {
    fn matches(&self, decision: &Decision) -> bool {
        match (self, decision) {
            (End::Acked, Decision::Ack) => true,
            (End::Dead(reasons), Decision::Dead(reason)) => reasons == std::slice::from_ref(reason),
            _ => false,
        }
    }
}

/// A run: the app, its broker behind the faults, and what the test did.
struct Run {
    target_name: &'static str,
    stream: String,
    pace: Pace,
    faults: Arc<FaultyBroker>,
    broker: Arc<dyn Broker>,
    chaos: Arc<Chaos>,
    claiming: bool,
    /// Entry number -> the chunk it was published in.
    chunk_of: BTreeMap<u32, u32>,
    attempts: u64,
    losses: Vec<(&'static str, Loss)>,
}

/// Every this many entries, one is wide: more fields than a Lua script can
/// pass to one command, so a broker's multi-step scripts must not break on
/// it (a retry copy or dead letter of it once lost the entry).
const WIDE_EVERY: u32 = 97;
/// The headers of a wide entry (each is two values in a Redis entry).
const WIDE_FIELDS: usize = 4_500;

/// Whether entry `n` is a wide one.
fn is_wide(n: u32) -> bool {
    n % WIDE_EVERY == 13
}

/// The message of a publish attempt: its key as the payload, and for every
/// `WIDE_EVERY`-th entry thousands of headers.
fn message(key: Key) -> Message {
    let mut message = Message::new(key.payload());
    if is_wide(key.n) {
        for i in 0..WIDE_FIELDS {
            message = message.with_header(format!("wide-{i}"), "v");
        }
    }
    message
}

impl Run {
    /// Publishes entry `n` through the faults, retrying (as a new attempt)
    /// until a publish is confirmed.
    async fn publish(&mut self, n: u32, chunk: u32) {
        self.chunk_of.insert(n, chunk);
        for attempt in 0..100 {
            self.attempts += 1;
            let key = Key { n, attempt };
            match self.broker.publish(&self.stream, message(key)).await {
                Ok(_) => return,
                Err(e) if e.is_transient() => continue,
                Err(e) => panic!("publishing {key} failed for good: {e}"),
            }
        }
        panic!("publishing entry {n} failed 100 times in a row");
    }

    fn lose(&mut self, group: &'static str, chunk: u32) {
        let loss = self.faults.lose_group(&self.stream, group);
        let seen = self.chaos.snapshot();
        let mut last: HashMap<Key, &Decision> = HashMap::new();
        for s in seen.iter().filter(|s| s.group == group) {
            last.insert(s.key, &s.decision);
        }
        let unfinished = last
            .into_iter()
            .filter(|(_, d)| !d.terminal())
            .map(|(k, _)| k)
            .collect();
        let taken_over = taken_over(&seen, group);
        self.losses.push((
            group,
            Loss {
                chunk,
                loss,
                unfinished,
                taken_over,
            },
        ));
    }

    /// Examines until nothing is wrong or `limit` has passed, and returns
    /// the last findings.
    async fn drain(&self, limit: Duration) -> Findings {
        let started = Instant::now();
        let deadline = started + limit;
        // (when, problems) of each look.
        let mut looks: Vec<(Duration, usize)> = Vec::new();
        loop {
            let mut findings = self.examine().await;
            let now = started.elapsed();
            if findings.problems.is_empty() || Instant::now() >= deadline {
                findings.took = now;
                findings.earlier = looks
                    .iter()
                    .rev()
                    .find(|(at, _)| now.saturating_sub(*at) >= PROGRESS_WINDOW)
                    .map(|(at, problems)| (*problems, now - *at));
                return findings;
            }
            looks.push((now, findings.problems.len()));
            tokio::time::sleep(self.pace.poll).await;
        }
    }

    /// Checks every entry of the stream in every group, on the inner
    /// broker.
    async fn examine(&self) -> Findings {
        let mut findings = Findings::default();
        // The groups' lists first, then the stream, then what the handlers
        // saw: every id a list names is then in the stream as read.
        let mut lists = Vec::with_capacity(GROUPS.len());
        for group in GROUPS {
            lists.push((group, self.lists(group, &mut findings).await));
        }
        let inner = self.faults.inner();
        let entries = match inner
            .range(&self.stream, EntryId::ZERO, EntryId::MAX, usize::MAX)
            .await
        {
            Ok(entries) => entries,
            Err(e) => {
                findings.problems.push(Problem {
                    category: Category::Broker,
                    group: "-",
                    text: format!("cannot read stream {:?}: {e}", self.stream),
                });
                return findings;
            }
        };
        let mut key_of: HashMap<EntryId, Key> = HashMap::new();
        let mut first_id: BTreeMap<Key, EntryId> = BTreeMap::new();
        let mut ids_of: HashMap<Key, Vec<EntryId>> = HashMap::new();
        for entry in &entries {
            if let Some(key) = Key::parse(entry.payload()) {
                key_of.insert(entry.id, key);
                first_id.entry(key).or_insert(entry.id);
                ids_of.entry(key).or_default().push(entry.id);
            }
        }
        findings.entries = first_id.len();
        let numbers: BTreeSet<u32> = first_id.keys().map(|k| k.n).collect();
        for n in self.chunk_of.keys() {
            if !numbers.contains(n) {
                findings.problems.push(Problem {
                    category: Category::Broker,
                    group: "-",
                    text: format!("entry n={n} was published (confirmed) but is not in the stream"),
                });
            }
        }
        let duplicates = first_id.len() - numbers.len();
        let after_faults = self
            .faults
            .injected()
            .get(CallKind::Publish, FaultKind::After);
        if duplicates as u64 != after_faults {
            findings.problems.push(Problem {
                category: Category::Broker,
                group: "-",
                text: format!(
                    "the stream holds {duplicates} duplicate publishes, but {after_faults} publish replies were lost"
                ),
            });
        }
        // Per (group, id): the faults injected into calls on it.
        let mut faults_on: HashMap<(String, EntryId), Vec<String>> = HashMap::new();
        for event in self.faults.events() {
            let Some(group) = &event.group else {
                continue;
            };
            for id in &event.ids {
                faults_on
                    .entry((group.clone(), *id))
                    .or_default()
                    .push(event.to_string());
            }
        }
        let seen = self.chaos.snapshot();
        for (group, lists) in &lists {
            let view = GroupView {
                run: self,
                group,
                key_of: &key_of,
                ids_of: &ids_of,
                faults_on: &faults_on,
            };
            view.check(lists, &first_id, &seen, &mut findings);
        }
        findings
    }

    /// What the inner broker holds for `group`: the current inner group's
    /// pending list, what the inner groups it lost still hold pending, and
    /// the dead letters of all of them.
    async fn lists(&self, group: &'static str, findings: &mut Findings) -> Lists {
        let inner = self.faults.inner();
        let names = self.faults.inner_groups(&self.stream, group);
        let problem = |category, text| Problem {
            category,
            group,
            text,
        };
        let mut lists = Lists::default();
        for (i, name) in names.iter().enumerate() {
            let current = i + 1 == names.len();
            match inner
                .pending(&self.stream, name, EntryId::ZERO, usize::MAX, None)
                .await
            {
                Ok(list) if current => lists.pending = list,
                Ok(list) => lists.old_pending.extend(list.iter().map(|p| p.id)),
                Err(BrokerError::NoGroup { .. }) if current && i > 0 => {
                    findings.problems.push(problem(
                        Category::Broker,
                        format!(
                            "group {group} was lost (inner {} -> {name}) and has not been \
                             recreated: the app never called ensure_group for it again",
                            names[i - 1]
                        ),
                    ));
                    continue;
                }
                Err(e) => findings.problems.push(problem(
                    Category::Broker,
                    format!("cannot list the pending entries of inner group {name:?}: {e}"),
                )),
            }
            match inner
                .dead_letters(&self.stream, name, EntryId::ZERO, usize::MAX)
                .await
            {
                Ok(list) => lists.dead.extend(list),
                Err(e) if current => findings.problems.push(problem(
                    Category::Broker,
                    format!("cannot list the dead letters of inner group {name:?}: {e}"),
                )),
                Err(_) => {}
            }
        }
        lists
    }

    fn loss_note(&self, group: &str, key: Key) -> String {
        let chunk = self.chunk_of.get(&key.n).copied().unwrap_or(0);
        let mut note = format!("published in chunk {chunk}");
        for (g, loss) in &self.losses {
            if *g == group && chunk >= loss.chunk {
                let _ = write!(
                    note,
                    ", after group {group} was lost at chunk {} (inner {} -> {})",
                    loss.chunk, loss.loss.old_inner, loss.loss.new_inner
                );
            }
        }
        note
    }
}

/// What the inner broker holds for one group.
#[derive(Default)]
struct Lists {
    /// The current inner group's pending list.
    pending: Vec<PendingEntry>,
    /// Entries still pending in the inner groups lost before it.
    old_pending: Vec<EntryId>,
    /// The dead letters of all its inner groups.
    dead: Vec<DeadLetter>,
}

/// One group's view of the inner broker during an examination.
struct GroupView<'a> {
    run: &'a Run,
    group: &'static str,
    key_of: &'a HashMap<EntryId, Key>,
    /// Every id of the stream carrying each key: the entry, then retry
    /// copies of it made for any group.
    ids_of: &'a HashMap<Key, Vec<EntryId>>,
    faults_on: &'a HashMap<(String, EntryId), Vec<String>>,
}

impl GroupView<'_> {
    fn check(
        &self,
        lists: &Lists,
        first_id: &BTreeMap<Key, EntryId>,
        seen: &[Seen],
        findings: &mut Findings,
    ) {
        let run = self.run;
        let group = self.group;
        let problem = |category, text| Problem {
            category,
            group,
            text,
        };
        let Lists {
            pending,
            old_pending,
            dead,
        } = lists;
        let mut deliveries: HashMap<Key, Vec<&Seen>> = HashMap::new();
        for s in seen.iter().filter(|s| s.group == group) {
            deliveries.entry(s.key).or_default().push(s);
        }
        let mut pending_of: HashMap<Key, Vec<&PendingEntry>> = HashMap::new();
        for p in pending {
            match self.key_of.get(&p.id) {
                Some(key) => pending_of.entry(*key).or_default().push(p),
                None => findings.problems.push(problem(
                    Category::Pending,
                    format!("id {} is pending but is not an entry of the stream", p.id),
                )),
            }
        }
        let mut dead_of: HashMap<Key, Vec<String>> = HashMap::new();
        for d in dead {
            if let Some(key) = Key::parse(d.entry.payload()) {
                dead_of.entry(key).or_default().push(d.reason.clone());
            }
        }
        let mut excused: HashSet<Key> = HashSet::new();
        for (g, loss) in &run.losses {
            if *g == group {
                excused.extend(loss.unfinished.iter().copied());
                excused.extend(loss.taken_over.iter().copied());
                excused.extend(loss.loss.held.iter().filter_map(|id| self.key_of.get(id)));
            }
        }
        let old_pending_keys: HashSet<Key> = old_pending
            .iter()
            .filter_map(|id| self.key_of.get(id).copied())
            .collect();
        excused.extend(old_pending_keys.iter().copied());
        *findings.excused.entry(group).or_default() = excused.len();
        *findings.deliveries.entry(group).or_default() = deliveries.values().map(Vec::len).sum();

        for (key, first) in first_id {
            let key = *key;
            let Some(ds) = deliveries.get(&key) else {
                if old_pending_keys.contains(&key) {
                    // Handed out by a read whose reply was lost, and
                    // pending under a consumer when its group was lost:
                    // the app never saw it, and nothing can recover it.
                    findings.lost_with_group += 1;
                    continue;
                }
                findings.problems.push(problem(
                    Category::Skipped,
                    format!(
                        "{key} (id {first}, {}) was never delivered to group {group}",
                        run.loss_note(group, key)
                    ),
                ));
                continue;
            };
            let duplicates = ds.windows(2).filter(|w| w[0].decision.terminal()).count();
            *findings.duplicates.entry(group).or_default() += duplicates;
            if let Some(ps) = pending_of.get(&key) {
                let held: Vec<String> = ps
                    .iter()
                    .map(|p| match (&p.consumer, p.owed_in_ms) {
                        (_, Some(ms)) => format!("{} owed in {ms} ms", p.id),
                        (Some(c), None) => format!(
                            "{} under consumer {c}, idle {} ms, delivered {} times",
                            p.id, p.idle_ms, p.times_delivered
                        ),
                        (None, None) => format!("{} held by nobody", p.id),
                    })
                    .collect();
                findings.problems.push(problem(
                    Category::Pending,
                    format!(
                        "{key} is still pending ({}); {}",
                        held.join(", "),
                        self.history_with(ds, &ps.iter().map(|p| p.id).collect::<Vec<_>>())
                    ),
                ));
                continue;
            }
            if excused.contains(&key) {
                continue;
            }
            let end = match dead_of.get(&key) {
                Some(reasons) => End::Dead(reasons.clone()),
                None => End::Acked,
            };
            let Some(last) = ds.last() else {
                continue;
            };
            if duplicates > 0 {
                // Deliveries overlapped: whichever settle came first won.
                if !ds.iter().any(|s| end.matches(&s.decision)) {
                    findings.problems.push(problem(
                        Category::WrongEnd,
                        format!(
                            "{key} ended {end}, which none of its handler's decisions asked for; {}",
                            self.history(ds)
                        ),
                    ));
                }
            } else if !last.decision.terminal() && matches!(end, End::Acked) {
                findings.problems.push(problem(
                    Category::Unfinished,
                    format!(
                        "{key}: its handler last decided {} (delivery {}), but it was never \
                         delivered again and is neither pending nor dead-lettered; {}",
                        last.decision,
                        last.count,
                        self.history(ds)
                    ),
                ));
            } else if !end.matches(&last.decision) {
                findings.problems.push(problem(
                    Category::WrongEnd,
                    format!(
                        "{key} ended {end}, but its handler last decided {} (delivery {}); {}",
                        last.decision,
                        last.count,
                        self.history(ds)
                    ),
                ));
            }
        }
    }

    /// What happened to an entry: its deliveries and the faults injected
    /// into calls on its ids.
    fn history(&self, ds: &[&Seen]) -> String {
        self.history_with(ds, &[])
    }

    /// [`GroupView::history`], with the faults on `more` ids too (pending
    /// ones no handler saw).
    fn history_with(&self, ds: &[&Seen], more: &[EntryId]) -> String {
        let mut out = String::from("deliveries:");
        let mut ids: Vec<EntryId> = Vec::new();
        for s in ds {
            let _ = write!(
                out,
                " [#{} {} at {} id {}]",
                s.count, s.decision, s.consumer, s.id
            );
            if !ids.contains(&s.id) {
                ids.push(s.id);
            }
        }
        for id in more {
            if !ids.contains(id) {
                ids.push(*id);
            }
        }
        // Other ids with its payload that no handler of this group saw:
        // retry copies, made for this group or another (a copy does not
        // show which).
        let unseen: Vec<String> = ds
            .first()
            .and_then(|s| self.ids_of.get(&s.key))
            .into_iter()
            .flatten()
            .filter(|id| !ids.contains(id))
            .map(ToString::to_string)
            .collect();
        if !unseen.is_empty() {
            let _ = write!(
                out,
                "; other ids with its payload, not delivered to this group: {}",
                unseen.join(", ")
            );
        }
        let faults: Vec<&String> = ids
            .iter()
            .filter_map(|id| self.faults_on.get(&(self.group.to_owned(), *id)))
            .flatten()
            .collect();
        if !faults.is_empty() {
            let shown: Vec<&str> = faults.iter().take(8).map(|s| s.as_str()).collect();
            let _ = write!(out, "; faults on its ids: {}", shown.join(", "));
            if faults.len() > shown.len() {
                let _ = write!(out, " and {} more", faults.len() - shown.len());
            }
        }
        out
    }
}

/// A whole app runs through injected broker faults and must still settle
/// every entry as its handler last decided (`docs/guarantees.md`).
///
/// The target's broker is wrapped in a [`FaultyBroker`]. Groups `plain`
/// and `lossy` read with a `new` subscription, group `claim` with a
/// `claiming` one (on a broker without claiming reads, `new` plus
/// `reclaim`), all with `workers(4)` and `prefetch(16)`; every handler
/// returns a random but recorded outcome (ack, retry, retry_after, dead
/// letter, `Err`, panic) chosen from the seed per entry and delivery. While
/// entries are published, 5% of reads, publishes, group creations and
/// settles of each kind fail before the call, 5% lose their reply after
/// it, 5% are delayed; every settle fails for a few seconds (an outage);
/// and groups `lossy` and `claim` are each lost once near the end of the
/// outage, as a server restart without persistence loses them (`plain`
/// keeps its state, so what the outage left behind stays visible).
/// The test's own publishes retry on failure; a lost reply makes a
/// duplicate, counted as such. About one entry in a hundred is wide
/// (thousands of headers): more fields than a script can pass to one
/// command, which a broker's multi-step changes must survive.
///
/// Then the faults stop and the app drains; then it restarts (same
/// consumer names) and drains again. After each drain, checked on the
/// inner broker, in every group:
///
/// - every entry was delivered at least once (a lost group must not skip
///   what was published meanwhile; excused: entries a lost read reply
///   handed out that were still pending when their group was lost, which
///   no handler ever saw);
/// - nothing is pending (an outcome that could not be applied for a while,
///   or a read reply lost, must not strand an entry under a live
///   consumer);
/// - each entry ended as its handler last decided: acked, or dead-lettered
///   with that decision's reason. Entries the app held, or owed another
///   delivery, when their group was lost are excused, and so are entries
///   another consumer took over while a retry copy was on its way (the
///   copy may win, and the test's loss renames the group, so a copy made
///   for the old one is never read); entries delivered again after an ack
///   or dead letter (duplicates) need only end as one of their decisions,
///   and are counted and bounded (a fifth of the entries).
///
/// And over the whole run, the entries read and not settled at the broker
/// by each consumer of a `new` subscription never exceed its read-ahead
/// plus one ack batch (measured by the wrapper: entries handed out by
/// reads minus those whose settle the broker confirmed).
///
/// A failure lists each entry with what its handler decided at each
/// delivery and the faults injected on its ids, and names the seed to
/// replay ([`FAULT_SEED_VAR`]).
pub async fn survives_injected_faults(t: Target) {
    quiet_injected_panics();
    let seed = seed();
    let pace = if t.paused {
        Pace::paused()
    } else {
        Pace::real_time()
    };
    let stream = t.stream("chaos");
    let faults = Arc::new(FaultyBroker::new(Arc::clone(&t.broker), seed));
    let broker: Arc<dyn Broker> = faults.clone();
    let chaos = Arc::new(Chaos {
        seed,
        seen: Mutex::new(Vec::new()),
    });
    let mut run = Run {
        target_name: t.broker.name(),
        stream,
        pace,
        faults: Arc::clone(&faults),
        broker: Arc::clone(&broker),
        chaos: Arc::clone(&chaos),
        claiming: t.claiming_reads,
        chunk_of: BTreeMap::new(),
        attempts: 0,
        losses: Vec::new(),
    };
    let started = std::time::Instant::now();
    let app = start_app(&broker, handlers(&run.stream, run.claiming, &chaos)).await;

    let faulted = [
        CallKind::Read,
        CallKind::Publish,
        CallKind::EnsureGroup,
        CallKind::Ack,
        CallKind::RetryCopy,
        CallKind::RetryAfter,
        CallKind::DeadLetter,
    ];
    faults.set_rate(&faulted, Fault::Before, 0.05);
    faults.set_rate(&faulted, Fault::After, 0.05);
    faults.set_rate(&faulted, Fault::Delay(Duration::from_millis(30)), 0.05);
    for chunk in 0..run.pace.chunks() {
        if chunk == run.pace.outage_at {
            faults.outage(&CallKind::SETTLES, run.pace.outage);
        }
        for (at, group) in run.pace.losses {
            if chunk == at {
                run.lose(group, chunk);
            }
        }
        let first = chunk * run.pace.chunk;
        for n in first..(first + run.pace.chunk).min(run.pace.entries) {
            run.publish(n, chunk).await;
        }
        tokio::time::sleep(run.pace.gap).await;
    }
    faults.set_enabled(false);
    let mut phases = vec![("faults", started.elapsed())];

    let live = run.drain(run.pace.live_drain).await;
    phases.push(("drain", started.elapsed()));
    // In real time a stalled app takes long to stop, and the test has
    // failed already: it ends here, and the app with the test's runtime.
    let done = if live.problems.is_empty() || t.paused {
        app.shutdown_within(SHUTDOWN).await;
        let app = start_app(&broker, handlers(&run.stream, run.claiming, &chaos)).await;
        phases.push(("restart", started.elapsed()));
        let drained = run.drain(run.pace.final_drain).await;
        phases.push(("drain", started.elapsed()));
        app.shutdown_within(SHUTDOWN).await;
        phases.push(("shutdown", started.elapsed()));
        // The verdict on a quiet broker.
        let mut done = run.examine().await;
        done.took = drained.took;
        Some(done)
    } else {
        None
    };

    let report = Report {
        run: &run,
        live: &live,
        done: done.as_ref(),
        real: started.elapsed(),
        phases,
    };
    let (text, failed) = report.render();
    assert!(!failed, "{text}");
    println!("{text}");
}

/// The test's report: what was done, what was injected, what went wrong.
struct Report<'a> {
    run: &'a Run,
    live: &'a Findings,
    /// After the restart; `None` when it was skipped.
    done: Option<&'a Findings>,
    real: Duration,
    /// When each phase ended, in real time since the start.
    phases: Vec<(&'static str, std::time::Duration)>,
}

impl Report<'_> {
    /// The report, and whether the test failed.
    fn render(&self) -> (String, bool) {
        let run = self.run;
        let faults = &run.faults;
        // The counts of the last examination.
        let counts = self.done.unwrap_or(self.live);
        let mut out = String::new();
        let mut failed = false;
        let bound = 2 * PREFETCH;
        // Consumers of `new` subscriptions, where every outcome is a broker
        // call (on a claiming or reclaim one a retry leaves the entry
        // pending without a call, so it stays counted until taken over).
        let consumers: &[(&str, &str)] = if run.claiming {
            &[(PLAIN, PLAIN_CONSUMER), (LOSSY, LOSSY_CONSUMER)]
        } else {
            &[
                (PLAIN, PLAIN_CONSUMER),
                (LOSSY, LOSSY_CONSUMER),
                (CLAIM, CLAIM_NEW_CONSUMER),
            ]
        };
        let marks: Vec<(&str, usize)> = consumers
            .iter()
            .map(|(g, c)| (*c, faults.held_high_water(&run.stream, g, c)))
            .collect();
        let read_ahead_broken = marks.iter().any(|(_, high)| *high > bound);
        let duplicates: usize = counts.duplicates.values().sum();
        let duplicate_bound = run.pace.entries as usize / 5;
        let too_many_duplicates = duplicates > duplicate_bound;
        failed |= read_ahead_broken || too_many_duplicates;
        failed |= !self.live.problems.is_empty();
        failed |= self.done.is_some_and(|done| !done.problems.is_empty());

        let _ = writeln!(
            out,
            "survives_injected_faults on {} ({:.1} s real time): {}",
            run.target_name,
            self.real.as_secs_f64(),
            if failed { "FAILED" } else { "passed" }
        );
        let mut last = Duration::ZERO;
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(name, at)| {
                let took = at.saturating_sub(last);
                last = *at;
                format!("{name} {:.1} s", took.as_secs_f64())
            })
            .collect();
        let _ = writeln!(out, "  real time per phase: {}", phases.join(", "));
        let _ = writeln!(
            out,
            "  fault seed {:#x}; replay with {FAULT_SEED_VAR}={:#x} cargo test -p ruststream-testkit \
             --test conformance_{} survives_injected_faults",
            faults.seed(),
            faults.seed(),
            run.target_name
        );
        let _ = writeln!(
            out,
            "  {} entries published in {} attempts: {} entries in the stream, {} of them \
             duplicates from lost publish replies",
            run.pace.entries,
            run.attempts,
            counts.entries,
            counts.entries.saturating_sub(run.pace.entries as usize)
        );
        let per_group = |m: &BTreeMap<&str, usize>| {
            m.iter()
                .map(|(g, n)| format!("{g} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "  deliveries: {}; duplicates (delivered again after an ack or dead letter): {} \
             (bound {duplicate_bound}){}",
            per_group(&counts.deliveries),
            per_group(&counts.duplicates),
            if too_many_duplicates { " EXCEEDED" } else { "" }
        );
        let injected = faults.injected();
        let _ = writeln!(
            out,
            "  faults injected: {} ({})",
            injected.total(),
            injected
        );
        let calls: Vec<String> = CallKind::ALL
            .iter()
            .filter(|k| faults.calls(**k) > 0)
            .map(|k| format!("{k} {}", faults.calls(*k)))
            .collect();
        let _ = writeln!(
            out,
            "  calls: {}; {} read replies lost",
            calls.join(", "),
            faults.lost_reads().len()
        );
        for (group, loss) in &run.losses {
            let _ = writeln!(
                out,
                "  group {group} lost before chunk {} (inner {} -> {}): the app held {} \
                 entries, {} owed another delivery; {} entries excused from the last-decision \
                 check in all",
                loss.chunk,
                loss.loss.old_inner,
                loss.loss.new_inner,
                loss.loss.held.len(),
                loss.unfinished.len(),
                counts.excused.get(group).copied().unwrap_or(0)
            );
        }
        if counts.lost_with_group > 0 {
            let _ = writeln!(
                out,
                "  {} entries never reached a handler: a read reply carrying them was lost, \
                 then their group while they were pending",
                counts.lost_with_group
            );
        }
        let shown: Vec<String> = marks.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(
            out,
            "  most entries read and not settled at the broker, per `new` consumer: {} \
             (bound: prefetch({PREFETCH}) plus one ack batch, {bound})",
            shown.join(", ")
        );
        for (consumer, high) in marks.iter().filter(|(_, high)| *high > bound) {
            let _ = writeln!(
                out,
                "  READ-AHEAD: consumer {consumer} (prefetch({PREFETCH})) had {high} entries read \
                 and not settled at the broker at once, over the bound of {bound}: handled \
                 entries whose settle had not gone through were not counted against the \
                 read-ahead"
            );
        }
        let title = format!(
            "faults off, after a drain of {:.1} s (limit {:?}) with the app that ran through them",
            self.live.took.as_secs_f64(),
            run.pace.live_drain
        );
        section(&mut out, &title, self.live);
        match self.done {
            Some(done) => {
                let title = format!(
                    "after a restart and a drain of {:.1} s (limit {:?})",
                    done.took.as_secs_f64(),
                    run.pace.final_drain
                );
                section(&mut out, &title, done);
            }
            None => {
                let _ = writeln!(
                    out,
                    "  restart skipped: in real time, with the app stalled, it would take long"
                );
            }
        }
        (out, failed)
    }
}

fn section(out: &mut String, title: &str, findings: &Findings) {
    if findings.problems.is_empty() {
        let _ = writeln!(out, "  {title}: all entries as decided");
        return;
    }
    let _ = write!(out, "  {title}: {} problems", findings.problems.len());
    if let Some((earlier, before)) = findings.earlier {
        let verdict = if earlier > findings.problems.len() {
            "still resolving: a slow app, not a stuck one"
        } else {
            "none resolved since: a stuck app, or an end no drain changes"
        };
        let _ = write!(
            out,
            " ({earlier} problems {:.0} s before the end, {verdict})",
            before.as_secs_f64()
        );
    }
    let _ = writeln!(out);
    let mut by: BTreeMap<(Category, &str), Vec<&Problem>> = BTreeMap::new();
    for p in &findings.problems {
        by.entry((p.category, p.group)).or_default().push(p);
    }
    for ((category, group), problems) in by {
        let _ = writeln!(
            out,
            "    group {group}, {}: {}",
            category.heading(),
            problems.len()
        );
        for p in problems.iter().take(LISTED) {
            let _ = writeln!(out, "      - {}", p.text);
        }
        if problems.len() > LISTED {
            let _ = writeln!(out, "      ... and {} more", problems.len() - LISTED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(key: Key, id: u64, consumer: &str, decision: Decision) -> Seen {
        Seen {
            group: CLAIM,
            key,
            id: EntryId::new(id, 0),
            count: 0,
            consumer: consumer.to_owned(),
            decision,
        }
    }

    #[test]
    fn a_drain_that_ran_out_says_whether_problems_were_still_being_resolved() {
        let problem = || Problem {
            category: Category::Pending,
            group: PLAIN,
            text: "entry n=1 attempt=0 is still pending".to_owned(),
        };
        let mut findings = Findings {
            problems: vec![problem()],
            earlier: Some((7, Duration::from_secs(10))),
            ..Findings::default()
        };
        let mut out = String::new();
        section(&mut out, "drain", &findings);
        assert!(
            out.starts_with("  drain: 1 problems (7 problems 10 s before the end, still resolving"),
            "{out}"
        );
        findings.earlier = Some((1, Duration::from_secs(12)));
        out.clear();
        section(&mut out, "drain", &findings);
        assert!(
            out.starts_with("  drain: 1 problems (1 problems 12 s before the end, none resolved"),
            "{out}"
        );
    }

    #[test]
    fn a_takeover_after_a_copy_retry_is_found_and_a_delivered_copy_is_not_one() {
        let a = Key { n: 30, attempt: 0 };
        let b = Key { n: 31, attempt: 0 };
        let c = Key { n: 32, attempt: 0 };
        let dead = || Decision::Dead("chaos".to_owned());
        let history = [
            // Taken over by the reclaiming consumer, same id: found.
            seen(a, 1, CLAIM_NEW_CONSUMER, Decision::Fail),
            seen(a, 1, "claim-reclaim", dead()),
            // The copy (another id) delivered after the retry: sequential.
            seen(b, 2, CLAIM_NEW_CONSUMER, Decision::Retry),
            seen(b, 9, "claim-reclaim", dead()),
            // A retry after a delay is no copy: its entry goes out again
            // under the same id, and a takeover's settle still finds it.
            seen(c, 3, CLAIM_NEW_CONSUMER, Decision::RetryAfter(MIN_IDLE)),
            seen(c, 3, "claim-reclaim", dead()),
        ];
        assert_eq!(taken_over(&history, CLAIM), BTreeSet::from([a]));
        assert!(taken_over(&history, PLAIN).is_empty());
    }
}
