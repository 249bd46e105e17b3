//! Unit tests of the engine: every rule of SPEC section 3 that a pure state
//! machine can show, with explicit times (no runtime, no clock).

use std::time::Duration;

use super::*;

const S: &str = "jobs";
const G: &str = "workers";
const T0: u64 = 1_000;

// ---------------------------------------------------------------- helpers

fn msg(payload: &str) -> Message {
    Message::new(payload.as_bytes().to_vec())
}

/// Publishes `n` messages `"<prefix>0"`, `"<prefix>1"`, ... at `now`.
fn publish_n(e: &mut Engine, prefix: &str, n: usize, now: u64) -> Vec<EntryId> {
    e.publish(S, (0..n).map(|i| msg(&format!("{prefix}{i}"))), now)
}

fn publish_one(e: &mut Engine, payload: &str, now: u64) -> EntryId {
    e.publish(S, [msg(payload)], now)[0]
}

/// An engine with group `G` on `S` starting at the beginning, and `n`
/// entries `m0..` published at `T0`.
fn setup(n: usize) -> (Engine, Vec<EntryId>) {
    let mut e = Engine::new();
    assert!(e.ensure_group(S, G, StreamStart::Beginning, T0));
    let ids = publish_n(&mut e, "m", n, T0);
    (e, ids)
}

fn new_req(consumer: &'static str, count: usize) -> ReadRequest<'static> {
    ReadRequest::new(S, G, consumer, ReadMode::New, count)
}

fn claiming_req(consumer: &'static str, min_idle_ms: u64, count: usize) -> ReadRequest<'static> {
    let min_idle = Duration::from_millis(min_idle_ms);
    ReadRequest::new(S, G, consumer, ReadMode::Claiming { min_idle }, count)
}

fn reclaim_req(consumer: &'static str, min_idle_ms: u64, count: usize) -> ReadRequest<'static> {
    let min_idle = Duration::from_millis(min_idle_ms);
    ReadRequest::new(S, G, consumer, ReadMode::Reclaim { min_idle }, count)
}

fn own_req(consumer: &'static str, after: EntryId, count: usize) -> ReadRequest<'static> {
    ReadRequest::new(S, G, consumer, ReadMode::OwnPending { after }, count)
}

fn read(e: &mut Engine, req: ReadRequest<'_>, now: u64) -> ReadBatch {
    e.read(&req, now).unwrap()
}

fn ids(batch: &ReadBatch) -> Vec<EntryId> {
    batch.deliveries.iter().map(Delivery::id).collect()
}

fn counts(batch: &ReadBatch) -> Vec<u32> {
    batch.deliveries.iter().map(|d| d.delivery_count).collect()
}

fn payloads(batch: &ReadBatch) -> Vec<String> {
    batch
        .deliveries
        .iter()
        .map(|d| String::from_utf8(d.entry.payload().to_vec()).unwrap())
        .collect()
}

fn all_pending(e: &Engine, now: u64) -> Vec<PendingEntry> {
    e.pending(S, G, EntryId::ZERO, usize::MAX, None, now)
        .unwrap()
}

fn pending_entry(e: &Engine, id: EntryId, now: u64) -> PendingEntry {
    let found = e.pending(S, G, id, 1, None, now).unwrap();
    match found.into_iter().next() {
        Some(p) if p.id == id => p,
        other => panic!("{id} is not pending (found {other:?})"),
    }
}

fn pending_ids(e: &Engine, now: u64) -> Vec<EntryId> {
    all_pending(e, now).iter().map(|p| p.id).collect()
}

fn dead(e: &Engine) -> Vec<DeadLetter> {
    e.dead_letters(S, G, EntryId::ZERO, usize::MAX).unwrap()
}

fn info(e: &Engine) -> GroupInfo {
    e.group_info(S, G).unwrap()
}

fn assert_no_group<T: std::fmt::Debug>(result: BrokerResult<T>, stream: &str, group: &str) {
    match result {
        Err(err @ BrokerError::NoGroup { .. }) => {
            let text = err.to_string();
            assert!(text.contains(stream), "{text:?} does not name {stream:?}");
            assert!(text.contains(group), "{text:?} does not name {group:?}");
            match err {
                BrokerError::NoGroup {
                    stream: s,
                    group: g,
                } => {
                    assert_eq!(s, stream);
                    assert_eq!(g, group);
                }
                _ => unreachable!(),
            }
        }
        other => panic!("expected NoGroup for {stream:?}/{group:?}, got {other:?}"),
    }
}

// ------------------------------------------------------------ streams

#[test]
fn publish_returns_strictly_increasing_ids_in_order() {
    let mut e = Engine::new();
    let ids = publish_n(&mut e, "m", 3, 5_000);
    assert_eq!(
        ids,
        vec![
            EntryId::new(5_000, 0),
            EntryId::new(5_000, 1),
            EntryId::new(5_000, 2)
        ]
    );
    let later = publish_one(&mut e, "later", 5_001);
    assert_eq!(later, EntryId::new(5_001, 0));
    let range = e.range(S, EntryId::ZERO, EntryId::MAX, 10);
    let range_ids: Vec<EntryId> = range.iter().map(|en| en.id).collect();
    assert_eq!(range_ids, [ids, vec![later]].concat());
}

#[test]
fn ids_stay_strictly_increasing_when_the_clock_goes_backwards() {
    let mut e = Engine::new();
    let a = publish_one(&mut e, "a", 10_000);
    let b = publish_one(&mut e, "b", 9_000);
    let c = publish_one(&mut e, "c", 1);
    let d = publish_one(&mut e, "d", 10_000);
    let f = publish_one(&mut e, "f", 10_001);
    assert_eq!(a, EntryId::new(10_000, 0));
    assert_eq!(b, EntryId::new(10_000, 1));
    assert_eq!(c, EntryId::new(10_000, 2));
    assert_eq!(d, EntryId::new(10_000, 3));
    assert_eq!(f, EntryId::new(10_001, 0));
    assert_eq!(e.stream_info(S).unwrap().last_id, f);
}

#[test]
fn publish_shared_appends_like_publish() {
    let mut e = Engine::new();
    let shared = Arc::new(msg("shared"));
    let a = e.publish_shared(S, Arc::clone(&shared), 7);
    let b = e.publish_shared(S, shared, 7);
    assert!(a < b);
    let got = e.range(S, a, b, 10);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].payload(), b"shared");
}

#[test]
fn range_bounds_are_inclusive() {
    let (e, ids) = setup(5);
    let got: Vec<EntryId> = e
        .range(S, ids[1], ids[3], 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(got, ids[1..=3].to_vec());
    let single: Vec<EntryId> = e
        .range(S, ids[2], ids[2], 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(single, vec![ids[2]]);
}

#[test]
fn range_bounds_need_not_be_entry_ids() {
    let mut e = Engine::new();
    let a = publish_one(&mut e, "a", 100);
    let b = publish_one(&mut e, "b", 200);
    let c = publish_one(&mut e, "c", 300);
    let got: Vec<EntryId> = e
        .range(S, EntryId::new(150, 0), EntryId::new(300, 0), 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(got, vec![b, c]);
    assert_eq!(e.range(S, EntryId::ZERO, EntryId::new(100, 0), 10)[0].id, a);
}

#[test]
fn range_respects_count() {
    let (e, ids) = setup(5);
    let got: Vec<EntryId> = e
        .range(S, EntryId::ZERO, EntryId::MAX, 2)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(got, ids[..2].to_vec());
    assert!(e.range(S, EntryId::ZERO, EntryId::MAX, 0).is_empty());
}

#[test]
fn range_with_from_after_to_is_empty() {
    let (e, ids) = setup(3);
    assert!(e.range(S, ids[2], ids[0], 10).is_empty());
}

#[test]
fn range_of_a_missing_stream_is_empty() {
    let e = Engine::new();
    assert!(e.range("nope", EntryId::ZERO, EntryId::MAX, 10).is_empty());
}

#[test]
fn payload_and_headers_round_trip_exactly() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::Beginning, T0);
    let payload: Vec<u8> = vec![0, 255, 0xC3, 0x28, b'\n', 0, b'{', 0x80];
    let sent = Message::new(payload.clone())
        .with_header("z-last-set-first", "1")
        .with_header("tenant", "acme ünïcødé")
        .with_header("empty", "")
        .with_header("a", "line\nbreak");
    let id = e.publish(S, [sent.clone(), Message::default()], T0)[0];

    let replay = e.range(S, id, id, 1);
    assert_eq!(*replay[0].message, sent);
    assert_eq!(replay[0].payload(), payload.as_slice());
    let order: Vec<(&str, &str)> = replay[0].headers().iter().collect();
    assert_eq!(
        order,
        vec![
            ("z-last-set-first", "1"),
            ("tenant", "acme ünïcødé"),
            ("empty", ""),
            ("a", "line\nbreak"),
        ]
    );

    let batch = read(&mut e, new_req("c", 10), T0);
    assert_eq!(*batch.deliveries[0].entry.message, sent);
    assert_eq!(*batch.deliveries[1].entry.message, Message::default());
}

#[test]
fn stream_info_reports_length_ids_and_groups() {
    let mut e = Engine::new();
    assert!(e.stream_info(S).is_none());
    assert!(!e.has_stream(S));

    e.ensure_group(S, "b-group", StreamStart::New, T0);
    e.ensure_group(S, "a-group", StreamStart::New, T0);
    let empty = e.stream_info(S).unwrap();
    assert_eq!(empty.name, S);
    assert_eq!(empty.length, 0);
    assert_eq!(empty.first_id, None);
    assert_eq!(empty.last_id, EntryId::ZERO);
    assert_eq!(
        empty.groups,
        vec!["a-group".to_owned(), "b-group".to_owned()]
    );
    assert!(e.has_stream(S));

    let ids = publish_n(&mut e, "m", 3, T0);
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 3);
    assert_eq!(si.first_id, Some(ids[0]));
    assert_eq!(si.last_id, ids[2]);
}

// ------------------------------------------------------- rule 1: groups

#[test]
fn group_created_at_new_sees_only_later_entries() {
    let mut e = Engine::new();
    publish_n(&mut e, "old", 3, T0);
    assert!(e.ensure_group(S, G, StreamStart::New, T0));
    assert_eq!(info(&e).lag, 0);
    assert!(read(&mut e, new_req("c", 10), T0).is_empty());

    let fresh = publish_one(&mut e, "fresh", T0 + 1);
    let batch = read(&mut e, new_req("c", 10), T0 + 1);
    assert_eq!(ids(&batch), vec![fresh]);
}

#[test]
fn group_created_at_beginning_sees_the_whole_stream() {
    let mut e = Engine::new();
    let ids_before = publish_n(&mut e, "m", 3, T0);
    assert!(e.ensure_group(S, G, StreamStart::Beginning, T0));
    assert_eq!(info(&e).lag, 3);
    assert_eq!(info(&e).last_delivered, EntryId::ZERO);
    let batch = read(&mut e, new_req("c", 10), T0);
    assert_eq!(ids(&batch), ids_before);
    assert_eq!(payloads(&batch), vec!["m0", "m1", "m2"]);
}

#[test]
fn group_created_at_an_id_sees_entries_after_it() {
    let mut e = Engine::new();
    let all = publish_n(&mut e, "m", 4, T0);
    assert!(e.ensure_group(S, G, StreamStart::Id(all[1]), T0));
    assert_eq!(info(&e).last_delivered, all[1]);
    assert_eq!(info(&e).lag, 2);
    let batch = read(&mut e, new_req("c", 10), T0);
    assert_eq!(ids(&batch), all[2..].to_vec());
}

#[test]
fn ensuring_an_existing_group_keeps_its_cursor() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("c", 2), T0);
    assert_eq!(info(&e).last_delivered, all[1]);

    assert!(!e.ensure_group(S, G, StreamStart::New, T0 + 5));
    assert!(!e.ensure_group(S, G, StreamStart::Beginning, T0 + 5));
    assert!(!e.ensure_group(S, G, StreamStart::Id(all[2]), T0 + 5));
    let gi = info(&e);
    assert_eq!(gi.last_delivered, all[1]);
    assert_eq!(gi.pending, 2);
    assert_eq!(ids(&read(&mut e, new_req("c", 10), T0 + 5)), vec![all[2]]);
}

