//! Creating groups and moving their cursors (`docs/semantics.md`, rule 1).

use super::*;

// --------------------------------------------------------- rule 1: groups

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

    e.set_group_position(S, G, StreamStart::New, T0).unwrap();
    assert_eq!(info(&e).last_delivered, all[3]);
    assert_eq!(info(&e).lag, 0);
    assert_eq!(all_pending(&e, T0 + 10), before);
    assert!(read(&mut e, new_req("c", 10), T0 + 10).is_empty());

    e.set_group_position(S, G, StreamStart::Id(all[2]), T0)
        .unwrap();
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
    e.set_group_position(S, G, StreamStart::New, T0).unwrap();
    assert_eq!(info(&e).dead_letters, 1);
    assert_eq!(dead(&e)[0].id(), all[0]);
}

#[test]
fn rewinding_the_cursor_does_not_hand_out_entries_still_held() {
    // Rules 2 and 3: an entry held by a consumer is not handed out again
    // while its claim stands, even as "new" after the cursor was moved back.
    let (mut e, all) = setup(3);
    read(&mut e, new_req("a", 2), T0);
    e.set_group_position(S, G, StreamStart::Beginning, T0)
        .unwrap();
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
    e.set_group_position(S, G, StreamStart::Beginning, T0)
        .unwrap();
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
    e.set_group_position(S, G, StreamStart::Beginning, T0)
        .unwrap();
    assert_eq!(info(&e).lag, 3);
    let batch = read(&mut e, new_req("b", 10), T0 + 1);
    assert_eq!(ids(&batch), all);
    assert_eq!(counts(&batch), vec![0, 0, 0]);
}

#[test]
fn set_group_position_on_an_unknown_group_is_no_group() {
    let mut e = Engine::new();
    assert_no_group(e.set_group_position(S, G, StreamStart::New, T0), S, G);
    e.ensure_group(S, "other", StreamStart::New, T0);
    assert_no_group(e.set_group_position(S, G, StreamStart::New, T0), S, G);
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
        ReadMode::own_pending(EntryId::ZERO),
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
