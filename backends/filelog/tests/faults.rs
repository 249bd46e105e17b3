//! Failures stay where they happen: a bad name or an oversized record is
//! refused before anything changes, an I/O error fails only its own call
//! (and leaves nothing behind, in memory or on disk), and an fsync failure
//! stops the broker for good (fail-stop).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{
    TempDir, dead_letter_jobs, ensure_g1, journal_len, observe_with, open_with_jobs_group,
    retry_jobs, with_jobs_group,
};
use ruststream_core::{
    Broker, BrokerError, EntryId, Message, ReadMode, ReadRequest, Retry, StreamStart, Trim,
};
use ruststream_filelog::{FileLogBroker, FileLogOptions, SyncPolicy};

/// Fails unless `result` is an `InvalidArgument` error; the error.
#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(result: Result<T, BrokerError>) -> BrokerError {
    let err = result.unwrap_err();
    assert!(matches!(err, BrokerError::InvalidArgument(_)), "{err:?}");
    err
}

fn msg(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec())
}

/// The payloads of a stream, in order.
async fn payloads(b: &FileLogBroker, stream: &str) -> Vec<String> {
    b.range(stream, EntryId::ZERO, EntryId::MAX, 1000)
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(e.payload()).into_owned())
        .collect()
}

/// What a read of new entries hands out.
async fn read_new(b: &FileLogBroker, stream: &str, group: &str) -> Vec<String> {
    b.read(ReadRequest::new(stream, group, "c1", ReadMode::New, 100))
        .await
        .unwrap()
        .deliveries
        .iter()
        .map(|d| String::from_utf8_lossy(d.entry.payload()).into_owned())
        .collect()
}

#[tokio::test]
async fn an_oversized_record_is_refused_before_anything_changes() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    b.publish("jobs", msg("a")).await.unwrap();
    let journal_before = journal_len(&dir.0);

    let huge = Message::new(vec![7u8; 64 << 20]);
    let err = assert_invalid(b.publish("jobs", huge.clone()).await);
    let text = err.to_string();
    assert!(
        text.contains("\"jobs\"") && text.contains("limit"),
        "the error names the stream and the limit: {text}"
    );
    // A batch is refused whole: its small first message is not kept either.
    assert_invalid(b.publish_batch("jobs", vec![msg("small"), huge]).await);
    assert_eq!(payloads(&b, "jobs").await, ["a"], "nothing was applied");
    assert_eq!(journal_len(&dir.0), journal_before, "nothing was written");

    // The stream and the others go on.
    b.publish("jobs", msg("b")).await.unwrap();
    b.publish("other", msg("x")).await.unwrap();
    assert_eq!(read_new(&b, "jobs", "g1").await, ["a", "b"]);
    assert_eq!(b.failure(), None);
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(payloads(&b, "jobs").await, ["a", "b"]);
    assert_eq!(payloads(&b, "other").await, ["x"]);
}

#[tokio::test]
async fn a_stream_name_too_long_for_a_directory_is_refused_and_others_go_on() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    b.publish("jobs", msg("a")).await.unwrap();
    // 200 bytes, within every broker's limit, but 600 as a directory name
    // (each byte of a non-ASCII character is written %XX).
    let long = "é".repeat(100);
    let err = assert_invalid(b.publish(&long, msg("x")).await);
    assert!(err.to_string().contains("255"), "names the limit: {err}");
    assert_invalid(b.ensure_group(&long, "g1", StreamStart::New).await);
    assert_eq!(b.stream_info(&long).await.unwrap(), None);
    // A long ASCII name of the same length is fine.
    b.publish(&"s".repeat(200), msg("y")).await.unwrap();
    b.publish("jobs", msg("b")).await.unwrap();
    assert_eq!(payloads(&b, "jobs").await, ["a", "b"]);
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(payloads(&b, "jobs").await, ["a", "b"]);
    assert_eq!(payloads(&b, &"s".repeat(200)).await, ["y"]);
}