#[test]
fn ensure_group_creates_the_stream() {
    let mut e = Engine::new();
    assert!(e.ensure_group(S, G, StreamStart::New, T0));
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 0);
    assert_eq!(si.groups, vec![G.to_owned()]);
    assert!(read(&mut e, new_req("c", 1), T0).is_empty());
}

#[test]
fn set_group_position_moves_the_cursor_and_leaves_pending_alone() {
    let (mut e, all) = setup(4);
    read(&mut e, new_req("c", 2), T0);
    let before = all_pending(&e, T0 + 10);

    e.set_group_position(S, G, StreamStart::New).unwrap();
    assert_eq!(info(&e).last_delivered, all[3]);
    assert_eq!(info(&e).lag, 0);
    assert_eq!(all_pending(&e, T0 + 10), before);
    assert!(read(&mut e, new_req("c", 10), T0 + 10).is_empty());

    e.set_group_position(S, G, StreamStart::Id(all[2])).unwrap();
    assert_eq!(info(&e).last_delivered, all[2]);
    assert_eq!(info(&e).lag, 1);
    assert_eq!(all_pending(&e, T0 + 10), before);
    assert_eq!(ids(&read(&mut e, new_req("c", 10), T0 + 10)), vec![all[3]]);
}

#[test]
fn set_group_position_keeps_dead_letters() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("c", 1), T0);
    e.dead_letter(S, G, &[all[0]], "poison", T0).unwrap();
    e.set_group_position(S, G, StreamStart::New).unwrap();
    assert_eq!(info(&e).dead_letters, 1);
    assert_eq!(dead(&e)[0].id(), all[0]);
}

#[test]
fn rewinding_the_cursor_does_not_hand_out_entries_still_held() {
    // Rules 2 and 3: an entry held by a consumer is not handed out again
    // while its claim stands, even as "new" after the cursor was moved back.
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 2), T0);
    e.set_group_position(S, G, StreamStart::Beginning).unwrap();
    assert_eq!(info(&e).lag, 1);

    let batch = read(&mut e, new_req("b", 10), T0 + 1);
    assert_eq!(ids(&batch), vec![all[2]]);
    let p = pending_entry(&e, all[0], T0 + 1);
    assert_eq!(p.consumer.as_deref(), Some("a"));
    assert_eq!(p.times_delivered, 1);
    assert_eq!(info(&e).last_delivered, all[2]);
}

#[test]
fn rewinding_the_cursor_does_not_revive_dead_letters_or_duplicate_owed_entries() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 3), T0);
    e.dead_letter(S, G, &[all[0]], "poison", T0).unwrap();
    e.retry_after(S, G, &[all[1]], 0, T0).unwrap();
    e.set_group_position(S, G, StreamStart::Beginning).unwrap();
    assert_eq!(info(&e).lag, 0);

    // all[1] goes out once, as owed (a redelivery); all[0] stays dead.
    let batch = read(&mut e, new_req("b", 10), T0 + 1);
    assert_eq!(ids(&batch), vec![all[1]]);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(pending_ids(&e, T0 + 1), vec![all[1], all[2]]);
    assert_eq!(dead(&e).len(), 1);
    assert_eq!(info(&e).dead_letters, 1);
}

#[test]
fn rewinding_the_cursor_replays_settled_entries_as_new() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 3), T0);
    e.ack(S, G, &all).unwrap();
    e.set_group_position(S, G, StreamStart::Beginning).unwrap();
    assert_eq!(info(&e).lag, 3);
    let batch = read(&mut e, new_req("b", 10), T0 + 1);
    assert_eq!(ids(&batch), all);
    assert_eq!(counts(&batch), vec![0, 0, 0]);
}

#[test]
fn set_group_position_on_an_unknown_group_is_no_group() {
    let mut e = Engine::new();
    assert_no_group(e.set_group_position(S, G, StreamStart::New), S, G);
    e.ensure_group(S, "other", StreamStart::New, T0);
    assert_no_group(e.set_group_position(S, G, StreamStart::New), S, G);
}

#[test]
fn reading_an_unknown_group_or_stream_is_no_group_naming_both() {
    let mut e = Engine::new();
    assert_no_group(e.read(&new_req("c", 1), T0), S, G);

    publish_one(&mut e, "x", T0);
    assert_no_group(e.read(&new_req("c", 1), T0), S, G);

    e.ensure_group(S, "other", StreamStart::Beginning, T0);
    for mode in [
        ReadMode::New,
        ReadMode::Claiming {
            min_idle: Duration::ZERO,
        },
        ReadMode::Reclaim {
            min_idle: Duration::ZERO,
        },
        ReadMode::OwnPending {
            after: EntryId::ZERO,
        },
    ] {
        let req = ReadRequest::new(S, G, "c", mode, 1);
        assert_no_group(e.read(&req, T0), S, G);
    }
    let other_stream = ReadRequest::new("elsewhere", "other", "c", ReadMode::New, 1);
    assert_no_group(e.read(&other_stream, T0), "elsewhere", "other");
}

