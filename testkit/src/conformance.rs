//! The broker conformance suite: the consumer-group rules of
//! `docs/semantics.md` as executable tests, one set for every backend.
//!
//! Each test is an `async fn(Target)`. A backend runs the whole suite with
//! [`conformance_suite!`](crate::conformance_suite), which expands to one
//! `#[test]` per rule, so a failure names the rule and the backend:
//!
//! ```
//! use ruststream_testkit::conformance::Target;
//!
//! async fn memory() -> Target {
//!     Target::paused(std::sync::Arc::new(ruststream_memory::MemoryBroker::new()))
//! }
//! ruststream_testkit::conformance_suite!(paused, memory);
//! # fn main() {}
//! ```
//!
//! Tests that depend on time move the broker's clock with
//! [`Target::advance`]. For local brokers that is tokio's paused clock, so
//! a 30-second claim timeout takes microseconds. A broker whose idle times
//! are measured elsewhere (a server) supplies an `advance` that waits in
//! real time instead; the suite keeps its durations short for that reason.
//!
//! # Where a backend genuinely differs
//!
//! A few rules depend on what the backend can do, and a target says so
//! explicitly rather than skipping tests:
//!
//! - [`Target::without_claiming_reads`]: the backend refuses
//!   [`ReadMode::Claiming`] (Redis before 8.4). `check_mode` must then
//!   return [`BrokerError::Unsupported`], and the tests read the way an app
//!   on such a backend does: a `Reclaim` read, then a `New` read for the
//!   room left.
//! - [`Target::trim_drops_pending`]: trimming deletes entries a group still
//!   has pending, owed or unread as retry copies (Redis trims what it is
//!   told to). The tests then check that such entries are acked away rather
//!   than retried forever, and that dead letters still redrive from the copy
//!   of their fields the backend keeps.
//!
//! # A whole app under faults
//!
//! [`survives_injected_faults`] runs an app (`RustStream`, `new` and
//! `claiming` subscriptions) on the target's broker wrapped in a
//! [`FaultyBroker`](crate::FaultyBroker) that fails calls, loses replies,
//! stalls settles and loses groups, and checks that every entry ends as its
//! handler last decided (`docs/guarantees.md`). Its seed comes from
//! [`FAULT_SEED_VAR`] (`RUSTSTREAM_FAULT_SEED`); a failure names the seed
//! to replay.

// Panicking is how a test reports failure; every unwrap below is a test
// assertion about a broker call that must succeed.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ruststream_core::{
    Broker, BrokerError, DeadLetter, Delivery, EntryId, Headers, Message, PendingEntry, ReadBatch,
    ReadMode, ReadRequest, Retry, StreamStart, Trim,
};

mod chaos;
mod order;

pub use chaos::{FAULT_SEED_VAR, survives_injected_faults};
pub use order::by_key_order_survives_retries;

type Advance = Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A broker under test, and how to move its clock.
#[derive(Clone)]
pub struct Target {
    /// The broker.
    pub broker: Arc<dyn Broker>,
    advance: Advance,
    prefix: String,
    paused: bool,
    claiming_reads: bool,
    trim_keeps_pending: bool,
}

impl Target {
    /// A broker whose clock follows tokio's paused clock: `advance` moves it
    /// with `tokio::time::advance`. Its tests run on a paused runtime.
    pub fn paused(broker: Arc<dyn Broker>) -> Self {
        Target {
            broker,
            advance: Arc::new(|d| Box::pin(tokio::time::advance(d))),
            prefix: String::new(),
            paused: true,
            claiming_reads: true,
            trim_keeps_pending: true,
        }
    }

    /// A broker whose clock is real time (a server's): `advance` sleeps.
    /// `prefix` is put before every stream name so tests sharing a server
    /// do not see each other's streams.
    pub fn real_time(broker: Arc<dyn Broker>, prefix: impl Into<String>) -> Self {
        Target {
            broker,
            advance: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
            prefix: prefix.into(),
            paused: false,
            claiming_reads: true,
            trim_keeps_pending: true,
        }
    }

    /// The backend cannot serve [`ReadMode::Claiming`] (Redis before 8.4):
    /// `check_mode` must refuse it, and the tests read as an app there does,
    /// a `Reclaim` read then a `New` read.
    pub fn without_claiming_reads(mut self) -> Self {
        self.claiming_reads = false;
        self
    }

    /// Trimming deletes entries that groups still have pending, owed or
    /// unread as retry copies (Redis). The trimming tests then check that
    /// such entries are acked away, not retried forever, and that dead
    /// letters still redrive.
    pub fn trim_drops_pending(mut self) -> Self {
        self.trim_keeps_pending = false;
        self
    }

    /// Moves the broker's clock forward by `d`.
    pub async fn advance(&self, d: Duration) {
        (self.advance)(d).await;
    }

    /// A stream name private to this test run.
    pub fn stream(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// Runs `test` on a fresh current-thread runtime, paused or not.
pub fn run<F: Future<Output = ()>>(paused: bool, test: F) {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if paused {
        builder.start_paused(true);
    }
    let runtime = builder
        .build()
        .expect("a current-thread tokio runtime can always be built");
    runtime.block_on(test);
}

/// The one list of the suite's rules: every `pub async fn(Target)` test
/// of this module, in the order they run. It hands the list to a macro
/// (`$callback!($($args)*; rule, rule, ...)`), so the suite and
/// [`RULES`] expand from it, and a test checks that every rule defined
/// here is on it (a rule left off would never run).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_rules {
    ($callback:path, $($args:tt)*) => {
        $callback!($($args)*;
            ids_are_strictly_increasing,
            payload_and_headers_round_trip_exactly,
            range_reads_replay_in_order,
            trimming_removes_old_entries,
            a_new_group_starts_with_later_entries,
            a_group_can_start_at_the_beginning,
            a_group_can_start_after_an_id,
            creating_an_existing_group_keeps_its_cursor,
            start_at_moves_an_existing_cursor,
            a_forward_cursor_move_keeps_a_retry_still_to_run,
            two_consumers_in_one_group_get_disjoint_sets,
            independent_groups_each_get_everything,
            an_offset_in_flight_is_not_handed_out_again,
            pending_entries_record_owner_count_and_idle_time,
            a_lapsed_claim_is_handed_out_again,
            an_extended_claim_stands_for_min_idle_from_the_extension,
            extending_a_claim_the_consumer_does_not_hold_changes_nothing,
            a_read_taking_idle_entries_passes_over_what_its_reader_holds,
            a_delivery_counted_without_a_read_is_kept_through_a_hand_back,
            owed_records_go_out_before_new_ones,
            reclaim_never_hands_out_new_entries,
            a_consumer_rereads_its_own_pending_after_a_restart,
            an_own_pending_read_with_min_idle_passes_over_fresh_entries,
            only_an_idle_consumer_holding_nothing_is_deleted,
            the_stream_listing_names_every_stream,
            ack_is_idempotent,
            a_retry_with_delay_is_owed_after_the_delay_not_before,
            an_immediate_nack_is_owed_at_once,
            a_retry_copy_goes_behind_newer_entries_and_keeps_its_count,
            a_retry_copy_is_only_for_its_group,
            a_record_is_given_up_on_after_the_attempt_bound,
            dead_letters_are_listed_with_reason_and_count,
            a_redriven_record_is_handed_out_again,
            a_redriven_record_gets_its_attempts_back,
            a_redriven_retry_copy_gets_its_attempts_back,
            redrive_does_not_move_the_cursor,
            discard_drops_a_dead_letter,
            an_entry_has_one_dead_letter_at_most,
            dead_letters_and_pending_entries_survive_trimming,
            a_retry_copy_survives_trimming_until_read,
            lag_and_pending_counts_are_right_after_each_step,
            consumer_info_reports_pending_and_idle_time,
            a_blocking_read_wakes_when_an_entry_arrives,
            a_blocking_read_returns_an_empty_batch_after_its_block_time,
            a_blocking_read_given_up_on_leaves_nothing_claimed,
            calls_that_never_wait_still_let_other_tasks_run,
            reads_and_acks_on_the_spot_match_read_and_ack,
            an_unknown_group_is_a_clear_error,
            check_mode_refuses_only_what_the_broker_cannot_serve,
            a_start_past_the_end_of_the_stream_is_refused,
            bad_names_are_refused_with_the_rule,
            survives_injected_faults,
            by_key_order_survives_retries,
        );
    };
}

/// Names the rules, for [`RULES`].
macro_rules! rule_names {
    (; $($name:ident),* $(,)?) => {
        /// The names of the suite's rules, in the order they run.
        pub const RULES: &[&str] = &[$(stringify!($name)),*];
    };
}

crate::__conformance_rules!(rule_names,);

/// Expands to one `#[test]` per conformance rule for a backend.
///
/// `paused` runs each test on a paused tokio clock, `real_time` on the real
/// one. `$factory` is an `async fn() -> Target` (or a path to one) making a
/// fresh target per test.
#[macro_export]
macro_rules! conformance_suite {
    (paused, $factory:path) => {
        $crate::conformance_suite!(@each true, $factory);
    };
    (real_time, $factory:path) => {
        $crate::conformance_suite!(@each false, $factory);
    };
    (@each $paused:expr, $factory:path) => {
        $crate::__conformance_rules!($crate::conformance_suite, @tests $paused, $factory);
    };
    (@tests $paused:expr, $factory:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::run($paused, async {
                    $crate::conformance::$name($factory().await).await
                });
            }
        )*
    };
}

