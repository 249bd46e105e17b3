//! Recording changes and rebuilding from them: a rebuilt engine is the
//! live one, and goes on like it.

use std::time::Duration;

use ruststream_core::{ReadMode, ReadRequest, StreamStart, Trim};

use super::*;

/// A small deterministic generator, so a failure replays exactly.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

const STREAMS: [&str; 2] = ["s1", "s2"];
const GROUPS: [&str; 2] = ["g1", "g2"];
const CONSUMERS: [&str; 3] = ["c1", "c2", "c3"];

/// Applies one random operation.
fn step(e: &mut Engine, rng: &mut Lcg, now: u64) {
    let s = STREAMS[rng.next(2) as usize];
    let g = GROUPS[rng.next(2) as usize];
    let c = CONSUMERS[rng.next(3) as usize];
    let pending: Vec<EntryId> = e
        .pending(s, g, EntryId::ZERO, 100, None, now)
        .map(|p| p.iter().map(|p| p.id).collect())
        .unwrap_or_default();
    let some = |rng: &mut Lcg, ids: &[EntryId]| -> Vec<EntryId> {
        ids.iter().copied().filter(|_| rng.next(2) == 0).collect()
    };
    match rng.next(12) {
        0 | 1 => {
            let n = rng.next(4) as usize + 1;
            let msgs = (0..n).map(|i| Message::new(format!("{now}-{i}").into_bytes()));
            e.publish(s, msgs, now);
        }
        2 => {
            let start = [StreamStart::New, StreamStart::Beginning][rng.next(2) as usize];
            e.ensure_group(s, g, start, now);
        }
        3 | 4 => {
            let mode = match rng.next(4) {
                0 => ReadMode::New,
                1 => ReadMode::Claiming {
                    min_idle: Duration::from_millis(50),
                },
                2 => ReadMode::Reclaim {
                    min_idle: Duration::from_millis(50),
                },
                _ => ReadMode::own_pending(EntryId::ZERO),
            };
            let mut req = ReadRequest::new(s, g, c, mode, rng.next(5) as usize + 1);
            if rng.next(3) == 0 {
                req = req.max_deliveries(3);
            }
            let _ = e.read(&req, now);
        }
        5 => {
            let ids = some(rng, &pending);
            let _ = e.ack(s, g, &ids);
        }
        6 => {
            let ids = some(rng, &pending);
            if rng.next(2) == 0 {
                let _ = e.ack(s, g, &ids);
            } else {
                let _ = e.extend_claim(s, g, c, &ids, now);
            }
        }
        7 => {
            let ids = some(rng, &pending);
            let _ = e.retry_copy(s, g, &ids, now);
        }
        8 => {
            let ids = some(rng, &pending);
            let _ = e.retry_after(s, g, &ids, rng.next(100), now);
        }
        9 => {
            let ids = some(rng, &pending);
            let _ = e.dead_letter(s, g, &ids, "bad", now);
        }
        10 => {
            let dead: Vec<EntryId> = e
                .dead_letters(s, g, EntryId::ZERO, 100)
                .map(|d| d.iter().map(|d| d.id()).collect())
                .unwrap_or_default();
            let ids = some(rng, &dead);
            if rng.next(2) == 0 {
                let _ = e.redrive(s, g, &ids, now);
            } else {
                let _ = e.discard(s, g, &ids);
            }
        }
        _ => {
            if rng.next(4) == 0 {
                let _ = e.trim(s, Trim::MaxLen(rng.next(6)));
            } else if rng.next(8) == 0 {
                let _ = e.set_group_position(s, g, StreamStart::Beginning, now);
            } else if rng.next(2) == 0 {
                let idle = Duration::from_millis(rng.next(60));
                let _ = e.delete_consumer(s, g, c, idle, now);
            }
        }
    }
}

