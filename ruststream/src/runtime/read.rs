//! Reading: what a subscription reads, and when.
//!
//! - The read-ahead bound counts every entry read and not yet settled at
//!   the broker: queued on a lane, running, or handled with its decision on
//!   the way to the broker (or being applied again after a failure). The
//!   task reads only while that is below the bound, asking the broker for
//!   the room left, so a crash redelivers at most the read-ahead, and a
//!   broker that refuses settles stops reading rather than letting handled
//!   entries pile up. How much it asks for, and when it reads again, is
//!   the adaptive window's (`window.rs`); the settler wakes it when
//!   decisions land. A new read is polled once before the handlers of the
//!   wake run ([`Reader::send`]), so its request is on its way while they
//!   work.
//! - A subscription first re-reads its own pending list (`OwnPending`,
//!   page by page, not blocking) and handles what a predecessor with the
//!   same consumer name left there, then reads as its kind says. It takes
//!   only entries left unrefreshed for the live window
//!   ([`claims::live_window`](super::claims::live_window)): fresher ones
//!   are worked on by a live process that shares the name (or were held
//!   by a crashed predecessor moments ago). It warns about them, and looks
//!   again once the window has passed, handing back to the group whatever
//!   has gone stale meanwhile (see `own_pending`).
//! - A failed read backs off with jitter. A group the broker lost (a
//!   server restarted without persistence) is recreated after the last id
//!   the app's subscriptions of the group read ([`LastRead`]), never at the
//!   stream's end ([`recreate_group`]).

use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use ruststream_core::{
    BrokerError, BrokerFuture, BrokerResult, Delivery, EntryId, ReadBatch, ReadMode, ReadRequest,
    StreamStart,
};

use super::claims::{IdleRead, KeepAlive};
use super::own_pending::{Look, TwinLook, TwinWatch, look_for_a_twin, recheck_after_a_lost_read};
use super::room::SettledSignal;
use super::settle::Outbox;
use super::window::ReadWindow;
use super::{Backoff, Env};
use crate::metrics::Outcome;

/// How long one blocking read waits before asking again.
const READ_BLOCK: Duration = Duration::from_secs(5);

/// The highest id the app's subscriptions of one group have read (at
/// first the group's position once they were all prepared, `start_at`
/// included): where a group the broker lost is recreated from. One per
/// group of the app (the same broker `Arc`, stream and group), shared by
/// the task and the settler of every subscription reading it, so whichever
/// finds the group lost recreates it after everything any of them read: a
/// `reclaim` subscription reads no new entries, and recreating from what it
/// alone read would hand its `new` sibling the stream again from the start.
pub(crate) struct LastRead(Mutex<EntryId>);

impl LastRead {
    pub(crate) fn new(floor: EntryId) -> Self {
        LastRead(Mutex::new(floor))
    }

