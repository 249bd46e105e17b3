//! The Redis broker where a server-side script could leave a change half
//! done, or where the key layout could mislead it: entries too big for a
//! script's argument list, owed entries that fall due together, dead letters
//! without a copy of their fields, names that would share keys, start
//! positions past a stream's end, the original id of a dead retry copy, and
//! settle calls that fail (each must change nothing).

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use redis::Value;
use ruststream_core::{
    Broker, BrokerError, DeadLetter, EntryId, Message, ReadBatch, ReadMode, ReadRequest, Retry,
    StreamStart, Trim,
};
use ruststream_redis::{ORIGINAL_ID_HEADER, RedisBroker};
use support::{ensure_groups, publish_bytes, raw, raw_command, unique, url, xpending, xrange};

const G: &str = "g";

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// `n` field-value pairs. Names repeat every 100 fields (a stream entry
/// may repeat a name), which keeps decoding the entry into headers cheap;
/// what matters here is the number of fields a script has to copy.
fn big_fields(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("h:f{}", i % 100), format!("v{i}")))
        .collect()
}

/// Appends an entry with `fields` as another client would.
async fn xadd(stream: &str, fields: &[(String, String)]) -> EntryId {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(stream).arg("*");
    for (name, value) in fields {
        cmd.arg(name).arg(value);
    }
    let id: String = raw_command(&cmd).await;
    id.parse().unwrap()
}

/// The fields of entry `id` of `key`, flat, as any client reads them.
async fn raw_fields(key: &str, id: &str) -> Option<Vec<String>> {
    let range = xrange(key, id, id).await;
    let Value::Array(entries) = range else {
        return None;
    };
    let Value::Array(parts) = entries.first()? else {
        return None;
    };
    match &parts[1] {
        Value::Array(f) => Some(f.iter().map(text).collect()),
        _ => Some(Vec::new()),
    }
}

/// Every entry of `key`: (id, flat fields).
async fn raw_entries(key: &str) -> Vec<(String, Vec<String>)> {
    let range = xrange(key, "-", "+").await;
    let Value::Array(entries) = range else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|e| {
            let Value::Array(parts) = e else { panic!() };
            let fields = match &parts[1] {
                Value::Array(f) => f.iter().map(text).collect(),
                _ => Vec::new(),
            };
            (text(&parts[0]), fields)
        })
        .collect()
}

fn flat(fields: &[(String, String)]) -> Vec<String> {
    fields
        .iter()
        .flat_map(|(n, v)| [n.clone(), v.clone()])
        .collect()
}

fn dead_key(stream: &str) -> String {
    format!("rs:{{{stream}}}:dead:{G}")
}

async fn new_read(broker: &RedisBroker, s: &str, consumer: &str, count: usize) -> Vec<EntryId> {
    broker
        .read(ReadRequest::new(s, G, consumer, ReadMode::New, count))
        .await
        .unwrap()
        .deliveries
        .iter()
        .map(|d| d.id())
        .collect()
}

async fn pending_ids(broker: &RedisBroker, s: &str) -> Vec<EntryId> {
    broker
        .pending(s, G, EntryId::ZERO, 1000, None)
        .await
        .unwrap()
        .iter()
        .map(|p| p.id)
        .collect()
}

/// A fresh stream named after `what`, with group [`G`] reading from its
/// beginning.
async fn stream_with_group(broker: &RedisBroker, what: &str) -> String {
    let s = unique(what);
    broker
        .ensure_group(&s, G, StreamStart::Beginning)
        .await
        .unwrap();
    s
}

/// Publishes one entry per payload to `s`, in one call: their ids.
async fn publish_payloads(broker: &RedisBroker, s: &str, payloads: &[&[u8]]) -> Vec<EntryId> {
    let messages = payloads.iter().map(|p| Message::new(p.to_vec())).collect();
    broker.publish_batch(s, messages).await.unwrap()
}

/// A broker on the server under test and a fresh stream named after
/// `what` (see [`stream_with_group`]).
async fn broker_and_stream(what: &str) -> (RedisBroker, String) {
    let broker = RedisBroker::standalone(url());
    let s = stream_with_group(&broker, what).await;
    (broker, s)
}

/// A fresh stream (see [`stream_with_group`]) holding an entry of `n`
/// fields, then a small one: (stream, big, small).
async fn big_then_small(broker: &RedisBroker, what: &str, n: usize) -> (String, EntryId, EntryId) {
    let s = stream_with_group(broker, what).await;
    let big = xadd(&s, &big_fields(n)).await;
    let small = publish_bytes(broker, &s, b"small").await;
    (s, big, small)
}

/// A fresh stream (see [`stream_with_group`]) holding one entry of `n`
/// fields, read once by consumer `c`: (stream, its fields, its id).
async fn big_delivered(
    broker: &RedisBroker,
    what: &str,
    n: usize,
) -> (String, Vec<(String, String)>, EntryId) {
    let s = stream_with_group(broker, what).await;
    let fields = big_fields(n);
    let big = xadd(&s, &fields).await;
    assert_eq!(new_read(broker, &s, "c", 10).await, [big]);
    (s, fields, big)
}