#[test]
fn group_calls_on_an_unknown_group_are_no_group() {
    let mut e = Engine::new();
    let id = publish_one(&mut e, "x", T0);
    assert_no_group(e.ack(S, G, &[id]), S, G);
    assert_no_group(e.retry_after(S, G, &[id], 0, T0), S, G);
    assert_no_group(e.retry_copy(S, G, &[id], T0), S, G);
    assert_no_group(e.retry_copy(S, G, &[], T0), S, G);
    assert_no_group(e.ack(S, G, &[]), S, G);
    assert_no_group(e.dead_letter(S, G, &[id], "r", T0), S, G);
    assert_no_group(e.redrive(S, G, &[id], T0), S, G);
    assert_no_group(e.discard(S, G, &[id]), S, G);
    assert_no_group(e.group_info(S, G), S, G);
    assert_no_group(e.consumers(S, G, T0), S, G);
    assert_no_group(e.pending(S, G, EntryId::ZERO, 10, None, T0), S, G);
    assert_no_group(e.dead_letters(S, G, EntryId::ZERO, 10), S, G);
    assert_no_group(e.group_info("missing", G), "missing", G);
}

#[test]
fn a_failed_read_creates_no_stream() {
    let mut e = Engine::new();
    assert!(e.read(&new_req("c", 1), T0).is_err());
    assert!(!e.has_stream(S));
}

// ------------------------------------------------- rule 2: new entries

#[test]
fn each_new_entry_goes_to_exactly_one_consumer() {
    let (mut e, all) = setup(5);
    let a = read(&mut e, new_req("a", 2), T0);
    let b = read(&mut e, new_req("b", 2), T0);
    let c = read(&mut e, new_req("c", 10), T0);
    let d = read(&mut e, new_req("a", 10), T0);
    assert_eq!(ids(&a), all[0..2].to_vec());
    assert_eq!(ids(&b), all[2..4].to_vec());
    assert_eq!(ids(&c), all[4..].to_vec());
    assert!(d.is_empty());
    for batch in [&a, &b, &c] {
        assert!(batch.deliveries.iter().all(|d| d.delivery_count == 0));
        assert!(batch.deliveries.iter().all(|d| d.idle_ms == 0));
        assert!(batch.dead_lettered.is_empty());
    }
    let owners: Vec<Option<String>> = all_pending(&e, T0)
        .into_iter()
        .map(|p| p.consumer)
        .collect();
    let expected: Vec<Option<String>> = ["a", "a", "b", "b", "c"]
        .iter()
        .map(|s| Some((*s).to_owned()))
        .collect();
    assert_eq!(owners, expected);
}

#[test]
fn independent_groups_each_see_every_entry() {
    let mut e = Engine::new();
    e.ensure_group(S, "g1", StreamStart::New, T0);
    e.ensure_group(S, "g2", StreamStart::New, T0);
    let all = publish_n(&mut e, "m", 3, T0);
    let r1 = ReadRequest::new(S, "g1", "c", ReadMode::New, 10);
    let r2 = ReadRequest::new(S, "g2", "c", ReadMode::New, 10);
    assert_eq!(ids(&e.read(&r1, T0).unwrap()), all);
    assert_eq!(ids(&e.read(&r2, T0).unwrap()), all);
    e.ack(S, "g1", &all).unwrap();
    assert_eq!(e.group_info(S, "g1").unwrap().pending, 0);
    assert_eq!(e.group_info(S, "g2").unwrap().pending, 3);
}

#[test]
fn new_reads_respect_count() {
    let (mut e, all) = setup(5);
    assert_eq!(ids(&read(&mut e, new_req("c", 1), T0)), vec![all[0]]);
    assert_eq!(ids(&read(&mut e, new_req("c", 3), T0)), all[1..4].to_vec());
    assert_eq!(ids(&read(&mut e, new_req("c", 3), T0)), vec![all[4]]);
    assert!(read(&mut e, new_req("c", 3), T0).is_empty());
}

#[test]
fn a_read_of_zero_entries_is_invalid_argument() {
    let (mut e, _) = setup(1);
    for req in [
        new_req("c", 0),
        claiming_req("c", 0, 0),
        reclaim_req("c", 0, 0),
        own_req("c", EntryId::ZERO, 0),
    ] {
        match e.read(&req, T0) {
            Err(BrokerError::InvalidArgument(text)) => {
                assert!(text.contains("count"), "{text}");
                assert!(text.contains(G) && text.contains(S), "{text}");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(info(&e).lag, 1);
    assert_eq!(info(&e).consumers, 0);
}

#[test]
fn an_empty_read_returns_an_empty_batch_and_registers_the_consumer() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::New, T0);
    let batch = read(&mut e, new_req("c", 10), T0);
    assert!(batch.is_empty());
    assert!(batch.dead_lettered.is_empty());
    assert_eq!(info(&e).consumers, 1);
}

// ------------------------------------------- rule 3: pending and claims

#[test]
fn a_delivered_entry_is_pending_with_owner_count_and_idle_time() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("c", 1), T0 + 100);
    let p = pending_entry(&e, all[0], T0 + 350);
    assert_eq!(
        p,
        PendingEntry {
            id: all[0],
            consumer: Some("c".to_owned()),
            idle_ms: 250,
            times_delivered: 1,
            owed_in_ms: None,
        }
    );
}

#[test]
fn pending_filters_by_consumer_and_pages_by_from_and_count() {
    let (mut e, all) = setup(5);
    read(&mut e, new_req("a", 2), T0);
    read(&mut e, new_req("b", 3), T0);
    let of = |e: &Engine, c: &str| -> Vec<EntryId> {
        e.pending(S, G, EntryId::ZERO, 10, Some(c), T0)
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect()
    };
    assert_eq!(of(&e, "a"), all[..2].to_vec());
    assert_eq!(of(&e, "b"), all[2..].to_vec());
    assert!(of(&e, "nobody").is_empty());

    let page: Vec<EntryId> = e
        .pending(S, G, all[1], 2, None, T0)
        .unwrap()
        .iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(page, all[1..3].to_vec());
    assert!(
        e.pending(S, G, EntryId::ZERO, 0, None, T0)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_held_entry_is_not_handed_out_again_while_its_claim_stands() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let t = T0 + 999;
    assert!(read(&mut e, new_req("b", 10), t).is_empty());
    assert!(read(&mut e, claiming_req("b", 1_000, 10), t).is_empty());
    assert!(read(&mut e, reclaim_req("b", 1_000, 10), t).is_empty());
    let p = pending_entry(&e, all[0], t);
    assert_eq!(p.consumer.as_deref(), Some("a"));
    assert_eq!(p.times_delivered, 1);
    assert_eq!(p.idle_ms, 999);
}

// ----------------------------------------------- rule 4: idle claims

#[test]
fn claiming_takes_an_entry_idle_for_exactly_min_idle() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let batch = read(&mut e, claiming_req("b", 1_000, 10), T0 + 1_000);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(batch.deliveries[0].delivery_count, 1);
    assert_eq!(batch.deliveries[0].idle_ms, 1_000);
    assert_eq!(payloads(&batch), vec!["m0"]);

    let p = pending_entry(&e, all[0], T0 + 1_000);
    assert_eq!(p.consumer.as_deref(), Some("b"));
    assert_eq!(p.times_delivered, 2);
    assert_eq!(p.idle_ms, 0);
    assert!(
        e.pending(S, G, EntryId::ZERO, 10, Some("a"), T0 + 1_000)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn reclaim_takes_an_entry_idle_for_exactly_min_idle() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    assert!(read(&mut e, reclaim_req("b", 500, 10), T0 + 499).is_empty());
    let batch = read(&mut e, reclaim_req("b", 500, 10), T0 + 500);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(batch.deliveries[0].idle_ms, 500);
    assert_eq!(
        pending_entry(&e, all[0], T0 + 500).consumer.as_deref(),
        Some("b")
    );
}

#[test]
fn a_claim_restarts_the_idle_time() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    read(&mut e, reclaim_req("b", 100, 10), T0 + 100);
    assert!(read(&mut e, reclaim_req("c", 100, 10), T0 + 199).is_empty());
    let batch = read(&mut e, reclaim_req("c", 100, 10), T0 + 200);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(counts(&batch), vec![2]);
    assert_eq!(batch.deliveries[0].idle_ms, 100);
    assert_eq!(pending_entry(&e, all[0], T0 + 200).times_delivered, 3);
}

#[test]
fn claims_take_the_longest_idle_first_and_respect_count() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::Beginning, T0);
    let all = publish_n(&mut e, "m", 3, T0);
    // Deliver in the order 2, 0, 1 at increasing times.
    e.set_group_position(S, G, StreamStart::Id(all[1])).unwrap();
    read(&mut e, new_req("a", 1), T0); // all[2]
    e.set_group_position(S, G, StreamStart::Beginning).unwrap();
    read(&mut e, new_req("a", 1), T0 + 10); // all[0]
    read(&mut e, new_req("a", 1), T0 + 20); // all[1]

    let first = read(&mut e, reclaim_req("b", 100, 2), T0 + 500);
    assert_eq!(ids(&first), vec![all[2], all[0]]);
    assert_eq!(
        first
            .deliveries
            .iter()
            .map(|d| d.idle_ms)
            .collect::<Vec<_>>(),
        vec![500, 490]
    );
    let second = read(&mut e, reclaim_req("b", 100, 2), T0 + 500);
    assert_eq!(ids(&second), vec![all[1]]);
}

