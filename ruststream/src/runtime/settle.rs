//! Settling: handler decisions on their way to the broker.
//!
//! The vocabulary, from the handler to the broker:
//!
//! - a handler returns a [`HandlerOutcome`](crate::HandlerOutcome) (or
//!   `()`, a `Result`, a reply), which the macro turns into a
//!   [`Settle`](crate::Settle): what the return value means, failures
//!   included;
//! - the runtime turns a `Settle` into a [`Decided`]: the [`Decision`] to
//!   apply at the broker, and the [`Settlement`] an observer is told;
//! - the subscription's task puts decisions into a [`SettleBatch`] and
//!   hands it to the settler through the [`Outbox`];
//! - the settler applies a batch as broker calls (`ack`, `retry`,
//!   `dead_letter`), each made again until it lands ([`settle_call`]);
//!   with them go the delivery counts of held entries a `by_key` lane ran
//!   again (`count_deliveries`), which settle nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream_core::{BrokerError, BrokerResult, EntryId, Retry};
use tokio::sync::Notify;

use super::own_pending::OWN_LIST;
use super::read::{self, LastRead};
use super::{Backoff, Env};
use crate::metrics::Outcome;
use crate::observe::Settlement;

/// Outcomes applied per settle batch at most.
const SETTLE_BATCH: usize = 1024;
/// Attempts at a settle call once the subscription has stopped (the
/// process is shutting down) before the settler gives up on it. While the
/// subscription runs there is no limit: an outcome is applied again, with
/// backoff, until it lands (see `settle_call`).
const SETTLE_ATTEMPTS_AT_STOP: u32 = 6;

/// What to tell the broker about one entry.
#[derive(Debug)]
pub(super) enum Decision {
    Ack(EntryId),
    /// Retry on a new subscription: copy and ack.
    Copy(EntryId),
    /// Owed again after a delay (zero: an immediate nack). With the
    /// entry's delivery count at the broker when decided (see
    /// [`retry_call`]).
    After(EntryId, Duration, u32),
    /// Read but not finished at shutdown: owed again at once, for any
    /// consumer (the broker call of an immediate nack). With the entry's
    /// delivery count at the broker when decided.
    HandBack(EntryId, u32),
    Dead(EntryId, String),
    /// Retry on a claiming or reclaim subscription: nothing to tell the
    /// broker, the entry stays pending under its own id until a claiming
    /// read takes it once idle. Not acking it is the retry.
    Leave(EntryId),
}

/// How a handled entry is to be settled, and what an observer is told.
pub(super) struct Decided {
    pub(super) decision: Decision,
    pub(super) settlement: Settlement,
}

impl Decided {
    pub(super) fn new(decision: Decision, settlement: Settlement) -> Self {
        Decided {
            decision,
            settlement,
        }
    }

    /// Dead-letter the entry with `reason`.
    pub(super) fn dead(id: EntryId, reason: String) -> Self {
        let settlement = Settlement::DeadLettered {
            reason: reason.clone(),
        };
        Decided::new(Decision::Dead(id, reason), settlement)
    }
}

/// Outcomes on their way from a subscription's task to its settler: a
/// batch the task appends to and the settler swaps for its own empty one,
/// so a hand-over moves the outcomes and allocates nothing.
#[derive(Default)]
pub(super) struct Outbox {
    ops: Mutex<SettleBatch>,
    ready: Notify,
    closed: AtomicBool,
    /// Signalled by the settler each time outcomes reach the broker: the
    /// task may then have room to read again (see `Counters::in_flight`).
    pub(super) settled: Notify,
    /// Signalled when the outbox is closed, for a settler waiting out a
    /// backoff.
    closing: Notify,
    /// The entries of the batch the settler is applying, until it has
    /// applied all of it (see [`Outbox::in_hand`]).
    applying: Mutex<InHand>,
    /// Entries a read handed out again while the subscription held them
    /// (not run twice: `Driver::skip_in_hand`), with the delivery count
    /// the broker gave them then, until their decisions have been applied:
    /// that count is this subscription's own, not another holder's (see
    /// [`still_held`]).
    taken_back: Mutex<std::collections::HashMap<EntryId, u32>>,
}