const G: &str = "group";
const MIN_IDLE: Duration = Duration::from_millis(300);

fn msg(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec())
}

fn texts(batch: &ReadBatch) -> Vec<String> {
    batch.deliveries.iter().map(text).collect()
}

fn text(d: &Delivery) -> String {
    String::from_utf8_lossy(d.entry.payload()).into_owned()
}

fn ids(batch: &ReadBatch) -> Vec<EntryId> {
    batch.deliveries.iter().map(Delivery::id).collect()
}

fn counts(batch: &ReadBatch) -> Vec<u32> {
    batch.deliveries.iter().map(|d| d.delivery_count).collect()
}

impl Target {
    async fn publish_all(&self, stream: &str, items: &[&str]) -> Vec<EntryId> {
        self.broker
            .publish_batch(stream, items.iter().map(|t| msg(t)).collect())
            .await
            .unwrap()
    }

    async fn group_at(&self, stream: &str, group: &str, start: StreamStart) {
        assert!(
            self.broker
                .ensure_group(stream, group, start)
                .await
                .unwrap(),
            "group {group} on {stream} should be new"
        );
    }

    /// A stream named for this run with the group `G` created on it,
    /// starting at new entries.
    async fn new_group(&self, name: &str) -> String {
        let stream = self.stream(name);
        self.group_at(&stream, G, StreamStart::New).await;
        stream
    }

    async fn read(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        mode: ReadMode,
        count: usize,
    ) -> ReadBatch {
        self.broker
            .read(ReadRequest::new(stream, group, consumer, mode, count))
            .await
            .unwrap()
    }

    async fn read_new(&self, stream: &str, consumer: &str, count: usize) -> ReadBatch {
        self.read(stream, G, consumer, ReadMode::New, count).await
    }

    async fn claiming(&self, stream: &str, consumer: &str, count: usize) -> ReadBatch {
        let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
        self.claiming_read(ReadRequest::new(stream, G, consumer, mode, count))
            .await
    }

    /// A claiming read, or on a backend without them what an app there
    /// runs instead: a reclaim read, then a new read for the room left.
    async fn claiming_read(&self, request: ReadRequest<'_>) -> ReadBatch {
        if self.claiming_reads {
            return self.broker.read(request).await.unwrap();
        }
        let ReadMode::Claiming { min_idle } = request.mode else {
            return self.broker.read(request).await.unwrap();
        };
        let reclaim = ReadRequest {
            mode: ReadMode::Reclaim { min_idle },
            ..request
        };
        let mut batch = self.broker.read(reclaim).await.unwrap();
        let room = request.count - batch.deliveries.len();
        if room > 0 {
            let new = ReadRequest {
                mode: ReadMode::New,
                count: room,
                ..request
            };
            let more = self.broker.read(new).await.unwrap();
            batch.deliveries.extend(more.deliveries);
            batch.dead_lettered.extend(more.dead_lettered);
        }
        batch
    }

    /// Whether a claiming read by `consumer` finds nothing to hand out.
    async fn claims_nothing(&self, stream: &str, consumer: &str) -> bool {
        self.claiming(stream, consumer, 10).await.is_empty()
    }

    async fn bounded_claim(&self, stream: &str, max_deliveries: u32) -> ReadBatch {
        let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
        let request = ReadRequest::new(stream, G, "w", mode, 10).max_deliveries(max_deliveries);
        self.claiming_read(request).await
    }

    /// The first ten entries of the group `G`'s pending list.
    async fn pending_list(&self, stream: &str) -> Vec<PendingEntry> {
        self.broker
            .pending(stream, G, EntryId::ZERO, 10, None)
            .await
            .unwrap()
    }

    /// The first ten of the group `G`'s dead letters.
    async fn dead_list(&self, stream: &str) -> Vec<DeadLetter> {
        self.broker
            .dead_letters(stream, G, EntryId::ZERO, 10)
            .await
            .unwrap()
    }

    async fn pending_count(&self, stream: &str) -> u64 {
        self.broker.group_info(stream, G).await.unwrap().pending
    }

    async fn lag(&self, stream: &str) -> u64 {
        self.broker.group_info(stream, G).await.unwrap().lag
    }
}

// ---- streams ---------------------------------------------------------------

/// Ids are strictly increasing, across batches and single publishes.
pub async fn ids_are_strictly_increasing(t: Target) {
    let s = t.stream("ids");
    let mut all = t.publish_all(&s, &["a", "b", "c"]).await;
    for i in 0..5 {
        all.push(
            t.broker
                .publish(&s, msg(&format!("single-{i}")))
                .await
                .unwrap(),
        );
    }
    all.extend(t.publish_all(&s, &["x", "y"]).await);
    for pair in all.windows(2) {
        assert!(
            pair[0] < pair[1],
            "ids must increase: {} then {}",
            pair[0],
            pair[1]
        );
    }
    let info = t.broker.stream_info(&s).await.unwrap().unwrap();
    assert_eq!(info.length, 10);
    assert_eq!(info.last_id, *all.last().unwrap());
}

/// Payload bytes and headers come back exactly as published, through a
/// range read and through a group read.
pub async fn payload_and_headers_round_trip_exactly(t: Target) {
    let s = t.new_group("roundtrip").await;
    let payload: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
    let mut headers = Headers::new();
    headers.insert("tenant", "acme");
    headers.insert("ünïcode", "välue with spaces and = signs");
    headers.insert("empty", "");
    let sent = Message {
        headers: headers.clone(),
        payload: payload.clone(),
    };
    let id = t.broker.publish(&s, sent.clone()).await.unwrap();
    let replay = t.broker.range(&s, id, id, 10).await.unwrap();
    assert_eq!(replay.len(), 1);
    assert_eq!(*replay[0].message, sent);
    let batch = t.read_new(&s, "c1", 10).await;
    assert_eq!(*batch.deliveries[0].entry.message, sent);
    assert_eq!(batch.deliveries[0].entry.headers(), &headers);
}

/// Range reads replay entries in id order within inclusive bounds.
pub async fn range_reads_replay_in_order(t: Target) {
    let s = t.stream("range");
    let ids = t.publish_all(&s, &["a", "b", "c", "d", "e"]).await;
    let all = t
        .broker
        .range(&s, EntryId::ZERO, EntryId::MAX, 100)
        .await
        .unwrap();
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let middle = t.broker.range(&s, ids[1], ids[3], 100).await.unwrap();
    assert_eq!(middle.iter().map(|e| e.id).collect::<Vec<_>>(), ids[1..=3]);
    let unbounded = t
        .broker
        .range(&s, EntryId::ZERO, EntryId::MAX, usize::MAX)
        .await
        .unwrap();
    assert_eq!(unbounded.len(), ids.len(), "usize::MAX means all");
    let two = t.broker.range(&s, ids[1], EntryId::MAX, 2).await.unwrap();
    assert_eq!(two.iter().map(|e| e.id).collect::<Vec<_>>(), ids[1..=2]);
    let none = t
        .broker
        .range(&t.stream("no-such-stream"), EntryId::ZERO, EntryId::MAX, 10)
        .await
        .unwrap();
    assert!(none.is_empty(), "a missing stream reads as empty");
    let missing = t
        .broker
        .stream_info(&t.stream("no-such-stream"))
        .await
        .unwrap();
    assert_eq!(missing, None, "a missing stream has no info");
}

/// Trimming by length and by id removes the oldest entries.
pub async fn trimming_removes_old_entries(t: Target) {
    let s = t.stream("trim");
    let ids = t.publish_all(&s, &["a", "b", "c", "d", "e", "f"]).await;
    assert_eq!(t.broker.trim(&s, Trim::MaxLen(4)).await.unwrap(), 2);
    let left = t
        .broker
        .range(&s, EntryId::ZERO, EntryId::MAX, 100)
        .await
        .unwrap();
    assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), ids[2..]);
    assert_eq!(t.broker.trim(&s, Trim::MinId(ids[4])).await.unwrap(), 2);
    let info = t.broker.stream_info(&s).await.unwrap().unwrap();
    assert_eq!(info.length, 2);
    assert_eq!(info.first_id, Some(ids[4]));
    assert_eq!(info.last_id, ids[5]);
}

// ---- rule 1: creating groups -------------------------------------------------

/// A group created at New sees only entries appended afterwards.
pub async fn a_new_group_starts_with_later_entries(t: Target) {
    let s = t.stream("start-new");
    t.publish_all(&s, &["old-1", "old-2"]).await;
    t.group_at(&s, G, StreamStart::New).await;
    t.publish_all(&s, &["new-1"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["new-1"]);
}

/// A group created at Beginning sees the whole retained stream.
pub async fn a_group_can_start_at_the_beginning(t: Target) {
    let s = t.stream("start-beginning");
    t.publish_all(&s, &["a", "b"]).await;
    t.group_at(&s, G, StreamStart::Beginning).await;
    t.publish_all(&s, &["c"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["a", "b", "c"]);
}

/// A group created at an id sees the entries after it.
pub async fn a_group_can_start_after_an_id(t: Target) {
    let s = t.stream("start-id");
    let ids = t.publish_all(&s, &["a", "b", "c"]).await;
    t.group_at(&s, G, StreamStart::Id(ids[0])).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["b", "c"]);
}

/// Creating a group that exists changes nothing: its cursor stays.
pub async fn creating_an_existing_group_keeps_its_cursor(t: Target) {
    let s = t.stream("keep-cursor");
    t.group_at(&s, G, StreamStart::Beginning).await;
    t.publish_all(&s, &["a", "b", "c"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 2).await), ["a", "b"]);
    let created = t
        .broker
        .ensure_group(&s, G, StreamStart::Beginning)
        .await
        .unwrap();
    assert!(!created, "ensure_group on an existing group reports false");
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["c"]);
    assert_eq!(t.pending_count(&s).await, 3, "pending entries untouched");
}

