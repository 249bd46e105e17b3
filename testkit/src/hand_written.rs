//! Subscribers written by hand, for tests whose handler carries state
//! (what `#[subscriber]` on a free function cannot hold).

use std::future::Future;

use ruststream::{Context, Settle, Subscriber, SubscriberInfo, Subscription};

/// What a subscriber written by hand does with each delivery.
pub trait Handle: Send + Sync + 'static {
    /// Handles the delivery `ctx` is about; the future settles it.
    fn start<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a;
}

/// A subscriber written by hand: its name, its subscription, and the
/// handler (with its state) that handles each delivery.
pub struct HandWritten<H> {
    /// The subscriber's name (in logs and metrics).
    pub name: &'static str,
    /// What it reads and how.
    pub subscription: Subscription,
    /// What it does with each delivery.
    pub handler: H,
}

impl<H: Handle> Subscriber for HandWritten<H> {
    fn info(&self) -> SubscriberInfo {
        SubscriberInfo {
            name: self.name,
            module: module_path!(),
            file: file!(),
            line: line!(),
        }
    }

    fn subscription(&self) -> Subscription {
        self.subscription.clone()
    }

    fn handle<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        self.handler.start(ctx)
    }
}