#[test]
fn owed_entries_go_before_idle_ones_and_before_new_ones() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 2), T0); // all[0], all[1]
    e.retry_after(S, G, &[all[1]], 0, T0 + 50).unwrap(); // owed
    let fresh = publish_one(&mut e, "fresh", T0 + 60);

    let batch = read(&mut e, claiming_req("b", 100, 10), T0 + 100);
    assert_eq!(ids(&batch), vec![all[1], all[0], all[2], fresh]);
    assert_eq!(counts(&batch), vec![1, 1, 0, 0]);
    assert_eq!(
        batch
            .deliveries
            .iter()
            .map(|d| d.idle_ms)
            .collect::<Vec<_>>(),
        vec![50, 100, 0, 0]
    );
}

#[test]
fn owed_entries_go_before_new_ones_in_a_new_read() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 0, T0).unwrap();
    let batch = read(&mut e, new_req("b", 2), T0 + 1);
    assert_eq!(ids(&batch), vec![all[0], all[1]]);
    assert_eq!(counts(&batch), vec![1, 0]);
    assert_eq!(info(&e).last_delivered, all[1]);
}

#[test]
fn owed_entries_go_out_in_the_order_they_became_due() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 3), T0);
    e.retry_after(S, G, &[all[0]], 300, T0).unwrap(); // due T0+300
    e.retry_after(S, G, &[all[1]], 100, T0).unwrap(); // due T0+100
    e.retry_after(S, G, &[all[2]], 200, T0).unwrap(); // due T0+200
    let batch = read(&mut e, reclaim_req("b", 10_000, 10), T0 + 300);
    assert_eq!(ids(&batch), vec![all[1], all[2], all[0]]);
}

#[test]
fn a_count_filled_by_owed_entries_leaves_the_cursor_alone() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 0, T0).unwrap();
    let batch = read(&mut e, new_req("b", 1), T0);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(info(&e).last_delivered, all[0]);
    assert_eq!(info(&e).lag, 2);
}

#[test]
fn reclaim_never_hands_out_new_entries() {
    let (mut e, all) = setup(3);
    assert!(read(&mut e, reclaim_req("a", 0, 10), T0).is_empty());
    assert_eq!(info(&e).lag, 3);
    assert_eq!(info(&e).last_delivered, EntryId::ZERO);

    read(&mut e, new_req("a", 1), T0);
    let batch = read(&mut e, reclaim_req("b", 0, 10), T0 + 5);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(info(&e).lag, 2);
}

#[test]
fn claiming_hands_out_new_entries_after_idle_ones() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 1), T0);
    let batch = read(&mut e, claiming_req("b", 100, 2), T0 + 100);
    assert_eq!(ids(&batch), vec![all[0], all[1]]);
    assert_eq!(counts(&batch), vec![1, 0]);
    assert_eq!(info(&e).last_delivered, all[1]);
}

#[test]
fn claiming_with_zero_min_idle_does_not_rehand_what_it_just_delivered() {
    let (mut e, all) = setup(3);
    let batch = read(&mut e, claiming_req("a", 0, 10), T0);
    assert_eq!(ids(&batch), all);
    assert_eq!(counts(&batch), vec![0, 0, 0]);
    assert!(pending_ids(&e, T0).iter().all(|id| all.contains(id)));
    assert_eq!(
        all_pending(&e, T0).iter().map(|p| p.times_delivered).max(),
        Some(1)
    );
}

#[test]
fn claiming_with_zero_min_idle_does_not_rehand_an_owed_entry_in_the_same_read() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 0, T0).unwrap();
    let batch = read(&mut e, claiming_req("b", 0, 10), T0 + 1);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(pending_entry(&e, all[0], T0 + 1).times_delivered, 2);
}

#[test]
fn claiming_with_zero_min_idle_takes_held_entries_at_once() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let batch = read(&mut e, claiming_req("b", 0, 10), T0);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(batch.deliveries[0].idle_ms, 0);
}

#[test]
fn a_consumer_may_claim_its_own_idle_entry() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let batch = read(&mut e, reclaim_req("a", 100, 10), T0 + 100);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(counts(&batch), vec![1]);
}

#[test]
fn min_idle_longer_than_the_clock_claims_nothing() {
    let (mut e, _) = setup(1);
    read(&mut e, new_req("a", 1), 0);
    assert!(read(&mut e, reclaim_req("b", 10_000, 10), 5).is_empty());
}

// ---------------------------------------- rule 5: own pending re-reads

#[test]
fn own_pending_returns_only_the_consumers_own_held_entries() {
    let (mut e, all) = setup(5);
    read(&mut e, new_req("a", 2), T0); // a: 0, 1
    read(&mut e, new_req("b", 1), T0); // b: 2
    read(&mut e, new_req("a", 1), T0); // a: 3
    e.retry_after(S, G, &[all[1]], 0, T0).unwrap(); // owed, nobody's

    let batch = read(&mut e, own_req("a", EntryId::ZERO, 10), T0 + 40);
    assert_eq!(ids(&batch), vec![all[0], all[3]]);
    assert_eq!(counts(&batch), vec![1, 1]);
    assert_eq!(
        batch
            .deliveries
            .iter()
            .map(|d| d.idle_ms)
            .collect::<Vec<_>>(),
        vec![40, 40]
    );
    // It never hands out new entries or moves the cursor.
    assert_eq!(info(&e).last_delivered, all[3]);
    assert_eq!(info(&e).lag, 1);
    // The owed entry is still owed to the group.
    assert_eq!(pending_entry(&e, all[1], T0 + 40).consumer, None);
}

#[test]
fn own_pending_increments_delivery_counts() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    for expected in 1..=3 {
        let batch = read(
            &mut e,
            own_req("a", EntryId::ZERO, 10),
            T0 + u64::from(expected),
        );
        assert_eq!(ids(&batch), vec![all[0]]);
        assert_eq!(counts(&batch), vec![expected]);
    }
    let p = pending_entry(&e, all[0], T0 + 3);
    assert_eq!(p.times_delivered, 4);
    assert_eq!(p.consumer.as_deref(), Some("a"));
}

#[test]
fn own_pending_pages_with_after() {
    let (mut e, all) = setup(5);
    read(&mut e, new_req("a", 5), T0);
    let first = read(&mut e, own_req("a", EntryId::ZERO, 2), T0 + 1);
    assert_eq!(ids(&first), all[0..2].to_vec());
    let second = read(&mut e, own_req("a", all[1], 2), T0 + 1);
    assert_eq!(ids(&second), all[2..4].to_vec());
    let third = read(&mut e, own_req("a", all[3], 2), T0 + 1);
    assert_eq!(ids(&third), vec![all[4]]);
    assert!(read(&mut e, own_req("a", all[4], 2), T0 + 1).is_empty());
    assert!(read(&mut e, own_req("stranger", EntryId::ZERO, 2), T0 + 1).is_empty());
}

#[test]
fn own_pending_does_not_hand_out_owed_entries_even_when_due() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 0, T0).unwrap();
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), T0 + 1_000).is_empty());
}

// --------------------------------------------------------- rule 6: ack

#[test]
fn ack_is_idempotent_and_ignores_unknown_ids() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 2), T0);
    assert_eq!(e.ack(S, G, &[all[0]]).unwrap(), 1);
    assert_eq!(e.ack(S, G, &[all[0]]).unwrap(), 0);
    assert_eq!(e.ack(S, G, &[EntryId::new(1, 1)]).unwrap(), 0);
    assert_eq!(e.ack(S, G, &[all[0], all[1], all[1]]).unwrap(), 1);
    assert_eq!(e.ack(S, G, &[]).unwrap(), 0);
    assert!(all_pending(&e, T0).is_empty());
    assert_eq!(info(&e).pending, 0);
}

#[test]
fn an_acked_entry_is_never_handed_out_again() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.ack(S, G, &all).unwrap();
    assert!(read(&mut e, claiming_req("b", 0, 10), T0 + 10_000).is_empty());
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), T0 + 10_000).is_empty());
    assert_eq!(e.consumers(S, G, T0).unwrap()[0].pending, 0);
}

#[test]
fn acking_an_undelivered_entry_changes_nothing() {
    let (mut e, all) = setup(1);
    assert_eq!(e.ack(S, G, &all).unwrap(), 0);
    assert_eq!(ids(&read(&mut e, new_req("a", 1), T0)), all);
}

#[test]
fn acking_an_owed_entry_settles_it() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 100, T0).unwrap();
    assert_eq!(e.ack(S, G, &all).unwrap(), 1);
    assert!(read(&mut e, new_req("a", 10), T0 + 1_000).is_empty());
    assert_eq!(e.next_due(&new_req("a", 10), T0), None);
}

// ------------------------------------------------- rule 7: retry after

