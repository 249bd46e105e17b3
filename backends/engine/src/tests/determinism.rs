//! The same calls at the same times give the same state, and the indexes
//! stay small.

use super::*;

// ------------------------------------------------------------ determinism

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