#[tokio::test]
async fn an_io_error_on_one_stream_fails_that_call_only() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    ensure_g1(&b, "blocked", StreamStart::Beginning).await;
    b.publish("jobs", msg("a")).await.unwrap();
    // A file where the stream's directory goes: creating it fails.
    let in_the_way = dir.0.join("streams").join("blocked");
    fs::write(&in_the_way, b"not a directory").unwrap();
    let err = b.publish("blocked", msg("lost")).await.unwrap_err();
    assert!(matches!(err, BrokerError::Io { .. }), "{err:?}");
    assert!(err.is_transient(), "worth retrying once the cause is fixed");
    // The failed publish is nowhere: not in the stream, not read.
    assert_eq!(payloads(&b, "blocked").await, Vec::<String>::new());
    assert_eq!(read_new(&b, "blocked", "g1").await, Vec::<String>::new());
    // Other streams go on, and so does this one once the cause is gone.
    b.publish("jobs", msg("b")).await.unwrap();
    assert_eq!(read_new(&b, "jobs", "g1").await, ["a", "b"]);
    assert_eq!(b.failure(), None);
    fs::remove_file(&in_the_way).unwrap();
    b.publish("blocked", msg("kept")).await.unwrap();
    assert_eq!(read_new(&b, "blocked", "g1").await, ["kept"]);
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(payloads(&b, "jobs").await, ["a", "b"]);
    assert_eq!(payloads(&b, "blocked").await, ["kept"]);
    assert_eq!(b.group_info("blocked", "g1").await.unwrap().pending, 1);
}

/// A fresh log with group `g1` on `jobs` and entries "a" and "b" in it.
async fn jobs_a_b() -> (TempDir, FileLogBroker) {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    b.publish_batch("jobs", vec![msg("a"), msg("b")])
        .await
        .unwrap();
    (dir, b)
}

#[tokio::test]
async fn a_segment_write_cut_short_is_undone_and_the_log_reopens() {
    let (dir, b) = jobs_a_b().await;
    // The next write to the stream's segment writes half its bytes, then
    // fails.
    b.inject_write_failure(Some("jobs"));
    let err = b.publish("jobs", msg("torn")).await.unwrap_err();
    assert!(matches!(err, BrokerError::Io { .. }), "{err:?}");
    assert_eq!(payloads(&b, "jobs").await, ["a", "b"]);
    b.publish("other", msg("x")).await.unwrap();
    b.publish("jobs", msg("c")).await.unwrap();
    assert_eq!(read_new(&b, "jobs", "g1").await, ["a", "b", "c"]);
    drop(b);
    // The half record was removed: what follows it is not "damage inside
    // the file".
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(payloads(&b, "jobs").await, ["a", "b", "c"]);
    assert_eq!(b.group_info("jobs", "g1").await.unwrap().pending, 3);
}

#[tokio::test]
async fn a_journal_write_cut_short_undoes_the_read_that_made_it() {
    let (dir, b) = jobs_a_b().await;
    b.inject_write_failure(None);
    let err = b
        .read(ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 10))
        .await
        .unwrap_err();
    assert!(matches!(err, BrokerError::Io { .. }), "{err:?}");
    // The read delivered nothing: the entries are still new.
    assert_eq!(b.group_info("jobs", "g1").await.unwrap().pending, 0);
    assert_eq!(read_new(&b, "jobs", "g1").await, ["a", "b"]);
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(b.group_info("jobs", "g1").await.unwrap().pending, 2);
}

/// After an fsync error nothing that was written since the last good sync
/// can be trusted to be on disk, and a later fsync that succeeds proves
/// nothing (the kernel may have dropped the pages): the broker stops.
async fn assert_stopped(b: &FileLogBroker) {
    let failure = b.failure().expect("the broker reports its failure");
    assert!(failure.contains("fsync"), "{failure}");
    let failed = |r: Result<(), BrokerError>| match r {
        Err(BrokerError::Failed { detail, .. }) => assert!(detail.contains("fsync"), "{detail}"),
        other => panic!("expected Failed, got {other:?}"),
    };
    failed(b.publish("jobs", msg("after")).await.map(|_| ()));
    failed(b.publish("other", msg("after")).await.map(|_| ()));
    failed(
        b.publish_batch("jobs", vec![msg("after")])
            .await
            .map(|_| ()),
    );
    failed(
        b.ensure_group("jobs", "g2", StreamStart::New)
            .await
            .map(|_| ()),
    );
    failed(
        b.read(ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 10))
            .await
            .map(|_| ()),
    );
    failed(b.ack("jobs", "g1", &[EntryId::new(1, 0)]).await.map(|_| ()));
    // Not even what was written before it is shown: it may not be on disk.
    failed(
        b.range("jobs", EntryId::ZERO, EntryId::MAX, 10)
            .await
            .map(|_| ()),
    );
    failed(b.stream_info("jobs").await.map(|_| ()));
}