/// Everything observable about an engine, for comparison.
fn observe(e: &Engine, now: u64) -> Vec<String> {
    let mut out = Vec::new();
    for s in STREAMS {
        out.push(format!("{s}: {:?}", e.stream_info(s)));
        out.push(format!(
            "{s} range: {:?}",
            e.range(s, EntryId::ZERO, EntryId::MAX, 1000)
        ));
        for g in GROUPS {
            out.push(format!("{s}/{g}: {:?}", e.group_info(s, g).ok()));
            out.push(format!(
                "{s}/{g} pending: {:?}",
                e.pending(s, g, EntryId::ZERO, 1000, None, now).ok()
            ));
            out.push(format!(
                "{s}/{g} dead: {:?}",
                e.dead_letters(s, g, EntryId::ZERO, 1000).ok()
            ));
            let consumers: Option<Vec<(String, u64)>> = e
                .consumers(s, g, now)
                .ok()
                .map(|c| c.into_iter().map(|c| (c.name, c.pending)).collect());
            out.push(format!("{s}/{g} consumers: {consumers:?}"));
        }
    }
    out
}

fn rebuild(changes: impl IntoIterator<Item = Change>) -> Engine {
    let mut e = Engine::new();
    for c in changes {
        e.restore(c).unwrap();
    }
    let report = e.finish_restore(0);
    assert!(
        report.dangling.is_empty() && report.uncopied.is_empty(),
        "{report:?}"
    );
    e
}

/// A group whose cursor is past the last entry on disk (it read entries a
/// power failure then took from the segments): new ids go past the cursor,
/// so the group does not pass over them.
#[test]
fn a_rebuilt_stream_never_issues_ids_behind_a_groups_cursor() {
    let mut e = Engine::new();
    for change in [
        Change::Appended {
            stream: "s".into(),
            id: EntryId::new(5, 0),
            message: Arc::new(Message::new(b"on disk".to_vec())),
            copy: None,
        },
        Change::GroupCreated {
            stream: "s".into(),
            group: "g".into(),
            cursor: EntryId::new(9, 0),
        },
    ] {
        e.restore(change).unwrap();
    }
    e.finish_restore(0);
    let ids = e.publish("s", vec![Message::new(b"next".to_vec())], 1);
    assert!(ids[0] > EntryId::new(9, 0), "{ids:?}");
    let request = ReadRequest::new("s", "g", "c", ReadMode::New, 10);
    assert_eq!(e.read(&request, 2).unwrap().deliveries.len(), 1);
}

#[test]
fn replaying_the_recorded_changes_rebuilds_the_same_state() {
    for seed in 0..100 {
        let mut rng = Lcg(seed);
        let mut live = Engine::new();
        live.record_changes(true);
        let mut log = Vec::new();
        let mut now = 1_000;
        for _ in 0..300 {
            now += rng.next(40);
            step(&mut live, &mut rng, now);
            live.take_changes_into(&mut log);
        }
        let rebuilt = rebuild(log.clone());
        assert_eq!(observe(&live, now), observe(&rebuilt, now), "seed {seed}");

        // As the file log replays: every entry first (from the stream
        // segments), then the rest of the journal in order.
        let (entries, rest): (Vec<Change>, Vec<Change>) = log
            .iter()
            .cloned()
            .partition(|c| matches!(c, Change::Appended { .. }));
        let segments_first = rebuild(entries.into_iter().chain(rest));
        assert_eq!(
            observe(&live, now),
            observe(&segments_first, now),
            "seed {seed} (segments first)"
        );

        // A snapshot plus the entries rebuilds it too.
        let entries = log
            .into_iter()
            .filter(|c| matches!(c, Change::Appended { .. }));
        let from_snapshot = rebuild(entries.chain(live.snapshot()));
        assert_eq!(
            observe(&live, now),
            observe(&from_snapshot, now),
            "seed {seed} (snapshot)"
        );

        // And the rebuilt engine goes on exactly like the live one.
        let mut a = live;
        let mut b = from_snapshot;
        b.record_changes(true);
        let mut rng_a = Lcg(seed + 1000);
        let mut rng_b = Lcg(seed + 1000);
        for _ in 0..100 {
            now += 7;
            step(&mut a, &mut rng_a, now);
            step(&mut b, &mut rng_b, now);
        }
        assert_eq!(
            observe(&a, now),
            observe(&b, now),
            "seed {seed} (continued)"
        );
    }
}

