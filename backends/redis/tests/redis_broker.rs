//! Redis-specific behaviour of the broker, against a real server: the field
//! layout as other clients see it, the version gate for claiming reads,
//! lazy connection, reconnecting, and the keys kept beside a stream.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use redis::Value;
use ruststream_core::{
    Broker, BrokerError, EntryId, Message, ReadBatch, ReadMode, ReadRequest, Retry, StreamStart,
};
use ruststream_redis::RedisBroker;
use support::{kill_clients_of_db, publish_bytes, raw, unique, url, url_db, xpending, xrange};

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn fields_of(entry: &Value) -> Vec<String> {
    match entry {
        Value::Array(parts) => match &parts[1] {
            Value::Array(f) => f.iter().map(text).collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Creates `group` on `s` for new entries, publishes one entry of
/// `payload` and reads it as `consumer`: the ids read.
async fn deliver_one(
    broker: &RedisBroker,
    s: &str,
    group: &str,
    consumer: &str,
    payload: &[u8],
) -> Vec<EntryId> {
    broker
        .ensure_group(s, group, StreamStart::New)
        .await
        .unwrap();
    broker
        .publish(s, Message::new(payload.to_vec()))
        .await
        .unwrap();
    let read = read_new(broker, s, group, consumer, 10).await;
    read.deliveries.iter().map(|d| d.id()).collect()
}

/// A read of up to `count` new entries of `s` as `consumer` of `group`.
async fn read_new(
    broker: &RedisBroker,
    s: &str,
    group: &str,
    consumer: &str,
    count: usize,
) -> ReadBatch {
    broker
        .read(ReadRequest::new(s, group, consumer, ReadMode::New, count))
        .await
        .unwrap()
}

/// A broker, and a stream of its own (named after `what`) with group `g`
/// created for new entries.
async fn fresh_group(what: &str) -> (RedisBroker, String) {
    group_on(url(), what, StreamStart::New).await
}

/// A broker on `url`, and a stream of its own (named after `what`) with
/// group `g` created at `start`.
async fn group_on(url: String, what: &str, start: StreamStart) -> (RedisBroker, String) {
    let broker = RedisBroker::standalone(url);
    let s = unique(what);
    broker.ensure_group(&s, "g", start).await.unwrap();
    (broker, s)
}

#[tokio::test]
async fn entries_use_the_documented_fields_both_ways() {
    let (broker, s) = fresh_group("layout").await;
    let sent = Message::new(br#"{"id":1}"#.to_vec())
        .with_header("tenant", "acme")
        .with_header("trace", "t-1");
    let id = broker.publish(&s, sent).await.unwrap();

    // What redis-cli / redis-py see.
    let mut cli = raw(0).await;
    let range = xrange(&s, &id.to_string(), &id.to_string()).await;
    let Value::Array(entries) = range else {
        panic!()
    };
    assert_eq!(
        fields_of(&entries[0]),
        [
            "payload",
            r#"{"id":1}"#,
            "h:tenant",
            "acme",
            "h:trace",
            "t-1"
        ]
    );

    // What another client writes, ruststream consumes.
    let plain: String = redis::cmd("XADD")
        .arg(&s)
        .arg("*")
        .arg("payload")
        .arg(r#"{"id":2}"#)
        .query_async(&mut cli)
        .await
        .unwrap();
    let batch = read_new(&broker, &s, "g", "c", 10).await;
    assert_eq!(batch.deliveries.len(), 2);
    let second = &batch.deliveries[1];
    assert_eq!(second.id().to_string(), plain);
    assert_eq!(second.entry.payload(), br#"{"id":2}"#);
    assert!(second.entry.headers().is_empty());
    assert_eq!(
        batch.deliveries[0].entry.headers().get_str("tenant"),
        Some("acme")
    );
}

#[tokio::test]
async fn retry_copies_and_dead_letters_are_readable_by_other_clients() {
    let broker = RedisBroker::standalone(url());
    let s = unique("copies");
    let ids = deliver_one(&broker, &s, "ledger", "c", b"p").await;
    broker.retry(&s, "ledger", &ids, Retry::Copy).await.unwrap();

    let range = xrange(&s, "-", "+").await;
    let Value::Array(entries) = range else {
        panic!()
    };
    let original = ids[0].to_string();
    assert_eq!(
        fields_of(&entries[1]),
        [
            "rs:group",
            "ledger",
            "rs:count",
            "1",
            "rs:orig",
            original.as_str(),
            "payload",
            "p"
        ],
        "a copy names its group, carries the count and its original's id, first"
    );
    // The copy's pending record counts across copies once read.
    let copy = read_new(&broker, &s, "ledger", "c", 10).await;
    assert_eq!(copy.deliveries[0].delivery_count, 1);
    let rows = xpending(&s, "ledger").await;
    let Value::Array(row) = &rows[0] else {
        panic!()
    };
    assert_eq!(
        row[3],
        Value::Int(2),
        "XPENDING counts the original's delivery"
    );

    let copy_id = copy.deliveries[0].id();
    broker
        .dead_letter(&s, "ledger", &[copy_id], "cannot post")
        .await
        .unwrap();
    let dead_key = format!("rs:{{{s}}}:dead:ledger");
    let dead = xrange(&dead_key, "-", "+").await;
    let Value::Array(dead) = dead else { panic!() };
    let f = fields_of(&dead[0]);
    assert_eq!(
        &f[..6],
        [
            "rs:id",
            &copy_id.to_string(),
            "rs:reason",
            "cannot post",
            "rs:times_delivered",
            "2"
        ]
    );
    assert!(f.contains(&"payload".to_owned()));
}

#[tokio::test]
async fn claiming_reads_are_refused_before_redis_8_4_naming_both_versions() {
    let broker = RedisBroker::standalone(url());
    let mut cli = raw(0).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut cli)
        .await
        .unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap()
        .trim()
        .to_owned();
    let major_minor: Vec<u32> = version
        .split('.')
        .take(2)
        .map(|p| p.parse().unwrap())
        .collect();
    let result = broker
        .check_mode(ReadMode::Claiming {
            min_idle: Duration::from_secs(30),
        })
        .await;
    if (major_minor[0], major_minor[1]) >= (8, 4) {
        result.unwrap();
        return;
    }
    let err = result.unwrap_err();
    let BrokerError::Unsupported { detail, .. } = &err else {
        panic!("expected Unsupported, got {err:?}")
    };
    assert!(
        detail.contains(&version),
        "names the server's version: {detail}"
    );
    assert!(detail.contains("8.4"), "names the version needed: {detail}");
    assert!(
        detail.contains("RedisStream::new") && detail.contains("reclaim"),
        "suggests new + reclaim: {detail}"
    );
    // The read itself is refused the same way, before touching the group.
    let s = unique("claiming");
    let read = broker
        .read(ReadRequest::new(
            &s,
            "g",
            "c",
            ReadMode::Claiming {
                min_idle: Duration::from_secs(30),
            },
            1,
        ))
        .await;
    assert!(matches!(read, Err(BrokerError::Unsupported { .. })));
    for mode in [
        ReadMode::New,
        ReadMode::Reclaim {
            min_idle: Duration::from_secs(1),
        },
    ] {
        broker.check_mode(mode).await.unwrap();
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_transient_error_naming_the_url() {
    // Port 1: nothing listens there. Building the broker must not connect.
    let broker = RedisBroker::standalone("redis://app:s3cret@127.0.0.1:1/0");
    let err = broker
        .ensure_group("jobs", "workers", StreamStart::New)
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("redis://app:***@127.0.0.1:1/0"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    let bad = RedisBroker::standalone("http://not-redis");
    let err = bad
        .publish("s", Message::new(b"x".to_vec()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("http://not-redis"), "{err}");
}

#[tokio::test]
async fn the_broker_reconnects_after_its_connections_are_killed() {
    const DB: u32 = 9;
    let (broker, s) = group_on(url_db(DB), "reconnect", StreamStart::New).await;
    publish_bytes(&broker, &s, b"before").await;
    // A blocking wait too, so that the pool holds a connection.
    let request =
        ReadRequest::new(&s, "g", "c", ReadMode::New, 10).block(Duration::from_millis(20));
    assert_eq!(broker.read(request).await.unwrap().deliveries.len(), 1);
    broker.read(request).await.unwrap();

    assert!(kill_clients_of_db(DB).await >= 1);

    let mut errors = Vec::new();
    let mut published = None;
    for _ in 0..50 {
        match broker.publish(&s, Message::new(b"after".to_vec())).await {
            Ok(id) => {
                published = Some(id);
                break;
            }
            Err(e) => {
                assert!(e.is_transient(), "a lost connection is transient: {e:?}");
                errors.push(e);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(published.is_some(), "never reconnected: {errors:?}");
    let mut got = Vec::new();
    for _ in 0..50 {
        match broker.read(request).await {
            Ok(batch) => {
                got.extend(batch.deliveries);
                if !got.is_empty() {
                    break;
                }
            }
            Err(e) => {
                assert!(e.is_transient(), "{e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].entry.payload(), b"after");
}

/// After `SCRIPT FLUSH` (as after a server restart) a settle script is
/// sent again with `EVAL` and works; a script call's ids, keys and
/// arguments reach the script intact both ways.
#[tokio::test]
async fn settle_scripts_run_again_after_the_script_cache_is_flushed() {
    let broker = RedisBroker::standalone(url());
    let s = unique("script-flush");
    let ids = deliver_one(&broker, &s, "g", "c", b"a").await;
    let mut more = deliver_one(&broker, &s, "g", "c", b"b").await;
    let mut cli = raw(0).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut cli)
        .await
        .unwrap();
    let unknown = EntryId::new(1, 1);
    assert_eq!(broker.ack(&s, "g", &[ids[0], unknown]).await.unwrap(), 1);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut cli)
        .await
        .unwrap();
    more.push(unknown);
    assert_eq!(
        broker
            .retry(&s, "g", &more, Retry::After(Duration::ZERO))
            .await
            .unwrap(),
        1
    );
    let again = read_new(&broker, &s, "g", "c", 10).await;
    assert_eq!(again.deliveries.len(), 1, "the retried entry is owed again");
    assert_eq!(again.deliveries[0].entry.payload(), b"b");
}

#[tokio::test]
async fn a_flushed_group_is_nogroup_and_ensure_group_recreates_it() {
    const DB: u32 = 10;
    let (broker, s) = group_on(url_db(DB), "flush", StreamStart::Beginning).await;
    let mut cli = raw(DB).await;
    let _: () = redis::cmd("FLUSHDB").query_async(&mut cli).await.unwrap();
    let err = broker
        .read(ReadRequest::new(&s, "g", "c", ReadMode::New, 1))
        .await
        .unwrap_err();
    assert!(matches!(err, BrokerError::NoGroup { .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(
        broker
            .ensure_group(&s, "g", StreamStart::Beginning)
            .await
            .unwrap()
    );
    publish_bytes(&broker, &s, b"x").await;
    let batch = read_new(&broker, &s, "g", "c", 1).await;
    assert_eq!(batch.deliveries.len(), 1);
}

#[tokio::test]
async fn a_delayed_retry_wakes_a_blocked_reader_of_another_process() {
    // Two brokers: two processes' worth of connections to one server.
    let reader = RedisBroker::standalone(url());
    let worker = RedisBroker::standalone(url());
    let s = unique("wake");
    let ids = deliver_one(&worker, &s, "g", "w", b"job").await;
    let s2 = s.clone();
    let blocked = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let request =
            ReadRequest::new(&s2, "g", "r", ReadMode::New, 10).block(Duration::from_secs(10));
        let batch = reader.read(request).await.unwrap();
        (batch, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // An immediate nack by the worker: owed at once, to anyone.
    worker
        .retry(&s, "g", &ids, Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let (batch, waited) = blocked.await.unwrap();
    assert_eq!(batch.deliveries.len(), 1);
    assert_eq!(
        batch.deliveries[0].id(),
        ids[0],
        "same id, handed out again"
    );
    assert_eq!(batch.deliveries[0].delivery_count, 1);
    assert!(waited < Duration::from_secs(2), "woke late: {waited:?}");

    // A delay: the blocked reader wakes when it falls due, not before.
    let again: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
    let reader = RedisBroker::standalone(url());
    worker
        .retry(&s, "g", &again, Retry::After(Duration::from_millis(400)))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let request = ReadRequest::new(&s, "g", "r", ReadMode::New, 10).block(Duration::from_secs(10));
    let batch = reader.read(request).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(batch.deliveries.len(), 1);
    assert_eq!(batch.deliveries[0].delivery_count, 2);
    assert!(
        waited >= Duration::from_millis(350) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_dead_letter_is_visible_and_redrivable_from_another_process() {
    let one = RedisBroker::standalone(url());
    let other = RedisBroker::standalone(url());
    let s = unique("dead-shared");
    let id = deliver_one(&one, &s, "g", "c", b"bad").await[0];
    one.dead_letter(&s, "g", &[id], "poison").await.unwrap();
    let listed = other
        .dead_letters(&s, "g", EntryId::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id(), listed[0].reason.as_str()), (id, "poison"));
    assert_eq!(other.redrive(&s, "g", &[id]).await.unwrap(), 1);
    let again = read_new(&one, &s, "g", "c2", 10).await;
    assert_eq!(again.deliveries[0].id(), id);
    assert_eq!(
        again.deliveries[0].delivery_count, 0,
        "redrive resets the count"
    );
}

#[tokio::test]
async fn owed_entries_go_first_and_new_ones_beyond_the_count_are_handed_back() {
    let (broker, s) = fresh_group("hand-back").await;
    broker
        .publish_batch(
            &s,
            ["a", "b", "c"]
                .iter()
                .map(|t| Message::new(t.as_bytes().to_vec()))
                .collect(),
        )
        .await
        .unwrap();
    let first = read_new(&broker, &s, "g", "c1", 1).await;
    let a = first.deliveries[0].id();
    broker
        .retry(&s, "g", &[a], Retry::After(Duration::ZERO))
        .await
        .unwrap();
    // The new entries are read in the same round trip as the owed one is
    // found due; one of them does not fit and goes back, unread.
    let second = read_new(&broker, &s, "g", "c2", 2).await;
    let got: Vec<&[u8]> = second
        .deliveries
        .iter()
        .map(|d| d.entry.payload())
        .collect();
    assert_eq!(got, [b"a".as_slice(), b"b"]);
    assert_eq!(second.deliveries[0].delivery_count, 1);
    let pending = broker
        .pending(&s, "g", EntryId::ZERO, 10, None)
        .await
        .unwrap();
    let c = pending.last().unwrap();
    assert_eq!(
        (c.consumer.as_deref(), c.times_delivered),
        (None, 0),
        "{pending:?}"
    );
    let third = read_new(&broker, &s, "g", "c3", 10).await;
    assert_eq!(third.deliveries.len(), 1);
    assert_eq!(third.deliveries[0].entry.payload(), b"c");
    assert_eq!(
        third.deliveries[0].delivery_count, 0,
        "never counted as delivered"
    );
}

/// Group `g`'s pending list on `s`: each id and who holds it (`None`:
/// owed).
async fn holders(broker: &RedisBroker, s: &str) -> Vec<(EntryId, Option<String>)> {
    let pending = broker
        .pending(s, "g", EntryId::ZERO, 10, None)
        .await
        .unwrap();
    pending.into_iter().map(|p| (p.id, p.consumer)).collect()
}

/// Moving a group's cursor leaves owed entries owed: one retried with a
/// delay, the cursor moved back and then forward again (a `start_at`
/// changed and changed back across deploys), still comes back when due,
/// and the one held stays held. (Forgetting owed records on a move back
/// lost such an entry for good once the cursor went forward again.)
#[tokio::test]
async fn an_owed_entry_survives_moving_the_cursor_back_then_forward() {
    for forward in [StreamStart::Id(EntryId::MAX), StreamStart::New] {
        let (broker, s) = group_on(url(), "back-forward", StreamStart::Beginning).await;
        let all = broker
            .publish_batch(&s, (0..3u8).map(|i| Message::new(vec![i])).collect())
            .await
            .unwrap();
        assert_eq!(read_new(&broker, &s, "g", "a", 3).await.deliveries.len(), 3);
        broker.ack(&s, "g", &all[..1]).await.unwrap();
        let later = Retry::After(Duration::from_millis(200));
        broker.retry(&s, "g", &all[1..2], later).await.unwrap();
        let back = StreamStart::Beginning;
        broker.set_group_position(&s, "g", back).await.unwrap();
        let forward = match forward {
            StreamStart::Id(_) => StreamStart::Id(all[2]),
            other => other,
        };
        broker.set_group_position(&s, "g", forward).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = read_new(&broker, &s, "g", "b", 10).await;
        let got: Vec<EntryId> = got.deliveries.iter().map(|d| d.id()).collect();
        assert_eq!(
            got,
            [all[1]],
            "{forward:?}: the owed entry comes back when due"
        );
        let a = Some("a".to_owned());
        let b = Some("b".to_owned());
        assert_eq!(
            holders(&broker, &s).await,
            [(all[1], b), (all[2], a)],
            "{forward:?}"
        );
    }
}

/// An entry made owed after its group's cursor was moved back behind it
/// is read again as new all the same (the cursor gets there first): it is
/// handed out once, and when its delay passes it is not claimed from the
/// consumer that holds it.
#[tokio::test]
async fn an_entry_owed_behind_a_moved_back_cursor_is_not_taken_from_its_holder() {
    for delay in [Duration::ZERO, Duration::from_millis(300)] {
        let (broker, s) = group_on(url(), "rewind-then-owed", StreamStart::Beginning).await;
        let e = publish_bytes(&broker, &s, b"e").await;
        assert_eq!(read_new(&broker, &s, "g", "a", 1).await.deliveries.len(), 1);
        broker
            .set_group_position(&s, "g", StreamStart::Beginning)
            .await
            .unwrap();
        broker
            .retry(&s, "g", &[e], Retry::After(delay))
            .await
            .unwrap();
        let b = read_new(&broker, &s, "g", "b", 10).await;
        let got: Vec<EntryId> = b.deliveries.iter().map(|d| d.id()).collect();
        assert_eq!(got, [e], "{delay:?}: once");
        tokio::time::sleep(delay + Duration::from_millis(100)).await;
        let c = read_new(&broker, &s, "g", "c", 10).await;
        assert!(c.is_empty(), "{delay:?}: {c:?}");
        assert_eq!(
            holders(&broker, &s).await,
            [(e, Some("b".to_owned()))],
            "{delay:?}"
        );
    }
}

#[tokio::test]
async fn lag_is_counted_when_the_server_cannot_tell_it() {
    // A group started at an arbitrary id: XINFO GROUPS reports lag nil.
    let broker = RedisBroker::standalone(url());
    let s = unique("lag");
    let ids = broker
        .publish_batch(&s, (0..5).map(|i| Message::new(vec![b'0' + i])).collect())
        .await
        .unwrap();
    broker
        .ensure_group(&s, "g", StreamStart::Id(ids[1]))
        .await
        .unwrap();
    let info = broker.group_info(&s, "g").await.unwrap();
    assert_eq!((info.lag, info.last_delivered), (3, ids[1]));
    broker
        .set_group_position(&s, "g", StreamStart::Id(ids[3]))
        .await
        .unwrap();
    assert_eq!(broker.group_info(&s, "g").await.unwrap().lag, 1);
}

/// A `New` read whose `XREADGROUP` comes back full of retry copies meant
/// for other groups is empty for this group while entries behind them are
/// still unread: its blocking wait must not start past them (it would
/// sleep out its block for every page of copies).
#[tokio::test]
async fn entries_behind_a_full_read_of_other_groups_copies_come_at_once() {
    let broker = RedisBroker::standalone(url());
    let s = unique("behind-copies");
    support::ensure_groups(&broker, &s, &["a", "b"], StreamStart::New).await;
    let mut cli = raw(0).await;
    for _ in 0..6 {
        let _: String = redis::cmd("XADD")
            .arg(&s)
            .arg("*")
            .arg("rs:group")
            .arg("a")
            .arg("rs:count")
            .arg(1)
            .arg("rs:orig")
            .arg("0-1")
            .arg("payload")
            .arg("x")
            .query_async(&mut cli)
            .await
            .unwrap();
    }
    let wanted = publish_bytes(&broker, &s, b"{}").await;
    let started = std::time::Instant::now();
    let mut got = None;
    while got.is_none() && started.elapsed() < Duration::from_secs(20) {
        let mut req = ReadRequest::new(&s, "b", "c", ReadMode::New, 2);
        req.block = Some(Duration::from_secs(3));
        let batch = broker.read(req).await.unwrap();
        got = batch
            .deliveries
            .first()
            .map(|d| (d.id(), started.elapsed()));
    }
    let (id, took) = got.expect("the entry never came");
    assert_eq!(id, wanted);
    assert!(
        took < Duration::from_secs(1),
        "the entry behind the copies took {took:?}: the wait started past it"
    );
}

/// A blocking `New` read sends its read behind its wait, so a read whose
/// caller gave up on it (the runtime stopped and dropped it) may claim an
/// entry after all. What it claimed is handed back, owed at once, and a
/// listing of the consumer's own pending list waits for that.
#[tokio::test]
async fn what_a_read_claims_after_its_caller_gave_up_is_handed_back() {
    let (broker, s) = fresh_group("abandoned-claim").await;
    let request =
        ReadRequest::new(&s, "g", "gone", ReadMode::New, 10).block(Duration::from_secs(10));
    let mut read = Box::pin(broker.read(request));
    // The read finds nothing and waits, its read queued behind the wait.
    let waited = tokio::time::timeout(Duration::from_millis(200), read.as_mut()).await;
    assert!(waited.is_err(), "nothing was published: the read waits");
    // An entry arrives: the queued read claims it, but nobody polls the
    // read any more.
    let published = publish_bytes(&broker, &s, b"late").await;
    let started = std::time::Instant::now();
    while xpending(&s, "g").await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the queued read never claimed the entry"
        );
        tokio::task::yield_now().await;
    }
    drop(read);
    let own = broker
        .pending(&s, "g", EntryId::ZERO, 10, Some("gone"))
        .await
        .unwrap();
    assert!(own.is_empty(), "left pending under the consumer: {own:?}");
    let batch = read_new(&broker, &s, "g", "other", 10).await;
    let ids: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
    assert_eq!(ids, [published], "another consumer reads it at once");
    assert_eq!(batch.deliveries[0].delivery_count, 0, "as if never read");
}