/// Entries whose decisions have not reached the broker yet, by what the
/// decision does.
#[derive(Default)]
pub(super) struct InHand {
    /// Acks, retry copies and dead letters: once applied, the entry is
    /// never handed out again under its id.
    pub(super) ending: Vec<EntryId>,
    /// Delayed retries and hand-backs: once applied, a read hands the entry
    /// out again, rightly, even while the rest of the batch is applied.
    pub(super) owing: Vec<EntryId>,
}

impl InHand {
    fn clear(&mut self) {
        self.ending.clear();
        self.owing.clear();
    }
}

impl Outbox {
    /// Moves `ops` (left empty, its capacity kept, but for the ids of the
    /// retries left in place: see [`SettleBatch::take_left`]) to the
    /// settler. A retry left in place needs no broker call, so the entry
    /// is out of hand at once: its take-back, if any, is forgotten here.
    pub(super) fn push(&self, ops: &mut SettleBatch) {
        if !ops.left_ids.is_empty() {
            let mut taken = self
                .taken_back
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !taken.is_empty() {
                for id in &ops.left_ids {
                    taken.remove(id);
                }
            }
        }
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(ops);
        self.ready.notify_one();
    }

    /// Adds to `into` every entry whose decision is on its way to the
    /// broker and has not landed yet: waiting here, or in the batch the
    /// settler applies (a call of it may be failing and made again). The
    /// subscription still holds these entries: their claims are refreshed,
    /// and a read that hands one out again does not run it twice
    /// (`docs/guarantees.md`, "Under faults": own take-backs). A retry left
    /// pending on purpose (`Decision::Leave`) is not among them.
    pub(super) fn in_hand(&self, into: &mut InHand) {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .in_hand(into);
        let applying = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        into.ending.extend_from_slice(&applying.ending);
        into.owing.extend_from_slice(&applying.owing);
    }

    /// Notes that a read handed `id` out again, with `count` deliveries at
    /// the broker, while the subscription held it.
    pub(super) fn taken_back(&self, id: EntryId, count: u32) {
        let mut taken = self
            .taken_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let known = taken.entry(id).or_insert(count);
        *known = (*known).max(count);
    }

    /// The delivery count a take-back of `id` left at the broker, if any.
    fn taken_back_count(&self, id: EntryId) -> Option<u32> {
        let taken = self
            .taken_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        taken.get(&id).copied()
    }

    /// The batch being applied has been: its entries are no longer in hand,
    /// nor their take-backs.
    fn applied(&self) {
        let mut applying = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        let mut taken = self
            .taken_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !taken.is_empty() {
            for id in applying.ending.iter().chain(&applying.owing) {
                taken.remove(id);
            }
        }
        applying.clear();
    }

    /// Whether no more outcomes will come: the subscription has stopped.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// No more outcomes will come.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
        self.closing.notify_one();
    }

    /// Resolves once the outbox is closed.
    async fn stopped(&self) {
        while !self.is_closed() {
            self.closing.notified().await;
        }
    }

    /// Waits for outcomes and swaps them into `into` (which must be empty).
    /// Returns `false` once the outbox is closed and empty.
    async fn take(&self, into: &mut SettleBatch) -> bool {
        loop {
            // `closed` is read before the buffer: outcomes pushed before the
            // close are then always seen.
            let closed = self.closed.load(Ordering::Acquire);
            {
                let mut ops = self.ops.lock().unwrap_or_else(PoisonError::into_inner);
                if !ops.is_empty() {
                    std::mem::swap(&mut *ops, into);
                    // Under the same lock: a look at what is in hand sees
                    // these entries in one list or the other.
                    into.in_hand(&mut self.applying.lock().unwrap_or_else(PoisonError::into_inner));
                    return true;
                }
            }
            if closed {
                return false;
            }
            // A push or close since the checks above left a permit, so
            // this returns at once.
            self.ready.notified().await;
        }
    }
}

/// Closes an outbox when dropped.
pub(super) struct CloseOnDrop<'a>(pub(super) &'a Outbox);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Applies settle decisions in batches until the outbox is closed and
/// empty.
pub(super) async fn settle_loop(env: Env, outbox: Arc<Outbox>, last_read: Arc<LastRead>) {
    let mut batch = SettleBatch::default();
    let settler = Settler {
        env: &env,
        outbox: &outbox,
        last_read: &last_read,
        abandoned: AtomicBool::new(false),
        troubled: AtomicBool::new(false),
        failures: AtomicU64::new(0),
    };
    while outbox.take(&mut batch).await {
        let settled = batch.count;
        let failures = settler.failures.load(Ordering::Relaxed);
        batch.apply(&settler).await;
        if settler.failures.load(Ordering::Relaxed) == failures {
            settler.troubled.store(false, Ordering::Relaxed);
        }
        outbox.applied();
        env.counters.add_settled(settled as u64);
        outbox.settled.notify_one();
    }
}

