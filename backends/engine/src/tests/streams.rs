//! Streams: ids, ranges, payloads, summaries and trimming.

use super::*;

// ---------------------------------------------------------------- streams

/// Publishes one entry at each of `times`, in order; their ids.
fn publish_at(e: &mut Engine, times: &[u64]) -> Vec<EntryId> {
    times
        .iter()
        .enumerate()
        .map(|(i, &now)| publish_one(e, &i.to_string(), now))
        .collect()
}

/// Stream `S`'s length and first id, as `stream_info` gives them.
fn length_and_first(e: &Engine) -> (u64, Option<EntryId>) {
    let si = e.stream_info(S).unwrap();
    (si.length, si.first_id)
}

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
    let range_ids = range_ids(&e, EntryId::ZERO, EntryId::MAX, 10);
    assert_eq!(range_ids, [ids, vec![later]].concat());
}

#[test]
fn ids_stay_strictly_increasing_when_the_clock_goes_backwards() {
    let mut e = Engine::new();
    let ids = publish_at(&mut e, &[10_000, 9_000, 1, 10_000, 10_001]);
    assert_eq!(
        ids,
        [
            EntryId::new(10_000, 0),
            EntryId::new(10_000, 1),
            EntryId::new(10_000, 2),
            EntryId::new(10_000, 3),
            EntryId::new(10_001, 0),
        ]
    );
    assert_eq!(e.stream_info(S).unwrap().last_id, ids[4]);
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
    let got = range_ids(&e, ids[1], ids[3], 10);
    assert_eq!(got, ids[1..=3].to_vec());
    let single = range_ids(&e, ids[2], ids[2], 10);
    assert_eq!(single, vec![ids[2]]);
}

#[test]
fn range_bounds_need_not_be_entry_ids() {
    let mut e = Engine::new();
    let ids = publish_at(&mut e, &[100, 200, 300]);
    let got = range_ids(&e, EntryId::new(150, 0), EntryId::new(300, 0), 10);
    assert_eq!(got, ids[1..].to_vec());
    assert_eq!(
        e.range(S, EntryId::ZERO, EntryId::new(100, 0), 10)[0].id,
        ids[0]
    );
}

#[test]
fn range_respects_count() {
    let (e, ids) = setup(5);
    let got = range_ids(&e, EntryId::ZERO, EntryId::MAX, 2);
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
    assert_eq!(length_and_first(&e), (3, Some(ids[0])));
    assert_eq!(e.stream_info(S).unwrap().last_id, ids[2]);
}

// ------------------------------------------------------------------- trim

#[test]
fn trim_max_len_removes_the_oldest_entries() {
    let (mut e, all) = setup(5);
    assert_eq!(e.trim(S, Trim::MaxLen(2)).unwrap(), 3);
    assert_eq!(length_and_first(&e), (2, Some(all[3])));
    assert_eq!(e.stream_info(S).unwrap().last_id, all[4]);
    let left = range_ids(&e, EntryId::ZERO, EntryId::MAX, 10);
    assert_eq!(left, all[3..].to_vec());
    assert_eq!(e.trim(S, Trim::MaxLen(2)).unwrap(), 0);
    assert_eq!(info(&e).lag, 2);
    assert_eq!(ids(&read(&mut e, new_req("a", 10), T0)), all[3..].to_vec());
}

#[test]
fn trim_min_id_removes_entries_below_it() {
    let (mut e, all) = setup(5);
    assert_eq!(e.trim(S, Trim::MinId(all[2])).unwrap(), 2);
    assert_eq!(length_and_first(&e), (3, Some(all[2])));
    assert_eq!(e.trim(S, Trim::MinId(all[2])).unwrap(), 0);
}

#[test]
fn trimming_everything_keeps_the_last_id() {
    let (mut e, all) = setup(3);
    assert_eq!(e.trim(S, Trim::MaxLen(0)).unwrap(), 3);
    assert_eq!(length_and_first(&e), (0, None));
    assert_eq!(e.stream_info(S).unwrap().last_id, all[2]);
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

    assert_eq!(length_and_first(&e), (2, Some(all[0])));
    let left = range_ids(&e, EntryId::ZERO, EntryId::MAX, 10);
    assert_eq!(left, vec![all[0], all[3]]);
    assert_eq!(e.range(S, all[0], all[0], 1)[0].payload(), b"m0");

    // Still redeliverable by a claim, payload intact.
    let batch = read(&mut e, reclaim_req("b", 100, 10), T0 + 100);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(payloads(&batch), vec!["m0"]);
    assert_eq!(counts(&batch), vec![1]);

    // Acked: gone for good.
    e.ack(S, G, &[all[0]]).unwrap();
    assert_eq!(length_and_first(&e), (1, Some(all[3])));
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
    let (mut e, all) = held(2);
    e.retry_after(S, G, &[all[0]], 500, T0).unwrap();
    assert_eq!(e.trim(S, Trim::MinId(EntryId::MAX)).unwrap(), 1);
    let batch = read(&mut e, new_req("a", 10), T0 + 500);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(payloads(&batch), vec!["m0"]);
}