/// `start_at` moves an existing group's cursor; pending entries stay.
pub async fn start_at_moves_an_existing_cursor(t: Target) {
    let s = t.stream("start-at");
    t.group_at(&s, G, StreamStart::Beginning).await;
    let ids = t.publish_all(&s, &["a", "b", "c", "d"]).await;
    t.read_new(&s, "c1", 1).await;
    t.broker
        .set_group_position(&s, G, StreamStart::Id(ids[2]))
        .await
        .unwrap();
    assert_eq!(
        t.broker.group_info(&s, G).await.unwrap().last_delivered,
        ids[2]
    );
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["d"]);
    assert_eq!(t.pending_count(&s).await, 2);
    t.broker
        .set_group_position(&s, G, StreamStart::New)
        .await
        .unwrap();
    t.publish_all(&s, &["e"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["e"]);
}

/// Moving a cursor forward passes over the entries behind it, but not a
/// retry still to run: the group's retry copy not read yet (`retry()` on a
/// `new` subscription) is its only record, so it becomes owed, with the
/// count it carries, and the next read hands it out (an instance started
/// with `start_at(New)` while another consumes loses no retry).
pub async fn a_forward_cursor_move_keeps_a_retry_still_to_run(t: Target) {
    let s = t.new_group("forward-retry").await;
    t.publish_all(&s, &["x"]).await;
    let x = ids(&t.read_new(&s, "c1", 10).await);
    assert_eq!(t.broker.retry(&s, G, &x, Retry::Copy).await.unwrap(), 1);
    t.publish_all(&s, &["backlog"]).await;
    t.broker
        .set_group_position(&s, G, StreamStart::New)
        .await
        .unwrap();
    let next = t.read_new(&s, "c1", 10).await;
    assert_eq!(texts(&next), ["x"], "the retry of x is still to run");
    assert_eq!(counts(&next), [1], "with the count its copy carried");
    t.broker.ack(&s, G, &ids(&next)).await.unwrap();
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.pending, info.lag, info.dead_letters), (0, 0, 0));
    t.publish_all(&s, &["later"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["later"]);
}

// ---- rule 2: distribution -----------------------------------------------------

/// Each new entry goes to exactly one consumer of the group.
pub async fn two_consumers_in_one_group_get_disjoint_sets(t: Target) {
    let s = t.new_group("disjoint").await;
    let items: Vec<String> = (0..20).map(|i| format!("job-{i}")).collect();
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    t.publish_all(&s, &refs).await;
    let mut a = Vec::new();
    let mut b = Vec::new();
    loop {
        let got_a = t.read_new(&s, "a", 3).await;
        let got_b = t.read_new(&s, "b", 4).await;
        if got_a.is_empty() && got_b.is_empty() {
            break;
        }
        a.extend(texts(&got_a));
        b.extend(texts(&got_b));
    }
    assert!(!a.is_empty() && !b.is_empty(), "both consumers got work");
    assert!(
        a.iter().all(|x| !b.contains(x)),
        "no entry went to both: {a:?} / {b:?}"
    );
    let mut all: Vec<String> = a.into_iter().chain(b).collect();
    all.sort_by_key(|x| x[4..].parse::<u32>().unwrap());
    assert_eq!(all, items, "every entry went to one of them");
}

/// Independent groups each see every entry.
pub async fn independent_groups_each_get_everything(t: Target) {
    let s = t.stream("fan-out");
    t.group_at(&s, "ledger", StreamStart::New).await;
    t.group_at(&s, "fraud", StreamStart::New).await;
    t.publish_all(&s, &["p1", "p2", "p3"]).await;
    let ledger = t.read(&s, "ledger", "c", ReadMode::New, 10).await;
    let fraud = t.read(&s, "fraud", "c", ReadMode::New, 10).await;
    assert_eq!(texts(&ledger), ["p1", "p2", "p3"]);
    assert_eq!(texts(&fraud), ["p1", "p2", "p3"]);
    t.broker.ack(&s, "ledger", &ids(&ledger)).await.unwrap();
    assert_eq!(
        t.broker.group_info(&s, "fraud").await.unwrap().pending,
        3,
        "acks are per group"
    );
}

// ---- rule 3: pending -----------------------------------------------------------

/// While a claim stands, no read hands the entry out again.
pub async fn an_offset_in_flight_is_not_handed_out_again(t: Target) {
    let s = t.new_group("in-flight").await;
    t.publish_all(&s, &["a"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["a"]);
    assert!(t.read_new(&s, "c2", 10).await.is_empty());
    t.advance(MIN_IDLE / 2).await;
    assert!(t.claims_nothing(&s, "c2").await, "claim still stands");
    let reclaim = ReadMode::Reclaim { min_idle: MIN_IDLE };
    assert!(t.read(&s, G, "c3", reclaim, 10).await.is_empty());
    assert_eq!(t.pending_count(&s).await, 1);
}

/// A pending entry records its owner, delivery count and idle time.
pub async fn pending_entries_record_owner_count_and_idle_time(t: Target) {
    let s = t.new_group("pending-record").await;
    let sent = t.publish_all(&s, &["a", "b"]).await;
    t.read_new(&s, "c1", 1).await;
    t.read_new(&s, "c2", 1).await;
    t.advance(Duration::from_millis(120)).await;
    let pending = t.pending_list(&s).await;
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].id, sent[0]);
    assert_eq!(pending[0].consumer.as_deref(), Some("c1"));
    assert_eq!(pending[1].consumer.as_deref(), Some("c2"));
    assert!(pending.iter().all(|p| p.times_delivered == 1));
    assert!(pending.iter().all(|p| p.idle_ms >= 120), "{pending:?}");
    assert!(pending.iter().all(|p| p.owed_in_ms.is_none()));
    let c2 = t
        .broker
        .pending(&s, G, EntryId::ZERO, 10, Some("c2"))
        .await
        .unwrap();
    assert_eq!(c2.iter().map(|p| p.id).collect::<Vec<_>>(), [sent[1]]);
}

// ---- rule 4: claims -------------------------------------------------------------

/// An entry idle for min_idle goes to another consumer, count +1.
pub async fn a_lapsed_claim_is_handed_out_again(t: Target) {
    let s = t.new_group("lapsed").await;
    let sent = t.publish_all(&s, &["a"]).await;
    let first = t.read_new(&s, "crashed", 10).await;
    assert_eq!(counts(&first), [0]);
    t.advance(MIN_IDLE).await;
    let claimed = t.claiming(&s, "rescuer", 10).await;
    assert_eq!(ids(&claimed), sent);
    assert_eq!(
        counts(&claimed),
        [1],
        "a first recovery reports one earlier delivery"
    );
    assert!(claimed.deliveries[0].idle_ms >= MIN_IDLE.as_millis() as u64);
    let pending = t.pending_list(&s).await;
    assert_eq!(
        pending[0].consumer.as_deref(),
        Some("rescuer"),
        "ownership moved"
    );
    assert_eq!(pending[0].times_delivered, 2);
    assert!(t.claims_nothing(&s, "third").await, "the new claim stands");
}

/// Extending a claim restarts the entry's idle time without counting a
/// delivery: it is not claimable until `min_idle` after the extension, and
/// is then claimed with the count it had.
pub async fn an_extended_claim_stands_for_min_idle_from_the_extension(t: Target) {
    let s = t.new_group("extend-claim").await;
    let sent = t.publish_all(&s, &["slow", "crashed"]).await;
    assert_eq!(
        texts(&t.read_new(&s, "worker", 10).await),
        ["slow", "crashed"]
    );
    t.advance(MIN_IDLE * 2 / 3).await;
    let extended = t
        .broker
        .extend_claim(&s, G, "worker", &[sent[0]])
        .await
        .unwrap();
    assert_eq!(extended, 1);
    let pending = t.broker.pending(&s, G, sent[0], 1, None).await.unwrap();
    assert_eq!(pending[0].consumer.as_deref(), Some("worker"));
    assert_eq!(pending[0].times_delivered, 1, "an extension is no delivery");
    assert!(
        pending[0].idle_ms < MIN_IDLE.as_millis() as u64 / 2,
        "{pending:?}"
    );

    // Idle for min_idle since delivery, but not since the extension.
    t.advance(MIN_IDLE / 2).await;
    let claimed = t.claiming(&s, "rescuer", 10).await;
    assert_eq!(texts(&claimed), ["crashed"], "the extended claim stands");
    t.broker.ack(&s, G, &ids(&claimed)).await.unwrap();

    t.advance(MIN_IDLE).await;
    let claimed = t.claiming(&s, "rescuer", 10).await;
    assert_eq!(ids(&claimed), [sent[0]]);
    assert_eq!(counts(&claimed), [1], "one earlier delivery, not two");
    let pending = t.broker.pending(&s, G, sent[0], 1, None).await.unwrap();
    assert_eq!(pending[0].consumer.as_deref(), Some("rescuer"));
    assert_eq!(pending[0].times_delivered, 2);
}