#[test]
fn retry_after_makes_an_entry_owed_by_nobody() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    assert_eq!(e.retry_after(S, G, &all, 500, T0 + 100).unwrap(), 1);
    let p = pending_entry(&e, all[0], T0 + 300);
    assert_eq!(
        p,
        PendingEntry {
            id: all[0],
            consumer: None,
            idle_ms: 200,
            times_delivered: 1,
            owed_in_ms: Some(300),
        }
    );
    assert_eq!(pending_entry(&e, all[0], T0 + 600).owed_in_ms, Some(0));
    assert_eq!(pending_entry(&e, all[0], T0 + 900).owed_in_ms, Some(0));
    assert_eq!(e.consumers(S, G, T0 + 300).unwrap()[0].pending, 0);
    assert_eq!(info(&e).pending, 1);
}

#[test]
fn retry_after_is_not_handed_out_before_the_delay() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 500, T0).unwrap();
    let t = T0 + 499;
    assert!(read(&mut e, reclaim_req("b", 0, 10), t).is_empty());
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), t).is_empty());
    assert_eq!(ids(&read(&mut e, claiming_req("b", 0, 1), t)), vec![all[1]]);
    assert_eq!(pending_entry(&e, all[0], t).consumer, None);
}

#[test]
fn retry_after_is_handed_out_at_the_delay_by_a_new_read() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 500, T0).unwrap();
    assert!(read(&mut e, new_req("b", 10), T0 + 499).is_empty());
    let batch = read(&mut e, new_req("b", 10), T0 + 500);
    assert_eq!(ids(&batch), all);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(batch.deliveries[0].idle_ms, 500);
    let p = pending_entry(&e, all[0], T0 + 500);
    assert_eq!(p.consumer.as_deref(), Some("b"));
    assert_eq!(p.owed_in_ms, None);
    assert_eq!(p.times_delivered, 2);
}

#[test]
fn retry_after_is_handed_out_after_the_delay_by_claiming_and_reclaim() {
    for req in [claiming_req("b", 60_000, 10), reclaim_req("b", 60_000, 10)] {
        let (mut e, all) = setup(1);
        read(&mut e, new_req("a", 1), T0);
        e.retry_after(S, G, &all, 500, T0).unwrap();
        let batch = read(&mut e, req, T0 + 750);
        assert_eq!(ids(&batch), all, "{:?}", req.mode);
        assert_eq!(counts(&batch), vec![1]);
    }
}

#[test]
fn retry_after_zero_is_owed_at_once() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 0, T0).unwrap();
    assert_eq!(pending_entry(&e, all[0], T0).owed_in_ms, Some(0));
    let batch = read(&mut e, reclaim_req("a", 60_000, 10), T0);
    assert_eq!(ids(&batch), all);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(batch.deliveries[0].idle_ms, 0);
}

#[test]
fn retry_after_ignores_ids_that_are_not_pending() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    assert_eq!(
        e.retry_after(S, G, &[all[1], EntryId::new(1, 1)], 0, T0)
            .unwrap(),
        0
    );
    e.ack(S, G, &[all[0]]).unwrap();
    assert_eq!(e.retry_after(S, G, &[all[0]], 0, T0).unwrap(), 0);
    assert!(all_pending(&e, T0).is_empty());
}

#[test]
fn retrying_an_owed_entry_again_re_times_it() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 100, T0).unwrap();
    assert_eq!(e.retry_after(S, G, &all, 1_000, T0 + 50).unwrap(), 1);
    assert!(read(&mut e, new_req("a", 1), T0 + 100).is_empty());
    assert_eq!(ids(&read(&mut e, new_req("a", 1), T0 + 1_050)), all);
}

#[test]
fn retried_entries_keep_their_delivery_count_across_attempts() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    for attempt in 1..=4u32 {
        let now = T0 + u64::from(attempt) * 10;
        e.retry_after(S, G, &all, 0, now).unwrap();
        let batch = read(&mut e, new_req("a", 1), now);
        assert_eq!(counts(&batch), vec![attempt]);
    }
    assert_eq!(pending_entry(&e, all[0], T0 + 40).times_delivered, 5);
}

// ------------------------------------------------------- retry copy

#[test]
fn retry_copy_appends_a_copy_and_settles_the_original() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let out = e.retry_copy(S, G, &all, T0 + 10).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].original, all[0]);
    let copy = out[0].copy.unwrap();
    assert!(copy > all[0]);
    assert_eq!(e.stream_info(S).unwrap().length, 2);
    assert_eq!(e.stream_info(S).unwrap().last_id, copy);
    assert!(pending_ids(&e, T0 + 10).is_empty());
    assert_eq!(
        e.copy_of(S, copy),
        Some(&CopyOf {
            group: G.to_owned(),
            times_delivered: 1,
        })
    );
    assert_eq!(e.copy_of(S, all[0]), None);
    assert_eq!(e.copy_of("missing", copy), None);
    let replay = e.range(S, copy, copy, 1);
    assert_eq!(replay[0].message, e.range(S, all[0], all[0], 1)[0].message);
}

#[test]
fn a_retry_copy_is_delivered_behind_entries_published_meanwhile() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let meanwhile = publish_n(&mut e, "later", 2, T0 + 5);
    let copy = e.retry_copy(S, G, &all, T0 + 10).unwrap()[0].copy.unwrap();
    assert_eq!(info(&e).lag, 3);
    let batch = read(&mut e, new_req("b", 10), T0 + 20);
    assert_eq!(ids(&batch), vec![meanwhile[0], meanwhile[1], copy]);
    assert_eq!(counts(&batch), vec![0, 0, 1]);
    assert_eq!(payloads(&batch), vec!["later0", "later1", "m0"]);
    let p = pending_entry(&e, copy, T0 + 20);
    assert_eq!(p.times_delivered, 2);
    assert_eq!(p.consumer.as_deref(), Some("b"));
}

#[test]
fn a_retry_copy_carries_the_originals_delivery_count() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    read(&mut e, reclaim_req("b", 0, 1), T0 + 1);
    read(&mut e, reclaim_req("c", 0, 1), T0 + 2);
    assert_eq!(pending_entry(&e, all[0], T0 + 2).times_delivered, 3);

    let copy = e.retry_copy(S, G, &all, T0 + 3).unwrap()[0].copy.unwrap();
    assert_eq!(e.copy_of(S, copy).unwrap().times_delivered, 3);
    let batch = read(&mut e, new_req("a", 1), T0 + 4);
    assert_eq!(ids(&batch), vec![copy]);
    assert_eq!(counts(&batch), vec![3]);

    // A copy of a copy carries the running total.
    let copy2 = e.retry_copy(S, G, &[copy], T0 + 5).unwrap()[0]
        .copy
        .unwrap();
    assert_eq!(e.copy_of(S, copy2).unwrap().times_delivered, 4);
    assert_eq!(counts(&read(&mut e, new_req("a", 1), T0 + 6)), vec![4]);
}

#[test]
fn other_groups_pass_over_a_retry_copy() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::New, T0);
    e.ensure_group(S, "other", StreamStart::New, T0);
    let all = publish_n(&mut e, "m", 1, T0);
    read(&mut e, new_req("a", 1), T0);
    let copy = e.retry_copy(S, G, &all, T0).unwrap()[0].copy.unwrap();
    let after = publish_one(&mut e, "after", T0 + 1);

    let other = ReadRequest::new(S, "other", "x", ReadMode::New, 10);
    assert_eq!(e.group_info(S, "other").unwrap().lag, 2);
    let batch = e.read(&other, T0 + 2).unwrap();
    assert_eq!(ids(&batch), vec![all[0], after]);
    let oi = e.group_info(S, "other").unwrap();
    assert_eq!(oi.last_delivered, after);
    assert_eq!(oi.lag, 0);
    assert_eq!(oi.pending, 2);

    // A group created later at the beginning passes over it too.
    e.ensure_group(S, "late", StreamStart::Beginning, T0 + 3);
    assert_eq!(e.group_info(S, "late").unwrap().lag, 2);
    let late = ReadRequest::new(S, "late", "x", ReadMode::New, 10);
    assert_eq!(ids(&e.read(&late, T0 + 3).unwrap()), vec![all[0], after]);

    // The group it is for gets it.
    assert_eq!(
        ids(&read(&mut e, new_req("a", 10), T0 + 4)),
        vec![copy, after]
    );
}

#[test]
fn a_copy_for_another_group_does_not_use_up_the_count() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::New, T0);
    e.ensure_group(S, "other", StreamStart::New, T0);
    let first = publish_one(&mut e, "first", T0);
    read(&mut e, new_req("a", 1), T0);
    e.retry_copy(S, G, &[first], T0).unwrap();
    let second = publish_one(&mut e, "second", T0);
    let other = ReadRequest::new(S, "other", "x", ReadMode::New, 1);
    assert_eq!(ids(&e.read(&other, T0).unwrap()), vec![first]);
    assert_eq!(ids(&e.read(&other, T0).unwrap()), vec![second]);
}