/// What the settler's calls need: the subscription, the outbox (to tell
/// whether the subscription has stopped) and the last id read (to
/// recreate a group the broker lost).
struct Settler<'a> {
    env: &'a Env,
    outbox: &'a Outbox,
    last_read: &'a LastRead,
    /// Set once a call has given up while stopping: the broker is not
    /// answering, so the calls after it are not tried (shutdown stays
    /// bounded).
    abandoned: AtomicBool,
    /// Set when a call fails, cleared when a batch lands without a failed
    /// call: while set, decisions may have waited longer than the claims
    /// they were made under (see [`retry_call`]).
    troubled: AtomicBool,
    /// Calls failed so far.
    failures: AtomicU64,
}

/// Settle decisions grouped into broker calls.
#[derive(Default)]
pub(super) struct SettleBatch {
    /// Decisions in the batch, `Decision::Leave` included.
    count: usize,
    acks: Vec<EntryId>,
    copies: Vec<EntryId>,
    delayed: Vec<(Duration, EntryId, u32)>,
    dead: Vec<(EntryId, String)>,
    handed_back: Vec<(EntryId, u32)>,
    /// Retries left pending in place (`Decision::Leave`).
    left: u64,
    /// Their ids, taken out by the subscription's task before the batch
    /// is handed over (see [`SettleBatch::take_left`]).
    left_ids: Vec<EntryId>,
    /// Held entries run again on their `by_key` lanes, with their delivery
    /// counts for the broker (`Broker::count_deliveries`). Not decisions:
    /// they settle nothing and are not in `count`.
    reruns: Vec<(EntryId, u32)>,
}

impl SettleBatch {
    #[inline]
    pub(super) fn add(&mut self, decision: Decision) {
        self.count += 1;
        match decision {
            Decision::Ack(id) => self.acks.push(id),
            other => self.add_other(other),
        }
    }

    /// [`SettleBatch::add`] for anything but an ack (kept out of line, so
    /// the ack's path stays short).
    #[inline(never)]
    fn add_other(&mut self, decision: Decision) {
        match decision {
            Decision::Ack(id) => self.acks.push(id),
            Decision::Copy(id) => self.copies.push(id),
            Decision::Leave(id) => {
                self.left += 1;
                self.left_ids.push(id);
            }
            Decision::After(id, delay, times) => self.delayed.push((delay, id, times)),
            Decision::HandBack(id, times) => self.handed_back.push((id, times)),
            Decision::Dead(id, reason) => self.dead.push((id, reason)),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count == 0 && self.reruns.is_empty()
    }

    /// Adds the entries the batch settles to `into`.
    pub(super) fn in_hand(&self, into: &mut InHand) {
        into.ending.extend_from_slice(&self.acks);
        into.ending.extend_from_slice(&self.copies);
        into.ending.extend(self.dead.iter().map(|(id, _)| *id));
        into.owing.extend(self.delayed.iter().map(|&(_, id, _)| id));
        into.owing
            .extend(self.handed_back.iter().map(|&(id, _)| id));
    }

    /// The ids of the retries left pending in place since the last call.
    pub(super) fn take_left(&mut self) -> std::vec::Drain<'_, EntryId> {
        self.left_ids.drain(..)
    }

    /// Where the held entries run again go (see `reruns`).
    pub(super) fn reruns(&mut self) -> &mut Vec<(EntryId, u32)> {
        &mut self.reruns
    }

    /// Moves `other`'s decisions into this batch.
    fn append(&mut self, other: &mut SettleBatch) {
        self.count += std::mem::take(&mut other.count);
        self.acks.append(&mut other.acks);
        self.copies.append(&mut other.copies);
        self.delayed.append(&mut other.delayed);
        self.dead.append(&mut other.dead);
        self.handed_back.append(&mut other.handed_back);
        self.left += std::mem::take(&mut other.left);
        self.reruns.append(&mut other.reruns);
    }