    pub(super) fn get(&self) -> EntryId {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn raise(&self, id: EntryId) {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if id > *last {
            *last = id;
        }
    }
}

/// What woke the reader.
pub(super) enum ReadWake {
    /// The read in flight returned.
    Read(BrokerResult<ReadBatch>),
    /// A look at the own pending list returned.
    Looked(BrokerResult<Look>),
    /// It is time to look at the own pending list again.
    LookDue,
    /// The backoff after a failed read is over.
    BackedOff,
    /// Decisions reached the broker: there may be room to read.
    Settled,
}

/// The reading side of a subscription's task.
/// The deliveries of a read, taken in by [`Reader::took`].
pub(super) struct Taken {
    pub(super) deliveries: Vec<Delivery>,
    /// Whether any of them was delivered before (a claim, a retry, an
    /// entry owed again): only those can be in the subscription's hands
    /// already.
    pub(super) redelivered: bool,
}

pub(super) struct Reader<'a> {
    env: &'a Env,
    last_read: &'a LastRead,
    /// The subscription's read mode.
    mode: ReadMode,
    /// How many entries to read at once (adaptive, within the read-ahead
    /// bound).
    window: ReadWindow,
    /// What the read in flight asked for.
    asked: usize,
    /// The read in flight.
    read: Option<BrokerFuture<'a, ReadBatch>>,
    /// What the read in flight returned when [`Reader::send`] polled it,
    /// or what a read the broker answered on the spot returned, kept for
    /// [`Reader::poll`].
    returned: Option<BrokerResult<ReadBatch>>,
    /// The batch a read the broker answers on the spot is written into
    /// ([`Broker::read_now`]): its buffer comes back from the lanes once
    /// they have taken the entries ([`Reader::recycle`]), so such reads
    /// allocate nothing.
    ///
    /// [`Broker::read_now`]: ruststream_core::Broker::read_now
    spare: ReadBatch,
    backoff: Backoff,
    backing_off: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Armed while the read-ahead is full of decisions not yet confirmed by
    /// the broker: the settler's signal that some landed.
    room: SettledSignal<'a>,
    /// Entries a predecessor with this consumer name left pending (it
    /// crashed, or was killed) come first: the subscription pages through
    /// its own pending list before its first ordinary read. `Some` holds
    /// the id to page on from.
    recovering: Option<EntryId>,
    /// Set after a failed read, to when it was sent: the own pending list
    /// is to be checked for entries a lost reply handed out (see
    /// `failed`).
    recheck: Option<Instant>,
    /// When the last read was sent.
    sent: Instant,
    /// Whether the "read" in flight is the re-check (a listing, which says
    /// nothing about whether reads work).
    rechecking: bool,
    /// Whether a lost group was recreated since the last successful read.
    recreated_since_read: bool,
    /// Entries under this consumer's name that another live process seems
    /// to work on: when to look at them next.
    twin: TwinWatch,
    /// The look at the own pending list in flight.
    looking: Option<BrokerFuture<'a, Look>>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(env: &'a Env, outbox: &'a Outbox, last_read: &'a LastRead) -> Self {
        Reader {
            env,
            last_read,
            mode: env.subscription.stream.read_mode(),
            window: ReadWindow::new(env.subscription.first_read(), env.subscription.read_ahead()),
            asked: 0,
            read: None,
            returned: None,
            spare: ReadBatch::default(),
            backoff: Backoff::new(),
            backing_off: None,
            room: SettledSignal::new(outbox),
            recovering: Some(EntryId::ZERO),
            recheck: None,
            sent: Instant::now(),
            rechecking: false,
            recreated_since_read: false,
            twin: TwinWatch::new(super::claims::live_window(env)),
            looking: None,
        }
    }

    /// Starts a read if one may go out now: none in flight, no backoff
    /// running, and room under the read-ahead bound (else it waits for the
    /// settler's signal). `stopping` forbids reading.
    ///
    /// `in_lanes` is how many entries the lanes hold, and `holding` lists
    /// them (asked for only by a re-check). `claims` is the keep-alive and
    /// what the subscription holds: a read that takes idle entries while
    /// anything is held reads as [`KeepAlive::idle_read`] says, so that it
    /// cannot take back an entry the subscription still works on.
    pub(super) fn maybe_read(
        &mut self,
        stopping: bool,
        in_lanes: usize,
        holding: impl FnOnce() -> Vec<EntryId>,
        claims: (&KeepAlive<'_>, impl FnOnce() -> Vec<EntryId>),
    ) {
        let may_read = self.read.is_none()
            && self.returned.is_none()
            && self.looking.is_none()
            && !stopping
            && self.backing_off.is_none();
        if !may_read {
            return;
        }
        let env = self.env;
        // Decisions of this wake were pushed to the outbox before this is
        // called, so they count already.
        let unsettled = usize::try_from(env.counters.in_flight()).unwrap_or(usize::MAX);
        if let Some(sent) = self.recheck {
            // Only once every decision made has reached the broker (nothing
            // in flight but what the lanes hold): any other entry pending
            // under this consumer is then one nobody here will settle.
            if unsettled == in_lanes {
                self.recheck = None;
                self.room.disarm();
                self.read = Some(recheck_after_a_lost_read(env, holding(), sent));
                self.rechecking = true;
            } else {
                self.room.arm();
            }
            return;
        }
        let window = self.twin.window;
        match self.twin.state {
            TwinLook::AtStart => {
                self.twin.state = TwinLook::Off;
                self.looking = Some(look_for_a_twin(env, Vec::new(), window, false, None));
                return;
            }
            // Like the re-check: only once every decision made has landed,
            // so an entry whose ack is on its way is not taken for a stray.
            TwinLook::Due if unsettled == in_lanes => {
                self.twin.state = TwinLook::Off;
                self.room.disarm();
                let before = self.twin.delivered_before(env);
                self.looking = Some(look_for_a_twin(env, holding(), window, true, before));
                return;
            }
            TwinLook::Due => {
                self.room.arm();
                return;
            }
            TwinLook::Armed(_) | TwinLook::Off => {}
        }
        let parked = usize::try_from(env.counters.held()).unwrap_or(usize::MAX);
        let Some(count) = self.window.ask(unsettled, parked) else {
            self.room.arm();
            return;
        };
        self.room.disarm();
        let (mode, mut block) = match self.recovering {
            // A pending list answers at once: no blocking.
            Some(after) => (
                ReadMode::OwnPending {
                    after,
                    min_idle: self.twin.window,
                },
                None,
            ),
            None => (self.mode, Some(READ_BLOCK)),
        };
        let (keep_alive, in_hand) = claims;
        let mut held = Vec::new();
        let mut request = ReadRequest::new(env.stream(), env.group(), &env.consumer, mode, count);
        if unsettled > 0 && request.takes_idle() {
            let IdleRead { name_held, wait } = keep_alive.idle_read();
            if name_held {
                held = in_hand();
            }
            block = block.map(|b| b.min(wait));
        }
        self.asked = count;
        request.block = block;
        request.max_deliveries = env.subscription.max_deliveries;
        // Empty already (recycled buffers are); cleared again so that a
        // broker that appends without clearing cannot hand out twice.
        self.spare.deliveries.clear();
        self.spare.dead_lettered.clear();
        self.sent = Instant::now();
        match env
            .broker
            .read_now(&request.holding(&held), &mut self.spare)
        {
            // Nothing now, and the read would wait: it waits as a read.
            Some(Ok(())) if block.is_some() && is_quiet(&self.spare) => {}
            Some(answer) => {
                self.window.answered(true);
                self.returned = Some(answer.map(|()| std::mem::take(&mut self.spare)));
                return;
            }
            None => {}
        }
        self.read = Some(if held.is_empty() {
            env.broker.read(request)
        } else {
            Box::pin(async move { env.broker.read(request.holding(&held)).await })
        });
    }

    /// Takes back a delivery buffer the lanes are done with (empty), for
    /// the next read the broker answers on the spot.
    pub(super) fn recycle(&mut self, mut buffer: Vec<Delivery>) {
        if buffer.capacity() > self.spare.deliveries.capacity() {
            buffer.clear();
            self.spare.deliveries = buffer;
        }
    }

    /// What a read polled by [`Reader::send`] returned, if it has not
    /// been taken in yet: at a stop, its entries are handed back rather
    /// than dropped (on a broker whose reads come back at once, that is a
    /// whole read's worth).
    pub(super) fn take_returned(&mut self) -> Option<BrokerResult<ReadBatch>> {
        self.returned.take()
    }

    /// Whether a read is in flight.
    #[inline]
    pub(super) fn reading(&self) -> bool {
        self.read.is_some()
    }

    /// Polls the read in flight once, so that its request goes out before
    /// the handlers of this wake run (a broker's client sends on the first
    /// poll); what it returns at once is kept for [`Reader::poll`]. True
    /// while the read is still on its way: the task should yield once, so
    /// that a client that writes from a task of its own (redis-rs) sends
    /// it now, and the broker reads the next batch while the handlers work
    /// on this one.
    #[inline]
    pub(super) fn send(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(read) = self.read.as_mut() else {
            return false;
        };
        let poll = read.as_mut().poll(cx);
        self.window.answered(poll.is_ready());
        match poll {
            Poll::Ready(result) => {
                self.read = None;
                self.returned = Some(result);
                false
            }
            Poll::Pending => true,
        }
    }

    /// Polls the read in flight, the backoff and the settler's signal.
    #[inline]
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ReadWake> {
        if let Some(result) = self.returned.take() {
            return Poll::Ready(ReadWake::Read(result));
        }
        if let Some(read) = self.read.as_mut()
            && let Poll::Ready(result) = read.as_mut().poll(cx)
        {
            self.read = None;
            return Poll::Ready(ReadWake::Read(result));
        }
        if let Some(look) = self.looking.as_mut()
            && let Poll::Ready(result) = look.as_mut().poll(cx)
        {
            self.looking = None;
            return Poll::Ready(ReadWake::Looked(result));
        }
        if self.twin.poll_due(cx) {
            return Poll::Ready(ReadWake::LookDue);
        }
        if let Some(b) = self.backing_off.as_mut()
            && b.as_mut().poll(cx).is_ready()
        {
            self.backing_off = None;
            return Poll::Ready(ReadWake::BackedOff);
        }
        if self.room.poll(cx) {
            return Poll::Ready(ReadWake::Settled);
        }
        Poll::Pending
    }

    /// Takes in a batch read: pages on through recovery, notes the highest
    /// id read, counts it and reports what the read dead-lettered. Returns
    /// the deliveries.
    pub(super) fn took(&mut self, batch: ReadBatch) -> Taken {
        self.backoff.reset();
        // One pass over the deliveries: their size, the highest id, and
        // whether any was delivered before.
        let (mut bytes, mut top, mut again) = (0, EntryId::ZERO, 0);
        for delivery in &batch.deliveries {
            bytes += entry_bytes(delivery);
            top = top.max(delivery.id());
            again |= delivery.delivery_count;
        }
        let last = (!batch.deliveries.is_empty())
            .then_some(top)
            .max(batch.dead_lettered.iter().copied().max());
        if !self.rechecking {
            let got = batch.deliveries.len() + batch.dead_lettered.len();
            self.window.took(self.asked, got, bytes);
        }
        self.recreated_since_read = false;
        if let Some(after) = &mut self.recovering {
            // Page on past what this read handed out or dead-lettered; an
            // empty page ends recovery.
            match last {
                Some(last) => *after = last,
                None => self.recovering = None,
            }
        }
        if let Some(last) = last {
            self.last_read.raise(last);
        }
        let env = self.env;
        if !std::mem::take(&mut self.rechecking) {
            env.counters.signals.read_ok();
        }
        env.counters.signals.settled(&batch.dead_lettered);
        env.counters.add_read(batch.deliveries.len() as u64);
        for id in &batch.dead_lettered {
            env.counters.settled_as(Outcome::DeadLetter, 1);
            group_event!(
                warn,
                env,
                %id,
                max_deliveries = env.subscription.max_deliveries,
                "entry dead-lettered: delivered max_deliveries times"
            );
        }
        Taken {
            deliveries: batch.deliveries,
            redelivered: again > 0,
        }
    }

    /// Handles a failed read: logs it, recreates a group the broker lost,
    /// and backs off (or, right after recreating the group, reads again at
    /// once).
    pub(super) async fn failed(&mut self, error: BrokerError) {
        // The broker may have applied the read and lost its reply: the
        // entries it handed out sit pending under this consumer. On a `new`
        // subscription nothing else would hand them out again while it
        // lives; claiming and reclaim reads would take them back once idle,
        // but by then later entries of their keys may have run. So once the
        // decisions already made have reached the broker (the settler's
        // work of milliseconds; a long handler holds nothing up), the
        // subscription lists its own pending entries (a listing, which
        // counts no delivery) and hands back those its lanes do not hold
        // (on a claiming or reclaim subscription, those delivered since the
        // read was sent): owed at once, the next read takes them first,
        // counted as redeliveries. New reads pause meanwhile. A failed own-pending read
        // (start-up recovery) leaves what it would have handed out pending
        // here, possibly claimed afresh: the next look at the own pending
        // list hands it back once stale; a group the broker lost took its
        // pending list with it.
        let new_kind = !self.env.subscription.stream.retries_in_place();
        if self.recovering.is_none() && !matches!(error, BrokerError::NoGroup { .. }) {
            self.recheck = Some(self.sent);
        }
        // A recovery page whose reply was lost may have claimed entries
        // (their idle time starts again), which the page read again skips
        // as fresh: the look after the live window hands them back once
        // stale.
        if self.recovering.is_some() && new_kind {
            self.twin.arm_if_off();
        }
        let env = self.env;
        if !std::mem::take(&mut self.rechecking) {
            env.counters.signals.read_failed(&error);
        }
        let delay = self.backoff.next_delay();
        tracing::error!(
            subscriber = env.name,
            stream = env.stream(),
            group = env.group(),
            %error,
            retry_in = ?delay,
            "read failed"
        );
        let recreated = matches!(error, BrokerError::NoGroup { .. })
            && recreate_group(env, self.last_read.get()).await;
        if recreated && !self.recreated_since_read {
            // The group is back: the broker answers again, so read at once
            // rather than after the backoff its outage built up. Once only
            // until a read succeeds, so a broker that keeps losing the group
            // still gets the backoff.
            self.recreated_since_read = true;
            self.backoff.reset();
        } else {
            self.backing_off = Some(Box::pin(tokio::time::sleep(delay)));
        }
    }

    /// Takes in what a look at the own pending list found (see
    /// [`TwinWatch::looked`]).
    pub(super) fn looked(&mut self, result: BrokerResult<Look>) {
        self.twin.looked(self.env, result);
    }

    /// Stops reading: a blocking read in flight is abandoned.
    pub(super) fn stop(&mut self) {
        self.read = None;
        self.returned = None;
        self.looking = None;
        self.twin.state = TwinLook::Off;
        self.backing_off = None;
        self.room.disarm();
    }
}

