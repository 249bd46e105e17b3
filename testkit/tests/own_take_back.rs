//! A claiming subscription's own read can hand out again an entry this
//! same process still holds: a claiming read takes any entry idle
//! `min_idle`, its own consumer's included, and a claim lapses while acks
//! keep failing or the broker is away. Such an entry must not run again:
//! not twice at once, not after its key's later entries, and not into
//! `max_deliveries` (`docs/guarantees.md`, "Under faults": own take-backs).

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::{HandlerOutcome, PARTITION_KEY_HEADER, Running, Stream, Subscription};
use ruststream_core::{
    Broker, BrokerFuture, BrokerResult, DeadLetter, EntryId, Message, ReadBatch, ReadRequest,
};
use ruststream_memory::MemoryBroker;
use ruststream_testkit::faults::{CallKind, Fault, FaultyBroker};
use support::recorder::{Record, Recorder, ack};

const MIN_IDLE: Duration = Duration::from_millis(300);

struct Setup {
    inner: MemoryBroker,
    faults: Arc<FaultyBroker>,
    app: Option<Running>,
    record: Record,
}

/// One app (one consumer) on a memory broker wrapped in the fault injector,
/// with one claiming subscription (`min_idle` 300 ms).
impl Setup {
    /// The broker goes away for `d`: reads, listings and every settle fail.
    fn broker_away_for(&self, d: Duration) {
        let mut kinds = vec![CallKind::Read, CallKind::Pending];
        kinds.extend(CallKind::SETTLES);
        self.faults.outage(&kinds, d);
    }

    /// Group `g`'s dead letters on `s`.
    async fn dead_letters(&self, s: &str) -> Vec<DeadLetter> {
        let dead = self.inner.dead_letters(s, "g", EntryId::ZERO, 10);
        dead.await.unwrap()
    }

    /// Fails unless group `g` dead-lettered nothing on `s`, with the runs
    /// and the dead letters' reasons.
    async fn assert_nothing_dead_lettered(&self, s: &str) {
        let reasons: Vec<String> = self
            .dead_letters(s)
            .await
            .into_iter()
            .map(|d| d.reason)
            .collect();
        assert!(
            reasons.is_empty(),
            "runs {:?}: {reasons:?}",
            self.record.texts()
        );
    }

    /// Lets the app run for 20 s (paused clock), then shuts it down.
    async fn run_out(&mut self) {
        tokio::time::sleep(Duration::from_secs(20)).await;
        if let Some(app) = self.app.take() {
            app.shutdown().await;
        }
    }
}

async fn setup(
    subscription: Subscription,
    takes: fn(&str) -> Duration,
    outcome: fn(&str, u32) -> HandlerOutcome,
) -> Setup {
    let inner = MemoryBroker::new();
    let faults = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 7));
    let record = Record::default();
    let recorder = Recorder {
        who: "c",
        t0: tokio::time::Instant::now(),
        takes,
        outcome,
        record: record.clone(),
    };
    let app = recorder.start_on(faults.clone(), subscription).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    Setup {
        inner,
        faults,
        app: Some(app),
        record,
    }
}

/// Group `g`'s claiming subscription of `s` (`min_idle` [`MIN_IDLE`]),
/// `workers(1, by_key)`.
fn keyed_claiming(s: &str) -> Subscription {
    Subscription::new(Stream::claiming(s, MIN_IDLE).group("g"))
        .workers(1)
        .by_key()
}

fn keyed(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec()).with_header(PARTITION_KEY_HEADER, "K")
}

/// Key K: e0 (acked at once), then e1 (2 s), on `workers(1, by_key)`.
/// Acks are refused for 3 s from just before they are read (reads work).
/// Returns the runs and the dead letters afterwards.
async fn key_k_with_acks_refused(
    max_deliveries: Option<u32>,
    whole_outage: bool,
) -> (Vec<(String, u32)>, Vec<DeadLetter>) {
    let s = "take-back-ack-refused";
    let mut subscription = keyed_claiming(s);
    if let Some(max) = max_deliveries {
        subscription = subscription.max_deliveries(max);
    }
    let takes = |text: &str| {
        if text == "e1" {
            Duration::from_secs(2)
        } else {
            Duration::ZERO
        }
    };
    let mut t = setup(subscription, takes, ack).await;
    t.faults.outage(&[CallKind::Ack], Duration::from_secs(3));
    t.inner.publish(s, keyed("e0")).await.unwrap();
    t.inner.publish(s, keyed("e1")).await.unwrap();
    if whole_outage {
        // e0 has run (its ack is failing), e1 runs: now the broker goes away
        // altogether for 3 s (reads, listings and every settle fail).
        tokio::time::sleep(Duration::from_millis(1)).await;
        t.broker_away_for(Duration::from_secs(3));
    }
    t.run_out().await;
    let dead = t.dead_letters(s).await;
    let runs = t.record.texts();
    eprintln!("runs {runs:?}; injected {}", t.faults.injected());
    (runs, dead)
}