    /// Applies the batch, in broker calls of at most `SETTLE_BATCH`
    /// entries, and empties it. Each call is made again until it lands (see
    /// [`settle_call`]).
    async fn apply(&mut self, settler: &Settler<'_>) {
        let env = settler.env;
        let (stream, group) = (env.stream(), env.group());
        let broker = &*env.broker;
        let counters = &env.counters;
        self.count = 0;
        counters.settled_as(Outcome::Retry, std::mem::take(&mut self.left));
        // First: a re-run's count reaches the broker before anything later
        // in the batch hands its entry back.
        for counts in self.reruns.chunks(SETTLE_BATCH) {
            let consumer = env.consumer.as_str();
            settle_call(settler, "count deliveries", counts.len(), || {
                broker.count_deliveries(stream, group, consumer, counts)
            })
            .await;
        }
        self.reruns.clear();
        for ids in self.acks.chunks(SETTLE_BATCH) {
            let now = || broker.ack_now(stream, group, ids);
            if settle_call_now(settler, "ack", ids.len(), now, || {
                broker.ack(stream, group, ids)
            })
            .await
            {
                counters.settled_as(Outcome::Ack, ids.len() as u64);
                counters.signals.settled(ids);
            }
        }
        self.acks.clear();
        for ids in self.copies.chunks(SETTLE_BATCH) {
            if settle_call(settler, "retry (copy)", ids.len(), || {
                broker.retry(stream, group, ids, Retry::Copy)
            })
            .await
            {
                counters.settled_as(Outcome::Retry, ids.len() as u64);
                // The copy has a new id: the old one is no longer looping
                // (the copy enters the poison map when it is delivered past
                // the bound, and leaves it when acked or dead-lettered).
                counters.signals.settled(ids);
            }
        }
        self.copies.clear();
        self.delayed.sort();
        for run in self.delayed.chunk_by(|a, b| a.0 == b.0) {
            let delay = run[0].0;
            let items: Vec<(EntryId, u32)> =
                run.iter().map(|&(_, id, times)| (id, times)).collect();
            let made = retry_call(settler, "retry (delay)", &items, delay).await;
            counters.settled_as(Outcome::RetryAfter, made as u64);
        }
        self.delayed.clear();
        for items in self.handed_back.chunks(SETTLE_BATCH) {
            let made = retry_call(settler, "hand back", items, Duration::ZERO).await;
            counters.settled_as(Outcome::HandedBack, made as u64);
        }
        self.handed_back.clear();
        // One call per reason (a poison run shares one), ids in order.
        self.dead.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        for run in self.dead.chunk_by(|a, b| a.1 == b.1) {
            let reason = &run[0].1;
            let ids: Vec<EntryId> = run.iter().map(|(id, _)| *id).collect();
            for ids in ids.chunks(SETTLE_BATCH) {
                if settle_call(settler, "dead-letter", ids.len(), || {
                    broker.dead_letter(stream, group, ids, reason)
                })
                .await
                {
                    counters.settled_as(Outcome::DeadLetter, ids.len() as u64);
                    counters.signals.settled(ids);
                }
            }
        }
        self.dead.clear();
    }
}

/// Runs one settle call until it lands. Returns whether it did.
///
/// A failed call is made again with backoff (jittered, up to 5 s apart),
/// whatever the error, for as long as the subscription runs: an outcome
/// that could not be applied is never dropped, so an entry is never left
/// pending under a live consumer (which would not read it again). Broker
/// calls are all-or-nothing, so a failed one changed nothing and making it
/// again is safe; one whose reply was lost after it was applied is a no-op
/// the second time (acks, retries and dead letters ignore entries that
/// are no longer pending; a retry that makes entries owed, which could be
/// handed out again meanwhile, goes through [`retry_call`]). While outcomes wait here the read-ahead stays
/// full, so the subscription reads nothing new.
///
/// Once the subscription has stopped (the process is shutting down) the
/// call gets `SETTLE_ATTEMPTS_AT_STOP` more tries, and a closed broker
/// none: the entries then stay pending at the broker as they were, and are
/// delivered again (to this consumer's successor by its own-pending
/// re-read, to a claiming reader once idle).
async fn settle_call<'a, T, F>(settler: &Settler<'_>, what: &str, entries: usize, call: F) -> bool
where
    F: Fn() -> ruststream_core::BrokerFuture<'a, T>,
{
    settle_call_now(settler, what, entries, || None, call).await
}