#[test]
fn dead_letters_survive_trimming_until_discarded() {
    let (mut e, all) = held(3);
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
    assert_eq!(length_and_first(&e), (0, None));
    assert!(dead(&e).is_empty());
}

#[test]
fn an_entry_pinned_by_two_groups_stays_until_both_settle() {
    let (mut e, all) = setup_two_groups(StreamStart::Beginning, 2);
    read_one_in_both_groups(&mut e);
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
    let (mut e, all) = held(5); // all[0] pinned
    assert_eq!(e.trim(S, Trim::MaxLen(2)).unwrap(), 2); // all[1], all[2]
    let left = range_ids(&e, EntryId::ZERO, EntryId::MAX, 10);
    assert_eq!(left, vec![all[0], all[3], all[4]]);
    // Range reads with bounds around retained and live entries.
    let mid = range_ids(&e, all[0], all[3], 10);
    assert_eq!(mid, vec![all[0], all[3]]);
    assert_eq!(e.range(S, all[0], all[4], 1).len(), 1);
    assert_eq!(info(&e).lag, 2);
}

#[test]
fn a_bounded_cache_hands_out_older_entries_unloaded() {
    let (mut e, all) = setup(4);
    // "m0".."m3" are 2 bytes each: the newest two fit 4 bytes.
    e.cache_payloads(Some(4));
    let batch = read(&mut e, new_req("a", 10), T0);
    let loaded: Vec<bool> = batch
        .deliveries
        .iter()
        .map(|d| !is_unloaded(&d.entry.message))
        .collect();
    assert_eq!(loaded, [false, false, true, true]);
    assert_eq!(payloads(&batch)[3], "m3");
    assert!(is_unloaded(&e.range(S, all[0], all[0], 1)[0].message));
    // A retry copy of an unloaded original loads it first; a failed load
    // changes nothing.
    let failed = e.retry_copy_loading(S, G, &[all[0]], T0, |_| {
        Err(BrokerError::InvalidArgument("disk".into()))
    });
    assert!(failed.is_err());
    assert_eq!(info(&e).pending, 4);
    let copied = e
        .retry_copy_loading(S, G, &[all[0]], T0, |_| Ok(Arc::new(msg("m0"))))
        .unwrap();
    let copy = copied[0].copy.unwrap();
    assert_eq!(e.range(S, copy, copy, 1)[0].payload(), b"m0");
    assert_eq!(e.copy_of(S, copy).map(|c| c.times_delivered), Some(1));
}

#[test]
fn restored_entries_hold_no_payload() {
    let mut e = Engine::new();
    e.cache_payloads(Some(1 << 20));
    let ids = [EntryId::new(5, 0), EntryId::new(5, 1), EntryId::new(9, 0)];
    let copy = Arc::new(CopyOf {
        group: G.into(),
        times_delivered: 2,
    });
    e.restore_entries(S, [(ids[0], None), (ids[1], Some(copy)), (ids[2], None)]);
    // Ids at or below the last one are passed over.
    e.restore_entries(S, [(ids[1], None)]);
    let entries = e.range(S, EntryId::ZERO, EntryId::MAX, 10);
    assert_eq!(entries.iter().map(|x| x.id).collect::<Vec<_>>(), ids);
    assert!(entries.iter().all(|x| is_unloaded(&x.message)));
    assert_eq!(e.copy_of(S, ids[1]).map(|c| c.times_delivered), Some(2));
    assert_eq!(e.stream_info(S).unwrap().last_id, ids[2]);
    // New entries are held again.
    let id = publish_one(&mut e, "new", T0);
    assert_eq!(e.range(S, id, id, 1)[0].payload(), b"new");
}

/// A retry copy a trim kept for its group, which has not read it, is the
/// only record of work still owed: an ack or discard naming its id by a
/// group that does not hold it changes nothing (an unknown id is a no-op).
#[test]
fn an_unread_retry_copy_kept_by_a_trim_survives_acks_of_its_id() {
    let (mut e, ids) = setup_two_groups(StreamStart::Beginning, 1);
    let r1 = ReadRequest::new(S, "g1", "c", ReadMode::New, 10);
    assert_eq!(e.read(&r1, T0).unwrap().deliveries.len(), 1);
    let copy = e.retry_copy(S, "g1", &[ids[0]], T0).unwrap()[0]
        .copy
        .unwrap();
    e.trim(S, Trim::MaxLen(0)).unwrap();
    assert_eq!(e.stream_len(S), Some(1), "the unread copy is kept");
    assert_eq!(e.ack(S, "g2", &[copy]).unwrap(), 0);
    assert_eq!(e.ack(S, "g1", &[copy]).unwrap(), 0, "not pending: a no-op");
    assert_eq!(e.discard(S, "g2", &[copy]).unwrap(), 0);
    let again = e.read(&r1, T0 + 1).unwrap();
    let got: Vec<EntryId> = again.deliveries.iter().map(|d| d.entry.id).collect();
    assert_eq!(got, [copy], "g1's retry copy is still there to read");
}