/// One consumer, `workers(1, by_key)`: e0 then e1 of one key. A refused ack
/// is "applied again until it lands"; meanwhile the subscription's own
/// claiming read takes e0 back (its claim is not refreshed while its ack
/// waits) and runs it again after e1: the key runs out of order on one
/// consumer, and e0 runs three times though it was acked each time.
#[tokio::test(start_paused = true)]
async fn refused_acks_make_one_consumer_rerun_a_key_out_of_order() {
    let (runs, _) = key_k_with_acks_refused(None, false).await;
    let expected = [("e0".to_owned(), 0), ("e1".to_owned(), 0)];
    assert_eq!(runs, expected, "key K on one consumer");
}

/// The same through a whole outage of the broker of ten times `min_idle`
/// (reads fail too), then recovery.
#[tokio::test(start_paused = true)]
async fn an_outage_makes_one_consumer_rerun_a_key_out_of_order() {
    let (runs, _) = key_k_with_acks_refused(None, true).await;
    let order: Vec<&str> = runs.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "key K ran out of order on one consumer: {runs:?}"
    );
}

/// With `max_deliveries(2)`, entries whose handler acked every delivery end
/// dead-lettered, because each take-back by the own claiming read counted
/// a delivery while the ack waited.
#[tokio::test(start_paused = true)]
async fn refused_acks_dead_letter_entries_whose_every_run_acked() {
    let (runs, dead) = key_k_with_acks_refused(Some(2), false).await;
    assert!(
        dead.is_empty(),
        "dead-lettered though every run acked (runs {runs:?}): {:?}",
        dead.iter().map(|d| d.reason.clone()).collect::<Vec<_>>()
    );
}