/// [`settle_call`], each attempt made first with `now` (a broker call
/// answered on the spot, such as [`Broker::ack_now`]), and with `call`
/// only where the broker cannot answer so.
///
/// [`Broker::ack_now`]: ruststream_core::Broker::ack_now
async fn settle_call_now<'a, T, N, F>(
    settler: &Settler<'_>,
    what: &str,
    entries: usize,
    now: N,
    call: F,
) -> bool
where
    N: Fn() -> Option<BrokerResult<T>>,
    F: Fn() -> ruststream_core::BrokerFuture<'a, T>,
{
    if not_tried(settler, what, entries) {
        return false;
    }
    let mut attempts = Attempts::new();
    loop {
        let answer = match now() {
            Some(answer) => answer,
            None => call().await,
        };
        match answer {
            Ok(_) => return true,
            Err(error) => {
                if !attempts.again(settler, what, entries, error).await {
                    return false;
                }
            }
        }
    }
}

/// A retry that makes entries owed after `delay` (a delayed retry, or a
/// hand-back with no delay), made until it lands as [`settle_call`] makes
/// a call. Each entry comes with its delivery count at the broker when the
/// decision was made. After a failed attempt the retry is made again only
/// for the entries still pending under this consumer at no higher count:
/// the attempt may have been applied and its reply lost, and an entry it
/// made owed may have been handed out since (to another consumer, or to
/// this one again), which runs it now. Made owed again, that entry would
/// be taken from its holder and run twice at once.
async fn retry_call(
    settler: &Settler<'_>,
    what: &str,
    items: &[(EntryId, u32)],
    delay: Duration,
) -> usize {
    if not_tried(settler, what, items.len()) {
        return 0;
    }
    let env = settler.env;
    let mut items = items.to_vec();
    // A call failed since these decisions were made, or while they waited:
    // their claims may have lapsed meanwhile and the entries been handed
    // out again, so even the first attempt is made only for those still
    // held here at their counts.
    if settler.troubled.load(Ordering::Relaxed)
        && let Ok(held) = still_held(settler, &items).await
    {
        items = held;
        if items.is_empty() {
            return 0;
        }
    }
    let mut ids: Vec<EntryId> = items.iter().map(|(id, _)| *id).collect();
    let mut attempts = Attempts::new();
    loop {
        let answer = env
            .broker
            .retry(env.stream(), env.group(), &ids, Retry::After(delay))
            .await;
        match answer {
            Ok(_) => return ids.len(),
            Err(error) => {
                if !attempts.again(settler, what, ids.len(), error).await {
                    return 0;
                }
                let tried = ids.len();
                // A listing that fails leaves the entries as they were.
                if let Ok(held) = still_held(settler, &items).await {
                    items = held;
                    ids = items.iter().map(|(id, _)| *id).collect();
                }
                if ids.is_empty() {
                    // The failed attempt was applied after all.
                    return tried;
                }
            }
        }
    }
}

/// Those of `items` still pending under this consumer with a delivery
/// count no higher than theirs (not delivered again since), or than the
/// count a read that handed the entry out again to this subscription left
/// (its own take-back, not run twice: [`Outbox::taken_back`]). An entry
/// past the end of a listing cut short is kept.
async fn still_held(
    settler: &Settler<'_>,
    items: &[(EntryId, u32)],
) -> BrokerResult<Vec<(EntryId, u32)>> {
    let env = settler.env;
    let Some(from) = items.iter().map(|(id, _)| *id).min() else {
        return Ok(Vec::new());
    };
    let listed = env
        .broker
        .pending(
            env.stream(),
            env.group(),
            from,
            OWN_LIST,
            Some(&env.consumer),
        )
        .await?;
    let last = (listed.len() == OWN_LIST)
        .then(|| listed.last().map(|p| p.id))
        .flatten();
    let held: std::collections::HashMap<EntryId, u32> = listed
        .iter()
        .filter(|p| p.consumer.is_some())
        .map(|p| (p.id, p.times_delivered))
        .collect();
    Ok(items
        .iter()
        .copied()
        .filter(|(id, times)| {
            let ours = settler
                .outbox
                .taken_back_count(*id)
                .unwrap_or(0)
                .max(*times);
            held.get(id).is_some_and(|now| *now <= ours) || last.is_some_and(|last| *id > last)
        })
        .collect())
}