/// Extending claims on entries another consumer holds, owed entries,
/// entries never delivered and unknown ids refreshes nothing and returns 0;
/// so does a consumer the group does not know. Names and the group are
/// checked as by every call.
pub async fn extending_a_claim_the_consumer_does_not_hold_changes_nothing(t: Target) {
    let s = t.new_group("extend-other").await;
    let sent = t
        .publish_all(&s, &["mine", "theirs", "owed", "unread"])
        .await;
    t.read_new(&s, "worker", 1).await;
    t.read_new(&s, "other", 1).await;
    t.read_new(&s, "worker", 1).await;
    t.broker
        .retry(&s, G, &[sent[2]], Retry::After(Duration::from_secs(60)))
        .await
        .unwrap();
    let state = async || -> Vec<(EntryId, Option<String>, u32, bool)> {
        let pending = t.broker.pending(&s, G, EntryId::ZERO, 10, None).await;
        let pending = pending.unwrap().into_iter();
        pending
            .map(|p| (p.id, p.consumer, p.times_delivered, p.owed_in_ms.is_some()))
            .collect()
    };
    let before = state().await;
    t.advance(MIN_IDLE).await;

    let not_held = [sent[1], sent[2], sent[3], EntryId::new(1, 1)];
    let extend = |consumer, ids| t.broker.extend_claim(&s, G, consumer, ids);
    assert_eq!(extend("worker", &not_held).await.unwrap(), 0);
    assert_eq!(extend("stranger", &sent).await.unwrap(), 0);
    assert_eq!(extend("worker", &[]).await.unwrap(), 0);
    assert_eq!(
        state().await,
        before,
        "owners, counts and owed entries unchanged"
    );

    // Nothing was refreshed: both held entries are idle enough to claim.
    let claimed = t.claiming(&s, "rescuer", 10).await;
    assert_eq!(texts(&claimed), ["mine", "theirs", "unread"]);
    assert_eq!(counts(&claimed), [1, 1, 0]);

    refuses_a_ghost_group_and_a_bad_consumer(async |group, consumer| {
        t.broker.extend_claim(&s, group, consumer, &sent).await
    })
    .await;
}

/// Fails unless `call` (made on group and consumer names) answers group
/// `ghost` with `NoGroup`, and a consumer name with a NUL in it (on group
/// [`G`]) with an error that names the consumer name.
async fn refuses_a_ghost_group_and_a_bad_consumer<T: std::fmt::Debug>(
    call: impl AsyncFn(&str, &str) -> Result<T, BrokerError>,
) {
    let err = call("ghost", "worker").await.unwrap_err();
    assert!(matches!(err, BrokerError::NoGroup { .. }), "{err:?}");
    let err = call(G, "bad\u{0}consumer").await.unwrap_err();
    assert!(err.to_string().contains("consumer name"), "{err}");
}

/// A read that takes idle entries first refreshes the claims on the
/// entries its reader names as held (`ReadRequest::held`): it hands none of
/// them out and counts no delivery for them, and they stand for `min_idle`
/// from that read. That holds for claiming (or reclaim) reads and for own
/// pending reads with an idle bound. Naming an entry another consumer
/// holds refreshes nothing: it is taken as usual once idle.
pub async fn a_read_taking_idle_entries_passes_over_what_its_reader_holds(t: Target) {
    let s = t.new_group("held-refresh").await;
    let sent = t.publish_all(&s, &["held", "idle", "peers"]).await;
    assert_eq!(texts(&t.read_new(&s, "worker", 2).await), ["held", "idle"]);
    assert_eq!(texts(&t.read_new(&s, "peer", 1).await), ["peers"]);
    t.advance(MIN_IDLE).await;
    let held = [sent[0], sent[2]];
    let mode = ReadMode::Claiming { min_idle: MIN_IDLE };
    let request = ReadRequest::new(&s, G, "worker", mode, 10).holding(&held);
    let mut taken = texts(&t.claiming_read(request).await);
    taken.sort();
    assert_eq!(
        taken,
        ["idle", "peers"],
        "held passed over, the peer's taken"
    );
    let pending = t.broker.pending(&s, G, sent[0], 1, None).await.unwrap();
    assert_eq!(pending[0].consumer.as_deref(), Some("worker"));
    assert_eq!(pending[0].times_delivered, 1, "a refresh is no delivery");

    // Idle for min_idle since the claiming read: the own pending read with
    // an idle bound passes it over too when the reader names it.
    t.advance(MIN_IDLE).await;
    let stale = ReadMode::OwnPending {
        after: EntryId::ZERO,
        min_idle: MIN_IDLE,
    };
    let own = ReadRequest::new(&s, G, "worker", stale, 10).holding(&held[..1]);
    let own = t.broker.read(own).await.unwrap();
    assert_eq!(texts(&own), ["idle", "peers"], "both idle since the claim");
    let pending = t.broker.pending(&s, G, sent[0], 1, None).await.unwrap();
    assert_eq!(pending[0].times_delivered, 1, "still no delivery counted");

    // Not named any more, it is taken once idle, with the count it had.
    t.advance(MIN_IDLE).await;
    let claimed = t.claiming(&s, "rescuer", 1).await;
    assert_eq!(ids(&claimed), [sent[0]]);
    assert_eq!(counts(&claimed), [1], "delivered once before");
}

