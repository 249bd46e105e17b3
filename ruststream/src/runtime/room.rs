//! The reader's wait for room under the read-ahead bound: the settler's
//! signal (`Outbox::settled`) that decisions reached the broker.
//!
//! The wait is armed once per read batch on a busy subscription, so it is
//! kept in one pinned box for the subscription's life and refilled in place
//! rather than boxed anew each time (one allocation per read fewer).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use tokio::sync::futures::Notified;

use super::settle::Outbox;

/// The settler's signal, armed or not.
pub(super) struct SettledSignal<'a> {
    outbox: &'a Outbox,
    /// The wait; registered with the outbox only once polled while armed.
    wait: Pin<Box<Notified<'a>>>,
    armed: bool,
}

impl<'a> SettledSignal<'a> {
    /// A signal on `outbox`'s settles, not armed.
    pub(super) fn new(outbox: &'a Outbox) -> Self {
        SettledSignal {
            outbox,
            wait: Box::pin(outbox.settled.notified()),
            armed: false,
        }
    }

    /// Arms the signal, unless it is armed already: the next settle after
    /// this ends the wait (a settle before it, since the last wait ended,
    /// too: `Notify` keeps one permit).
    pub(super) fn arm(&mut self) {
        if !self.armed {
            self.wait.set(self.outbox.settled.notified());
            self.armed = true;
        }
    }

    /// Disarms the signal: the wait is dropped (it no longer holds a place
    /// among the outbox's waiters).
    pub(super) fn disarm(&mut self) {
        if self.armed {
            self.wait.set(self.outbox.settled.notified());
            self.armed = false;
        }
    }

    /// Polls the armed signal; true (and disarmed) once it has fired.
    #[inline]
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.armed || self.wait.as_mut().poll(cx).is_pending() {
            return false;
        }
        self.armed = false;
        true
    }
}