/// Hands `ids` back to the group, due at once.
async fn retry_now(broker: &RedisBroker, s: &str, ids: &[EntryId]) -> u64 {
    broker
        .retry(s, G, ids, Retry::After(Duration::ZERO))
        .await
        .unwrap()
}

/// The ids a read handed out, in order.
fn delivered(read: &ReadBatch) -> Vec<EntryId> {
    read.deliveries.iter().map(|d| d.id()).collect()
}

/// The group's first ten dead letters.
async fn dead_letters(broker: &RedisBroker, s: &str) -> Vec<DeadLetter> {
    broker.dead_letters(s, G, EntryId::ZERO, 10).await.unwrap()
}

// ---- 1. entries too big for a script's argument list -----------------------

const SIZES: [usize; 2] = [5_000, 20_000];

#[tokio::test]
async fn a_retry_copy_of_an_entry_with_thousands_of_fields_keeps_every_field() {
    let broker = RedisBroker::standalone(url());
    for n in SIZES {
        let (s, fields, big) = big_delivered(&broker, &format!("big-copy-{n}"), n).await;
        assert_eq!(
            broker.retry(&s, G, &[big], Retry::Copy).await.unwrap(),
            1,
            "{n} fields"
        );
        let entries = raw_entries(&s).await;
        assert_eq!(entries.len(), 2, "the original and its copy");
        let (copy_id, copy_fields) = &entries[1];
        let big_text = big.to_string();
        assert_eq!(
            copy_fields[..6],
            ["rs:group", G, "rs:count", "1", "rs:orig", big_text.as_str()]
        );
        assert_eq!(copy_fields[6..], flat(&fields)[..]);
        assert_eq!(pending_ids(&broker, &s).await, [], "the original was acked");
        let again = broker
            .read(ReadRequest::new(&s, G, "c", ReadMode::New, 10))
            .await
            .unwrap();
        assert_eq!(again.deliveries.len(), 1);
        assert_eq!(again.deliveries[0].id().to_string(), *copy_id);
        assert_eq!(again.deliveries[0].delivery_count, 1);
    }
}

#[tokio::test]
async fn dead_letters_and_redrives_of_an_entry_with_thousands_of_fields_keep_every_field() {
    let broker = RedisBroker::standalone(url());
    for n in SIZES {
        let (s, fields, big) = big_delivered(&broker, &format!("big-dead-{n}"), n).await;
        assert_eq!(
            broker.dead_letter(&s, G, &[big], "poison").await.unwrap(),
            1,
            "{n} fields"
        );
        assert_eq!(pending_ids(&broker, &s).await, []);
        let listed = dead_letters(&broker, &s).await;
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (
                listed[0].id(),
                listed[0].reason.as_str(),
                listed[0].times_delivered
            ),
            (big, "poison", 1)
        );
        let dead = raw_entries(&dead_key(&s)).await;
        assert_eq!(dead.len(), 1);
        assert!(
            dead[0].1.ends_with(&flat(&fields)),
            "the dead letter keeps every field"
        );

        // Redrive while the stream still holds the entry: owed, same id.
        assert_eq!(broker.redrive(&s, G, &[big]).await.unwrap(), 1);
        assert_eq!(new_read(&broker, &s, "c", 10).await, [big]);

        // Dead-letter it again, trim it away, redrive: appended again from
        // the dead letter's copy of its fields.
        assert_eq!(broker.dead_letter(&s, G, &[big], "again").await.unwrap(), 1);
        broker.trim(&s, Trim::MaxLen(0)).await.unwrap();
        assert_eq!(broker.redrive(&s, G, &[big]).await.unwrap(), 1);
        let entries = raw_entries(&s).await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].1[..4], ["rs:group", G, "rs:count", "0"]);
        assert_eq!(entries[0].1[4..6], ["rs:orig".to_owned(), big.to_string()]);
        assert_eq!(entries[0].1[6..], flat(&fields)[..]);
        assert!(dead_letters(&broker, &s).await.is_empty());
        let copy = new_read(&broker, &s, "c", 10).await;
        assert_eq!(copy.len(), 1);
        assert_eq!(copy[0].to_string(), entries[0].0);
    }
}

/// Reads up to `count` entries of `s` as `consumer` in `mode`, with
/// `max_deliveries(max)`.
async fn bounded_read(
    broker: &RedisBroker,
    s: &str,
    consumer: &str,
    mode: ReadMode,
    count: usize,
    max: u32,
) -> ReadBatch {
    broker
        .read(ReadRequest::new(s, G, consumer, mode, count).max_deliveries(max))
        .await
        .unwrap()
}

/// Reads `s` as `consumer` until `id` is delivered (at most a few reads).
async fn deliver(broker: &RedisBroker, s: &str, consumer: &str, id: EntryId) {
    let got = new_read(broker, s, consumer, 1).await;
    assert_eq!(got, [id]);
}