#[tokio::test]
async fn an_fsync_failure_stops_the_broker_when_every_publish_is_synced() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    b.publish("jobs", msg("a")).await.unwrap();
    assert_eq!(b.failure(), None);
    b.inject_fsync_failure();
    // The publish the failed fsync was to cover is not acknowledged.
    let err = b.publish("jobs", msg("b")).await.unwrap_err();
    assert!(matches!(err, BrokerError::Failed { .. }), "{err:?}");
    assert_stopped(&b).await;
    drop(b);
    // A restart reads back what reached the disk.
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(b.failure(), None);
    assert_eq!(payloads(&b, "jobs").await[0], "a");
    b.publish("jobs", msg("c")).await.unwrap();
}

#[tokio::test]
async fn an_fsync_failure_stops_the_broker_when_syncing_on_an_interval() {
    let dir = TempDir::new();
    let options = FileLogOptions {
        // Long enough that only the test's own sync() runs.
        sync: SyncPolicy::Interval(Duration::from_secs(3600)),
        ..FileLogOptions::default()
    };
    let b = with_jobs_group(FileLogBroker::open_with(&dir.0, options).unwrap()).await;
    b.publish("jobs", msg("a")).await.unwrap();
    b.sync().await.unwrap();
    b.inject_fsync_failure();
    // Acknowledged after the write, as the policy says...
    b.publish("jobs", msg("b")).await.unwrap();
    // ...and the sync that should have covered it fails.
    let err = b.sync().await.unwrap_err();
    assert!(matches!(err, BrokerError::Failed { .. }), "{err:?}");
    assert_stopped(&b).await;
    drop(b);
    let b = FileLogBroker::open_with(&dir.0, options).unwrap();
    assert_eq!(payloads(&b, "jobs").await[0], "a");
}

#[tokio::test]
async fn a_start_past_the_end_of_the_stream_is_refused_without_journaling() {
    let dir = TempDir::new();
    let b = FileLogBroker::open(&dir.0).unwrap();
    let ids = b
        .publish_batch("jobs", vec![msg("a"), msg("b")])
        .await
        .unwrap();
    let past = EntryId::new(ids[1].ms + 3_600_000, 0);
    let before = journal_len(&dir.0);
    assert_invalid(b.ensure_group("jobs", "g1", StreamStart::Id(past)).await);
    assert_invalid(
        b.ensure_group("fresh", "g1", StreamStart::Id(EntryId::new(1, 0)))
            .await,
    );
    assert_eq!(journal_len(&dir.0), before, "nothing journaled");
    assert!(b.group_info("jobs", "g1").await.is_err());

    b.ensure_group("jobs", "g1", StreamStart::Id(ids[0]))
        .await
        .unwrap();
    let before = journal_len(&dir.0);
    assert_invalid(
        b.set_group_position("jobs", "g1", StreamStart::Id(past))
            .await,
    );
    assert_eq!(journal_len(&dir.0), before, "nothing journaled");
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert!(b.group_info("fresh", "g1").await.is_err());
    assert_eq!(read_new(&b, "jobs", "g1").await, ["b"]);
}

/// Everything a reader can see, owed times included.
async fn observe(b: &FileLogBroker) -> Vec<String> {
    observe_with(b, true).await
}

/// A broker call to fail: a name for it, the stream whose segment write
/// fails (`None`: the journal's), and the call, made only when awaited.
type Call<'a> = (
    &'static str,
    Option<&'static str>,
    Pin<Box<dyn Future<Output = Result<(), BrokerError>> + 'a>>,
);