/// A delivery counted without a read (a `by_key` lane's re-run) raises
/// the entry's count at the broker, never lowers it, refreshes its claim,
/// and stays with the entry when it is handed back; entries the consumer
/// does not hold are passed over.
pub async fn a_delivery_counted_without_a_read_is_kept_through_a_hand_back(t: Target) {
    let s = t.new_group("count-deliveries").await;
    let sent = t.publish_all(&s, &["held", "other", "theirs"]).await;
    assert_eq!(texts(&t.read_new(&s, "worker", 2).await), ["held", "other"]);
    assert_eq!(texts(&t.read_new(&s, "stranger", 1).await), ["theirs"]);
    t.advance(MIN_IDLE * 2 / 3).await;

    let count = |consumer, counts| t.broker.count_deliveries(&s, G, consumer, counts);
    let unknown = EntryId::new(1, 1);
    let asked = [(sent[0], 3), (sent[0], 2), (sent[2], 5), (unknown, 4)];
    let (lower, owed) = ([(sent[0], 1)], [(sent[1], 7)]);
    assert_eq!(count("worker", &asked).await.unwrap(), 1, "only its own");
    assert_eq!(count("worker", &[]).await.unwrap(), 0);
    // Made again (a lost reply), and with a lower count: no change.
    assert_eq!(count("worker", &asked).await.unwrap(), 1);
    assert_eq!(count("worker", &lower).await.unwrap(), 1);
    let pending = t.pending_list(&s).await;
    let row = |id: EntryId| pending.iter().find(|p| p.id == id).unwrap();
    assert_eq!(row(sent[0]).times_delivered, 3, "raised, never lowered");
    assert_eq!(row(sent[0]).consumer.as_deref(), Some("worker"));
    assert!(
        row(sent[0]).idle_ms < MIN_IDLE.as_millis() as u64 / 2,
        "a counted delivery refreshes the claim: {pending:?}"
    );
    assert_eq!(row(sent[1]).times_delivered, 1);
    assert_eq!(row(sent[2]).times_delivered, 1, "another's entry");
    assert_eq!(row(sent[2]).consumer.as_deref(), Some("stranger"));

    // Owed entries are held by nobody: passed over.
    t.broker
        .retry(&s, G, &[sent[1]], Retry::After(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(count("worker", &owed).await.unwrap(), 0);

    // Handed back, the entry keeps its count: the next read is its fourth
    // delivery.
    t.broker
        .retry(&s, G, &[sent[0]], Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let next = t.read_new(&s, "next", 10).await;
    assert_eq!(texts(&next), ["held"]);
    assert_eq!(counts(&next), [3]);

    refuses_a_ghost_group_and_a_bad_consumer(async |group, consumer| {
        t.broker.count_deliveries(&s, group, consumer, &asked).await
    })
    .await;
}

/// Owed entries (here: idle ones) go out before new ones.
pub async fn owed_records_go_out_before_new_ones(t: Target) {
    let s = t.new_group("owed-first").await;
    t.publish_all(&s, &["old-1", "old-2"]).await;
    t.read_new(&s, "crashed", 10).await;
    t.advance(MIN_IDLE).await;
    t.publish_all(&s, &["new-1", "new-2"]).await;
    let batch = t.claiming(&s, "rescuer", 3).await;
    assert_eq!(texts(&batch), ["old-1", "old-2", "new-1"]);
    assert_eq!(counts(&batch), [1, 1, 0]);
    let nacked = ids(&batch)[2];
    t.broker
        .retry(&s, G, &[nacked], Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let next = t.read_new(&s, "other", 10).await;
    assert_eq!(
        texts(&next),
        ["new-1", "new-2"],
        "the nacked entry first, then the new one"
    );
}

/// Reclaim reads take idle entries only, never new ones.
pub async fn reclaim_never_hands_out_new_entries(t: Target) {
    let s = t.new_group("reclaim-only").await;
    t.publish_all(&s, &["a"]).await;
    t.read_new(&s, "crashed", 10).await;
    t.publish_all(&s, &["b"]).await;
    t.advance(MIN_IDLE).await;
    let reclaim = ReadMode::Reclaim { min_idle: MIN_IDLE };
    assert_eq!(texts(&t.read(&s, G, "rescuer", reclaim, 10).await), ["a"]);
    assert!(t.read(&s, G, "rescuer", reclaim, 10).await.is_empty());
    assert_eq!(t.lag(&s).await, 1, "b is still undelivered");
}

// ---- rule 5: own pending -----------------------------------------------------------

/// A restarted consumer re-reads its own pending entries, and only its own.
pub async fn a_consumer_rereads_its_own_pending_after_a_restart(t: Target) {
    let s = t.new_group("own-pending").await;
    t.publish_all(&s, &["a", "b", "c", "d"]).await;
    t.read_new(&s, "stable", 2).await;
    t.read_new(&s, "other", 1).await;
    t.read_new(&s, "stable", 1).await;
    let own = ReadMode::own_pending;
    let first = t.read(&s, G, "stable", own(EntryId::ZERO), 2).await;
    assert_eq!(texts(&first), ["a", "b"]);
    assert_eq!(counts(&first), [1, 1]);
    let rest = t
        .read(&s, G, "stable", own(*ids(&first).last().unwrap()), 10)
        .await;
    assert_eq!(texts(&rest), ["d"]);
    assert_eq!(t.lag(&s).await, 0, "re-reading does not move the cursor");
}

/// An own-pending read with a `min_idle` takes only the entries idle that
/// long: one whose claim was refreshed (a live process sharing the name
/// still works on it) is passed over until `min_idle` after the refresh.
pub async fn an_own_pending_read_with_min_idle_passes_over_fresh_entries(t: Target) {
    let s = t.new_group("own-pending-idle").await;
    t.publish_all(&s, &["a", "b", "c"]).await;
    let sent = ids(&t.read_new(&s, "shared", 3).await);
    let stale = ReadMode::OwnPending {
        after: EntryId::ZERO,
        min_idle: MIN_IDLE,
    };
    assert!(
        t.read(&s, G, "shared", stale, 10).await.is_empty(),
        "all three were just delivered"
    );
    t.advance(MIN_IDLE / 2).await;
    // The twin still works on "b" and refreshes its claim.
    t.broker
        .extend_claim(&s, G, "shared", &[sent[1]])
        .await
        .unwrap();
    t.advance(MIN_IDLE / 2 + Duration::from_millis(50)).await;
    let first = t.read(&s, G, "shared", stale, 1).await;
    assert_eq!(texts(&first), ["a"]);
    assert_eq!(counts(&first), [1], "delivered once before this read");
    let next = ReadMode::OwnPending {
        after: sent[0],
        min_idle: MIN_IDLE,
    };
    assert_eq!(
        texts(&t.read(&s, G, "shared", next, 10).await),
        ["c"],
        "b was refreshed: passed over, and the page goes on past it"
    );
    t.advance(MIN_IDLE).await;
    assert_eq!(
        texts(&t.read(&s, G, "shared", stale, 10).await),
        ["a", "b", "c"],
        "once idle again, all are taken (a and c were re-read above)"
    );
}

/// Deleting a consumer takes only one that holds nothing and has been idle
/// for `min_idle`; a deleted name that reads again joins anew, and an
/// unknown one is not deleted.
pub async fn only_an_idle_consumer_holding_nothing_is_deleted(t: Target) {
    let s = t.new_group("delete-consumer").await;
    t.publish_all(&s, &["a", "b"]).await;
    let done = ids(&t.read_new(&s, "done", 1).await);
    t.broker.ack(&s, G, &done).await.unwrap();
    t.read_new(&s, "holding", 1).await;
    let names = async || -> Vec<String> {
        let consumers = t.broker.consumers(&s, G).await.unwrap();
        consumers.into_iter().map(|c| c.name).collect()
    };
    let delete = |consumer| t.broker.delete_consumer(&s, G, consumer, MIN_IDLE);
    assert!(!delete("done").await.unwrap(), "not idle long enough yet");
    t.advance(MIN_IDLE + Duration::from_millis(50)).await;
    assert!(!delete("holding").await.unwrap(), "it holds an entry");
    assert!(!delete("stranger").await.unwrap(), "unknown");
    assert_eq!(names().await, ["done", "holding"]);
    assert!(delete("done").await.unwrap());
    assert_eq!(names().await, ["holding"]);
    assert_eq!(
        t.pending_count(&s).await,
        1,
        "the held entry is still pending"
    );
    t.publish_all(&s, &["c"]).await;
    assert_eq!(texts(&t.read_new(&s, "done", 1).await), ["c"]);
    assert_eq!(names().await, ["done", "holding"], "a read joins it again");
}

// ---- rule 6: ack ------------------------------------------------------------------

/// Ack removes entries from pending; acking again or an unknown id is a no-op.
pub async fn ack_is_idempotent(t: Target) {
    let s = t.new_group("ack").await;
    t.publish_all(&s, &["a", "b"]).await;
    let batch = t.read_new(&s, "c1", 10).await;
    let got = ids(&batch);
    assert_eq!(t.broker.ack(&s, G, &got[..1]).await.unwrap(), 1);
    assert_eq!(t.broker.ack(&s, G, &got[..1]).await.unwrap(), 0);
    assert_eq!(t.broker.ack(&s, G, &[EntryId::new(1, 1)]).await.unwrap(), 0);
    assert_eq!(t.broker.ack(&s, G, &got).await.unwrap(), 1);
    assert_eq!(t.pending_count(&s).await, 0);
    t.advance(MIN_IDLE).await;
    assert!(
        t.claims_nothing(&s, "c2").await,
        "acked entries never come back"
    );
}

// ---- rule 7: retries ----------------------------------------------------------------

/// A retry with a delay is owed after the delay, not before.
pub async fn a_retry_with_delay_is_owed_after_the_delay_not_before(t: Target) {
    let s = t.new_group("retry-after").await;
    t.publish_all(&s, &["a"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    let delay = Duration::from_millis(500);
    assert_eq!(
        t.broker
            .retry(&s, G, &got, Retry::After(delay))
            .await
            .unwrap(),
        1
    );
    t.advance(delay - Duration::from_millis(100)).await;
    assert!(
        t.claims_nothing(&s, "c2").await,
        "not owed before the delay"
    );
    assert!(t.read_new(&s, "c2", 10).await.is_empty());
    t.advance(Duration::from_millis(100)).await;
    let again = t.read_new(&s, "c2", 10).await;
    assert_eq!(ids(&again), got);
    assert_eq!(counts(&again), [1]);
    assert_eq!(t.pending_count(&s).await, 1);
}

/// An immediate nack makes the entry owed at once, to any consumer.
pub async fn an_immediate_nack_is_owed_at_once(t: Target) {
    let s = t.new_group("nack").await;
    t.publish_all(&s, &["a"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.broker
        .retry(&s, G, &got, Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let pending = t.pending_list(&s).await;
    assert_eq!(pending[0].consumer, None, "an owed entry is held by nobody");
    assert_eq!(pending[0].owed_in_ms, Some(0));
    let again = t.claiming(&s, "c2", 10).await;
    assert_eq!(ids(&again), got);
    assert_eq!(counts(&again), [1]);
}

/// Retry with copy: the original is acked, a copy goes behind the entries
/// appended meanwhile, carrying the original's delivery count.
pub async fn a_retry_copy_goes_behind_newer_entries_and_keeps_its_count(t: Target) {
    let s = t.new_group("retry-copy").await;
    t.publish_all(&s, &["a"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.publish_all(&s, &["b"]).await;
    assert_eq!(t.broker.retry(&s, G, &got, Retry::Copy).await.unwrap(), 1);
    let pending = t.pending_list(&s).await;
    assert!(
        pending.iter().all(|p| p.id != got[0]),
        "the original is acked"
    );
    let next = t.read_new(&s, "c1", 10).await;
    assert_eq!(texts(&next), ["b", "a"]);
    assert_eq!(
        counts(&next),
        [0, 1],
        "the copy carries one earlier delivery"
    );
    assert!(next.deliveries[1].id() > got[0]);
    t.broker
        .retry(&s, G, &ids(&next)[1..], Retry::Copy)
        .await
        .unwrap();
    let third = t.read_new(&s, "c1", 10).await;
    assert_eq!(counts(&third), [2], "the count goes on across copies");
    assert_eq!(t.broker.stream_info(&s).await.unwrap().unwrap().length, 4);
}

/// A retry copy is for the group that retried; other groups pass over it.
pub async fn a_retry_copy_is_only_for_its_group(t: Target) {
    let s = t.stream("retry-copy-group");
    t.group_at(&s, "ledger", StreamStart::New).await;
    t.group_at(&s, "fraud", StreamStart::New).await;
    t.publish_all(&s, &["a"]).await;
    let got = t.read(&s, "ledger", "c", ReadMode::New, 10).await;
    t.broker
        .retry(&s, "ledger", &ids(&got), Retry::Copy)
        .await
        .unwrap();
    t.publish_all(&s, &["b"]).await;
    let fraud = t.read(&s, "fraud", "c", ReadMode::New, 10).await;
    assert_eq!(texts(&fraud), ["a", "b"], "fraud sees each payment once");
    let ledger = t.read(&s, "ledger", "c", ReadMode::New, 10).await;
    assert_eq!(texts(&ledger), ["a", "b"], "ledger sees its copy, then b");
}

// ---- rule 8: dead letters -------------------------------------------------------------

/// An entry delivered max_deliveries times is dead-lettered, not handed out.
pub async fn a_record_is_given_up_on_after_the_attempt_bound(t: Target) {
    let s = t.new_group("attempt-bound").await;
    let sent = t.publish_all(&s, &["poison", "fine"]).await;
    let bounded = |consumer| {
        ReadRequest::new(
            "",
            G,
            consumer,
            ReadMode::Claiming { min_idle: MIN_IDLE },
            1,
        )
        .max_deliveries(3)
    };
    let mut deliveries = 0;
    for _ in 0..3 {
        let batch = t
            .claiming_read(ReadRequest {
                stream: &s,
                ..bounded("w")
            })
            .await;
        assert_eq!(ids(&batch), sent[..1]);
        deliveries += 1;
        t.advance(MIN_IDLE).await;
    }
    let batch = t
        .claiming_read(ReadRequest {
            stream: &s,
            ..bounded("w")
        })
        .await;
    assert_eq!(
        batch.dead_lettered,
        sent[..1],
        "given up after {deliveries} deliveries"
    );
    assert_eq!(texts(&batch), ["fine"], "the queue moves on");
    let dead = t.dead_list(&s).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].times_delivered, 3);
    assert!(
        dead[0].reason.contains("max_deliveries"),
        "{}",
        dead[0].reason
    );
    assert_eq!(t.pending_count(&s).await, 1);
}

/// Dead letters are listed with their reason, count and entry.
pub async fn dead_letters_are_listed_with_reason_and_count(t: Target) {
    let s = t.new_group("dead-list").await;
    t.publish_all(&s, &["bad", "ok"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.advance(MIN_IDLE).await;
    t.claiming(&s, "c2", 1).await;
    assert_eq!(
        t.broker
            .dead_letter(&s, G, &got[..1], "cannot decode: expected u64")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        t.broker
            .dead_letter(&s, G, &got[..1], "again")
            .await
            .unwrap(),
        0,
        "no longer pending"
    );
    let dead = t
        .broker
        .dead_letters(&s, G, EntryId::ZERO, usize::MAX)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id(), got[0]);
    let pending = t
        .broker
        .pending(&s, G, EntryId::ZERO, usize::MAX, None)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "usize::MAX means all");
    assert_eq!(dead[0].reason, "cannot decode: expected u64");
    assert_eq!(dead[0].times_delivered, 2);
    assert_eq!(dead[0].entry.payload(), b"bad");
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.pending, info.dead_letters), (1, 1));
}

/// A redriven dead letter is handed out again.
pub async fn a_redriven_record_is_handed_out_again(t: Target) {
    let s = t.new_group("redrive").await;
    t.publish_all(&s, &["a"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.broker.dead_letter(&s, G, &got, "bug").await.unwrap();
    assert!(t.read_new(&s, "c1", 10).await.is_empty());
    assert_eq!(t.broker.redrive(&s, G, &got).await.unwrap(), 1);
    assert_eq!(
        t.broker.redrive(&s, G, &got).await.unwrap(),
        0,
        "no longer a dead letter"
    );
    let again = t.read_new(&s, "c2", 10).await;
    assert_eq!(ids(&again), got);
    assert!(t.dead_list(&s).await.is_empty());
}

/// A redriven record's delivery count starts again from zero.
pub async fn a_redriven_record_gets_its_attempts_back(t: Target) {
    let s = t.new_group("redrive-attempts").await;
    let sent = t.publish_all(&s, &["a"]).await;
    assert_eq!(counts(&t.bounded_claim(&s, 2).await), [0]);
    t.advance(MIN_IDLE).await;
    assert_eq!(counts(&t.bounded_claim(&s, 2).await), [1]);
    t.advance(MIN_IDLE).await;
    assert_eq!(t.bounded_claim(&s, 2).await.dead_lettered, sent);
    t.broker.redrive(&s, G, &sent).await.unwrap();
    let again = t.bounded_claim(&s, 2).await;
    assert_eq!(counts(&again), [0], "attempts start over");
    t.advance(MIN_IDLE).await;
    assert_eq!(
        counts(&t.bounded_claim(&s, 2).await),
        [1],
        "and the bound applies afresh"
    );
    let pending = t.pending_list(&s).await;
    assert_eq!(pending[0].times_delivered, 2);
}

/// A redriven retry copy gets its attempts back too: the deliveries it
/// carried from its original and earlier copies no longer count, whether
/// its next failure is retried with a copy or with a delay. (Without this,
/// one failure after a redrive dead-letters it again.)
pub async fn a_redriven_retry_copy_gets_its_attempts_back(t: Target) {
    for (name, how) in [
        ("redrive-copy-copy", Retry::Copy),
        ("redrive-copy-after", Retry::After(Duration::ZERO)),
    ] {
        let s = t.new_group(name).await;
        t.publish_all(&s, &["a"]).await;
        let bounded_read = || async {
            let request = ReadRequest::new(&s, G, "w", ReadMode::New, 10).max_deliveries(2);
            t.broker.read(request).await.unwrap()
        };
        for count in 0..2 {
            let batch = bounded_read().await;
            assert_eq!(counts(&batch), [count], "{name}");
            t.broker
                .retry(&s, G, &ids(&batch), Retry::Copy)
                .await
                .unwrap();
        }
        assert_eq!(bounded_read().await.dead_lettered.len(), 1, "{name}");
        let dead: Vec<EntryId> = t.dead_list(&s).await.iter().map(DeadLetter::id).collect();
        assert_eq!(t.broker.redrive(&s, G, &dead).await.unwrap(), 1, "{name}");
        for count in 0..2 {
            let batch = bounded_read().await;
            assert_eq!(counts(&batch), [count], "{name}: attempts start over");
            assert!(batch.dead_lettered.is_empty(), "{name}");
            t.broker.retry(&s, G, &ids(&batch), how).await.unwrap();
        }
        let last = bounded_read().await;
        assert!(
            last.deliveries.is_empty(),
            "{name}: the bound applies afresh"
        );
        assert_eq!(last.dead_lettered.len(), 1, "{name}");
    }
}

/// Redrive does not move the group's cursor: finished work stays finished.
pub async fn redrive_does_not_move_the_cursor(t: Target) {
    let s = t.new_group("redrive-cursor").await;
    t.publish_all(&s, &["a", "b", "c"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.broker.ack(&s, G, &got[1..]).await.unwrap();
    t.broker.dead_letter(&s, G, &got[..1], "bug").await.unwrap();
    t.publish_all(&s, &["d"]).await;
    let before = t.broker.group_info(&s, G).await.unwrap();
    t.broker.redrive(&s, G, &got[..1]).await.unwrap();
    let after = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!(after.last_delivered, before.last_delivered);
    assert_eq!(after.lag, before.lag);
    assert_eq!(
        texts(&t.read_new(&s, "c1", 10).await),
        ["a", "d"],
        "b and c stay done"
    );
}

/// Discard drops a dead letter for good.
pub async fn discard_drops_a_dead_letter(t: Target) {
    let s = t.new_group("discard").await;
    t.publish_all(&s, &["a"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.broker
        .dead_letter(&s, G, &got, "unprocessable")
        .await
        .unwrap();
    assert_eq!(t.broker.discard(&s, G, &got).await.unwrap(), 1);
    assert_eq!(t.broker.discard(&s, G, &got).await.unwrap(), 0);
    assert!(t.dead_list(&s).await.is_empty());
    assert_eq!(t.broker.redrive(&s, G, &got).await.unwrap(), 0);
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.pending, info.dead_letters), (0, 0));
}

/// An entry has one dead letter at most. After the cursor moves back,
/// Redis hands out a dead-lettered entry again (`docs/semantics.md`, "Where
/// the rules leave a choice"); dead-lettered once more, its newer dead
/// letter replaces the older, so one redrive makes it owed once and
/// leaves nothing listed. (The local brokers pass over a dead-lettered
/// entry on the replay: the second dead letter changes nothing there.)
pub async fn an_entry_has_one_dead_letter_at_most(t: Target) {
    let s = t.new_group("dead-once").await;
    t.publish_all(&s, &["x"]).await;
    let x = ids(&t.read_new(&s, "c1", 10).await);
    t.broker.dead_letter(&s, G, &x, "bad").await.unwrap();
    t.broker
        .set_group_position(&s, G, StreamStart::Beginning)
        .await
        .unwrap();
    let replayed = ids(&t.read_new(&s, "c1", 10).await);
    t.broker
        .dead_letter(&s, G, &replayed, "bad again")
        .await
        .unwrap();
    let dead = t.dead_list(&s).await;
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((dead.len(), info.dead_letters), (1, 1), "{dead:?}");
    let all: Vec<EntryId> = dead.iter().map(DeadLetter::id).collect();
    assert_eq!(t.broker.redrive(&s, G, &all).await.unwrap(), 1);
    assert_eq!(texts(&t.read_new(&s, "c1", 10).await), ["x"]);
    t.broker.ack(&s, G, &x).await.unwrap();
    assert!(t.dead_list(&s).await.is_empty());
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.pending, info.dead_letters), (0, 0));
}

/// Trimming never loses a dead letter or a pending entry: both can still be
/// redriven or claimed, with their payloads.
pub async fn dead_letters_and_pending_entries_survive_trimming(t: Target) {
    let s = t.new_group("trim-pinned").await;
    t.publish_all(&s, &["dead", "held", "done"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.broker.dead_letter(&s, G, &got[..1], "bug").await.unwrap();
    t.broker.ack(&s, G, &got[2..]).await.unwrap();
    t.publish_all(&s, &["x", "y"]).await;
    t.broker.trim(&s, Trim::MaxLen(1)).await.unwrap();
    let dead = t.dead_list(&s).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].entry.payload(), b"dead");
    t.advance(MIN_IDLE).await;
    let claimed = t.claiming(&s, "c2", 1).await;
    if t.trim_keeps_pending {
        assert_eq!(
            texts(&claimed),
            ["held"],
            "a pending entry outlives trimming"
        );
    } else {
        assert_eq!(
            texts(&claimed),
            ["y"],
            "the trimmed pending entry is acked away, and the read moves on"
        );
        let pending = t.pending_list(&s).await;
        assert!(
            pending.iter().all(|p| p.id != got[1]),
            "a trimmed pending entry is not retried forever: {pending:?}"
        );
    }
    t.broker.redrive(&s, G, &got[..1]).await.unwrap();
    let again = t.claiming(&s, "c2", 1).await;
    assert_eq!(
        texts(&again),
        ["dead"],
        "a dead letter is redriven after trimming"
    );
}

/// A retry copy not yet read by its group is the only record of owed work
/// (its original is acked), so trimming keeps it.
pub async fn a_retry_copy_survives_trimming_until_read(t: Target) {
    let s = t.new_group("trim-copy").await;
    t.publish_all(&s, &["a"]).await;
    let got = ids(&t.read_new(&s, "c1", 10).await);
    t.broker.retry(&s, G, &got, Retry::Copy).await.unwrap();
    t.publish_all(&s, &["b", "c"]).await;
    t.broker.trim(&s, Trim::MaxLen(1)).await.unwrap();
    let next = t.read_new(&s, "c1", 10).await;
    if t.trim_keeps_pending {
        assert_eq!(
            texts(&next),
            ["a", "c"],
            "the copy survived; b was trimmed unread"
        );
        assert_eq!(counts(&next), [1, 0]);
    } else {
        assert_eq!(texts(&next), ["c"], "the copy was trimmed with b");
        assert_eq!(counts(&next), [0]);
    }
}

// ---- rule 9: group info -------------------------------------------------------------------

/// Lag, pending and dead-letter counts and the cursor follow every step.
pub async fn lag_and_pending_counts_are_right_after_each_step(t: Target) {
    let s = t.new_group("counts").await;
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!(
        (info.lag, info.pending, info.dead_letters, info.consumers),
        (0, 0, 0, 0)
    );
    let sent = t.publish_all(&s, &["a", "b", "c", "d"]).await;
    assert_eq!((t.lag(&s).await, t.pending_count(&s).await), (4, 0));
    let got = ids(&t.read_new(&s, "c1", 3).await);
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.lag, info.pending, info.consumers), (1, 3, 1));
    assert_eq!(info.last_delivered, sent[2]);
    t.broker.ack(&s, G, &got[..1]).await.unwrap();
    assert_eq!((t.lag(&s).await, t.pending_count(&s).await), (1, 2));
    t.broker
        .dead_letter(&s, G, &got[1..2], "bad")
        .await
        .unwrap();
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.lag, info.pending, info.dead_letters), (1, 1, 1));
    t.read_new(&s, "c2", 10).await;
    let info = t.broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.lag, info.pending, info.consumers), (0, 2, 2));
    assert_eq!(info.last_delivered, sent[3]);
}

/// Consumer info reports each consumer's pending count and idle time.
pub async fn consumer_info_reports_pending_and_idle_time(t: Target) {
    let s = t.new_group("consumers").await;
    t.publish_all(&s, &["a", "b", "c"]).await;
    t.read_new(&s, "alpha", 2).await;
    t.advance(Duration::from_millis(200)).await;
    t.read_new(&s, "beta", 2).await;
    let consumers = t.broker.consumers(&s, G).await.unwrap();
    let names: Vec<_> = consumers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!((consumers[0].pending, consumers[1].pending), (2, 1));
    assert!(consumers[0].idle_ms >= 200, "{consumers:?}");
    assert!(consumers[1].idle_ms < 200, "{consumers:?}");
}

/// The stream listing names every stream (and none of a broker's own side
/// keys), sorted.
pub async fn the_stream_listing_names_every_stream(t: Target) {
    let (a, b) = (t.stream("listed-a"), t.stream("listed-b"));
    t.publish_all(&b, &["x"]).await;
    t.publish_all(&a, &["y"]).await;
    // A group with a dead letter gives a broker its side keys.
    t.group_at(&a, G, StreamStart::Beginning).await;
    let got = ids(&t.read_new(&a, "c1", 1).await);
    t.broker.dead_letter(&a, G, &got, "listed").await.unwrap();
    let listed: Vec<String> = t
        .broker
        .streams()
        .await
        .unwrap()
        .into_iter()
        .filter(|name| name.starts_with(&t.stream("listed-")))
        .collect();
    assert_eq!(listed, [a, b]);
}

// ---- rule 10: blocking reads ------------------------------------------------------------------

/// A blocking read wakes as soon as an entry arrives.
pub async fn a_blocking_read_wakes_when_an_entry_arrives(t: Target) {
    let s = t.new_group("block-wake").await;
    let broker = Arc::clone(&t.broker);
    let stream = s.clone();
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        broker.publish(&stream, msg("late")).await.unwrap();
    });
    let started = tokio::time::Instant::now();
    let request = ReadRequest::new(&s, G, "c1", ReadMode::New, 10).block(Duration::from_secs(10));
    let batch = t.broker.read(request).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(texts(&batch), ["late"]);
    assert!(
        waited >= Duration::from_millis(200),
        "returned before the publish: {waited:?}"
    );
    assert!(waited < Duration::from_secs(2), "woke late: {waited:?}");
    producer.await.unwrap();
}

/// A blocking read with nothing to return gives up after its block time with
/// an empty batch, not an error.
pub async fn a_blocking_read_returns_an_empty_batch_after_its_block_time(t: Target) {
    let s = t.new_group("block-timeout").await;
    let started = tokio::time::Instant::now();
    let block = Duration::from_millis(400);
    let request = ReadRequest::new(&s, G, "c1", ReadMode::New, 10).block(block);
    let batch = t.broker.read(request).await.unwrap();
    let waited = started.elapsed();
    assert!(batch.is_empty() && batch.dead_lettered.is_empty());
    assert!(waited >= block, "gave up early: {waited:?}");
    assert!(waited < block * 5, "gave up late: {waited:?}");
}

/// A task whose broker calls all complete without waiting still gives the
/// other tasks of its thread their turns: every call takes part in tokio's
/// cooperative budget (`docs/guarantees.md`, "Fair turns"). Without that,
/// a publisher looping on a local broker keeps its worker thread from the
/// subscribers, timers and endpoints that share it. On this suite's
/// current-thread runtime, a task spawned before a loop of single publishes,
/// batch publishes, reads that do not block, or acks must run before the
/// loop has made [`FAIR_TURN_CALLS`] calls.
pub async fn calls_that_never_wait_still_let_other_tasks_run(t: Target) {
    let s = t.new_group("fair-turns").await;
    let id = t.publish_all(&s, &["one"]).await[0];
    let calls = [
        turns_taken(|| Box::pin(ignore(t.broker.publish(&s, msg("x"))))).await,
        turns_taken(|| Box::pin(ignore(t.broker.publish_batch(&s, vec![msg("a"), msg("b")]))))
            .await,
        turns_taken(|| {
            let request = ReadRequest::new(&s, G, "c1", ReadMode::New, 1);
            Box::pin(ignore(t.broker.read(request)))
        })
        .await,
        turns_taken(|| Box::pin(ignore(t.broker.ack(&s, G, std::slice::from_ref(&id))))).await,
    ];
    for (kind, taken) in ["publish", "publish_batch", "read", "ack"]
        .iter()
        .zip(calls)
    {
        assert!(
            taken.is_some(),
            "{kind}: {FAIR_TURN_CALLS} calls in a row never let a spawned task run"
        );
    }
}

/// How many calls in a row [`calls_that_never_wait_still_let_other_tasks_run`]
/// allows before another task must have run (tokio's budget is 128 a turn).
pub const FAIR_TURN_CALLS: usize = 1_000;

/// A broker call's answer, checked and dropped.
async fn ignore<T>(call: impl Future<Output = Result<T, BrokerError>>) {
    call.await.unwrap();
}

/// Calls `call` until a task spawned first has run, at most
/// [`FAIR_TURN_CALLS`] times: how many calls that took, or `None`.
async fn turns_taken<'a>(
    mut call: impl FnMut() -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
) -> Option<usize> {
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = tokio::spawn({
        let ran = Arc::clone(&ran);
        async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) }
    });
    let mut taken = None;
    for n in 1..=FAIR_TURN_CALLS {
        call().await;
        if ran.load(std::sync::atomic::Ordering::SeqCst) {
            taken = Some(n);
            break;
        }
    }
    other.await.unwrap();
    taken
}

