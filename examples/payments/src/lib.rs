//! The payments service of the ruststream guide.
//!
//! Payments arrive on the stream `payments`. The `ledger` group posts each
//! one: `workers(8, by_key)` keeps each account's payments in order, and its
//! claiming read takes over payments a stopped worker left pending once they
//! have been idle [`MIN_IDLE`]. A payment for an account under migration is
//! retried: it stays pending and comes back every `MIN_IDLE` until the
//! migration is over. The `fraud` group, added later, screens every payment
//! from the beginning of the stream and replies with a [`Screened`] on
//! `payments.screened`.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use ruststream::prelude::*;

pub mod demo;

/// Longer than the slowest posting ever takes: a payment idle this long
/// belongs to no live worker.
pub const MIN_IDLE: Duration = Duration::from_secs(30);

/// Payments above this many cents are flagged by the fraud screen.
pub const SUSPICIOUS_CENTS: u64 = 1_000_000;

/// A payment to post.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "payments")]
pub struct Payment {
    /// The payment's id.
    pub id: u64,
    /// The account it is posted to. Accounts named `migrating-...` are
    /// locked while [`Migrations`] says so.
    pub account: String,
    /// The amount, in cents.
    pub amount_cents: u64,
}

/// The fraud screen's verdict on a payment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "payments.screened")]
pub struct Screened {
    /// The payment screened.
    pub payment_id: u64,
    /// Whether it looks suspicious.
    pub suspicious: bool,
}

/// Accounts whose migration has finished. Payments for a `migrating-`
/// account are left pending until its migration is finished here.
#[derive(Debug, Default)]
pub struct Migrations {
    finished: Mutex<BTreeSet<String>>,
}

static MIGRATIONS: Migrations = Migrations {
    finished: Mutex::new(BTreeSet::new()),
};

impl Migrations {
    /// The process-wide migration register.
    pub fn global() -> &'static Migrations {
        &MIGRATIONS
    }

    /// Marks `account`'s migration as finished.
    pub fn finish(&self, account: &str) {
        self.lock().insert(account.to_owned());
    }

    /// Whether `account` is locked by a migration still under way.
    pub fn is_locked(&self, account: &str) -> bool {
        account.starts_with("migrating-") && !self.lock().contains(account)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.finished.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Posts a payment to the ledger, or leaves it pending while its account
/// is being migrated.
#[subscriber(
    RedisStream::claiming("payments", MIN_IDLE).group("ledger"),
    workers(8, by_key)
)]
pub async fn post_payment(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
    let earlier_deliveries = ctx.headers().get_str(DELIVERY_COUNT_HEADER).unwrap_or("0");
    if Migrations::global().is_locked(&payment.account) {
        tracing::warn!(
            payment.id,
            earlier_deliveries,
            "account locked, payment left pending"
        );
        return HandlerOutcome::retry();
    }
    tracing::info!(payment.id, earlier_deliveries, "payment posted");
    HandlerOutcome::ack()
}

/// Screens a payment and replies with the verdict.
#[subscriber(
    RedisStream::new("payments")
        .group("fraud")
        .start_id(StreamStart::Beginning),
    reply
)]
pub async fn screen_payment(payment: &Payment) -> Screened {
    Screened {
        payment_id: payment.id,
        suspicious: payment.amount_cents > SUSPICIOUS_CENTS,
    }
}

/// Before Redis 8.4 there is no claiming read, so the ledger is two
/// subscriptions on the same group: this one takes new payments, and
/// [`recover_payment`] takes over the ones a stopped worker left pending.
/// A `new` subscription retries by appending a copy that comes back at
/// once, so a locked account waits with `retry_after` instead.
#[subscriber(
    RedisStream::new("payments").group("ledger"),
    workers(8, by_key)
)]
pub async fn post_new_payment(payment: &Payment) -> HandlerOutcome {
    post_or_wait(payment, 0)
}

/// Takes over payments left pending by a stopped ledger worker once they
/// have been idle [`MIN_IDLE`] (Redis `XAUTOCLAIM`).
#[subscriber(RedisStream::reclaim("payments", MIN_IDLE).group("ledger"))]
pub async fn recover_payment(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
    tracing::warn!(
        payment.id,
        deliveries = ctx.delivery_count(),
        "payment recovered from a stopped worker"
    );
    post_or_wait(payment, ctx.delivery_count())
}

fn post_or_wait(payment: &Payment, earlier_deliveries: u32) -> HandlerOutcome {
    if Migrations::global().is_locked(&payment.account) {
        tracing::warn!(
            payment.id,
            earlier_deliveries,
            "account locked, payment back in MIN_IDLE"
        );
        return HandlerOutcome::retry_after(MIN_IDLE);
    }
    tracing::info!(payment.id, earlier_deliveries, "payment posted");
    HandlerOutcome::ack()
}

/// The service on `broker`: the ledger and the fraud screen.
pub fn service(broker: Arc<dyn Broker>) -> RustStream {
    RustStream::new(AppInfo::new("payments", env!("CARGO_PKG_VERSION"))).with_shared_broker(
        broker,
        |b| {
            b.include(post_payment);
            b.include(screen_payment).out_reply(Publish);
        },
    )
}

/// The service for a Redis server older than 8.4 (no claiming read): the
/// ledger as [`post_new_payment`] plus [`recover_payment`].
pub fn service_before_8_4(broker: Arc<dyn Broker>) -> RustStream {
    RustStream::new(AppInfo::new("payments", env!("CARGO_PKG_VERSION"))).with_shared_broker(
        broker,
        |b| {
            b.include(post_new_payment);
            b.include(recover_payment);
            b.include(screen_payment).out_reply(Publish);
        },
    )
}

/// The service that `broker` can serve: [`service`] if it has claiming
/// reads, else [`service_before_8_4`] (with a line saying so).
pub async fn service_for(broker: Arc<dyn Broker>) -> RustStream {
    let claiming = ruststream::ReadMode::Claiming { min_idle: MIN_IDLE };
    match broker.check_mode(claiming).await {
        Ok(()) => service(broker),
        Err(why) => {
            println!("note: {why}");
            println!("note: running the ledger as `new` + `reclaim` instead");
            service_before_8_4(broker)
        }
    }
}
