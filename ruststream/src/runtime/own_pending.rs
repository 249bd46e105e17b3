//! The consumer's own pending list, looked at beside the reads: what a
//! read must not leave behind, and what another process with the same
//! consumer name holds.
//!
//! - At start-up, and then every live window while another live process
//!   seems to share the consumer name, the subscription lists its own
//!   pending entries: fresh ones it does not hold are that process's (it
//!   warns once, and looks again); at a later look, stale ones are handed
//!   back to the group ([`TwinWatch`], `docs/guarantees.md`, "Shared
//!   consumer names").
//! - After a failed read on a `new` subscription, and at shutdown, entries
//!   pending under the consumer that its lanes do not hold are handed back
//!   ([`hand_back_own_strays`]).

use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use tokio::time::Instant;

use ruststream_core::{BrokerFuture, BrokerResult, EntryId, PendingEntry, ReadBatch};

use super::Env;

/// When the reader looks at its own pending list for entries a live
/// process sharing its consumer name works on.
pub(super) enum TwinLook {
    /// Before the first read.
    AtStart,
    /// Fresh entries were seen: look again when this fires.
    Armed(Pin<Box<tokio::time::Sleep>>),
    /// Look again as soon as every decision made has landed.
    Due,
    /// Nothing to watch.
    Off,
}

/// What one look at the own pending list found.
pub(super) struct Look {
    /// Entries refreshed within the live window that this subscription
    /// does not hold: another live process works on them.
    fresh: usize,
    /// Entries left unrefreshed longer, handed back to the group.
    handed_back: u64,
}

/// The watch for another live process sharing the consumer name.
pub(super) struct TwinWatch {
    pub(super) state: TwinLook,
    /// How recently a claim must have been refreshed to count as live.
    pub(super) window: Duration,
    /// Whether a live process sharing the name was warned about.
    warned: bool,
    /// When the subscription started.
    started: tokio::time::Instant,
}

impl TwinWatch {
    pub(super) fn new(window: Duration) -> Self {
        TwinWatch {
            state: TwinLook::AtStart,
            window,
            warned: false,
            started: tokio::time::Instant::now(),
        }
    }

    /// Which stale own pending entries a look hands back: on a claiming or
    /// reclaim subscription only those last delivered before it started
    /// (it leaves its own retries pending under its name, unrefreshed, on
    /// purpose, for a claiming read once `min_idle` has passed; those it
    /// left lately are known by id, the rest by this); on a `new` one, all.
    pub(super) fn delivered_before(&self, env: &Env) -> Option<tokio::time::Instant> {
        env.subscription
            .stream
            .retries_in_place()
            .then_some(self.started)
    }

    /// Looks again once the live window has passed, unless a look is
    /// already coming.
    pub(super) fn arm_if_off(&mut self) {
        if matches!(self.state, TwinLook::Off) {
            self.state = TwinLook::Armed(Box::pin(tokio::time::sleep(self.window)));
        }
    }

    /// Whether the timer of the next look fired (the look is then due).
    pub(super) fn poll_due(&mut self, cx: &mut Context<'_>) -> bool {
        if let TwinLook::Armed(timer) = &mut self.state
            && timer.as_mut().poll(cx).is_ready()
        {
            self.state = TwinLook::Due;
            return true;
        }
        false
    }