#[tokio::test]
async fn a_big_owed_entry_at_max_deliveries_is_dead_lettered_and_blocks_nothing() {
    let broker = RedisBroker::standalone(url());
    for n in SIZES {
        // `new`: the owed entry comes first, over its bound.
        let (s, big, small) = big_then_small(&broker, &format!("big-owed-new-{n}"), n).await;
        deliver(&broker, &s, "c", big).await;
        retry_now(&broker, &s, &[big]).await;
        let read = bounded_read(&broker, &s, "c", ReadMode::New, 1, 1).await;
        assert_eq!(read.dead_lettered, [big], "{n} fields");
        assert_eq!(delivered(&read), [small]);
        let dead = dead_letters(&broker, &s).await;
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].id(), dead[0].times_delivered), (big, 1));
        assert!(
            dead[0].reason.contains("max_deliveries"),
            "{}",
            dead[0].reason
        );
        assert_eq!(pending_ids(&broker, &s).await, [small]);

        // `reclaim`: an owed entry over its bound ahead of one that is not.
        let (s, big, small) = big_then_small(&broker, &format!("big-owed-reclaim-{n}"), n).await;
        deliver(&broker, &s, "c", big).await;
        retry_now(&broker, &s, &[big]).await;
        deliver(&broker, &s, "c", big).await;
        deliver(&broker, &s, "c", small).await;
        retry_now(&broker, &s, &[big, small]).await;
        let reclaim = ReadMode::Reclaim {
            min_idle: Duration::from_secs(60),
        };
        let read = bounded_read(&broker, &s, "r", reclaim, 1, 2).await;
        assert_eq!(read.dead_lettered, [big], "{n} fields");
        assert_eq!(
            delivered(&read),
            [small],
            "the entry behind it is handed out in the same read"
        );
        assert_eq!(dead_letters(&broker, &s).await[0].times_delivered, 2);
    }
}

#[tokio::test]
async fn a_big_claimed_entry_at_max_deliveries_is_dead_lettered_by_reclaim_and_own_reads() {
    let broker = RedisBroker::standalone(url());
    for n in SIZES {
        // reclaim: held by a stopped consumer, idle, over its bound.
        let (s, big, small) = big_then_small(&broker, &format!("big-claimed-{n}"), n).await;
        assert_eq!(new_read(&broker, &s, "gone", 10).await, [big, small]);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let reclaim = ReadMode::Reclaim {
            min_idle: Duration::from_millis(10),
        };
        let read = bounded_read(&broker, &s, "r", reclaim, 10, 1).await;
        assert_eq!(read.dead_lettered, [big, small], "{n} fields");
        let dead = dead_letters(&broker, &s).await;
        assert_eq!(dead.len(), 2);
        assert_eq!((dead[0].id(), dead[0].times_delivered), (big, 1));
        assert_eq!(pending_ids(&broker, &s).await, []);

        // own pending: a restarted consumer re-reads what it held.
        let (s, big, small) = big_then_small(&broker, &format!("big-own-{n}"), n).await;
        assert_eq!(new_read(&broker, &s, "c", 10).await, [big, small]);
        let own = ReadMode::own_pending(EntryId::ZERO);
        let read = bounded_read(&broker, &s, "c", own, 10, 2).await;
        assert_eq!(read.deliveries.len(), 2, "under the bound: re-read");
        let read = bounded_read(&broker, &s, "c", own, 10, 2).await;
        assert_eq!(read.dead_lettered, [big, small], "{n} fields");
        assert_eq!(pending_ids(&broker, &s).await, []);
    }
}

#[tokio::test]
async fn a_big_retry_copy_at_max_deliveries_is_dead_lettered_by_a_new_read() {
    let broker = RedisBroker::standalone(url());
    for n in SIZES {
        let s = stream_with_group(&broker, &format!("big-copy-dead-{n}")).await;
        let fields = big_fields(n);
        let big = xadd(&s, &fields).await;
        deliver(&broker, &s, "c", big).await;
        assert_eq!(broker.retry(&s, G, &[big], Retry::Copy).await.unwrap(), 1);
        let small = publish_bytes(&broker, &s, b"small").await;
        let copy: EntryId = raw_entries(&s).await[1].0.parse().unwrap();
        let read = bounded_read(&broker, &s, "c", ReadMode::New, 10, 1).await;
        assert_eq!(read.dead_lettered, [copy], "{n} fields");
        assert_eq!(delivered(&read), [small]);
        let dead = dead_letters(&broker, &s).await;
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].id(), copy);
        assert_eq!(
            dead[0].entry.headers().get_str(ORIGINAL_ID_HEADER),
            Some(big.to_string().as_str())
        );
        let raw_dead = raw_entries(&dead_key(&s)).await;
        assert!(raw_dead[0].1.ends_with(&flat(&fields)));
        assert_eq!(pending_ids(&broker, &s).await, [small]);
    }
}

// ---- 3. owed entries that fall due together ---------------------------------

