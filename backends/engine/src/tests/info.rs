//! Group summaries and consumers (`docs/semantics.md`, rule 9).

use super::*;

// ----------------------------------------------------- rule 9: group info

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