    /// Takes in what a look at the own pending list found: warns (once)
    /// about a live process that seems to share the consumer name, and
    /// looks again after the live window: on a claiming or reclaim
    /// subscription while the other process holds entries (its claiming
    /// reads take back what goes stale anyway), on a `new` one always, so
    /// that what it knows of another process stays current (its shutdown
    /// and its re-checks then leave that process's entries alone) and
    /// nothing stays stranded under its name for longer than a window.
    pub(super) fn looked(&mut self, env: &Env, result: BrokerResult<Look>) {
        let window = self.window;
        let look_again = match result {
            Ok(look) => {
                if look.handed_back > 0 {
                    group_event!(
                        warn,
                        env,
                        consumer = %env.consumer,
                        entries = look.handed_back,
                        "entries under this consumer name were left unrefreshed for the live window: handed back to the group"
                    );
                }
                if look.fresh > 0 && !self.warned {
                    self.warned = true;
                    group_event!(
                        warn,
                        env,
                        consumer = %env.consumer,
                        entries = look.fresh,
                        live_window = ?window,
                        "entries pending under this consumer name were worked on within the live window: another live process seems to use the name (name instances with RustStream::instance or RUSTSTREAM_INSTANCE); they are left to it and looked at again once the window has passed"
                    );
                } else if look.fresh == 0 && self.warned {
                    self.warned = false;
                    tracing::info!(
                        subscriber = env.name,
                        consumer = %env.consumer,
                        "no entries under this consumer name are worked on elsewhere any more"
                    );
                }
                env.counters.set_name_shared(look.fresh > 0);
                look.fresh > 0 || !env.subscription.stream.retries_in_place()
            }
            Err(error) => {
                group_event!(
                    warn,
                    env,
                    consumer = %env.consumer,
                    %error,
                    "could not list the own pending entries; looking again once the live window has passed"
                );
                true
            }
        };
        if look_again {
            self.state = TwinLook::Armed(Box::pin(tokio::time::sleep(window)));
        }
    }
}

/// Most entries a look at the own pending list takes in (the own pending
/// list of a `new` subscription is at most its read-ahead, plus what a
/// lost read handed out).
pub(super) const OWN_LIST: usize = 10_000;

/// Lists the consumer's own pending entries (a listing, which counts no
/// delivery) and hands back, owed at once, those held by it and not in
/// `holding`: entries a read handed out that nothing here will settle.
/// With `delivered_since`, only those delivered since then (see
/// [`own_strays`]). Returns how many were handed back. Used by the re-check
/// after a failed read and by the last look at shutdown.
pub(super) async fn hand_back_own_strays(
    env: &Env,
    holding: &[EntryId],
    delivered_since: Option<Instant>,
) -> BrokerResult<u64> {
    let strays: Vec<EntryId> = own_strays(env, holding, delivered_since)
        .await?
        .iter()
        .map(|p| p.id)
        .collect();
    hand_back(env, &strays).await
}

/// The consumer's own pending entries (a listing, which counts no
/// delivery) that are not in `holding` and, with `delivered_since`, were
/// last delivered since then. Owed entries belong to nobody and are not
/// listed.
///
/// A claiming or reclaim subscription leaves its own retries pending
/// under its name on purpose (the next claiming read takes them once
/// idle), so after a lost read only what was delivered since that read
/// was sent is a stray. The cut-off is measured when the listing has come
/// back, so an entry the lost read handed out always falls inside it (its
/// idle time is at most the time since the read was sent); a retry left
/// just before may fall inside too, and is then handed back early: one
/// retry sooner, never one lost.
async fn own_strays(
    env: &Env,
    holding: &[EntryId],
    delivered_since: Option<Instant>,
) -> BrokerResult<Vec<PendingEntry>> {
    let mut pending = env
        .broker
        .pending(
            env.stream(),
            env.group(),
            EntryId::ZERO,
            OWN_LIST,
            Some(&env.consumer),
        )
        .await?;
    let within = delivered_since.map(|since| since.elapsed().as_millis());
    let holding: std::collections::HashSet<&EntryId> = holding.iter().collect();
    pending.retain(|p| {
        p.consumer.is_some()
            && !holding.contains(&p.id)
            && within.is_none_or(|within| u128::from(p.idle_ms) <= within)
    });
    Ok(pending)
}

/// Hands `ids` back to the group, owed at once: the next read (of any
/// consumer) takes them, counted as redeliveries.
async fn hand_back(env: &Env, ids: &[EntryId]) -> BrokerResult<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    env.broker
        .retry(
            env.stream(),
            env.group(),
            ids,
            ruststream_core::Retry::After(Duration::ZERO),
        )
        .await
}