#[test]
fn retry_copy_ignores_ids_that_are_not_pending() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    let out = e
        .retry_copy(S, G, &[all[1], EntryId::new(3, 3)], T0)
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(e.stream_info(S).unwrap().length, 2);
}

#[test]
fn retry_copy_of_an_owed_entry_works() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 1_000, T0).unwrap();
    let copy = e.retry_copy(S, G, &all, T0 + 1).unwrap()[0].copy.unwrap();
    assert!(pending_ids(&e, T0 + 1).is_empty());
    assert_eq!(e.next_due(&new_req("a", 1), T0 + 1), None);
    let batch = read(&mut e, new_req("a", 10), T0 + 2);
    assert_eq!(ids(&batch), vec![copy]);
    assert_eq!(counts(&batch), vec![1]);
}

// -------------------------------------------------- max_deliveries

#[test]
fn an_entry_delivered_max_times_is_dead_lettered_instead_of_claimed() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0); // times_delivered 1
    let below = read(&mut e, reclaim_req("b", 0, 10).max_deliveries(3), T0 + 1);
    assert_eq!(ids(&below), all); // 2
    assert!(below.dead_lettered.is_empty());
    let below = read(&mut e, reclaim_req("c", 0, 10).max_deliveries(3), T0 + 2);
    assert_eq!(ids(&below), all); // 3

    let batch = read(&mut e, reclaim_req("d", 0, 10).max_deliveries(3), T0 + 3);
    assert!(batch.is_empty());
    assert_eq!(batch.dead_lettered, all);
    assert!(pending_ids(&e, T0 + 3).is_empty());
    let dl = dead(&e);
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].id(), all[0]);
    assert_eq!(dl[0].times_delivered, 3);
    assert_eq!(dl[0].dead_at_ms, T0 + 3);
    assert!(dl[0].reason.contains("max_deliveries"), "{}", dl[0].reason);
    assert!(dl[0].reason.contains('3'), "{}", dl[0].reason);
    assert_eq!(dl[0].entry.payload(), b"m0");
    assert_eq!(info(&e).dead_letters, 1);
    assert_eq!(info(&e).pending, 0);
}

#[test]
fn max_deliveries_applies_to_owed_entries() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 0, T0).unwrap();
    let batch = read(&mut e, new_req("a", 10).max_deliveries(1), T0 + 1);
    assert_eq!(batch.dead_lettered, vec![all[0]]);
    assert_eq!(ids(&batch), vec![all[1]]);
    assert_eq!(dead(&e)[0].times_delivered, 1);
}

#[test]
fn max_deliveries_applies_to_own_pending_rereads() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let batch = read(
        &mut e,
        own_req("a", EntryId::ZERO, 10).max_deliveries(1),
        T0,
    );
    assert!(batch.is_empty());
    assert_eq!(batch.dead_lettered, all);
}

#[test]
fn max_deliveries_does_not_stop_a_first_delivery() {
    let (mut e, all) = setup(1);
    let batch = read(&mut e, new_req("a", 10).max_deliveries(1), T0);
    assert_eq!(ids(&batch), all);
    assert!(batch.dead_lettered.is_empty());
}

#[test]
fn max_deliveries_applies_to_a_retry_copy_carrying_the_count() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    read(&mut e, reclaim_req("a", 0, 1), T0 + 1); // times_delivered 2
    let copy = e.retry_copy(S, G, &all, T0 + 2).unwrap()[0].copy.unwrap();
    let after = publish_one(&mut e, "after", T0 + 3);

    let batch = read(&mut e, new_req("a", 10).max_deliveries(2), T0 + 4);
    assert_eq!(batch.dead_lettered, vec![copy]);
    assert_eq!(ids(&batch), vec![after]);
    let dl = dead(&e);
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].id(), copy);
    assert_eq!(dl[0].times_delivered, 2);
    assert!(dl[0].reason.contains("max_deliveries"), "{}", dl[0].reason);
    assert_eq!(dl[0].entry.payload(), b"m0");
    assert_eq!(info(&e).last_delivered, after);
}

#[test]
fn a_retry_copy_below_max_deliveries_is_delivered() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let copy = e.retry_copy(S, G, &all, T0).unwrap()[0].copy.unwrap();
    let batch = read(&mut e, new_req("a", 10).max_deliveries(2), T0);
    assert_eq!(ids(&batch), vec![copy]);
    assert!(batch.dead_lettered.is_empty());
}

// ------------------------------------------------ rule 8: dead letters

#[test]
fn dead_letters_are_listed_with_reason_count_and_entry() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 3), T0);
    read(&mut e, reclaim_req("b", 0, 1), T0 + 1); // all[0] twice
    assert_eq!(
        e.dead_letter(S, G, &[all[0], all[2]], "bad json", T0 + 7)
            .unwrap(),
        2
    );
    let dl = dead(&e);
    assert_eq!(dl.len(), 2);
    assert_eq!(dl[0].id(), all[0]);
    assert_eq!(dl[0].reason, "bad json");
    assert_eq!(dl[0].times_delivered, 2);
    assert_eq!(dl[0].dead_at_ms, T0 + 7);
    assert_eq!(dl[0].entry.payload(), b"m0");
    assert_eq!(dl[1].id(), all[2]);
    assert_eq!(dl[1].times_delivered, 1);
    assert_eq!(dl[1].entry.payload(), b"m2");
    assert_eq!(pending_ids(&e, T0 + 7), vec![all[1]]);

    // Paging.
    let page = e.dead_letters(S, G, all[1], 10).unwrap();
    assert_eq!(
        page.iter().map(DeadLetter::id).collect::<Vec<_>>(),
        vec![all[2]]
    );
    assert_eq!(e.dead_letters(S, G, EntryId::ZERO, 1).unwrap().len(), 1);
}

#[test]
fn dead_letter_ignores_ids_that_are_not_pending() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    assert_eq!(e.dead_letter(S, G, &[all[1]], "r", T0).unwrap(), 0);
    assert_eq!(e.dead_letter(S, G, &[all[0]], "r", T0).unwrap(), 1);
    assert_eq!(e.dead_letter(S, G, &[all[0]], "again", T0).unwrap(), 0);
    assert_eq!(dead(&e)[0].reason, "r");
}

#[test]
fn a_dead_letter_is_not_handed_out() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.dead_letter(S, G, &all, "r", T0).unwrap();
    assert!(read(&mut e, claiming_req("b", 0, 10), T0 + 60_000).is_empty());
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), T0 + 60_000).is_empty());
}

#[test]
fn an_owed_entry_can_be_dead_lettered() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 100, T0).unwrap();
    assert_eq!(e.dead_letter(S, G, &all, "gave up", T0).unwrap(), 1);
    assert_eq!(e.next_due(&new_req("a", 1), T0), None);
    assert!(read(&mut e, new_req("a", 1), T0 + 100).is_empty());
}

#[test]
fn redrive_makes_a_dead_letter_owed_at_once_with_its_count_reset() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 2), T0);
    read(&mut e, reclaim_req("a", 0, 1), T0 + 1); // all[0] twice
    e.dead_letter(S, G, &[all[0]], "r", T0 + 2).unwrap();
    let before = info(&e);
    assert_eq!(before.last_delivered, all[1]);
    assert_eq!(before.lag, 1);

    assert_eq!(e.redrive(S, G, &[all[0]], T0 + 10).unwrap(), 1);
    let after = info(&e);
    assert_eq!(after.last_delivered, before.last_delivered);
    assert_eq!(after.lag, before.lag);
    assert_eq!(after.dead_letters, 0);
    assert_eq!(after.pending, 2);
    let p = pending_entry(&e, all[0], T0 + 10);
    assert_eq!(p.consumer, None);
    assert_eq!(p.times_delivered, 0);
    assert_eq!(p.owed_in_ms, Some(0));

    let batch = read(&mut e, new_req("b", 1), T0 + 10);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(counts(&batch), vec![0]);
    assert_eq!(info(&e).last_delivered, all[1]);
    assert_eq!(pending_entry(&e, all[0], T0 + 10).times_delivered, 1);
}

#[test]
fn a_redriven_entry_gets_a_fresh_max_deliveries_budget() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    let batch = read(&mut e, reclaim_req("a", 0, 1).max_deliveries(1), T0);
    assert_eq!(batch.dead_lettered, all);
    e.redrive(S, G, &all, T0 + 1).unwrap();
    let batch = read(&mut e, reclaim_req("a", 0, 1).max_deliveries(1), T0 + 1);
    assert_eq!(ids(&batch), all);
    assert!(batch.dead_lettered.is_empty());
}

#[test]
fn redrive_and_discard_ignore_unknown_ids() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    assert_eq!(e.redrive(S, G, &all, T0).unwrap(), 0);
    assert_eq!(e.discard(S, G, &all).unwrap(), 0);
    assert_eq!(pending_entry(&e, all[0], T0).consumer.as_deref(), Some("a"));
}

