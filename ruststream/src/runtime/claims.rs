//! Keeping claims fresh: a subscription refreshes the claim on every entry
//! it holds (queued on a lane, running, or held after a retry) every
//! keep-alive interval ([`crate::RustStream::keep_alive`], and at least
//! three times per `min_idle` on a claiming or reclaim subscription), so
//! no claiming reader (another consumer, or its own next read) takes an
//! entry it still has, a slow handler is never run twice, and a process
//! restarting under the same consumer name can tell entries a live process
//! works on from entries a crashed one left (see [`live_window`]). The
//! broker resets the entries' idle time without counting a delivery
//! (`Broker::extend_claim`).
//!
//! A handler can also refresh its entry by hand with
//! `Context::extend_claim`. Entries whose decisions are on their way to the
//! broker (an ack that keeps failing, say) are refreshed too, so no
//! claiming read takes them while the call is made again; a retry on a
//! claiming subscription is not (it is left pending on purpose, for a
//! claiming read to take once idle, and holds nothing here).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use ruststream_core::{BrokerResult, EntryId};

use super::Env;

/// How often claims are refreshed: three times per `min_idle`, so one
/// failed refresh still leaves time for the next.
const REFRESHES_PER_MIN_IDLE: u32 = 3;

/// The shortest refresh interval, so that a tiny `min_idle` cannot make
/// the task refresh in a tight loop.
const SHORTEST: Duration = Duration::from_millis(10);

/// A refresh in flight, with the time it was sent.
type Refresh<'a> = (
    tokio::time::Instant,
    Pin<Box<dyn Future<Output = BrokerResult<u64>> + Send + 'a>>,
);

/// How many refresh intervals may pass without a refresh landing before
/// the claims count as behind ([`KeepAlive::behind`]): one missed refresh.
/// Below [`REFRESHES_PER_MIN_IDLE`], so the entries in hand are named to
/// reads well before their claims can lapse.
const BEHIND_AFTER: u32 = 2;

/// Refreshes in flight at once at most. A slow broker call must not hold
/// up the next refresh (the claims would lapse behind it), but a broker
/// that does not answer at all should not pile calls up without end.
const IN_FLIGHT: usize = 8;

/// How a read that takes idle entries reads while the subscription holds
/// entries ([`KeepAlive::idle_read`]).
pub(super) struct IdleRead {
    /// Whether it names the entries held (`ReadRequest::held`).
    pub(super) name_held: bool,
    /// The longest it may wait.
    pub(super) wait: Duration,
}

/// The keep-alive of one subscription's claims.
pub(super) struct KeepAlive<'a> {
    env: &'a Env,
    /// How often.
    every: Duration,
    tick: Pin<Box<tokio::time::Sleep>>,
    /// The refreshes in flight, oldest first.
    calls: Vec<Refresh<'a>>,
    /// When the newest refresh that landed was sent (or the keep-alive
    /// started, or found nothing to refresh): every entry held then has
    /// been idle at the broker no longer than since this time.
    fresh_since: tokio::time::Instant,
    /// When the newest refresh that failed was sent: the refreshes are
    /// failing while that is later than `fresh_since` (a refresh sent
    /// later that landed, or a tick with nothing to refresh, ends it).
    failed: Option<tokio::time::Instant>,
}

/// How often the subscription refreshes its claims: its keep-alive
/// interval, and at least [`REFRESHES_PER_MIN_IDLE`] times per `min_idle`.
pub(super) fn refresh_every(env: &Env) -> Duration {
    // A `new` subscription's entries can be claimed too, by a claiming or
    // reclaim subscription of the same group: `claimed_after` covers the
    // app's own (`docs/semantics.md`, Claims).
    let every = match env.claimed_after {
        Some(min_idle) => env.keep_alive.min(min_idle / REFRESHES_PER_MIN_IDLE),
        None => env.keep_alive,
    };
    every.max(SHORTEST)
}