/// Looks at the own pending list for entries another live process with
/// this consumer name works on: those not in `holding` refreshed within
/// `window`. With `hand_back_stale`, entries not in `holding` left
/// unrefreshed longer are handed back to the group (their process is
/// gone); at start-up the recovery read takes those itself.
pub(super) fn look_for_a_twin(
    env: &Env,
    holding: Vec<EntryId>,
    window: Duration,
    hand_back_stale: bool,
    delivered_before: Option<tokio::time::Instant>,
) -> BrokerFuture<'_, Look> {
    Box::pin(async move {
        // `holding` includes the retries this subscription left pending in
        // place lately: its own, neither another process's nor strays.
        let strays = own_strays(env, &holding, None).await?;
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let (mut stale, fresh): (Vec<PendingEntry>, Vec<PendingEntry>) =
            strays.into_iter().partition(|p| p.idle_ms >= window_ms);
        // A stale one is handed back only if it was delivered before the
        // subscription started (idle at least as long as it has run,
        // measured once the listing is back): one delivered since is its
        // own, left to the claiming read. Fresh ones all count: another
        // process keeps them fresh, whenever it read them.
        if let Some(started) = delivered_before {
            let ran_ms = started.elapsed().as_millis();
            stale.retain(|p| u128::from(p.idle_ms) >= ran_ms);
        }
        let handed_back = if hand_back_stale {
            let stale: Vec<EntryId> = stale.iter().map(|p| p.id).collect();
            hand_back(env, &stale).await?
        } else {
            0
        };
        Ok(Look {
            fresh: fresh.len(),
            handed_back,
        })
    })
}

/// The re-check of a claiming or reclaim subscription: hands back the own
/// pending entries delivered since `sent` (see [`own_strays`]) that nobody
/// refreshes. Another live process using this consumer name (one not seen
/// by the last look, or forgotten since: its entries delivered after this
/// subscription started are not looked at) refreshes the claims of the
/// entries it runs every keep-alive interval, and they look just like a
/// lost read's. So the entries are listed twice, more than one interval
/// apart: one whose idle time grew by the time between the listings was
/// refreshed by no one, and is a stray. Reads pause meanwhile.
async fn hand_back_unrefreshed(env: &Env, holding: &[EntryId], sent: Instant) -> BrokerResult<u64> {
    let first = own_strays(env, holding, Some(sent)).await?;
    if first.is_empty() {
        return Ok(0);
    }
    let listed = Instant::now();
    let every = super::claims::refresh_every(env);
    tokio::time::sleep(every + every / 2).await;
    let second: std::collections::HashMap<EntryId, u64> = own_strays(env, holding, None)
        .await?
        .into_iter()
        .map(|p| (p.id, p.idle_ms))
        .collect();
    let elapsed = u64::try_from(listed.elapsed().as_millis()).unwrap_or(u64::MAX);
    // A refresh sets the idle time back to 0: within the wait, it lands at
    // least half an interval before the second listing.
    let slack = u64::try_from((every / 4).as_millis()).unwrap_or(u64::MAX);
    let unrefreshed: Vec<EntryId> = first
        .iter()
        .filter(|p| {
            second
                .get(&p.id)
                .is_some_and(|idle| idle.saturating_add(slack) >= p.idle_ms.saturating_add(elapsed))
        })
        .map(|p| p.id)
        .collect();
    hand_back(env, &unrefreshed).await
}

/// The re-check after a failed read sent at `sent`: hands back the strays
/// a lost reply left (see [`hand_back_own_strays`]; on a claiming or
/// reclaim subscription, [`hand_back_unrefreshed`]), then resolves to an
/// empty batch, as a read that found nothing.
pub(super) fn recheck_after_a_lost_read(
    env: &Env,
    holding: Vec<EntryId>,
    sent: Instant,
) -> BrokerFuture<'_, ReadBatch> {
    Box::pin(async move {
        if env.counters.name_shared() {
            // The strays may be the other process's running entries: leave
            // them; the next look hands back whatever goes stale.
            return Ok(ReadBatch::default());
        }
        let n = if env.subscription.stream.retries_in_place() {
            hand_back_unrefreshed(env, &holding, sent).await?
        } else {
            hand_back_own_strays(env, &holding, None).await?
        };
        if n > 0 {
            group_event!(
                warn,
                env,
                entries = n,
                "entries a read whose reply was lost had handed out: handed back"
            );
        }
        Ok(ReadBatch::default())
    })
}