/// 20 entries from one millisecond: ids `1000-1` .. `1000-20`, which sort
/// differently as text (`1000-10` before `1000-2`).
async fn twenty_in_one_ms(broker: &RedisBroker, s: &str) -> Vec<EntryId> {
    broker
        .ensure_group(s, G, StreamStart::Beginning)
        .await
        .unwrap();
    let mut cli = raw(0).await;
    let mut ids = Vec::new();
    for seq in 1..=20u64 {
        let id: String = redis::cmd("XADD")
            .arg(s)
            .arg(format!("1000-{seq}"))
            .arg("payload")
            .arg(seq.to_string())
            .query_async(&mut cli)
            .await
            .unwrap();
        ids.push(id.parse().unwrap());
    }
    ids
}

#[tokio::test]
async fn owed_entries_due_at_the_same_time_come_back_in_id_order() {
    let broker = RedisBroker::standalone(url());
    // A nack of all of them at once (a hand-back at shutdown).
    let s = unique("owed-order-nack");
    let ids = twenty_in_one_ms(&broker, &s).await;
    assert_eq!(new_read(&broker, &s, "c", 20).await, ids);
    assert_eq!(retry_now(&broker, &s, &ids).await, 20);
    assert_eq!(new_read(&broker, &s, "c", 20).await, ids);
    let reclaim = ReadMode::Reclaim {
        min_idle: Duration::from_secs(60),
    };
    retry_now(&broker, &s, &ids).await;
    let read = broker
        .read(ReadRequest::new(&s, G, "r", reclaim, 20))
        .await
        .unwrap();
    let got = delivered(&read);
    assert_eq!(got, ids, "reclaim reads owed entries in id order too");

    // A redrive of all of them at once.
    let s = unique("owed-order-redrive");
    let ids = twenty_in_one_ms(&broker, &s).await;
    assert_eq!(new_read(&broker, &s, "c", 20).await, ids);
    assert_eq!(broker.dead_letter(&s, G, &ids, "x").await.unwrap(), 20);
    assert_eq!(broker.redrive(&s, G, &ids).await.unwrap(), 20);
    assert_eq!(new_read(&broker, &s, "c", 20).await, ids);
    let pending = broker
        .pending(&s, G, EntryId::ZERO, 100, None)
        .await
        .unwrap();
    assert_eq!(pending.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
}

#[tokio::test]
async fn owed_entries_written_before_the_padded_layout_are_still_read() {
    // A due set member in the old layout (the plain id), as a broker of an
    // earlier version left it.
    let (broker, s) = broker_and_stream("owed-legacy").await;
    let id = publish_bytes(&broker, &s, b"x").await;
    assert_eq!(new_read(&broker, &s, "c", 10).await, [id]);
    let _: i64 = raw_command(redis::cmd("XACK").arg(&s).arg(G).arg(id.to_string())).await;
    let due = format!("rs:{{{s}}}:due:{G}");
    let _: i64 = raw_command(redis::cmd("ZADD").arg(due).arg(0).arg(id.to_string())).await;
    let owed = format!("rs:{{{s}}}:owed:{G}");
    let _: i64 = raw_command(redis::cmd("HSET").arg(owed).arg(id.to_string()).arg("1 0")).await;
    let pending = broker
        .pending(&s, G, EntryId::ZERO, 10, None)
        .await
        .unwrap();
    assert_eq!(
        (
            pending[0].id,
            pending[0].owed_in_ms,
            pending[0].times_delivered
        ),
        (id, Some(0), 1)
    );
    let read = broker
        .read(ReadRequest::new(&s, G, "c", ReadMode::New, 10))
        .await
        .unwrap();
    assert_eq!(read.deliveries.len(), 1);
    assert_eq!(
        (read.deliveries[0].id(), read.deliveries[0].delivery_count),
        (id, 1)
    );
    // Acking it leaves nothing owed behind.
    assert_eq!(broker.ack(&s, G, &[id]).await.unwrap(), 1);
    assert_eq!(broker.group_info(&s, G).await.unwrap().pending, 0);
}

// ---- 4. redriving a dead letter without a copy of its fields -----------------

#[tokio::test]
async fn a_dead_letter_whose_entry_was_trimmed_first_is_kept_when_redrive_cannot_restore_it() {
    let (broker, s) = broker_and_stream("lost-redrive").await;
    let ids = publish_payloads(&broker, &s, &[b"lost", b"kept"]).await;
    assert_eq!(new_read(&broker, &s, "c", 10).await, ids);
    // The first is trimmed while pending, then dead-lettered; the second
    // is dead-lettered while the stream still holds it.
    broker.trim(&s, Trim::MinId(ids[1])).await.unwrap();
    assert_eq!(broker.dead_letter(&s, G, &ids, "x").await.unwrap(), 2);
    let err = broker.redrive(&s, G, &ids).await.unwrap_err();
    assert!(matches!(err, BrokerError::InvalidArgument(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&ids[0].to_string()) && message.contains("trimmed"),
        "{message}"
    );
    // Nothing changed: both dead letters are still there.
    let dead = dead_letters(&broker, &s).await;
    assert_eq!(dead.iter().map(|d| d.id()).collect::<Vec<_>>(), ids);
    assert_eq!(new_read(&broker, &s, "c", 10).await, []);
    // The other one redrives on its own; the lost one can be discarded.
    assert_eq!(broker.redrive(&s, G, &ids[1..]).await.unwrap(), 1);
    assert_eq!(broker.discard(&s, G, &ids[..1]).await.unwrap(), 1);
    assert_eq!(new_read(&broker, &s, "c", 10).await, ids[1..]);
}

// ---- 5. names that would share keys ------------------------------------------

#[tokio::test]
async fn names_that_would_share_keys_are_refused_before_anything_is_sent() {
    let broker = RedisBroker::standalone(url());
    let base = unique("names");
    let pairs = [
        (format!("{base}a}}:due:b"), "c".to_owned()),
        (format!("{base}a"), "b}:due:c".to_owned()),
        (format!("{base}x{{y"), "g".to_owned()),
        (base.clone(), String::new()),
        (base.clone(), "g\n".to_owned()),
    ];
    let id = [EntryId::new(1, 0)];
    for (s, g) in &pairs {
        let (s, g) = (s.as_str(), g.as_str());
        let refused = |r: Result<(), BrokerError>, call: &str| match r {
            Err(BrokerError::InvalidArgument(m)) => {
                assert!(m.contains("name"), "{call}: {m}");
            }
            other => panic!("{call} on ({s:?}, {g:?}): {other:?}"),
        };
        refused(
            broker.ensure_group(s, g, StreamStart::New).await.map(drop),
            "ensure_group",
        );
        refused(
            broker
                .set_group_position(s, g, StreamStart::New)
                .await
                .map(drop),
            "set_group_position",
        );
        refused(
            broker
                .read(ReadRequest::new(s, g, "c", ReadMode::New, 1))
                .await
                .map(drop),
            "read",
        );
        refused(broker.ack(s, g, &id).await.map(drop), "ack");
        refused(broker.ack(s, g, &[]).await.map(drop), "ack of nothing");
        refused(
            broker.retry(s, g, &id, Retry::Copy).await.map(drop),
            "retry",
        );
        refused(
            broker.dead_letter(s, g, &id, "r").await.map(drop),
            "dead_letter",
        );
        refused(broker.redrive(s, g, &id).await.map(drop), "redrive");
        refused(broker.discard(s, g, &id).await.map(drop), "discard");
        refused(broker.group_info(s, g).await.map(drop), "group_info");
        refused(broker.consumers(s, g).await.map(drop), "consumers");
        refused(
            broker.pending(s, g, EntryId::ZERO, 1, None).await.map(drop),
            "pending",
        );
        refused(
            broker.dead_letters(s, g, EntryId::ZERO, 1).await.map(drop),
            "dead_letters",
        );
    }
    // Stream-only calls.
    for s in [
        format!("{base}a}}:due:b"),
        format!("{base}{{"),
        String::new(),
    ] {
        let refused = |r: Result<(), BrokerError>| {
            assert!(
                matches!(r, Err(BrokerError::InvalidArgument(_))),
                "{s:?}: {r:?}"
            );
        };
        refused(
            broker
                .publish(&s, Message::new(b"x".to_vec()))
                .await
                .map(drop),
        );
        refused(
            broker
                .range(&s, EntryId::ZERO, EntryId::MAX, 1)
                .await
                .map(drop),
        );
        refused(broker.stream_info(&s).await.map(drop));
        refused(broker.trim(&s, Trim::MaxLen(0)).await.map(drop));
    }
    // Consumer names.
    let s = unique("names-ok");
    broker.ensure_group(&s, G, StreamStart::New).await.unwrap();
    for bad in ["", "c\u{0}", "c\r"] {
        let err = broker
            .read(ReadRequest::new(&s, G, bad, ReadMode::New, 1))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("consumer name"), "{err}");
        let err = broker
            .pending(&s, G, EntryId::ZERO, 1, Some(bad))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("consumer name"), "{err}");
    }
    // Nothing was created by the refused calls.
    let keys: Vec<String> = raw_command(redis::cmd("KEYS").arg(format!("*{base}*"))).await;
    assert_eq!(keys, Vec::<String>::new());
    // A fine name (colons, dots, braces in a consumer name) works.
    let s = format!("{base}:payments.v2");
    broker
        .ensure_group(&s, "ledger:idx", StreamStart::New)
        .await
        .unwrap();
    let id = publish_bytes(&broker, &s, b"ok").await;
    let got = broker
        .read(ReadRequest::new(
            &s,
            "ledger:idx",
            "host-{1}",
            ReadMode::New,
            1,
        ))
        .await
        .unwrap();
    assert_eq!(got.deliveries[0].id(), id);
}