/// A blocking read given up on while it waits (dropped, as a stopping app
/// drops its reader's read) leaves nothing pending under its consumer: an
/// entry published then goes to the group's next read, as if never read.
/// A broker may let such a read claim an entry after all (on Redis the read
/// is queued behind the wait); it must then hand the entry back, owed at
/// once, before a listing of the consumer's own pending list answers. Each
/// round drops the read at another moment: before the publish is sent, as
/// it is sent, and after the broker has had time to act on it.
pub async fn a_blocking_read_given_up_on_leaves_nothing_claimed(t: Target) {
    let s = t.new_group("given-up").await;
    for round in 0..3 {
        let request =
            ReadRequest::new(&s, G, "gone", ReadMode::New, 10).block(Duration::from_secs(10));
        let mut read = Box::pin(t.broker.read(request));
        // Long enough for any broker to be waiting (a first read done).
        let waited = tokio::time::timeout(Duration::from_millis(300), read.as_mut()).await;
        assert!(waited.is_err(), "round {round}: nothing was published");
        let published = match round {
            0 => {
                drop(read);
                t.publish_all(&s, &["after"]).await
            }
            1 => {
                let published = t.publish_all(&s, &["as"]).await;
                drop(read);
                published
            }
            _ => {
                let published = t.publish_all(&s, &["before"]).await;
                t.advance(Duration::from_millis(100)).await;
                drop(read);
                published
            }
        };
        let own = t
            .broker
            .pending(&s, G, EntryId::ZERO, 10, Some("gone"))
            .await
            .unwrap();
        assert!(own.is_empty(), "round {round}: left pending: {own:?}");
        let batch = t.read(&s, G, "other", ReadMode::New, 10).await;
        assert_eq!(ids(&batch), published, "round {round}");
        assert_eq!(batch.deliveries[0].delivery_count, 0, "round {round}");
        t.broker.ack(&s, G, &published).await.unwrap();
    }
}