fn call<'a, T, F>(
    what: &'static str,
    target: Option<&'static str>,
    make: impl FnOnce() -> F + 'a,
) -> Call<'a>
where
    F: Future<Output = Result<T, BrokerError>> + 'a,
{
    (
        what,
        target,
        Box::pin(async move { make().await.map(drop) }),
    )
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_of_any_kind_leaves_every_stream_as_it_was() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    ensure_g1(&b, "other", StreamStart::Beginning).await;
    let ids = b
        .publish_batch("jobs", (0..12).map(|i| msg(&format!("j{i}"))).collect())
        .await
        .unwrap();
    b.publish("other", msg("o1")).await.unwrap();
    let read = |count| ReadRequest::new("jobs", "g1", "c1", ReadMode::New, count);
    assert_eq!(b.read(read(8)).await.unwrap().deliveries.len(), 8);
    b.read(ReadRequest::new("other", "g1", "c9", ReadMode::New, 1))
        .await
        .unwrap();
    b.ack("jobs", "g1", &ids[0..2]).await.unwrap();
    retry_jobs(&b, &ids[2..3], Retry::After(Duration::from_secs(60))).await;
    retry_jobs(&b, &ids[3..4], Retry::Copy).await;
    dead_letter_jobs(&b, &ids[4..6], "bad").await;
    // Entries 5 to 7 stay pending or dead past the trim: kept in memory.
    b.trim("jobs", Trim::MaxLen(4)).await.unwrap();
    let before = observe(&b).await;

    let calls = vec![
        call("read", None, || b.read(read(10))),
        call("ack", None, || b.ack("jobs", "g1", &ids[6..8])),
        call("ack of kept entries", None, || {
            b.ack("jobs", "g1", &ids[4..8])
        }),
        call("retry copy (journal)", None, || {
            b.retry("jobs", "g1", &ids[6..7], Retry::Copy)
        }),
        call("retry copy (segment)", Some("jobs"), || {
            b.retry("jobs", "g1", &ids[6..7], Retry::Copy)
        }),
        call("dead letter", None, || {
            b.dead_letter("jobs", "g1", &ids[7..8], "x")
        }),
        call("redrive", None, || b.redrive("jobs", "g1", &ids[4..5])),
        call("discard", None, || b.discard("jobs", "g1", &ids[4..6])),
        call("trim", None, || b.trim("jobs", Trim::MaxLen(1))),
        call("new group", None, || {
            b.ensure_group("jobs", "g2", StreamStart::Beginning)
        }),
        call("new group on a new stream", None, || {
            b.ensure_group("fresh", "g1", StreamStart::Beginning)
        }),
        call("move group", None, || {
            b.set_group_position("jobs", "g1", StreamStart::Beginning)
        }),
        call("publish", Some("jobs"), || b.publish("jobs", msg("lost"))),
        call("publish to a new stream", Some("fresh"), || {
            b.publish("fresh", msg("lost"))
        }),
    ];
    for (what, target, call) in calls {
        b.inject_write_failure(target);
        let err = call.await.unwrap_err();
        assert!(matches!(err, BrokerError::Io { .. }), "{what}: {err:?}");
        assert_eq!(observe(&b).await, before, "{what} left a trace");
        assert_eq!(b.stream_info("fresh").await.unwrap(), None, "{what}");
    }
    assert_eq!(b.failure(), None);
    // And the same calls then work.
    b.ack("jobs", "g1", &ids[4..8]).await.unwrap();
    b.publish("jobs", msg("after")).await.unwrap();
    let live = observe_with(&b, false).await;
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(observe_with(&b, false).await, live);
}

/// Seen times are best-effort: a poll that finds nothing does not fail
/// when the journal cannot take its consumer's seen time (a full disk),
/// nor is it taken back (a rebuild, once a second per idle consumer); what
/// it wrote is cut back off the journal as a failed call's is.
#[tokio::test(start_paused = true)]
async fn an_empty_poll_does_not_fail_when_its_seen_time_cannot_be_written() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    let poll = || b.read(ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 10));
    poll().await.unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    // The disk fills up: the next journal write fails.
    b.inject_write_failure(None);
    let polled = poll().await;
    assert!(polled.is_ok(), "an empty poll failed: {polled:?}");
    // What it wrote was cut back: the log takes more and reopens whole.
    b.publish("jobs", msg("a")).await.unwrap();
    drop(b);
    let b = FileLogBroker::open(&dir.0).unwrap();
    assert_eq!(payloads(&b, "jobs").await, ["a"]);
    let read = b
        .read(ReadRequest::new("jobs", "g1", "c1", ReadMode::New, 10))
        .await
        .unwrap();
    assert_eq!(read.deliveries.len(), 1);
}