// ---- 7. the original id of a dead retry copy ---------------------------------

#[tokio::test]
async fn a_dead_letter_of_a_retry_copy_names_the_original_entry_and_the_copy() {
    let (broker, s) = broker_and_stream("orig").await;
    let original = broker
        .publish(
            &s,
            Message::new(b"x".to_vec()).with_header("tenant", "acme"),
        )
        .await
        .unwrap();
    deliver(&broker, &s, "c", original).await;
    broker.retry(&s, G, &[original], Retry::Copy).await.unwrap();
    let first_copy = new_read(&broker, &s, "c", 1).await[0];
    broker
        .retry(&s, G, &[first_copy], Retry::Copy)
        .await
        .unwrap();
    let second_copy = new_read(&broker, &s, "c", 1).await[0];
    let copy_fields = raw_fields(&s, &second_copy.to_string()).await.unwrap();
    assert_eq!(
        copy_fields[..6],
        [
            "rs:group".to_owned(),
            G.to_owned(),
            "rs:count".to_owned(),
            "2".to_owned(),
            "rs:orig".to_owned(),
            original.to_string()
        ],
        "a copy of a copy carries the first original's id"
    );
    broker
        .dead_letter(&s, G, &[second_copy], "gave up")
        .await
        .unwrap();
    let dead = dead_letters(&broker, &s).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id(), second_copy, "keyed by the id the group held");
    assert_eq!(
        dead[0].entry.headers().get_str(ORIGINAL_ID_HEADER),
        Some(original.to_string().as_str())
    );
    assert_eq!(dead[0].entry.headers().get_str("tenant"), Some("acme"));
    assert_eq!(dead[0].times_delivered, 3);
    let raw_dead = raw_entries(&dead_key(&s)).await;
    let f = &raw_dead[0].1;
    let field = |name: &str| f.chunks(2).find(|p| p[0] == name).map(|p| p[1].clone());
    assert_eq!(field("rs:id"), Some(second_copy.to_string()));
    assert_eq!(field("rs:orig"), Some(original.to_string()));
    // An ordinary entry's dead letter has no such header.
    let plain = publish_bytes(&broker, &s, b"y").await;
    deliver(&broker, &s, "c", plain).await;
    broker.dead_letter(&s, G, &[plain], "no").await.unwrap();
    let dead = broker.dead_letters(&s, G, plain, 10).await.unwrap();
    assert_eq!(dead[0].id(), plain);
    assert!(
        dead[0]
            .entry
            .headers()
            .get_str(ORIGINAL_ID_HEADER)
            .is_none()
    );
}