/// Two entries handed out in one millisecond, the newer id first (it fell
/// due first): a claiming read of one, once both are idle, takes the one
/// handed out first by (time, id) order, before and after a rebuild.
#[test]
fn a_rebuild_breaks_ties_between_equally_idle_entries_as_the_live_engine() {
    let (mut e, all) = setup_recorded(2);
    let (a, b) = (all[0], all[1]);
    read(&mut e, new_req("w1", 2), T0);
    e.retry_after(S, G, &[a], 20, T0).unwrap();
    e.retry_after(S, G, &[b], 10, T0).unwrap();
    assert_eq!(
        ids(&read(&mut e, claiming_req("w2", 1_000, 10), T0 + 30)),
        [b, a]
    );
    let log = e.take_changes();
    let mut from_journal = rebuild(log.clone());
    let entries = log
        .into_iter()
        .filter(|c| matches!(c, Change::Appended { .. }));
    let mut from_snapshot = rebuild(entries.chain(e.snapshot()));
    let now = T0 + 1_030;
    let claimed: Vec<Vec<EntryId>> = [&mut e, &mut from_journal, &mut from_snapshot]
        .into_iter()
        .map(|engine| ids(&read(engine, reclaim_req("w3", 1_000, 1), now)))
        .collect();
    assert_eq!(claimed, [[a], [a], [a]]);
}

#[test]
fn missing_entries_are_reported_and_dropped() {
    let mut e = Engine::new();
    e.record_changes(true);
    e.ensure_group("s", "g", StreamStart::New, 0);
    e.publish("s", [Message::new(b"a".to_vec())], 1);
    let req = ReadRequest::new("s", "g", "c", ReadMode::New, 10);
    e.read(&req, 2).unwrap();
    let changes = e.take_changes();
    // Rebuild without the entry (it never became durable).
    let mut rebuilt = Engine::new();
    for c in changes
        .into_iter()
        .filter(|c| !matches!(c, Change::Appended { .. }))
    {
        rebuilt.restore(c).unwrap();
    }
    let report = rebuilt.finish_restore(0);
    assert_eq!(report.dangling.len(), 1);
    assert_eq!(rebuilt.group_info("s", "g").unwrap().pending, 0);
}

/// A snapshot lists pending entries in id order; an entry claimed again
/// since has a later delivery time than newer ids. The rebuilt engine must
/// still find the newer, idle entries for a claiming read.
#[test]
fn a_snapshot_rebuild_claims_idle_entries_in_time_order() {
    let (mut e, all) = setup_recorded(3);
    read(&mut e, new_req("a", 1), T0);
    read(&mut e, new_req("a", 1), T0 + 10);
    read(&mut e, new_req("a", 1), T0 + 20);
    // The oldest id is claimed again, and the next one's claim extended:
    // both now later than the newest id's delivery.
    assert_eq!(
        ids(&read(&mut e, claiming_req("b", 50, 1), T0 + 100)),
        [all[0]]
    );
    assert_eq!(e.extend_claim(S, G, "a", &[all[1]], T0 + 100).unwrap(), 1);
    let entries = e
        .take_changes()
        .into_iter()
        .filter(|c| matches!(c, Change::Appended { .. }));
    let mut rebuilt = rebuild(entries.chain(e.snapshot()));
    for engine in [&mut e, &mut rebuilt] {
        let claimed = read(engine, claiming_req("c", 50, 10), T0 + 110);
        assert_eq!(ids(&claimed), [all[2]]);
    }
}

