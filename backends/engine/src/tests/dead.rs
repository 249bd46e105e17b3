//! Dead letters: by `max_deliveries` and by hand, redrives and discards
//! (`docs/semantics.md`, rule 8).

use super::*;

// --------------------------------------------------------- max_deliveries

#[test]
fn an_entry_delivered_max_times_is_dead_lettered_instead_of_claimed() {
    let (mut e, all) = held(1); // times_delivered 1
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
    let (mut e, all) = owed(2);
    let batch = read(&mut e, new_req("a", 10).max_deliveries(1), T0 + 1);
    assert_eq!(batch.dead_lettered, vec![all[0]]);
    assert_eq!(ids(&batch), vec![all[1]]);
    assert_eq!(dead(&e)[0].times_delivered, 1);
}

#[test]
fn max_deliveries_applies_to_own_pending_rereads() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
    let copy = e.retry_copy(S, G, &all, T0).unwrap()[0].copy.unwrap();
    let batch = read(&mut e, new_req("a", 10).max_deliveries(2), T0);
    assert_eq!(ids(&batch), vec![copy]);
    assert!(batch.dead_lettered.is_empty());
}

// --------------------------------------------------- rule 8: dead letters

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
    let (mut e, all) = held(2);
    assert_eq!(e.dead_letter(S, G, &[all[1]], "r", T0).unwrap(), 0);
    assert_eq!(e.dead_letter(S, G, &[all[0]], "r", T0).unwrap(), 1);
    assert_eq!(e.dead_letter(S, G, &[all[0]], "again", T0).unwrap(), 0);
    assert_eq!(dead(&e)[0].reason, "r");
}

#[test]
fn a_dead_letter_is_not_handed_out() {
    let (mut e, all) = held(1);
    e.dead_letter(S, G, &all, "r", T0).unwrap();
    assert!(read(&mut e, claiming_req("b", 0, 10), T0 + 60_000).is_empty());
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), T0 + 60_000).is_empty());
}

#[test]
fn an_owed_entry_can_be_dead_lettered() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
    let batch = read(&mut e, reclaim_req("a", 0, 1).max_deliveries(1), T0);
    assert_eq!(batch.dead_lettered, all);
    e.redrive(S, G, &all, T0 + 1).unwrap();
    let batch = read(&mut e, reclaim_req("a", 0, 1).max_deliveries(1), T0 + 1);
    assert_eq!(ids(&batch), all);
    assert!(batch.dead_lettered.is_empty());
}

#[test]
fn redrive_and_discard_ignore_unknown_ids() {
    let (mut e, all) = held(1);
    assert_eq!(e.redrive(S, G, &all, T0).unwrap(), 0);
    assert_eq!(e.discard(S, G, &all).unwrap(), 0);
    assert_eq!(pending_entry(&e, all[0], T0).consumer.as_deref(), Some("a"));
}

#[test]
fn discard_drops_a_dead_letter() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = setup_two_groups(StreamStart::Beginning, 1);
    read_one_in_both_groups(&mut e);
    e.dead_letter(S, "g1", &all, "r", T0).unwrap();
    assert_eq!(e.group_info(S, "g1").unwrap().dead_letters, 1);
    assert_eq!(e.group_info(S, "g2").unwrap().dead_letters, 0);
    assert_eq!(e.group_info(S, "g2").unwrap().pending, 1);
    assert_eq!(e.discard(S, "g2", &all).unwrap(), 0);
}