// ---- 10. start positions past the end -----------------------------------------

#[tokio::test]
async fn a_group_cannot_start_or_move_past_the_end_of_its_stream() {
    let broker = RedisBroker::standalone(url());
    let s = unique("past-end");
    let ids = publish_payloads(&broker, &s, &[b"a", b"b"]).await;
    let past = EntryId::new(ids[1].ms + 3_600_000, 0);
    let err = broker
        .ensure_group(&s, G, StreamStart::Id(past))
        .await
        .unwrap_err();
    assert!(matches!(err, BrokerError::InvalidArgument(_)), "{err:?}");
    assert!(err.to_string().contains(&ids[1].to_string()), "{err}");
    assert!(broker.group_info(&s, G).await.is_err(), "no group was made");
    assert!(
        broker
            .ensure_group(&s, G, StreamStart::Id(ids[1]))
            .await
            .unwrap()
    );
    let err = broker
        .set_group_position(&s, G, StreamStart::Id(past))
        .await
        .unwrap_err();
    assert!(matches!(err, BrokerError::InvalidArgument(_)), "{err:?}");
    assert_eq!(
        broker.group_info(&s, G).await.unwrap().last_delivered,
        ids[1],
        "the cursor did not move"
    );
    broker
        .set_group_position(&s, G, StreamStart::Id(ids[0]))
        .await
        .unwrap();
    // A stream that does not exist has nothing to start after.
    let fresh = unique("past-end-fresh");
    assert!(
        broker
            .ensure_group(&fresh, G, StreamStart::Id(EntryId::new(1, 0)))
            .await
            .is_err()
    );
    assert!(broker.stream_info(&fresh).await.unwrap().is_none());
}

// ---- settle calls are all-or-nothing ------------------------------------------

/// Makes one of the group's side keys a string, so that a write to it fails.
async fn spoil(key: &str) {
    let _: () = raw_command(redis::cmd("SET").arg(key).arg("not ours")).await;
}

/// Undoes [`spoil`]: deletes the key.
async fn unspoil(key: &str) {
    let _: i64 = raw_command(redis::cmd("DEL").arg(key)).await;
}