/// One process, `workers(2)` (no key): a 5 s handler runs when the broker
/// goes away for 2 s (its claim refreshes fail). After the outage the
/// subscription's own claiming read takes the entry back and a second lane
/// starts it while the first still runs it.
#[tokio::test(start_paused = true)]
async fn one_process_runs_an_entry_twice_at_once_after_an_outage() {
    let s = "take-back-overlap";
    let subscription = Subscription::new(Stream::claiming(s, MIN_IDLE).group("g")).workers(2);
    let mut t = setup(subscription, |_| Duration::from_secs(5), ack).await;
    t.inner
        .publish(s, Message::new(b"slow".to_vec()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    t.broker_away_for(Duration::from_secs(2));
    t.run_out().await;
    let overlaps = t.record.overlaps();
    let runs = t.record.texts();
    assert!(
        overlaps.is_empty(),
        "started again while this process still runs it: {overlaps:?}; runs {runs:?}; injected {}",
        t.faults.injected()
    );
}

/// The other side of the guard: a delayed retry that has landed makes its
/// entry owed, and a read hands it out again while a dead letter decided
/// in the same wake is still being made again (dead letters refused for
/// 2 s). The entry is not in hand any more: it runs again at once. (Left
/// out as "in hand", a `new` subscription would never read it again.)
#[tokio::test(start_paused = true)]
async fn an_entry_owed_again_runs_while_the_rest_of_its_batch_waits() {
    let s = "take-back-owed";
    let subscription = Subscription::new(Stream::new(s).group("g")).workers(2);
    let outcome = |text: &str, count: u32| match (text, count) {
        ("x", 0) => HandlerOutcome::retry_after(Duration::from_millis(10)),
        ("y", _) => HandlerOutcome::dead_letter("poison"),
        _ => HandlerOutcome::ack(),
    };
    let mut t = setup(subscription, |_| Duration::ZERO, outcome).await;
    t.faults
        .outage(&[CallKind::DeadLetter], Duration::from_secs(2));
    let batch = vec![Message::new(b"x".to_vec()), Message::new(b"y".to_vec())];
    t.inner.publish_batch(s, batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs = t.record.texts();
    assert!(
        runs.contains(&("x".to_owned(), 1)),
        "x, owed again after 10 ms, ran again while y's dead letter waited: {runs:?}"
    );
    t.run_out().await;
    let info = t.inner.group_info(s, "g").await.unwrap();
    assert_eq!((info.pending, info.lag), (0, 0), "{info:?}");
}

/// Claim refreshes that are slow (each waits up to 400 ms: longer than the
/// refresh interval of 100 ms) but answer, while acks are refused for 3 s:
/// refreshes do not wait for each other, so the entry's claim holds, no
/// claiming read takes it back, and `max_deliveries(3)` does not
/// dead-letter an entry whose one run acked. (One refresh at a time, the
/// claim lapsed behind them.)
#[tokio::test(start_paused = true)]
async fn slow_refreshes_keep_an_acked_entrys_claim_while_its_ack_waits() {
    let s = "take-back-slow-refresh";
    let subscription = keyed_claiming(s).max_deliveries(3);
    let mut t = setup(subscription, |_| Duration::ZERO, ack).await;
    let slow = Fault::Delay(Duration::from_millis(400));
    t.faults.set_rate(&[CallKind::ExtendClaim], slow, 1.0);
    t.faults.outage(&[CallKind::Ack], Duration::from_secs(3));
    t.inner.publish(s, keyed("e0")).await.unwrap();
    t.run_out().await;
    t.assert_nothing_dead_lettered(s).await;
    assert_eq!(t.record.texts(), [("e0".to_owned(), 0)]);
}

/// Claim refreshes refused for 3 s while reads work, and the ack of e0
/// refused as long: e0's claim lapses while it is in hand. The
/// subscription's own claiming reads name what it holds once its
/// refreshes are behind, and the broker refreshes those first, so no read
/// takes e0 back and counts a delivery: `max_deliveries(2)` does not
/// dead-letter an entry whose one run acked, and the broker's count stays
/// at that one delivery. (Before, every read after `min_idle` counted one,
/// and the second dead-lettered e0.)
#[tokio::test(start_paused = true)]
async fn refused_refreshes_do_not_count_deliveries_for_an_entry_in_hand() {
    let s = "take-back-refused-refresh";
    let subscription = keyed_claiming(s).max_deliveries(2);
    let mut t = setup(subscription, |_| Duration::ZERO, ack).await;
    t.faults.outage(
        &[CallKind::Ack, CallKind::ExtendClaim],
        Duration::from_secs(3),
    );
    t.inner.publish(s, keyed("e0")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pending = t
        .inner
        .pending(s, "g", EntryId::ZERO, 10, None)
        .await
        .unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|p| p.times_delivered)
            .collect::<Vec<_>>(),
        [1],
        "e0 in hand, its ack refused: delivered once"
    );
    t.run_out().await;
    t.assert_nothing_dead_lettered(s).await;
    assert_eq!(t.record.texts(), [("e0".to_owned(), 0)]);
    let info = t.inner.group_info(s, "g").await.unwrap();
    assert_eq!((info.pending, info.lag), (0, 0), "{info:?}");
}

/// Records, for every read, when it went out and how many held ids it
/// named.
struct Named {
    inner: Arc<FaultyBroker>,
    t0: tokio::time::Instant,
    named: std::sync::Mutex<Vec<(Duration, usize)>>,
}

impl Named {
    fn note(&self, held: usize) {
        let at = self.t0.elapsed();
        self.named.lock().unwrap().push((at, held));
    }
}

impl Broker for Named {
    fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
        self.note(request.held.len());
        self.inner.read(request)
    }

    fn read_now(
        &self,
        request: &ReadRequest<'_>,
        batch: &mut ReadBatch,
    ) -> Option<BrokerResult<()>> {
        self.note(request.held.len());
        self.inner.read_now(request, batch)
    }

    ruststream_core::forward_broker!(
        inner: name, failure, check_mode, publish, publish_batch, ensure_group,
        set_group_position, ack, retry, dead_letter, redrive, discard, group_info, consumers,
        pending, dead_letters, range, stream_info, trim,
        extend_claim, count_deliveries,
    );
}

/// One claim refresh fails while an entry is in hand; after that the
/// subscription holds entries only between ticks (short handlers), and no
/// refresh fails again. Its reads stop naming what they hold: naming is for
/// failing or slow refreshes only, and costs the broker a refresh per named
/// entry. (A failure was once remembered until a refresh came back, which
/// a tick with nothing held never sends.)
#[tokio::test(start_paused = true)]
async fn one_failed_refresh_does_not_keep_reads_naming_what_they_hold() {
    let s = "stale-failing";
    let t0 = tokio::time::Instant::now();
    let inner = MemoryBroker::new();
    let faults = Arc::new(FaultyBroker::new(Arc::new(inner.clone()), 7));
    let named = Arc::new(Named {
        inner: faults.clone(),
        t0,
        named: std::sync::Mutex::default(),
    });
    let record = Record::default();
    let takes = |text: &str| {
        let ms = if text == "a" { 160 } else { 5 };
        Duration::from_millis(ms)
    };
    let recorder = Recorder {
        who: "c",
        t0,
        takes,
        outcome: ack,
        record: record.clone(),
    };
    let subscription = Subscription::new(Stream::claiming(s, MIN_IDLE).group("g")).workers(1);
    let app = recorder.start_on(named.clone(), subscription).await;
    tokio::time::sleep_until(t0 + Duration::from_millis(120)).await;
    faults.outage(&[CallKind::ExtendClaim], Duration::from_millis(280));
    inner.publish(s, Message::new(b"a".to_vec())).await.unwrap();
    for i in 0..50u64 {
        tokio::time::sleep_until(t0 + Duration::from_millis(450 + 100 * i)).await;
        let text = format!("b{i}").into_bytes();
        inner.publish(s, Message::new(text)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    app.shutdown().await;
    assert_eq!(record.texts().len(), 51);
    let late: Vec<(Duration, usize)> = named
        .named
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|&(at, n)| n > 0 && at > Duration::from_secs(1))
        .collect();
    assert!(
        late.is_empty(),
        "{} reads named held entries long after the one failed refresh: first {:?}",
        late.len(),
        &late[..late.len().min(5)]
    );
}
