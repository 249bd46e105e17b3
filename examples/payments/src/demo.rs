//! `payments demo`: publishes sample payments, prints each posting,
//! screening and retry as it happens, and exits with a summary once every
//! payment is settled.
//!
//! The demo runs on tokio's paused clock: time moves from one timer to the
//! next as soon as the service is idle, so the 30-second claim timeout of a
//! locked account passes at once while the printed times show the
//! simulated seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ruststream::{Broker, Handled, Observer, Publisher, Running, Settlement, StartError};
use tokio::time::Instant;

use crate::{MIN_IDLE, Migrations, Payment, Screened, service_for};

/// The sample payments: three ordinary accounts, one account under
/// migration, one suspiciously large payment.
pub fn sample_payments() -> Vec<Payment> {
    let p = |id, account: &str, amount_cents| Payment {
        id,
        account: account.to_owned(),
        amount_cents,
    };
    vec![
        p(1, "acct-ana", 12_50),
        p(2, "acct-ben", 8_00),
        p(3, "acct-ana", 42_00),
        p(4, "migrating-cy", 99_00),
        p(5, "acct-ben", 250_000_000),
        p(6, "acct-ana", 3_10),
        p(7, "acct-dee", 15_00),
        p(8, "acct-ben", 61_20),
    ]
}

/// When the migration of the locked sample account finishes.
pub const MIGRATION_DONE_AFTER: Duration = Duration::from_secs(45);

/// What the demo saw.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Payments posted to the ledger.
    pub posted: u64,
    /// Ledger deliveries retried (locked accounts).
    pub retried: u64,
    /// Payments screened.
    pub screened: u64,
    /// Screened payments flagged as suspicious.
    pub suspicious: u64,
    /// Simulated time until everything was settled.
    pub took: Duration,
}

struct Printer {
    started: Instant,
    posted: AtomicU64,
    retried: AtomicU64,
    screened: AtomicU64,
}

impl Printer {
    fn line(&self, group: &str, what: &str, payment: &Payment, note: &str) {
        let t = self.started.elapsed().as_secs_f64();
        println!(
            "[t+{t:5.1}s] {group:<6} {what:<9} payment {:<2} {:<13} {:>12}  {note}",
            payment.id,
            payment.account,
            format!(
                "{}.{:02}",
                payment.amount_cents / 100,
                payment.amount_cents % 100
            ),
        );
    }
}

impl Observer for Printer {
    fn handled(&self, event: &Handled<'_>) {
        let Ok(payment) = serde_json::from_slice::<Payment>(event.delivery.entry.payload()) else {
            let what = match event.settlement {
                Settlement::DeadLettered { reason } => format!("dead letter: {reason}"),
                other => format!("{other:?}"),
            };
            println!(
                "[t+{:5.1}s] {:<6} not a payment  {what}",
                self.started.elapsed().as_secs_f64(),
                event.group
            );
            return;
        };
        let count = event.delivery.delivery_count;
        let again = if count > 0 {
            format!("(delivery {})", count + 1)
        } else {
            String::new()
        };
        match (event.group, event.settlement) {
            ("ledger", Settlement::Acked) => {
                self.posted.fetch_add(1, Ordering::Relaxed);
                self.line("ledger", "posted", &payment, &again);
            }
            ("ledger", Settlement::RetriedAfter(delay)) => {
                self.retried.fetch_add(1, Ordering::Relaxed);
                let note = format!("account locked: back in {}s {again}", delay.as_secs());
                self.line("ledger", "retry", &payment, &note);
            }
            ("ledger", Settlement::Retried { .. }) => {
                self.retried.fetch_add(1, Ordering::Relaxed);
                let note = format!(
                    "account locked: left pending, back after {}s idle {again}",
                    MIN_IDLE.as_secs()
                );
                self.line("ledger", "retry", &payment, &note);
            }
            ("fraud", Settlement::Replied { stream }) => {
                self.screened.fetch_add(1, Ordering::Relaxed);
                let verdict = if payment.amount_cents > crate::SUSPICIOUS_CENTS {
                    "SUSPICIOUS"
                } else {
                    "ok"
                };
                self.line(
                    "fraud",
                    "screened",
                    &payment,
                    &format!("{verdict} -> {stream}"),
                );
            }
            (group, other) => {
                self.line(group, "settled", &payment, &format!("{other:?}"));
            }
        }
    }
}

/// Why the demo failed.
#[derive(Debug)]
pub enum DemoError {
    /// The service did not start.
    Start(StartError),
    /// Publishing a sample failed.
    Publish(ruststream::PublishError),
    /// The broker already holds the demo's streams, left by an earlier run
    /// (the demo would count their entries too and never add up).
    Leftover(String),
    /// The broker could not say whether it holds the demo's streams.
    Broker(ruststream::BrokerError),
    /// Not everything settled within the simulated time limit.
    Stuck(String),
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::Start(e) => write!(f, "the service did not start: {e}"),
            DemoError::Publish(e) => write!(f, "publishing a sample payment failed: {e}"),
            DemoError::Leftover(what) => write!(
                f,
                "the broker holds data from an earlier run ({what}); the demo needs an empty one"
            ),
            DemoError::Broker(e) => write!(f, "cannot look at the broker: {e}"),
            DemoError::Stuck(what) => write!(f, "the demo did not settle: {what}"),
        }
    }
}

