//! The binary on a file log the test filled with `FileLogBroker`: every
//! read command in table and JSON form on a directory the test holds open
//! (the tool reads it read-only and refuses changes, naming the holder),
//! and the changes on a directory nobody holds.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use ruststream::{Broker, EntryId, FileLogBroker, Message, StreamStart};
use support::{
    TempDir, cli, cli_in, cli_in_background, json_in, log_with_one_entry, numbers, read_new,
    stdout_of,
};

/// The file log in `dir`, opened, with group `g` on stream `jobs` from its
/// beginning.
async fn with_group_g(dir: &TempDir) -> FileLogBroker {
    let b = FileLogBroker::open(&dir.0).unwrap();
    b.ensure_group("jobs", "g", StreamStart::Beginning)
        .await
        .unwrap();
    b
}

/// Stream `jobs`, group `g`: `job-1` and `job-2` pending under `c1`;
/// `job-3` acked by `c2`; `poison-1` (header `tenant=acme`) and
/// `poison-2` dead-lettered by `c2`, for a bad payload and a timeout.
/// Returns the broker (holding the directory) and the dead letters' ids.
async fn fill(dir: &TempDir) -> (FileLogBroker, EntryId, EntryId) {
    let b = with_group_g(dir).await;
    for text in ["job-1", "job-2", "job-3"] {
        b.publish("jobs", Message::new(text)).await.unwrap();
    }
    b.publish(
        "jobs",
        Message::new("poison-1").with_header("tenant", "acme"),
    )
    .await
    .unwrap();
    b.publish("jobs", Message::new("poison-2")).await.unwrap();
    read_new(&b, ("jobs", "g", "c1"), 2).await;
    let batch = read_new(&b, ("jobs", "g", "c2"), 3).await;
    let ids: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
    b.ack("jobs", "g", &ids[..1]).await.unwrap();
    b.dead_letter("jobs", "g", &ids[1..2], "bad payload: expected JSON")
        .await
        .unwrap();
    b.dead_letter("jobs", "g", &ids[2..3], "timeout talking to the bank")
        .await
        .unwrap();
    b.sync().await.unwrap();
    (b, ids[1], ids[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_file_log_is_read_read_only_and_refuses_changes() {
    let dir = TempDir::new("held");
    let (holder, poison1, _) = fill(&dir).await;
    let d = dir.arg();
    let d = d.as_str();

    // streams
    let table = stdout_of(&["--dir", d], &["streams"]).await;
    assert!(table.starts_with("STREAM"), "{table}");
    assert!(
        table.lines().nth(1).unwrap().starts_with("jobs  "),
        "{table}"
    );
    let json = cli(&["--dir", d, "streams", "--format", "json"])
        .await
        .ok()
        .json();
    assert_eq!(json[0]["stream"], "jobs");
    assert_eq!(json[0]["length"], 5);
    assert_eq!(json[0]["groups"], serde_json::json!(["g"]));

    // describe, flagging c1 (idle, holding two entries)
    tokio::time::sleep(Duration::from_millis(20)).await;
    let json = json_in(&["--dir", d], "describe jobs g --idle-threshold 5ms").await;
    assert_eq!(json["stream"]["length"], 5);
    let g = &json["group"];
    assert_eq!(
        numbers(g, &["pending", "dead_letters", "lag"]),
        [Some(2), Some(2), Some(0)]
    );
    assert_eq!(g["consumers"], 2);
    assert!(g["oldest_pending_ms"].as_u64().unwrap() >= 5, "{g}");
    assert_eq!(g["idle_threshold_ms"], 5);
    let consumers = g["consumer_list"].as_array().unwrap();
    let c1 = consumers.iter().find(|c| c["name"] == "c1").unwrap();
    let c2 = consumers.iter().find(|c| c["name"] == "c2").unwrap();
    assert_eq!(
        (c1["pending"].as_u64(), c1["idle_over_threshold"].as_bool()),
        (Some(2), Some(true))
    );
    assert_eq!(
        (c2["pending"].as_u64(), c2["idle_over_threshold"].as_bool()),
        (Some(0), Some(false))
    );
    let table = cli_in(&["--dir", d], "describe jobs g --idle-threshold 5ms")
        .await
        .ok()
        .stdout;
    assert!(table.contains("dead letters    2"), "{table}");
    let flagged: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("! idle over"))
        .collect();
    assert_eq!(flagged.len(), 1, "{table}");
    assert!(flagged[0].starts_with("c1 "), "{table}");
    let json = json_in(&["--dir", d], "describe jobs").await;
    assert_eq!(json["group"], serde_json::Value::Null);

    // pending
    let json = json_in(&["--dir", d], "pending jobs g").await;
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0]["consumer"].as_str(),
            rows[0]["times_delivered"].as_u64()
        ),
        (Some("c1"), Some(1))
    );
    let json = json_in(&["--dir", d], "pending jobs g --limit 1").await;
    assert_eq!(json.as_array().unwrap().len(), 1);
    let json = json_in(&["--dir", d], "pending jobs g --consumer c2").await;
    assert_eq!(json, serde_json::json!([]));
    let json = json_in(&["--dir", d], "pending jobs g --min-idle 1h").await;
    assert_eq!(json, serde_json::json!([]));
    let table = stdout_of(&["--dir", d], &["pending", "jobs", "g"]).await;
    assert!(table.starts_with("ID"), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.contains(" c1 ")).count(),
        2,
        "{table}"
    );

    // dead letters
    let json = json_in(&["--dir", d], "dead-letters jobs g").await;
    let letters = json.as_array().unwrap();
    assert_eq!(letters.len(), 2);
    assert_eq!(letters[0]["id"], poison1.to_string());
    assert_eq!(letters[0]["original_id"], poison1.to_string());
    assert_eq!(letters[0]["reason"], "bad payload: expected JSON");
    assert_eq!(letters[0]["times_delivered"], 1);
    assert_eq!(letters[0]["entry"]["payload"], "poison-1");
    assert_eq!(letters[0]["entry"]["headers"]["tenant"], "acme");
    let table = stdout_of(&["--dir", d], &["dead-letters", "list", "jobs", "g"]).await;
    assert!(
        table.contains("bad payload: expected JSON") && table.contains("poison-2"),
        "{table}"
    );
    let id = poison1.to_string();
    let shown = stdout_of(&["--dir", d], &["dead-letters", "show", "jobs", "g", &id]).await;
    assert!(
        shown.contains("tenant: acme") && shown.contains("\npoison-1\n"),
        "{shown}"
    );
    let json = json_in(&["--dir", d], &format!("dead-letters show jobs g {id}")).await;
    assert_eq!(
        (json["id"].as_str(), json["entry"]["payload"].as_str()),
        (Some(id.as_str()), Some("poison-1"))
    );
    cli(&["--dir", d, "dead-letters", "show", "jobs", "g", "1-0"])
        .await
        .fails(3, &["no dead letter 1-0", "\"g\"", "\"jobs\""]);

    // Changes are refused, naming the holder and --admin; a dry run reads.
    let pid = format!("pid {}", std::process::id());
    cli(&["--dir", d, "redrive", "jobs", "g", "--all", "--yes"])
        .await
        .fails(4, &[&pid, "--admin"]);
    cli(&["--dir", d, "publish", "jobs", "x"])
        .await
        .fails(4, &[&pid, "--admin"]);
    cli_in(&["--dir", d], "consumers prune jobs g --idle 1ms")
        .await
        .fails(4, &[&pid, "--admin"]);
    let dry = json_in(&["--dir", d], "discard jobs g --all --dry-run").await;
    assert_eq!(
        (
            dry["dry_run"].as_bool(),
            dry["selected"].as_array().map(Vec::len),
            dry["changed"].as_u64()
        ),
        (Some(true), Some(2), Some(0))
    );
    assert_eq!(
        holder.group_info("jobs", "g").await.unwrap().dead_letters,
        2
    );

    // Unknown names.
    cli(&["--dir", d, "describe", "jobs", "nope"])
        .await
        .fails(3, &["no consumer group \"nope\" on stream \"jobs\""]);
    cli(&["--dir", d, "describe", "nothing"])
        .await
        .fails(3, &["no stream \"nothing\""]);
    cli(&["--dir", d, "pending", "nothing", "g"])
        .await
        .fails(3, &["\"nothing\""]);

    // tail reads what is there, then follows what the holder publishes,
    // opening the directory again for each look.
    let all = cli_in(
        &["--dir", d],
        "--format json tail jobs --from 0 --no-follow",
    )
    .await
    .ok()
    .stdout;
    assert_eq!(all.lines().count(), 5, "{all}");
    let last: EntryId = holder.stream_info("jobs").await.unwrap().unwrap().last_id;
    let from = last.next().to_string();
    let words = format!("--format json tail jobs --from {from} --count 2 --interval 20ms");
    let tail = cli_in_background(&["--dir", d], &words);
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder
        .publish("jobs", Message::new("late-1"))
        .await
        .unwrap();
    holder
        .publish("jobs", Message::new("late-2"))
        .await
        .unwrap();
    let tailed = tail.ok().await;
    let payloads: Vec<String> = tailed
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["payload"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(payloads, ["late-1", "late-2"]);
    drop(holder);
}