/// An ack is one `XACK` when every id is pending; when some id is owed
/// again (held by nobody), the ack script finds it there. If that second
/// step fails, each entry is acked or not, never half-way, and the same
/// ack made again finishes it.
#[tokio::test]
async fn an_ack_whose_owed_step_fails_leaves_each_entry_whole_and_a_repeat_finishes_it() {
    let (broker, s) = broker_and_stream("ack-two-steps").await;
    let ids = publish_payloads(&broker, &s, &[b"a", b"b"]).await;
    assert_eq!(new_read(&broker, &s, "c", 10).await, ids);
    // `b` is owed again: nobody holds it, so XACK does not find it.
    assert_eq!(
        broker
            .retry(&s, G, &ids[1..], Retry::After(Duration::from_secs(3600)))
            .await
            .unwrap(),
        1
    );
    // The due set is checked by the ack script: spoiled, its step fails.
    // (Spoiling drops `b`'s due time; it stays owed in the owed hash.)
    let due = format!("rs:{{{s}}}:due:{G}");
    spoil(&due).await;
    assert!(broker.ack(&s, G, &ids).await.is_err());
    unspoil(&due).await;
    let held = xpending(&s, G).await;
    assert!(held.is_empty(), "`a`, found by XACK, is acked: {held:?}");
    assert_eq!(
        pending_ids(&broker, &s).await,
        ids[1..],
        "`b` is still owed"
    );
    assert_eq!(
        broker.ack(&s, G, &ids).await.unwrap(),
        1,
        "the repeat acks `b` where it is owed"
    );
    assert_eq!(broker.ack(&s, G, &ids).await.unwrap(), 0, "nothing is left");
    let info = broker.group_info(&s, G).await.unwrap();
    assert_eq!((info.pending, info.lag), (0, 0), "{info:?}");
}

#[tokio::test]
async fn a_settle_call_that_fails_changes_nothing() {
    let (broker, s) = broker_and_stream("all-or-nothing").await;
    let ids = publish_payloads(&broker, &s, &[b"a", b"b"]).await;
    assert_eq!(new_read(&broker, &s, "c", 10).await, ids);
    let due = format!("rs:{{{s}}}:due:{G}");
    let dead = dead_key(&s);

    spoil(&dead).await;
    assert!(broker.dead_letter(&s, G, &ids, "x").await.is_err());
    assert_eq!(pending_ids(&broker, &s).await, ids, "dead_letter");
    unspoil(&dead).await;

    spoil(&due).await;
    assert!(
        broker
            .retry(&s, G, &ids, Retry::After(Duration::ZERO))
            .await
            .is_err()
    );
    unspoil(&due).await;
    assert_eq!(pending_ids(&broker, &s).await, ids, "retry after");

    assert_eq!(broker.dead_letter(&s, G, &ids, "x").await.unwrap(), 2);
    spoil(&due).await;
    assert!(broker.redrive(&s, G, &ids).await.is_err());
    unspoil(&due).await;
    let listed = dead_letters(&broker, &s).await;
    assert_eq!(listed.len(), 2, "redrive");
    assert_eq!(broker.redrive(&s, G, &ids).await.unwrap(), 2);
    assert_eq!(new_read(&broker, &s, "c", 10).await, ids);
}

/// A page of a consumer's own pending list made only of entries trimmed
/// away comes back as the next live entries, not as an empty page (which a
/// restarted consumer takes for the end of its list, stranding the rest).
#[tokio::test]
async fn an_own_pending_page_of_trimmed_entries_does_not_end_the_list() {
    let (broker, s) = broker_and_stream("own-trimmed").await;
    let gone = publish_payloads(&broker, &s, &[b"a", b"b", b"c"]).await;
    assert_eq!(new_read(&broker, &s, "c1", 3).await, gone);
    let kept = publish_payloads(&broker, &s, &[b"d"]).await;
    assert_eq!(new_read(&broker, &s, "c1", 1).await, kept);
    broker.trim(&s, Trim::MinId(kept[0])).await.unwrap();
    let own = ReadMode::own_pending(EntryId::ZERO);
    let page = broker
        .read(ReadRequest::new(&s, G, "c1", own, 2))
        .await
        .unwrap();
    assert_eq!(delivered(&page), kept, "paged on past the trimmed entries");
}

// ---- a read whose reply was lost, its strays handed back -----------------------------

/// What a read's lost reply leaves: the server ran `XREADGROUP` (the
/// entries are pending under `consumer`) and the caller never saw them.
async fn read_lost(s: &str, consumer: &str) {
    let _: Value = raw_command(
        redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(G)
            .arg(consumer)
            .arg("COUNT")
            .arg(10)
            .arg("STREAMS")
            .arg(s)
            .arg(">"),
    )
    .await;
}

/// What the runtime does after a failed read: hands back, owed at once,
/// what is pending under the consumer (it holds nothing here).
async fn hand_back_strays(broker: &RedisBroker, s: &str, consumer: &str) -> Vec<EntryId> {
    let strays: Vec<EntryId> = broker
        .pending(s, G, EntryId::ZERO, 100, Some(consumer))
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.consumer.is_some())
        .map(|p| p.id)
        .collect();
    broker
        .retry(s, G, &strays, Retry::After(Duration::ZERO))
        .await
        .unwrap();
    strays
}