/// How recently an entry's claim must have been refreshed (or the entry
/// delivered) for it to count as worked on by a live process: three
/// refresh intervals, so a process that missed one refresh (a slow broker
/// call) still counts as live. An own pending entry idle longer than this
/// was left by a process that is gone.
pub(super) fn live_window(env: &Env) -> Duration {
    refresh_every(env) * REFRESHES_PER_MIN_IDLE
}

impl<'a> KeepAlive<'a> {
    pub(super) fn new(env: &'a Env) -> Self {
        let every = refresh_every(env);
        KeepAlive {
            env,
            every,
            tick: Box::pin(tokio::time::sleep(every)),
            calls: Vec::new(),
            fresh_since: tokio::time::Instant::now(),
            failed: None,
        }
    }

    /// How a read that takes idle entries (claiming, reclaim) reads while
    /// the subscription holds entries. While the refreshes are failing or
    /// slow ([`KeepAlive::behind`]) it names what is held, for the broker
    /// to refresh first (`ReadRequest::held`), and waits one interval at
    /// most: an entry settled meanwhile (a retry left pending for a
    /// claiming read to take) must not be kept fresh by a list gone stale.
    /// Otherwise it names nothing and waits no longer than the claims stay
    /// fresh ([`KeepAlive::fresh_for`]; an interval once that has passed).
    pub(super) fn idle_read(&self) -> IdleRead {
        if self.behind() {
            return IdleRead {
                name_held: true,
                wait: self.every,
            };
        }
        let fresh_for = self.fresh_for();
        IdleRead {
            name_held: false,
            wait: if fresh_for.is_zero() {
                self.every
            } else {
                fresh_for
            },
        }
    }

    /// How long the claims on held entries stay safely fresh: until no
    /// refresh has landed for [`BEHIND_AFTER`] intervals; zero after that.
    /// A read that takes idle entries and names none waits no longer than
    /// this, so it cannot take back an entry whose claim lapsed while it
    /// waited.
    fn fresh_for(&self) -> Duration {
        (self.fresh_since + self.every * BEHIND_AFTER)
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Whether the refreshes are failing (one sent since the newest that
    /// landed failed, and no tick found nothing held since) or slow (the oldest in flight was sent more than an interval
    /// ago). A read that takes idle entries then names the entries in
    /// hand, and the broker refreshes those first (`ReadRequest::held`): so
    /// the subscription's own read never takes back, and counts a delivery
    /// for, an entry it still works on. (Only failing or slow refreshes
    /// count, not time alone: a paused clock moved on in one step is no
    /// reason to keep entries fresh that a retry left to be claimed.)
    fn behind(&self) -> bool {
        self.failed.is_some_and(|failed| failed >= self.fresh_since)
            || self
                .calls
                .first()
                .is_some_and(|(sent, _)| sent.elapsed() > self.every)
    }

    /// Polls the refresh in flight (its errors are logged: the next tick
    /// tries again) and the timer; ready when it is time to refresh.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let env = self.env;
        let (fresh_since, failed) = (&mut self.fresh_since, &mut self.failed);
        self.calls.retain_mut(|(sent, call)| {
            let Poll::Ready(result) = call.as_mut().poll(cx) else {
                return true;
            };
            match result {
                Ok(_) => *fresh_since = (*fresh_since).max(*sent),
                Err(error) => {
                    *failed = (*failed).max(Some(*sent));
                    group_event!(
                    warn,
                    env,
                    %error,
                        "could not refresh the claims on held entries; trying again at the next tick"
                    );
                }
            }
            false
        });
        self.tick.as_mut().poll(cx)
    }

    /// Refreshes the claims on `ids` (the entries the subscription holds)
    /// and sets the next tick.
    pub(super) fn refresh(&mut self, ids: Vec<EntryId>) {
        let now = tokio::time::Instant::now();
        self.tick.as_mut().reset(now + self.every);
        if ids.is_empty() {
            // Nothing held: nothing can lapse.
            self.fresh_since = now;
            return;
        }
        if self.calls.len() >= IN_FLIGHT {
            return;
        }
        let env = self.env;
        let call = Box::pin(async move {
            env.broker
                .extend_claim(env.stream(), env.group(), &env.consumer, &ids)
                .await
        });
        self.calls.push((now, call));
    }
}