/// Opens the directory in the test, waiting for the tool's lock to go.
fn reopen(dir: &TempDir) -> FileLogBroker {
    for _ in 0..100 {
        match FileLogBroker::open(&dir.0) {
            Ok(b) => return b,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    FileLogBroker::open(&dir.0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_on_a_file_log_nobody_holds() {
    let dir = TempDir::new("free");
    let (b, poison1, poison2) = fill(&dir).await;
    drop(b);
    let d = dir.arg();
    let d = d.as_str();

    // Two selected, no --yes, stdin not a terminal: refused.
    cli(&["--dir", d, "redrive", "jobs", "g", "--all"])
        .await
        .fails(4, &["stdin is not a terminal", "--yes", "2 dead letters"]);
    let dry = json_in(
        &["--dir", d],
        "discard jobs g --reason-contains timeout --dry-run",
    )
    .await;
    assert_eq!(
        dry,
        serde_json::json!({ "dry_run": true, "selected": [poison2.to_string()], "changed": 0, "skipped": [] })
    );
    let done = cli_in(&["--dir", d], "discard jobs g --reason-contains timeout")
        .await
        .ok()
        .stdout;
    assert_eq!(done, "discarded 1 of 1 selected dead letter(s)\n");
    let id = poison1.to_string();
    let done = json_in(&["--dir", d], &format!("redrive jobs g {id}")).await;
    assert_eq!(
        done,
        serde_json::json!({ "dry_run": false, "selected": [id], "changed": 1, "skipped": [] })
    );
    // Again: the id is no longer a dead letter, and is skipped, saying so.
    let again = stdout_of(&["--dir", d], &["redrive", "jobs", "g", &id]).await;
    assert_eq!(
        again,
        format!(
            "no dead letters selected: 0 redriven\nskipped 1 id(s) that are not dead \
             letters of the group (already changed, or never one):\n  {id}\n"
        )
    );
    cli(&["--dir", d, "redrive", "jobs", "nogroup", &id])
        .await
        .fails(3, &["\"nogroup\""]);
    let b = reopen(&dir);
    let info = b.group_info("jobs", "g").await.unwrap();
    assert_eq!((info.dead_letters, info.pending), (0, 3));
    drop(b);

    // Prune: c2 holds nothing and goes; c1 holds entries and stays.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let dry = json_in(&["--dir", d], "consumers prune jobs g --idle 1ms --dry-run").await;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted"], serde_json::json!(["c2"]));
    assert_eq!(dry["kept_holding"][0]["name"], "c1");
    assert_eq!(dry["kept_holding"][0]["pending"], 2);
    let json = json_in(&["--dir", d], "describe jobs g").await;
    assert_eq!(json["group"]["consumers"], 2, "the dry run deleted nothing");
    let table = cli_in(&["--dir", d], "consumers prune jobs g --idle 1ms")
        .await
        .ok()
        .stdout;
    assert!(
        table.starts_with("deleted 1 consumer(s)") && table.contains("  c2\n"),
        "{table}"
    );
    assert!(
        table.contains("kept 1 consumer(s) that still hold entries")
            && table.contains("  c1  pending 2"),
        "{table}"
    );
    let json = json_in(&["--dir", d], "describe jobs g").await;
    assert_eq!(json["group"]["consumers"], 1);
    assert_eq!(json["group"]["consumer_list"][0]["name"], "c1");

    // Publish (a payload, headers, a key; then a file), then tail.
    let json = json_in(&["--dir", d], "publish news hello -H a=b --key acct-1").await;
    assert_eq!(json["stream"], "news");
    let first = json["ids"][0].as_str().unwrap().to_owned();
    let file = dir.0.join("lines.txt");
    std::fs::write(&file, "one\n\ntwo\n").unwrap();
    let ids = stdout_of(
        &["--dir", d],
        &["publish", "news", "--file", &file.display().to_string()],
    )
    .await;
    assert_eq!(ids.lines().count(), 2, "{ids}");
    let tailed = cli_in(
        &["--dir", d],
        &format!("--format json tail news --from {first} --count 3"),
    )
    .await
    .ok()
    .stdout;
    let entries: Vec<serde_json::Value> = tailed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["id"], first.as_str());
    assert_eq!(entries[0]["headers"]["a"], "b");
    assert_eq!(
        entries[0]["headers"][ruststream::PARTITION_KEY_HEADER],
        "acct-1"
    );
    assert_eq!(
        (
            entries[1]["payload"].as_str(),
            entries[2]["payload"].as_str()
        ),
        (Some("one"), Some("two"))
    );
    let table = tail_table(d, "news", &first, 1).await;
    assert_eq!(
        table,
        format!("{first}  [a=b ruststream-partition-key=acct-1]  hello\n")
    );

    // Header values holding a space, `=` or `]` are quoted in the table.
    let json = json_in(&["--dir", d], "publish notes x -H note=a_b -H k=x]").await;
    let id = json["ids"][0].as_str().unwrap().to_owned();
    let b = stdout_of(
        &["--dir", d],
        &[
            "publish",
            "notes",
            "y",
            "-H",
            "note=two words",
            "-H",
            "eq=a=b",
        ],
    )
    .await;
    let second = b.trim().to_owned();
    let table = tail_table(d, "notes", &id, 2).await;
    assert_eq!(
        table,
        format!("{id}  [k=\"x]\" note=a_b]  x\n{second}  [eq=\"a=b\" note=\"two words\"]  y\n")
    );
}

/// `publish --file` of 1,000 small lines then one over the file log's
/// 64 MB entry limit: the first batch (1,000 messages) is published, the
/// second refused, and the error says what was published (as through
/// `--admin`), so that running the command again does not publish the
/// 1,000 twice unknowingly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_failing_after_its_first_batch_says_what_was_published() {
    let dir = TempDir::new("publish-part-way");
    drop(FileLogBroker::open(&dir.0).unwrap());
    let file = dir.0.join("lines.txt");
    let mut text: String = (0..1_000).map(|n| format!("line-{n}\n")).collect();
    text.push_str(&"x".repeat(65 << 20));
    text.push('\n');
    std::fs::write(&file, text).unwrap();
    let d = dir.arg();
    let f = file.display().to_string();
    let out = cli(&["--dir", d.as_str(), "publish", "feed", "--file", f.as_str()]).await;
    let b = FileLogBroker::open(&dir.0).unwrap();
    let info = b.stream_info("feed").await.unwrap().unwrap();
    assert_eq!(info.length, 1_000, "the first batch was published");
    let first = info.first_id.unwrap().to_string();
    let last = info.last_id.to_string();
    out.fails(
        2,
        &[
            "1000 of 1001 messages published (",
            &first,
            &last,
            "then message 1001: ",
        ],
    );
}

/// A header (or a dead letter's reason) holding a line break is escaped
/// onto its line, as payloads are: `tail` prints one line per entry, and `dead-letters show` one line
/// per header, so that no header reads as another entry or field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_with_line_breaks_print_on_one_line() {
    let dir = TempDir::new("header-lines");
    let b = with_group_g(&dir).await;
    let forged = "first\n1796172361835-0  forged";
    let one = Message::new("one").with_header("no\nte", forged);
    b.publish("jobs", one).await.unwrap();
    b.publish("jobs", Message::new("two")).await.unwrap();
    let batch = read_new(&b, ("jobs", "g", "c"), 1).await;
    let id = batch.deliveries[0].id();
    b.dead_letter("jobs", "g", &[id], "bad\nforged")
        .await
        .unwrap();
    b.sync().await.unwrap();
    let d = dir.arg();
    let d = d.as_str();
    // The value holds spaces, so it is quoted (`tail`'s header list).
    let escaped = "no\\nte=\"first\\n1796172361835-0  forged\"";

    let table = stdout_of(
        &["--dir", d],
        &["tail", "jobs", "--from", "0", "--no-follow"],
    )
    .await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "two entries, two lines:\n{table}");
    assert_eq!(lines[0], format!("{id}  [{escaped}]  one"), "{table}");

    let id = id.to_string();
    let shown = stdout_of(&["--dir", d], &["dead-letters", "show", "jobs", "g", &id]).await;
    let headers = shown
        .split_once("headers\n")
        .and_then(|(_, rest)| rest.split_once("payload\n"))
        .map(|(headers, _)| headers);
    assert_eq!(
        headers,
        Some("  no\\nte: first\\n1796172361835-0  forged\n"),
        "{shown}"
    );
    // The reason too: a line break in it forges no line of its own.
    assert!(shown.contains("bad\\nforged"), "{shown}");
    assert!(!shown.lines().any(|line| line == "forged"), "{shown}");
    drop(b);
}

