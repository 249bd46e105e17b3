//! Reads, phase by phase: new entries, claims of idle entries, own pending
//! re-reads, and when a read could next return something
//! (`docs/semantics.md`, rules 2 to 5).

use super::*;

/// Asserts that `batch` is the first of `all` again (its second delivery),
/// then the second, new, and that the cursor moved to the second.
fn assert_again_then_new(e: &Engine, batch: &ReadBatch, all: &[EntryId]) {
    assert_eq!(ids(batch), vec![all[0], all[1]]);
    assert_eq!(counts(batch), vec![1, 0]);
    assert_eq!(info(e).last_delivered, all[1]);
}

// ---------------------------------------------------- rule 2: new entries

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
    let (mut e, all) = setup_two_groups(StreamStart::New, 3);
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
    for req in every_mode("c", 0, 0) {
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

// --------------------------------------------- rule 3: pending and claims

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
    let (mut e, all) = held(1);
    let t = T0 + 999;
    assert!(read(&mut e, new_req("b", 10), t).is_empty());
    assert!(read(&mut e, claiming_req("b", 1_000, 10), t).is_empty());
    assert!(read(&mut e, reclaim_req("b", 1_000, 10), t).is_empty());
    let p = pending_entry(&e, all[0], t);
    assert_eq!(p.consumer.as_deref(), Some("a"));
    assert_eq!(p.times_delivered, 1);
    assert_eq!(p.idle_ms, 999);
}

// ---------------------------------------------------- rule 4: idle claims

#[test]
fn claiming_takes_an_entry_idle_for_exactly_min_idle() {
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
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
    let (mut e, all) = held(1);
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
    e.set_group_position(S, G, StreamStart::Id(all[1]), T0)
        .unwrap();
    read(&mut e, new_req("a", 1), T0); // all[2]
    e.set_group_position(S, G, StreamStart::Beginning, T0)
        .unwrap();
    read(&mut e, new_req("a", 1), T0 + 10); // all[0]
    read(&mut e, new_req("a", 1), T0 + 20); // all[1]

    let first = read(&mut e, reclaim_req("b", 100, 2), T0 + 500);
    assert_eq!(ids(&first), vec![all[2], all[0]]);
    assert_eq!(idles(&first), vec![500, 490]);
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
    assert_eq!(idles(&batch), vec![50, 100, 0, 0]);
}

#[test]
fn owed_entries_go_before_new_ones_in_a_new_read() {
    let (mut e, all) = owed(3);
    let batch = read(&mut e, new_req("b", 2), T0 + 1);
    assert_again_then_new(&e, &batch, &all);
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
    let (mut e, all) = owed(3);
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
    let (mut e, all) = held(3);
    let batch = read(&mut e, claiming_req("b", 100, 2), T0 + 100);
    assert_again_then_new(&e, &batch, &all);
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
    let (mut e, all) = owed(1);
    let batch = read(&mut e, claiming_req("b", 0, 10), T0 + 1);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(pending_entry(&e, all[0], T0 + 1).times_delivered, 2);
}

#[test]
fn claiming_with_zero_min_idle_takes_held_entries_at_once() {
    let (mut e, all) = held(1);
    let batch = read(&mut e, claiming_req("b", 0, 10), T0);
    assert_eq!(ids(&batch), vec![all[0]]);
    assert_eq!(counts(&batch), vec![1]);
    assert_eq!(batch.deliveries[0].idle_ms, 0);
}

#[test]
fn a_consumer_may_claim_its_own_idle_entry() {
    let (mut e, all) = held(1);
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

// ------------------------------------------- rule 5: own pending re-reads

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
    assert_eq!(idles(&batch), vec![40, 40]);
    // It never hands out new entries or moves the cursor.
    assert_eq!(info(&e).last_delivered, all[3]);
    assert_eq!(info(&e).lag, 1);
    // The owed entry is still owed to the group.
    assert_eq!(pending_entry(&e, all[1], T0 + 40).consumer, None);
}

#[test]
fn own_pending_increments_delivery_counts() {
    let (mut e, all) = held(1);
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
    let (mut e, _) = owed(1);
    assert!(read(&mut e, own_req("a", EntryId::ZERO, 10), T0 + 1_000).is_empty());
}

// --------------------------------------------------------------- next_due

#[test]
fn next_due_is_none_when_nothing_is_scheduled() {
    let (mut e, _) = setup(0);
    for req in every_mode("a", 100, 1) {
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
    let (mut e, all) = held(1);
    e.retry_after(S, G, &all, 0, T0).unwrap();
    assert_eq!(e.next_due(&new_req("a", 1), T0 + 50), Some(T0 + 51));
}