/// Another group's retry copy that a lost read left pending here, handed
/// back, is passed over (acked), as a read passes it over: never handed to
/// this group, which had acked the original.
#[tokio::test]
async fn another_groups_retry_copy_handed_back_here_is_passed_over() {
    let broker = RedisBroker::standalone(url());
    let s = unique("foreign-stray");
    ensure_groups(&broker, &s, &[G, "h"], StreamStart::Beginning).await;
    let e = publish_bytes(&broker, &s, b"e").await;
    assert_eq!(new_read(&broker, &s, "c", 10).await, [e]);
    broker.ack(&s, G, &[e]).await.unwrap();
    let h = broker
        .read(ReadRequest::new(&s, "h", "x", ReadMode::New, 10))
        .await
        .unwrap();
    assert_eq!(h.deliveries.len(), 1);
    broker.retry(&s, "h", &[e], Retry::Copy).await.unwrap();
    read_lost(&s, "c").await;
    assert_eq!(hand_back_strays(&broker, &s, "c").await.len(), 1);
    assert!(new_read(&broker, &s, "c", 10).await.is_empty());
    assert!(pending_ids(&broker, &s).await.is_empty());
}

/// A restarted consumer re-reading its own pending list a page at a time
/// (with or without an idle bound) pages on past a page made only of
/// another group's retry copies (left pending here by a read whose reply
/// was lost, and passed over): an empty page would read as the end of the
/// list, leaving the entries behind it pending forever.
#[tokio::test]
async fn an_own_pending_page_of_other_groups_retry_copies_does_not_end_the_list() {
    for min_idle in [Duration::ZERO, Duration::from_millis(1)] {
        let broker = RedisBroker::standalone(url());
        let s = unique("own-foreign-page");
        ensure_groups(&broker, &s, &[G, "h"], StreamStart::Beginning).await;
        let e0 = publish_bytes(&broker, &s, b"e0").await;
        let h = broker
            .read(ReadRequest::new(&s, "h", "x", ReadMode::New, 1))
            .await
            .unwrap();
        assert_eq!(delivered(&h), [e0]);
        broker.retry(&s, "h", &[e0], Retry::Copy).await.unwrap();
        let e1 = publish_bytes(&broker, &s, b"e1").await;
        // e0, h's copy of it, e1: all pending under "c", never seen.
        read_lost(&s, "c").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let own = |after| {
            let mode = ReadMode::OwnPending { after, min_idle };
            ReadRequest::new(&s, G, "c", mode, 1)
        };
        let first = broker.read(own(EntryId::ZERO)).await.unwrap();
        assert_eq!(delivered(&first), [e0], "min_idle {min_idle:?}");
        let next = broker.read(own(e0)).await.unwrap();
        assert_eq!(
            delivered(&next),
            [e1],
            "min_idle {min_idle:?}: paged on past h's copy"
        );
        assert_eq!(pending_ids(&broker, &s).await, [e0, e1], "the copy acked");
    }
}

/// A retry copy of this group's own that a lost read left pending counts
/// from its original's deliveries when handed back: `max_deliveries` still
/// ends it.
#[tokio::test]
async fn an_own_retry_copy_handed_back_after_a_lost_read_keeps_its_count() {
    let broker = RedisBroker::standalone(url());
    let s = unique("own-stray");
    ensure_groups(&broker, &s, &[G], StreamStart::Beginning).await;
    publish_bytes(&broker, &s, b"e").await;
    for _ in 0..2 {
        let id = new_read(&broker, &s, "c", 10).await[0];
        broker.retry(&s, G, &[id], Retry::Copy).await.unwrap();
    }
    // The third delivery, lost.
    read_lost(&s, "c").await;
    assert_eq!(hand_back_strays(&broker, &s, "c").await.len(), 1);
    let mut request = ReadRequest::new(&s, G, "c", ReadMode::New, 10);
    request.max_deliveries = Some(3);
    let batch = broker.read(request).await.unwrap();
    let counts: Vec<u32> = batch.deliveries.iter().map(|d| d.delivery_count).collect();
    assert!(
        batch.deliveries.is_empty() && batch.dead_lettered.len() == 1,
        "delivered three times: dead-lettered, not handed out with counts {counts:?}"
    );
}

/// The owed-entries step of a `new` read failing fails the read: the step
/// may have run with its reply lost, leaving the owed entries it took
/// pending under the consumer, never handed out; a failed read is what
/// makes the caller look at its own pending list (the runtime's re-check).
#[tokio::test]
async fn an_owed_step_that_fails_fails_the_read() {
    let broker = RedisBroker::standalone(url());
    let s = unique("owed-fails");
    ensure_groups(&broker, &s, &[G], StreamStart::Beginning).await;
    let e1 = publish_bytes(&broker, &s, b"e1").await;
    assert_eq!(new_read(&broker, &s, "c", 10).await, [e1]);
    broker
        .retry(&s, G, &[e1], Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let e2 = publish_bytes(&broker, &s, b"e2").await;
    // The owed step refuses to run on a side key of the wrong type.
    let owed = format!("rs:{{{s}}}:owed:{G}");
    spoil(&owed).await;
    let read = broker
        .read(ReadRequest::new(&s, G, "c", ReadMode::New, 10))
        .await;
    assert!(read.is_err(), "{read:?}");
    unspoil(&owed).await;
    // Nothing lost: what the read took is pending under the consumer.
    assert!(pending_ids(&broker, &s).await.contains(&e2));
}