/// The idle time of consumer `c` of `S`/`G` at `now`.
fn idle_of(e: &Engine, c: &str, now: u64) -> u64 {
    let consumers = e.consumers(S, G, now).unwrap();
    let found = consumers.iter().find(|x| x.name == c);
    found
        .map(|x| x.idle_ms)
        .unwrap_or_else(|| panic!("{consumers:?}"))
}

/// A consumer that read everything and then polled an empty stream has
/// the idle time it had once rebuilt, from the journal alone or from a
/// snapshot and the journal after it: never "since the epoch". From the
/// journal, at most [`SEEN_EVERY_MS`] too long; from a snapshot, exact.
#[test]
fn a_rebuild_keeps_each_consumers_idle_time() {
    let (mut e, ids) = setup_recorded(1);
    read(&mut e, new_req("c", 10), T0);
    e.ack(S, G, &ids).unwrap();
    let mut journal = e.take_changes();
    // Empty polls: the first within SEEN_EVERY_MS records nothing, the
    // next one past it records the time.
    read(&mut e, new_req("c", 10), T0 + 400);
    assert!(e.take_changes().is_empty(), "an empty poll wrote");
    read(&mut e, new_req("c", 10), T0 + SEEN_EVERY_MS + 500);
    journal.extend(e.take_changes());
    // The last poll, within SEEN_EVERY_MS of the one recorded: unrecorded.
    let last_poll = T0 + SEEN_EVERY_MS + 1_200;
    read(&mut e, new_req("c", 10), last_poll);
    assert!(e.take_changes().is_empty(), "an empty poll wrote");
    let now = last_poll + 5_000;
    assert_eq!(idle_of(&e, "c", now), 5_000);

    // The journal alone: too long by the 700 ms since the recorded poll,
    // which is within SEEN_EVERY_MS.
    let rebuilt = rebuild(journal);
    assert_eq!(idle_of(&rebuilt, "c", now), 5_700);
    const { assert!(700 < SEEN_EVERY_MS) };

    // A snapshot, then an empty poll the journal after it does not hold.
    read(&mut e, new_req("c", 10), last_poll + 200);
    let mut from_snapshot = e.snapshot();
    from_snapshot.extend(e.take_changes());
    let rebuilt = rebuild(from_snapshot);
    assert_eq!(idle_of(&rebuilt, "c", now), 4_800);
}

/// A log written before seen times were recorded (consumers joined, no
/// [`GroupChange::Seen`]) still rebuilds, and its consumers count as seen
/// at the rebuild (rather than at the epoch, or at their last delivery,
/// which could get a live consumer deleted as idle).
#[test]
fn a_log_without_seen_times_takes_its_consumers_as_seen_at_the_rebuild() {
    let (mut e, _) = setup_recorded(1);
    read(&mut e, new_req("c", 10), T0);
    read(&mut e, new_req("quiet", 10), T0);
    let old_log: Vec<Change> = e
        .take_changes()
        .into_iter()
        .map(|c| match c {
            Change::Group {
                stream,
                group,
                changes,
            } => Change::Group {
                stream,
                group,
                changes: changes
                    .into_iter()
                    .filter(|g| !matches!(g, GroupChange::Seen { .. }))
                    .collect(),
            },
            other => other,
        })
        .collect();
    let opened_at = T0 + 60_000;
    let mut rebuilt = Engine::new();
    for c in old_log {
        rebuilt.restore(c).unwrap();
    }
    rebuilt.finish_restore(opened_at);
    assert_eq!(idle_of(&rebuilt, "c", opened_at + 10), 10);
    assert_eq!(idle_of(&rebuilt, "quiet", opened_at + 10), 10);
    // Its next read records its seen time.
    rebuilt.record_changes(true);
    read(&mut rebuilt, new_req("quiet", 10), opened_at + 20);
    let changes = rebuilt.take_changes();
    assert!(
        matches!(&changes[..], [Change::Group { changes, .. }]
            if changes == &[GroupChange::Seen { consumer: 1, at_ms: opened_at + 20 }]),
        "{changes:?}"
    );
}