#[test]
fn discard_drops_a_dead_letter() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.dead_letter(S, G, &all, "r", T0).unwrap();
    assert_eq!(e.discard(S, G, &all).unwrap(), 1);
    assert_eq!(e.discard(S, G, &all).unwrap(), 0);
    assert!(dead(&e).is_empty());
    assert_eq!(info(&e).dead_letters, 0);
    assert_eq!(info(&e).pending, 0);
    assert_eq!(e.redrive(S, G, &all, T0).unwrap(), 0);
    assert!(read(&mut e, claiming_req("a", 0, 10), T0 + 1).is_empty());
    // The entry itself is still in the (untrimmed) stream.
    assert_eq!(e.range(S, all[0], all[0], 1).len(), 1);
}

#[test]
fn dead_letters_are_per_group() {
    let mut e = Engine::new();
    e.ensure_group(S, "g1", StreamStart::Beginning, T0);
    e.ensure_group(S, "g2", StreamStart::Beginning, T0);
    let all = publish_n(&mut e, "m", 1, T0);
    for g in ["g1", "g2"] {
        e.read(&ReadRequest::new(S, g, "c", ReadMode::New, 1), T0)
            .unwrap();
    }
    e.dead_letter(S, "g1", &all, "r", T0).unwrap();
    assert_eq!(e.group_info(S, "g1").unwrap().dead_letters, 1);
    assert_eq!(e.group_info(S, "g2").unwrap().dead_letters, 0);
    assert_eq!(e.group_info(S, "g2").unwrap().pending, 1);
    assert_eq!(e.discard(S, "g2", &all).unwrap(), 0);
}

// ------------------------------------------------ rule 9: group info

#[test]
fn group_info_follows_each_step() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::New, T0);
    let expect = |e: &Engine, last: EntryId, lag, pending, dead_letters, consumers| {
        assert_eq!(
            info(e),
            GroupInfo {
                stream: S.to_owned(),
                name: G.to_owned(),
                last_delivered: last,
                lag,
                pending,
                dead_letters,
                consumers,
            }
        );
    };
    expect(&e, EntryId::ZERO, 0, 0, 0, 0);

    let all = publish_n(&mut e, "m", 4, T0);
    expect(&e, EntryId::ZERO, 4, 0, 0, 0);

    read(&mut e, new_req("a", 2), T0);
    expect(&e, all[1], 2, 2, 0, 1);

    read(&mut e, new_req("b", 1), T0);
    expect(&e, all[2], 1, 3, 0, 2);

    e.ack(S, G, &[all[0]]).unwrap();
    expect(&e, all[2], 1, 2, 0, 2);

    e.dead_letter(S, G, &[all[1]], "r", T0).unwrap();
    expect(&e, all[2], 1, 1, 1, 2);

    e.retry_after(S, G, &[all[2]], 100, T0).unwrap();
    expect(&e, all[2], 1, 1, 1, 2);

    e.redrive(S, G, &[all[1]], T0).unwrap();
    expect(&e, all[2], 1, 2, 0, 2);

    read(&mut e, new_req("c", 10), T0 + 100);
    expect(&e, all[3], 0, 3, 0, 3);

    e.ack(S, G, &all).unwrap();
    expect(&e, all[3], 0, 0, 0, 3);
}

#[test]
fn consumers_report_pending_and_idle_time() {
    let (mut e, all) = setup(4);
    read(&mut e, new_req("b", 3), T0);
    read(&mut e, new_req("a", 1), T0 + 100);
    read(&mut e, new_req("c", 1), T0 + 150); // nothing left, still seen

    let list = e.consumers(S, G, T0 + 200).unwrap();
    assert_eq!(
        list,
        vec![
            ConsumerInfo {
                name: "a".to_owned(),
                pending: 1,
                idle_ms: 100,
            },
            ConsumerInfo {
                name: "b".to_owned(),
                pending: 3,
                idle_ms: 200,
            },
            ConsumerInfo {
                name: "c".to_owned(),
                pending: 0,
                idle_ms: 50,
            },
        ]
    );

    // A claim moves pending counts; the reader's idle time resets.
    read(&mut e, reclaim_req("a", 0, 1), T0 + 300); // takes all[0] from b
    e.ack(S, G, &[all[1]]).unwrap();
    e.retry_after(S, G, &[all[2]], 1_000, T0 + 300).unwrap();
    let list = e.consumers(S, G, T0 + 310).unwrap();
    let summary: Vec<(String, u64, u64)> = list
        .into_iter()
        .map(|c| (c.name, c.pending, c.idle_ms))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("a".to_owned(), 2, 10),
            ("b".to_owned(), 0, 310),
            ("c".to_owned(), 0, 160),
        ]
    );
}

// -------------------------------------------------------------- trim

#[test]
fn trim_max_len_removes_the_oldest_entries() {
    let (mut e, all) = setup(5);
    assert_eq!(e.trim(S, Trim::MaxLen(2)).unwrap(), 3);
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 2);
    assert_eq!(si.first_id, Some(all[3]));
    assert_eq!(si.last_id, all[4]);
    let left: Vec<EntryId> = e
        .range(S, EntryId::ZERO, EntryId::MAX, 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(left, all[3..].to_vec());
    assert_eq!(e.trim(S, Trim::MaxLen(2)).unwrap(), 0);
    assert_eq!(info(&e).lag, 2);
    assert_eq!(ids(&read(&mut e, new_req("a", 10), T0)), all[3..].to_vec());
}

#[test]
fn trim_min_id_removes_entries_below_it() {
    let (mut e, all) = setup(5);
    assert_eq!(e.trim(S, Trim::MinId(all[2])).unwrap(), 2);
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 3);
    assert_eq!(si.first_id, Some(all[2]));
    assert_eq!(e.trim(S, Trim::MinId(all[2])).unwrap(), 0);
}

#[test]
fn trimming_everything_keeps_the_last_id() {
    let (mut e, all) = setup(3);
    assert_eq!(e.trim(S, Trim::MaxLen(0)).unwrap(), 3);
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 0);
    assert_eq!(si.first_id, None);
    assert_eq!(si.last_id, all[2]);
    // New ids still go up.
    assert!(publish_one(&mut e, "x", 0) > all[2]);
}

#[test]
fn trimming_a_missing_stream_removes_nothing() {
    let mut e = Engine::new();
    assert_eq!(e.trim("nope", Trim::MaxLen(0)).unwrap(), 0);
    assert!(!e.has_stream("nope"));
}

#[test]
fn pending_entries_survive_trimming_until_acked() {
    let (mut e, all) = setup(4);
    read(&mut e, new_req("a", 2), T0); // all[0], all[1] pending
    e.ack(S, G, &[all[1]]).unwrap();
    assert_eq!(e.trim(S, Trim::MaxLen(1)).unwrap(), 2); // all[1], all[2]

    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 2);
    assert_eq!(si.first_id, Some(all[0]));
    let left: Vec<EntryId> = e
        .range(S, EntryId::ZERO, EntryId::MAX, 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(left, vec![all[0], all[3]]);
    assert_eq!(e.range(S, all[0], all[0], 1)[0].payload(), b"m0");

    // Still redeliverable by a claim, payload intact.
    let batch = read(&mut e, reclaim_req("b", 100, 10), T0 + 100);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(payloads(&batch), vec!["m0"]);
    assert_eq!(counts(&batch), vec![1]);

    // Acked: gone for good.
    e.ack(S, G, &[all[0]]).unwrap();
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 1);
    assert_eq!(si.first_id, Some(all[3]));
    assert!(e.range(S, all[0], all[0], 1).is_empty());
}

#[test]
fn a_retained_pending_entry_can_be_retried_after_a_delay_or_as_a_copy() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 2), T0);
    e.trim(S, Trim::MaxLen(0)).unwrap();
    assert_eq!(e.stream_info(S).unwrap().length, 2);

    e.retry_after(S, G, &[all[0]], 0, T0).unwrap();
    let batch = read(&mut e, new_req("b", 10), T0 + 1);
    assert_eq!(payloads(&batch), vec!["m0"]);

    let copy = e.retry_copy(S, G, &[all[1]], T0 + 2).unwrap()[0]
        .copy
        .unwrap();
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 2); // all[0] (still pending) and the copy
    assert!(e.range(S, all[1], all[1], 1).is_empty());
    let batch = read(&mut e, new_req("b", 10), T0 + 3);
    assert_eq!(ids(&batch), vec![copy]);
    assert_eq!(payloads(&batch), vec!["m1"]);
}

#[test]
fn owed_entries_survive_trimming() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &[all[0]], 500, T0).unwrap();
    assert_eq!(e.trim(S, Trim::MinId(EntryId::MAX)).unwrap(), 1);
    let batch = read(&mut e, new_req("a", 10), T0 + 500);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(payloads(&batch), vec!["m0"]);
}