/// A read or an ack answered on the spot (`read_now`, `ack_now`), where a
/// broker offers them, does what `read` and `ack` do: the same entries in
/// the same order, pending under the reader; never a wait, whatever the
/// request's block time; the batch given is cleared and its buffer reused;
/// the same error for an unknown group, with the batch left empty; an ack
/// that settles, idempotently. A broker that does not offer them answers
/// `None` to both, and callers use `read` and `ack`.
pub async fn reads_and_acks_on_the_spot_match_read_and_ack(t: Target) {
    let s = t.new_group("on-the-spot").await;
    t.publish_all(&s, &["a", "b", "c"]).await;
    let mut batch = ReadBatch::default();
    let block = Duration::from_secs(60);
    let request = ReadRequest::new(&s, G, "c1", ReadMode::New, 2).block(block);
    let Some(first) = t.broker.read_now(&request, &mut batch) else {
        assert!(
            t.broker.ack_now(&s, G, &[]).is_none(),
            "read_now is offered only with ack_now"
        );
        return;
    };
    first.unwrap();
    assert_eq!(texts(&batch), ["a", "b"]);
    let read = ids(&batch);
    assert_eq!(t.broker.group_info(&s, G).await.unwrap().pending, 2);
    let buffer = batch.deliveries.as_ptr();
    let started = tokio::time::Instant::now();
    t.broker.read_now(&request, &mut batch).unwrap().unwrap();
    assert_eq!(texts(&batch), ["c"]);
    assert_eq!(
        batch.deliveries.as_ptr(),
        buffer,
        "the batch's buffer is reused"
    );
    t.broker.read_now(&request, &mut batch).unwrap().unwrap();
    assert!(batch.is_empty() && batch.dead_lettered.is_empty());
    assert!(
        started.elapsed() < block / 10,
        "waited: {:?}",
        started.elapsed()
    );

    assert_eq!(t.broker.ack_now(&s, G, &read).unwrap().unwrap(), 2);
    assert_eq!(t.broker.ack_now(&s, G, &read).unwrap().unwrap(), 0);
    assert_eq!(t.broker.group_info(&s, G).await.unwrap().pending, 1);

    t.publish_all(&s, &["d"]).await;
    t.broker.read_now(&request, &mut batch).unwrap().unwrap();
    assert_eq!(texts(&batch), ["d"]);
    let unknown = ReadRequest::new(&s, "ghost", "c1", ReadMode::New, 1);
    match t.broker.read_now(&unknown, &mut batch) {
        Some(Err(BrokerError::NoGroup { group, .. })) => assert_eq!(group, "ghost"),
        other => panic!("expected NoGroup, got {other:?}"),
    }
    assert!(batch.is_empty(), "a failed read leaves the batch empty");
}

