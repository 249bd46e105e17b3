//! Subscribers written by hand, for tests whose handler carries state
//! (what `#[subscriber]` on a free function cannot hold).

use std::future::Future;
use std::panic::Location;

use ruststream::{Context, Settle, Subscriber, SubscriberInfo, Subscription};

/// What a subscriber written by hand does with each delivery.
pub trait Handle: Send + Sync + 'static {
    /// Handles the delivery `ctx` is about; the future settles it.
    fn start<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a;
}

/// A subscriber written by hand: its name, its subscription, and the
/// handler (with its state) that handles each delivery. Made with
/// [`HandWritten::new`], which notes where, for start-up errors.
pub struct HandWritten<H> {
    /// The subscriber's name (in logs and metrics).
    pub name: &'static str,
    /// What it reads and how.
    pub subscription: Subscription,
    /// What it does with each delivery.
    pub handler: H,
    /// Where it was made: the file and line start-up errors name.
    made_at: &'static Location<'static>,
}

impl<H: Handle> HandWritten<H> {
    /// A subscriber named `name` reading as `subscription`, handled by
    /// `handler`. An error starting it names the file and line of this
    /// call, as `#[subscriber]` names its function's.
    #[track_caller]
    pub fn new(name: &'static str, subscription: Subscription, handler: H) -> Self {
        HandWritten {
            name,
            subscription,
            handler,
            made_at: Location::caller(),
        }
    }
}

impl<H: Handle> Subscriber for HandWritten<H> {
    fn info(&self) -> SubscriberInfo {
        SubscriberInfo {
            name: self.name,
            module: module_path!(),
            file: self.made_at.file(),
            line: self.made_at.line(),
        }
    }

    fn subscription(&self) -> Subscription {
        self.subscription.clone()
    }

    fn handle<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        self.handler.start(ctx)
    }
}