/// `tail STREAM --from ID --count N` on the log at `dir`, as a table.
async fn tail_table(dir: &str, stream: &str, from: &str, count: usize) -> String {
    let count = count.to_string();
    stdout_of(
        &["--dir", dir],
        &["tail", stream, "--from", from, "--count", &count],
    )
    .await
}

/// Every file under `dir` but the `LOCK` file (which opening takes): its
/// path, bytes and modification time, in path order.
fn files_but_the_lock(dir: &std::path::Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else if e.file_name() != "LOCK" {
                let path = e.path().display().to_string();
                out.push((
                    path,
                    std::fs::read(e.path()).unwrap(),
                    meta.modified().unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// The read commands and the dry runs write no file of the log, whether a
/// service holds the directory (it is opened read-only) or nobody does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_dry_runs_change_no_file() {
    let dir = TempDir::new("reads-write-nothing");
    let b = with_group_g(&dir).await;
    for n in 0..5 {
        b.publish("jobs", Message::new(format!("m{n}")))
            .await
            .unwrap();
    }
    let batch = read_new(&b, ("jobs", "g", "c"), 3).await;
    let ids: Vec<_> = batch.deliveries.iter().map(|d| d.id()).collect();
    b.dead_letter("jobs", "g", &ids[..2], "bad").await.unwrap();
    b.sync().await.unwrap();
    let d = dir.arg();
    let commands = [
        "streams",
        "describe jobs g",
        "pending jobs g",
        "dead-letters jobs g",
        "tail jobs --from 0 --no-follow",
        "redrive jobs g --all --dry-run",
        "discard jobs g --all --dry-run",
        "consumers prune jobs g --idle 0s --dry-run",
    ];
    let mut held = Some(b);
    for holder in ["held", "not held"] {
        let before = files_but_the_lock(&dir.0);
        for command in commands {
            let out = cli_in(&["--dir", d.as_str()], command).await;
            assert_eq!(out.code, 0, "{holder}, {command}: {out:?}");
        }
        assert!(
            files_but_the_lock(&dir.0) == before,
            "{holder}: a file changed"
        );
        drop(held.take());
    }
}

/// A consumer's idle time survives the file log: a service holds the log,
/// its consumer `c` read and acked an entry, the service wrote a snapshot,
/// and `c` polled again and found nothing. The tool, reading the held
/// directory read-only, says `c` is idle for milliseconds (as the broker
/// does), not since the epoch; a prune with `--idle 1h` lists nothing,
/// neither as a dry run on the held log nor for real once the service
/// stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_log_keeps_a_live_consumers_idle_time_across_a_snapshot_and_a_restart() {
    let dir = TempDir::new("idle-time");
    let b = with_group_g(&dir).await;
    b.publish("jobs", Message::new("one")).await.unwrap();
    let batch = read_new(&b, ("jobs", "g", "c"), 1).await;
    let ids: Vec<_> = batch.deliveries.iter().map(|d| d.id()).collect();
    b.ack("jobs", "g", &ids).await.unwrap();
    // The holder writes a snapshot (as it does on its own as the journal
    // grows), then `c` reads again and finds nothing new: it is alive.
    b.compact().unwrap();
    read_new(&b, ("jobs", "g", "c"), 1).await;
    b.sync().await.unwrap();
    let in_process = b.consumers("jobs", "g").await.unwrap();
    assert!(in_process[0].idle_ms < 60_000, "{in_process:?}");

    let d = dir.arg();
    let target = ["--dir", d.as_str()];
    let pruned = json_in(&target, "consumers prune jobs g --idle 1h --dry-run").await;
    assert_eq!(pruned["deleted"], serde_json::json!([]), "{pruned}");
    let described = json_in(&target, "describe jobs g").await;
    let idle = described["group"]["consumer_list"][0]["idle_ms"]
        .as_u64()
        .unwrap();
    assert!(
        idle < 60_000,
        "c read a moment ago, the tool says idle {idle} ms: {described}"
    );

    // The service stops: a prune on the log nobody holds deletes nothing.
    drop(b);
    let pruned = json_in(&target, "consumers prune jobs g --idle 1h").await;
    assert_eq!(pruned["deleted"], serde_json::json!([]), "{pruned}");
    let reopened = reopen(&dir);
    let consumers = reopened.consumers("jobs", "g").await.unwrap();
    assert_eq!(consumers.len(), 1, "{consumers:?}");
    assert!(consumers[0].idle_ms < 60_000, "{consumers:?}");
}

/// A read command takes no lock, so a service opens its log while a `tail`
/// follows it: here the service opens and closes the log again and again
/// (as a restarting service would) while the tail polls, publishes, and
/// the tail prints what it published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_opens_its_log_while_tail_follows_it() {
    let dir = TempDir::new("tail-takes-no-lock");
    log_with_one_entry(&dir, "jobs", "first").await;
    let d = dir.arg();
    let tail = cli_in_background(&["--dir", d.as_str()], "tail jobs --from 0 --count 3");
    for n in 0..200 {
        let b = FileLogBroker::open(&dir.0)
            .unwrap_or_else(|e| panic!("open {n} while the tail follows: {e}"));
        if n % 100 == 99 {
            b.publish("jobs", Message::new(format!("m{n}")))
                .await
                .unwrap();
            b.sync().await.unwrap();
        }
        drop(b);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = tail.ok().await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert!(lines[2].ends_with("m199"), "{out:?}");
}