impl std::error::Error for DemoError {}

/// Runs the demo on `broker` (on a paused clock: call it from a
/// current-thread runtime with the clock paused). The broker must not hold
/// the demo's streams yet: see [`check_empty`].
pub async fn run(broker: Arc<dyn Broker>) -> Result<Summary, DemoError> {
    check_empty(&*broker).await?;
    let started = Instant::now();
    let printer = Arc::new(Printer {
        started,
        posted: AtomicU64::new(0),
        retried: AtomicU64::new(0),
        screened: AtomicU64::new(0),
    });
    let shared = Arc::clone(&broker);
    let running = service_for(Arc::clone(&shared))
        .await
        .observe(Arc::clone(&printer) as Arc<dyn Observer>)
        .start()
        .await
        .map_err(DemoError::Start)?;

    let samples = sample_payments();
    println!(
        "[t+  0.0s] publishing {} payments to stream \"payments\"",
        samples.len()
    );
    let publisher = Publisher::new(Arc::clone(&shared));
    for payment in &samples {
        publisher
            .publish(payment)
            .partition_key(&payment.account)
            .await
            .map_err(DemoError::Publish)?;
    }

    // An entry no subscriber can decode: each group dead-letters it, and
    // the walkthrough in the README redrives it with the command-line tool.
    println!("[t+  0.0s] publishing an entry that is not a payment (it has no amount)");
    publisher
        .publish_raw(
            "payments",
            ruststream::Message::new(br#"{"id":9,"account":"acct-eve"}"#.to_vec()),
        )
        .await
        .map_err(|e| DemoError::Publish(e.into()))?;

    let migration = tokio::spawn(async move {
        tokio::time::sleep(MIGRATION_DONE_AFTER).await;
        Migrations::global().finish("migrating-cy");
        println!(
            "[t+{:5.1}s] migration of account migrating-cy finished",
            started.elapsed().as_secs_f64()
        );
    });

    let settled = wait_until_settled(&*broker, samples.len() as u64).await;
    migration.abort();
    let summary = Summary {
        posted: printer.posted.load(Ordering::Relaxed),
        retried: printer.retried.load(Ordering::Relaxed),
        screened: printer.screened.load(Ordering::Relaxed),
        suspicious: suspicious_count(&*broker).await,
        took: started.elapsed(),
    };
    shutdown(running).await;
    settled.map(|()| summary)
}

/// Refuses to run the demo on a broker that already holds its streams, as
/// a `--data` directory or a Redis database an earlier run used does:
/// their old entries would be screened again and the count of screened
/// payments would never match, so the demo would wait for nothing.
pub async fn check_empty(broker: &dyn Broker) -> Result<(), DemoError> {
    for stream in ["payments", "payments.screened"] {
        match broker.stream_info(stream).await {
            Ok(None) => {}
            Ok(Some(info)) => {
                let groups = if info.groups.is_empty() {
                    String::new()
                } else {
                    format!(" and groups {}", info.groups.join(", "))
                };
                return Err(DemoError::Leftover(format!(
                    "stream {stream:?} exists, with {} entries{groups}",
                    info.length
                )));
            }
            Err(e) => return Err(DemoError::Broker(e)),
        }
    }
    Ok(())
}

async fn shutdown(running: Running) {
    running.shutdown_within(Duration::from_secs(5)).await;
}

async fn suspicious_count(broker: &dyn Broker) -> u64 {
    let entries = broker
        .range(
            "payments.screened",
            ruststream::EntryId::ZERO,
            ruststream::EntryId::MAX,
            usize::MAX,
        )
        .await
        .unwrap_or_default();
    entries
        .iter()
        .filter_map(|e| serde_json::from_slice::<Screened>(e.payload()).ok())
        .filter(|s| s.suspicious)
        .count() as u64
}

/// Waits (in simulated time) until both groups have nothing pending or
/// undelivered and every payment has been screened.
async fn wait_until_settled(broker: &dyn Broker, payments: u64) -> Result<(), DemoError> {
    let limit = Duration::from_secs(600);
    let started = Instant::now();
    loop {
        let ledger = broker.group_info("payments", "ledger").await;
        let fraud = broker.group_info("payments", "fraud").await;
        let screened = broker
            .stream_info("payments.screened")
            .await
            .ok()
            .flatten()
            .map_or(0, |i| i.length);
        if let (Ok(l), Ok(f)) = (&ledger, &fraud) {
            if l.pending == 0 && l.lag == 0 && f.pending == 0 && f.lag == 0 && screened == payments
            {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(DemoError::Stuck(format!(
                    "after {}s: ledger pending {} lag {}, fraud pending {} lag {}, screened {screened}/{payments}",
                    limit.as_secs(),
                    l.pending,
                    l.lag,
                    f.pending,
                    f.lag
                )));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