/// Whether a settle call is not tried at all: an earlier call gave up at
/// shutdown (logged).
fn not_tried(settler: &Settler<'_>, what: &str, entries: usize) -> bool {
    if !settler.abandoned.load(Ordering::Relaxed) {
        return false;
    }
    // The broker is not answering, and trying this one too would only make
    // shutdown longer.
    let env = settler.env;
    group_event!(
        error,
        env,
        entries,
        "{what} not tried while stopping (the broker stopped answering): the entries stay \
         pending, and are delivered again after a restart or once idle"
    );
    true
}

/// The attempts at one settle call: its backoff, and how many it has had
/// since the subscription stopped.
struct Attempts {
    backoff: Backoff,
    at_stop: u32,
}

impl Attempts {
    fn new() -> Self {
        Attempts {
            backoff: Backoff::new(),
            at_stop: 0,
        }
    }

    /// After a failed attempt with `error`: `false` to give up (logged),
    /// else `true` once the backoff has passed, to try again.
    async fn again(
        &mut self,
        settler: &Settler<'_>,
        what: &str,
        entries: usize,
        error: BrokerError,
    ) -> bool {
        let Settler {
            env,
            outbox,
            last_read,
            ..
        } = *settler;
        settler.failures.fetch_add(1, Ordering::Relaxed);
        settler.troubled.store(true, Ordering::Relaxed);
        if outbox.is_closed() {
            if self.at_stop == 0 {
                // Short delays from here: the process is stopping.
                self.backoff.reset();
            }
            self.at_stop += 1;
        }
        let give_up =
            matches!(error, BrokerError::Closed { .. }) || self.at_stop >= SETTLE_ATTEMPTS_AT_STOP;
        if give_up {
            if outbox.is_closed() {
                settler.abandoned.store(true, Ordering::Relaxed);
            }
            group_event!(
                error,
                env,
                %error,
                entries,
                "{what} failed while stopping; not applied (an ack on Redis may have acked the \
                 entries it found pending): the broker still holds the rest as pending, and they \
                 are delivered again after a restart or once idle"
            );
            return false;
        }
        let delay = self.backoff.next_delay();
        group_event!(
            warn,
            env,
            %error,
            entries,
            retry_in = ?delay,
            "{what} failed; applying it again"
        );
        if matches!(error, BrokerError::NoGroup { .. }) {
            // The broker lost the group, and with it these entries' pending
            // state. Recreating it here (the task would only on a failed
            // read, and it reads nothing while these decisions fill the
            // read-ahead) lets the call land: on the new group it is a
            // no-op.
            read::recreate_group(env, last_read.get()).await;
        }
        if self.at_stop > 0 {
            // Stopping: the short delays of a fresh backoff.
            tokio::time::sleep(delay).await;
        } else {
            // A long backoff is cut short when the subscription stops; the
            // attempts left then come with short delays.
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = outbox.stopped() => {}
            }
        }
        true
    }
}

#[cfg(test)]
mod memory_bounds {
    use super::*;

    /// Each entry was handed out again while a lane ran it (a claim
    /// refresh that did not land, then a claiming read: `skip_in_hand`
    /// notes `taken_back`), and its handler then asked for a retry on a
    /// claiming subscription without a backoff (`Decision::Leave`): the
    /// batch carrying the decision is taken and applied as the settler
    /// does. Nothing of the take-back should outlive the decision.
    #[tokio::test]
    async fn take_backs_of_entries_left_in_place_are_forgotten() {
        let outbox = Outbox::default();
        let mut into = SettleBatch::default();
        for i in 0..10_000u64 {
            let id = EntryId::new(1_000 + i, 0);
            outbox.taken_back(id, 2);
            let mut decisions = SettleBatch::default();
            decisions.add(Decision::Leave(id));
            outbox.push(&mut decisions);
            // The task takes the left ids out after the hand-over.
            let _: Vec<EntryId> = decisions.take_left().collect();
            assert!(outbox.take(&mut into).await);
            // (Applying a batch of only `Leave`s calls the broker for
            // nothing.)
            into = SettleBatch::default();
            outbox.applied();
        }
        let kept = outbox
            .taken_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        assert!(
            kept <= 1024,
            "take-backs kept after their decisions: {kept}"
        );
    }
}