// ---- errors ---------------------------------------------------------------------------------

/// Reading, acking or inspecting an unknown group is a NoGroup error naming
/// the stream and the group.
pub async fn an_unknown_group_is_a_clear_error(t: Target) {
    let s = t.stream("unknown-group");
    t.publish_all(&s, &["a"]).await;
    let err = t
        .broker
        .read(ReadRequest::new(&s, "ghost", "c1", ReadMode::New, 1))
        .await
        .unwrap_err();
    match &err {
        BrokerError::NoGroup { stream, group } => {
            assert_eq!((stream.as_str(), group.as_str()), (s.as_str(), "ghost"));
        }
        other => panic!("expected NoGroup, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("ghost") && text.contains(&s), "{text}");
    assert!(matches!(
        t.broker.group_info(&s, "ghost").await,
        Err(BrokerError::NoGroup { .. })
    ));
    let other_stream = t.stream("no-stream-at-all");
    assert!(matches!(
        t.broker
            .read(ReadRequest::new(&other_stream, G, "c1", ReadMode::New, 1))
            .await,
        Err(BrokerError::NoGroup { .. })
    ));
}

/// `check_mode` accepts every read mode the broker serves and refuses, with
/// `Unsupported`, the ones it does not (before an app reads anything).
pub async fn check_mode_refuses_only_what_the_broker_cannot_serve(t: Target) {
    let modes = [
        ReadMode::New,
        ReadMode::Reclaim { min_idle: MIN_IDLE },
        ReadMode::own_pending(EntryId::ZERO),
    ];
    for mode in modes {
        t.broker.check_mode(mode).await.unwrap();
    }
    let claiming = t
        .broker
        .check_mode(ReadMode::Claiming { min_idle: MIN_IDLE })
        .await;
    if t.claiming_reads {
        claiming.unwrap();
    } else {
        match claiming {
            Err(BrokerError::Unsupported { detail, .. }) => {
                assert!(!detail.is_empty());
            }
            other => panic!("expected Unsupported for a claiming read, got {other:?}"),
        }
    }
}

/// A group cannot start, or move its cursor, past the last id its stream
/// ever had: it would pass over every entry appended until the clock
/// reached that id. The error names the stream and both ids, and nothing
/// changes.
pub async fn a_start_past_the_end_of_the_stream_is_refused(t: Target) {
    let s = t.stream("start-past-end");
    let first = t.publish_all(&s, &["a", "b"]).await;
    let past = EntryId::new(first[1].ms + 3_600_000, 0);
    let err = t
        .broker
        .ensure_group(&s, G, StreamStart::Id(past))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&past.to_string())
            && text.contains(&s)
            && text.contains(&first[1].to_string()),
        "{text}"
    );
    assert!(t.broker.group_info(&s, G).await.is_err(), "no group made");
    // At the last id is fine: only later entries.
    t.group_at(&s, G, StreamStart::Id(first[1])).await;
    let err = t
        .broker
        .set_group_position(&s, G, StreamStart::Id(past))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&past.to_string()), "{err}");
    let later = t.publish_all(&s, &["c"]).await;
    let got = t.read_new(&s, "c1", 10).await;
    assert_eq!(ids(&got), later, "the cursor did not move");
    // A stream that does not exist yet has nothing to start after.
    let fresh = t.stream("start-past-end-fresh");
    assert!(
        t.broker
            .ensure_group(&fresh, G, StreamStart::Id(EntryId::new(1, 0)))
            .await
            .is_err()
    );
}

/// Stream, group and consumer names are checked before anything changes:
/// an empty name, a control character, or a brace in a stream or group
/// name (which would let two names share a broker's keys) is an
/// `InvalidArgument` error naming the name and the rule.
pub async fn bad_names_are_refused_with_the_rule(t: Target) {
    let s = t.stream("names");
    for bad in ["", "a\nb", "a}:due:b", "x{y"] {
        let bad_stream = format!("{s}{bad}");
        let stream = if bad.is_empty() {
            ""
        } else {
            bad_stream.as_str()
        };
        let err = t.broker.publish(stream, msg("x")).await.unwrap_err();
        assert!(matches!(err, BrokerError::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains("stream name"), "{err}");
        let err = t
            .broker
            .ensure_group(stream, G, StreamStart::Beginning)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("stream name"), "{err}");
        let err = t
            .broker
            .ensure_group(&s, bad, StreamStart::Beginning)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("group name"), "{err}");
    }
    let long = "n".repeat(ruststream_core::MAX_NAME_LEN + 1);
    let err = t.broker.publish(&long, msg("x")).await.unwrap_err();
    assert!(err.to_string().contains("the limit is"), "{err}");
    t.group_at(&s, G, StreamStart::Beginning).await;
    let err = t
        .broker
        .read(ReadRequest::new(
            &s,
            G,
            "bad\u{0}consumer",
            ReadMode::New,
            1,
        ))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("consumer name"), "{err}");
    // Nothing was created by the refused calls, and good names still work.
    assert!(
        t.broker
            .stream_info(&format!("{s}x{{y"))
            .await
            .map_or(true, |i| i.is_none())
    );
    t.publish_all(&s, &["ok"]).await;
    assert_eq!(texts(&t.read_new(&s, "c1", 5).await), ["ok"]);
}

#[cfg(test)]
mod rules_listed {
    /// Every rule this module defines (a `pub async fn NAME(t: Target)`
    /// here or in a submodule) is on the suite's list, and every name on
    /// the list is a rule: a rule left off the list would never run.
    #[test]
    fn every_rule_defined_is_run() {
        let sources = [
            include_str!("conformance.rs"),
            include_str!("conformance/chaos.rs"),
            include_str!("conformance/order.rs"),
        ];
        let mut defined: Vec<&str> = sources
            .iter()
            .flat_map(|source| source.lines())
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .filter_map(|rest| rest.strip_suffix("(t: Target) {"))
            .collect();
        defined.sort_unstable();
        let mut listed = super::RULES.to_vec();
        listed.sort_unstable();
        assert_eq!(defined, listed, "rules defined vs rules the suite runs");
        assert!(listed.len() >= 39);
    }
}
