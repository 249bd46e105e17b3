//! Memory follows the working set: indexes and buffers do not keep what
//! a long run or one burst left behind.

use super::*;

/// A subscription whose read-ahead is full of entries whose handlers never
/// end (nor a read in the whole group) keeps refreshing their claims: each
/// refresh pushes one `held_by_time` record per held entry; the refresh
/// prunes the stale ones too, not only a read.
#[test]
fn refreshing_claims_without_reads_keeps_the_idle_index_bounded() {
    let (mut e, ids) = setup(100);
    let got = ids_of(&read(&mut e, new_req("a", 100), T0));
    assert_eq!(got.len(), 100);
    // 10,000 refreshes, one per "second", and no read meanwhile.
    for i in 1..=10_000u64 {
        e.extend_claim(S, G, "a", &ids, T0 + i * 1_000).unwrap();
    }
    let pending = e.streams[S].groups[G].pending.len();
    let queued = e.streams[S].groups[G].held_by_time.len();
    assert_eq!(pending, 100);
    assert!(
        queued <= 2 * pending + 1024,
        "stale held records piled up without a read: {queued} for {pending} pending"
    );
}

fn ids_of(batch: &ReadBatch) -> Vec<EntryId> {
    batch.deliveries.iter().map(|d| d.entry.id).collect()
}

/// A burst that left 100,000 entries pending once (a downstream outage
/// with delayed retries, a large read-ahead across consumers), then steady
/// small traffic: the pending list's and idle index's buffers give the
/// burst's memory back.
#[test]
fn a_pending_burst_does_not_keep_its_buffers_forever() {
    let (mut e, _) = setup(100_000);
    let got = ids_of(&read(&mut e, new_req("a", 100_000), T0));
    assert_eq!(got.len(), 100_000);
    e.ack(S, G, &got).unwrap();
    // Steady small traffic afterwards.
    for round in 0..1_000u64 {
        let now = T0 + 10 + round;
        publish_n(&mut e, "m", 10, now);
        let got = ids_of(&read(&mut e, new_req("a", 10), now));
        e.ack(S, G, &got).unwrap();
    }
    let g = &e.streams[S].groups[G];
    let slots = g.pending.slots.capacity();
    let held = g.held_by_time.capacity();
    assert!(
        slots <= 4_096 && held <= 4_096,
        "buffers kept their peak: pending slots capacity {slots}, held_by_time capacity {held} \
         for {} pending",
        g.pending.len()
    );
}