/// Whether a read found nothing to report: no entry and no dead letter.
fn is_quiet(batch: &ReadBatch) -> bool {
    batch.deliveries.is_empty() && batch.dead_lettered.is_empty()
}

/// Recreates a group the broker lost (a server restart without
/// persistence, a flush) so that nothing published since is skipped: after
/// `last_read`, the highest id the app's subscriptions of the group have
/// read (or the group's position when they started, see [`LastRead`]), or
/// at the beginning when the stream itself is new since then (its last id
/// is below `last_read`, or nothing was read from a stream that was
/// empty). Never at the subscription's own start position: for `New` that
/// is the stream's end, which would pass over everything published between
/// the loss and now. Entries the lost group had pending lose their pending
/// state with it (the broker forgot them), as `docs/guarantees.md` says.
///
/// Returns whether the group exists now. Both the task (a read failed) and
/// the settler (a settle failed) call this; creating a group is
/// idempotent, so they may race.
pub(super) async fn recreate_group(env: &Env, last_read: EntryId) -> bool {
    let start = if last_read == EntryId::ZERO {
        StreamStart::Beginning
    } else {
        match env.broker.stream_info(env.stream()).await {
            Ok(Some(info)) if info.last_id >= last_read => StreamStart::Id(last_read),
            Ok(_) => StreamStart::Beginning,
            // The next failed call tries again.
            Err(_) => StreamStart::Id(last_read),
        }
    };
    match env
        .broker
        .ensure_group(env.stream(), env.group(), start)
        .await
    {
        Ok(created) => {
            if created {
                tracing::warn!(
                    stream = env.stream(),
                    group = env.group(),
                    ?start,
                    "consumer group was missing (server restart or flush?): recreated"
                );
            }
            true
        }
        Err(e) => {
            tracing::error!(
                stream = env.stream(),
                group = env.group(),
                %e,
                "could not recreate the consumer group; trying again after the next failed call"
            );
            false
        }
    }
}

/// An entry's size for the read-ahead's byte bound: payload and headers.
#[inline]
fn entry_bytes(delivery: &Delivery) -> usize {
    let entry = &delivery.entry;
    entry.payload().len()
        + entry
            .headers()
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}
