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

type Refresh<'a> = Pin<Box<dyn Future<Output = BrokerResult<u64>> + Send + 'a>>;

/// Refreshes in flight at once at most. A slow broker call must not hold
/// up the next refresh (the claims would lapse behind it), but a broker
/// that does not answer at all should not pile calls up without end.
const IN_FLIGHT: usize = 8;

/// The keep-alive of one subscription's claims.
pub(super) struct KeepAlive<'a> {
    env: &'a Env,
    /// How often.
    every: Duration,
    tick: Pin<Box<tokio::time::Sleep>>,
    /// The refreshes in flight, oldest first.
    calls: Vec<Refresh<'a>>,
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
        }
    }

    /// Polls the refresh in flight (its errors are logged: the next tick
    /// tries again) and the timer; ready when it is time to refresh.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let env = self.env;
        self.calls.retain_mut(|call| {
            let Poll::Ready(result) = call.as_mut().poll(cx) else {
                return true;
            };
            if let Err(error) = result {
                group_event!(
                    warn,
                    env,
                    %error,
                    "could not refresh the claims on held entries; trying again at the next tick"
                );
            }
            false
        });
        self.tick.as_mut().poll(cx)
    }

    /// Refreshes the claims on `ids` (the entries the subscription holds)
    /// and sets the next tick.
    pub(super) fn refresh(&mut self, ids: Vec<EntryId>) {
        self.tick
            .as_mut()
            .reset(tokio::time::Instant::now() + self.every);
        if ids.is_empty() || self.calls.len() >= IN_FLIGHT {
            return;
        }
        let env = self.env;
        self.calls.push(Box::pin(async move {
            env.broker
                .extend_claim(env.stream(), env.group(), &env.consumer, &ids)
                .await
        }));
    }
}