#[test]
fn dead_letters_survive_trimming_until_discarded() {
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 1), T0);
    e.dead_letter(S, G, &[all[0]], "poison", T0).unwrap();
    assert_eq!(e.trim(S, Trim::MaxLen(0)).unwrap(), 2);
    assert_eq!(e.stream_info(S).unwrap().length, 1);

    let dl = dead(&e);
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].entry.payload(), b"m0");
    assert_eq!(dl[0].reason, "poison");
    assert_eq!(e.range(S, EntryId::ZERO, EntryId::MAX, 10).len(), 1);

    // Redrive works on the retained entry.
    e.redrive(S, G, &[all[0]], T0 + 1).unwrap();
    let batch = read(&mut e, new_req("b", 10), T0 + 1);
    assert_eq!(payloads(&batch), vec!["m0"]);
    e.dead_letter(S, G, &[all[0]], "again", T0 + 2).unwrap();

    e.discard(S, G, &[all[0]]).unwrap();
    let si = e.stream_info(S).unwrap();
    assert_eq!(si.length, 0);
    assert_eq!(si.first_id, None);
    assert!(dead(&e).is_empty());
}

#[test]
fn an_entry_pinned_by_two_groups_stays_until_both_settle() {
    let mut e = Engine::new();
    e.ensure_group(S, "g1", StreamStart::Beginning, T0);
    e.ensure_group(S, "g2", StreamStart::Beginning, T0);
    let all = publish_n(&mut e, "m", 2, T0);
    for g in ["g1", "g2"] {
        e.read(&ReadRequest::new(S, g, "c", ReadMode::New, 1), T0)
            .unwrap();
    }
    e.dead_letter(S, "g2", &[all[0]], "r", T0).unwrap();
    assert_eq!(e.trim(S, Trim::MaxLen(0)).unwrap(), 1);
    e.ack(S, "g1", &[all[0]]).unwrap();
    assert_eq!(e.range(S, all[0], all[0], 1).len(), 1);
    assert_eq!(e.dead_letters(S, "g2", EntryId::ZERO, 10).unwrap().len(), 1);
    e.discard(S, "g2", &[all[0]]).unwrap();
    assert!(e.range(S, all[0], all[0], 1).is_empty());
    assert_eq!(e.stream_info(S).unwrap().length, 0);
}

#[test]
fn trim_keeps_the_newest_entries_besides_pinned_ones() {
    let (mut e, all) = setup(5);
    read(&mut e, new_req("a", 1), T0); // all[0] pinned
    assert_eq!(e.trim(S, Trim::MaxLen(2)).unwrap(), 2); // all[1], all[2]
    let left: Vec<EntryId> = e
        .range(S, EntryId::ZERO, EntryId::MAX, 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(left, vec![all[0], all[3], all[4]]);
    // Range reads with bounds around retained and live entries.
    let mid: Vec<EntryId> = e
        .range(S, all[0], all[3], 10)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(mid, vec![all[0], all[3]]);
    assert_eq!(e.range(S, all[0], all[4], 1).len(), 1);
    assert_eq!(info(&e).lag, 2);
}

// ---------------------------------------------------------- next_due

#[test]
fn next_due_is_none_when_nothing_is_scheduled() {
    let (mut e, _) = setup(0);
    for req in [
        new_req("a", 1),
        claiming_req("a", 100, 1),
        reclaim_req("a", 100, 1),
        own_req("a", EntryId::ZERO, 1),
    ] {
        assert_eq!(e.next_due(&req, T0), None, "{:?}", req.mode);
    }
    publish_one(&mut e, "x", T0);
    assert_eq!(e.next_due(&new_req("a", 1), T0), None);
    let unknown = ReadRequest::new(S, "nope", "a", ReadMode::New, 1);
    assert_eq!(e.next_due(&unknown, T0), None);
}

#[test]
fn next_due_is_the_due_time_of_an_owed_entry() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 2), T0);
    e.retry_after(S, G, &[all[0]], 500, T0).unwrap();
    e.retry_after(S, G, &[all[1]], 300, T0 + 100).unwrap();
    for req in [
        new_req("a", 1),
        claiming_req("a", 60_000, 1),
        reclaim_req("a", 60_000, 1),
    ] {
        assert_eq!(e.next_due(&req, T0 + 100), Some(T0 + 400), "{:?}", req.mode);
    }
    assert_eq!(e.next_due(&own_req("a", EntryId::ZERO, 1), T0 + 100), None);
}

#[test]
fn next_due_is_since_plus_min_idle_for_claims() {
    let (mut e, _) = setup(2);
    read(&mut e, new_req("a", 1), T0);
    read(&mut e, new_req("b", 1), T0 + 50);
    assert_eq!(
        e.next_due(&claiming_req("c", 1_000, 1), T0 + 60),
        Some(T0 + 1_000)
    );
    assert_eq!(
        e.next_due(&reclaim_req("c", 1_000, 1), T0 + 60),
        Some(T0 + 1_000)
    );
    // Once the claim stood for min_idle, the entry really is claimable then.
    assert!(read(&mut e, reclaim_req("c", 1_000, 1), T0 + 999).is_empty());
    assert_eq!(
        read(&mut e, reclaim_req("c", 1_000, 1), T0 + 1_000)
            .deliveries
            .len(),
        1
    );
    assert_eq!(
        e.next_due(&reclaim_req("c", 1_000, 1), T0 + 1_000),
        Some(T0 + 1_050)
    );
}

#[test]
fn next_due_takes_the_earlier_of_owed_and_idle() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 2), T0);
    e.retry_after(S, G, &[all[1]], 200, T0).unwrap();
    assert_eq!(e.next_due(&reclaim_req("c", 1_000, 1), T0), Some(T0 + 200));
    assert_eq!(e.next_due(&reclaim_req("c", 100, 1), T0), Some(T0 + 100));
}

#[test]
fn next_due_is_none_for_a_new_read_with_only_held_entries() {
    let (mut e, _) = setup(2);
    read(&mut e, new_req("a", 2), T0);
    assert_eq!(e.next_due(&new_req("b", 1), T0 + 10), None);
    assert_eq!(e.next_due(&own_req("a", EntryId::ZERO, 1), T0 + 10), None);
}

#[test]
fn next_due_is_always_after_now() {
    let (mut e, all) = setup(1);
    read(&mut e, new_req("a", 1), T0);
    e.retry_after(S, G, &all, 0, T0).unwrap();
    assert_eq!(e.next_due(&new_req("a", 1), T0 + 50), Some(T0 + 51));
}

// ------------------------------------------------------- determinism

#[test]
fn the_same_calls_at_the_same_times_give_the_same_state() {
    fn script() -> (Engine, Vec<ReadBatch>) {
        let mut e = Engine::new();
        let mut batches = Vec::new();
        e.ensure_group(S, G, StreamStart::Beginning, 10);
        let all = publish_n(&mut e, "m", 6, 10);
        batches.push(read(&mut e, new_req("a", 3), 20));
        batches.push(read(&mut e, new_req("b", 2), 30));
        e.retry_after(S, G, &[all[1]], 15, 40).unwrap();
        e.retry_copy(S, G, &[all[3]], 41).unwrap();
        e.dead_letter(S, G, &[all[4]], "r", 42).unwrap();
        batches.push(read(
            &mut e,
            claiming_req("c", 20, 10).max_deliveries(2),
            60,
        ));
        e.trim(S, Trim::MaxLen(1)).unwrap();
        batches.push(read(&mut e, reclaim_req("a", 0, 10).max_deliveries(2), 70));
        (e, batches)
    }
    let (e1, b1) = script();
    let (e2, b2) = script();
    assert_eq!(b1, b2);
    assert_eq!(all_pending(&e1, 100), all_pending(&e2, 100));
    assert_eq!(dead(&e1), dead(&e2));
    assert_eq!(info(&e1), info(&e2));
    assert_eq!(e1.stream_info(S), e2.stream_info(S));
}

#[test]
fn the_idle_index_stays_small_while_one_entry_is_held_for_long() {
    let mut e = Engine::new();
    e.ensure_group(S, G, StreamStart::New, 0);
    publish_n(&mut e, "stuck", 1, 1);
    let stuck = ids(&read(&mut e, new_req("slow", 1), 1));
    // A long stream of entries delivered and acked behind the stuck one.
    for round in 0..100u64 {
        let now = 10 + round;
        publish_n(&mut e, "m", 100, now);
        let got = ids(&read(&mut e, new_req("fast", 100), now));
        assert_eq!(got.len(), 100);
        e.ack(S, G, &got).unwrap();
    }
    let queued = e.streams[S].groups[G].held_by_time.len();
    assert!(queued <= 1024 + 2 + 100, "stale records piled up: {queued}");
    // The stuck entry is still claimable, and only it.
    let claimed = read(&mut e, claiming_req("rescuer", 1_000, 10), 2_000);
    assert_eq!(ids(&claimed), stuck);
}
