//! Acks, retries and refreshed claims (`docs/semantics.md`, rules 3, 4,
//! 6 and 7).

use super::*;

// ------------------------------------------------------------ rule 6: ack

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
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
    e.retry_after(S, G, &all, 100, T0).unwrap();
    assert_eq!(e.ack(S, G, &all).unwrap(), 1);
    assert!(read(&mut e, new_req("a", 10), T0 + 1_000).is_empty());
    assert_eq!(e.next_due(&new_req("a", 10), T0), None);
}

// ---------------------------------------------------- rule 7: retry after

#[test]
fn retry_after_makes_an_entry_owed_by_nobody() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(2);
    e.retry_after(S, G, &[all[0]], 500, T0).unwrap();
    let t = T0 + 499;
    assert!(read(&mut e, reclaim_req("b", 0, 10), t).is_empty());
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), t).is_empty());
    assert_eq!(ids(&read(&mut e, claiming_req("b", 0, 1), t)), vec![all[1]]);
    assert_eq!(pending_entry(&e, all[0], t).consumer, None);
}

#[test]
fn retry_after_is_handed_out_at_the_delay_by_a_new_read() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
    e.retry_after(S, G, &all, 0, T0).unwrap();
    assert_eq!(pending_entry(&e, all[0], T0).owed_in_ms, Some(0));
    let batch = read(&mut e, reclaim_req("a", 60_000, 10), T0);
    assert_eq!(ids(&batch), all);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(batch.deliveries[0].idle_ms, 0);
}

#[test]
fn retry_after_ignores_ids_that_are_not_pending() {
    let (mut e, all) = held(2);
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
    let (mut e, all) = held(1);
    e.retry_after(S, G, &all, 100, T0).unwrap();
    assert_eq!(e.retry_after(S, G, &all, 1_000, T0 + 50).unwrap(), 1);
    assert!(read(&mut e, new_req("a", 1), T0 + 100).is_empty());
    assert_eq!(ids(&read(&mut e, new_req("a", 1), T0 + 1_050)), all);
}

#[test]
fn retried_entries_keep_their_delivery_count_across_attempts() {
    let (mut e, all) = held(1);
    for attempt in 1..=4u32 {
        let now = T0 + u64::from(attempt) * 10;
        e.retry_after(S, G, &all, 0, now).unwrap();
        let batch = read(&mut e, new_req("a", 1), now);
        assert_eq!(counts(&batch), vec![attempt]);
    }
    assert_eq!(pending_entry(&e, all[0], T0 + 40).times_delivered, 5);
}

// ------------------------------------------------------------- retry copy

#[test]
fn retry_copy_appends_a_copy_and_settles_the_original() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(2);
    let out = e
        .retry_copy(S, G, &[all[1], EntryId::new(3, 3)], T0)
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(e.stream_info(S).unwrap().length, 2);
}

#[test]
fn retry_copy_of_an_owed_entry_works() {
    let (mut e, all) = held(1);
    e.retry_after(S, G, &all, 1_000, T0).unwrap();
    let copy = e.retry_copy(S, G, &all, T0 + 1).unwrap()[0].copy.unwrap();
    assert!(pending_ids(&e, T0 + 1).is_empty());
    assert_eq!(e.next_due(&new_req("a", 1), T0 + 1), None);
    let batch = read(&mut e, new_req("a", 10), T0 + 2);
    assert_eq!(ids(&batch), vec![copy]);
    assert_eq!(counts(&batch), vec![1]);
}

// ------------------------------------------- rules 3 and 4: extend claim

#[test]
fn extending_a_claim_resets_its_idle_time_and_keeps_its_count() {
    let (mut e, all) = setup(2);
    read(&mut e, new_req("a", 2), T0);
    assert_eq!(e.extend_claim(S, G, "a", &[all[0]], T0 + 200).unwrap(), 1);
    let p = pending_entry(&e, all[0], T0 + 200);
    assert_eq!((p.idle_ms, p.times_delivered), (0, 1));
    assert_eq!(p.consumer.as_deref(), Some("a"));
    // Only the entry not refreshed is idle long enough at T0 + 300.
    let claimed = read(&mut e, claiming_req("b", 300, 10), T0 + 300);
    assert_eq!(ids(&claimed), [all[1]]);
    assert!(read(&mut e, claiming_req("b", 300, 10), T0 + 499).is_empty());
    assert_eq!(
        e.next_due(&claiming_req("b", 300, 10), T0 + 499),
        Some(T0 + 500),
        "a blocking claim wakes when the refreshed claim lapses"
    );
    let claimed = read(&mut e, claiming_req("b", 300, 10), T0 + 500);
    assert_eq!(ids(&claimed), [all[0]]);
    assert_eq!(counts(&claimed), [1], "the refresh was not a delivery");
    assert_eq!(claimed.deliveries[0].idle_ms, 300);
}

#[test]
fn extending_a_claim_passes_over_what_the_consumer_does_not_hold() {
    let (mut e, all) = held(4);
    read(&mut e, new_req("b", 1), T0);
    read(&mut e, new_req("b", 1), T0);
    e.retry_after(S, G, &[all[2]], 0, T0).unwrap();
    let before = all_pending(&e, T0 + 100);
    // Held by b, owed, never delivered, unknown.
    let others = [all[1], all[2], all[3], EntryId::new(1, 1)];
    assert_eq!(e.extend_claim(S, G, "a", &others, T0 + 100).unwrap(), 0);
    assert_eq!(e.extend_claim(S, G, "nobody", &all, T0 + 100).unwrap(), 0);
    assert_eq!(e.extend_claim(S, G, "a", &[], T0 + 100).unwrap(), 0);
    assert_eq!(all_pending(&e, T0 + 100), before);
    assert!(
        e.consumers(S, G, T0)
            .unwrap()
            .iter()
            .all(|c| c.name != "nobody"),
        "an unknown consumer is not created"
    );
    assert_no_group(e.extend_claim(S, "ghost", "a", &all, T0), S, "ghost");
}

#[test]
fn an_id_named_twice_is_refreshed_once() {
    let (mut e, all) = held(1);
    let twice = [all[0], all[0]];
    assert_eq!(e.extend_claim(S, G, "a", &twice, T0 + 50).unwrap(), 1);
    assert_eq!(e.extend_claim(S, G, "a", &twice, T0 + 50).unwrap(), 1);
    assert_eq!(pending_entry(&e, all[0], T0 + 60).idle_ms, 10);
}

#[test]
fn a_refreshed_claim_survives_a_rebuild_from_the_journal() {
    let (mut e, all) = setup_recorded(1);
    read(&mut e, new_req("a", 1), T0);
    e.extend_claim(S, G, "a", &all, T0 + 200).unwrap();
    let mut rebuilt = Engine::new();
    for change in e.take_changes() {
        rebuilt.restore(change).unwrap();
    }
    assert!(rebuilt.finish_restore(0).dangling.is_empty());
    let p = pending_entry(&rebuilt, all[0], T0 + 250);
    assert_eq!((p.idle_ms, p.times_delivered), (50, 1));
    assert!(read(&mut rebuilt, claiming_req("b", 100, 1), T0 + 250).is_empty());
}
