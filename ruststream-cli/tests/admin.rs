//! The binary against a running app's admin endpoint: a full redrive
//! round trip on a file log the app holds (the tool reads the directory
//! read-only and sends changes through `--admin`), publish and tail, and
//! consumers prune, with the token's refusals.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use ruststream::{AppInfo, Broker, FileLogBroker, MemoryBroker, Running, RustStream, StreamStart};
use ruststream_testkit::serve_admin;
use serde_json::json;
use support::{
    GATE_REASON, Gate, TempDir, cli, cli_in, cli_in_background, cli_of, consumer_names, json_in,
    read_new, until,
};

/// Starts app `name` with `gate` on `broker`, serving the admin endpoint
/// with the token `t`; the app and the endpoint's URL.
async fn serve<B: Broker>(name: &str, broker: B, gate: Gate) -> (Running, String) {
    let app = RustStream::new(AppInfo::new(name, "0")).with_broker(broker, |b| {
        b.include(gate);
    });
    serve_admin(app, Some("t")).await.unwrap()
}

/// A fresh memory broker and app `name` on it, its gate reading `stream` as
/// `group`, serving the admin endpoint with the token `t`; the broker, the
/// app and the endpoint's URL.
async fn serve_memory(name: &str, stream: &str, group: &str) -> (MemoryBroker, Running, String) {
    let broker = MemoryBroker::new();
    let (gate, _state) = Gate::new(stream, group);
    let (app, url) = serve(name, broker.clone(), gate).await;
    (broker, app, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_listed_redriven_handled_and_gone() {
    let dir = TempDir::new("admin");
    let log = FileLogBroker::open(&dir.0).unwrap();
    let (gate, state) = Gate::new("orders", "billing");
    let (app, url) = serve("cli-admin", log.clone(), gate).await;
    let a = ["--admin", url.as_str(), "--token", "t"];

    // Published through the endpoint; the subscriber dead-letters it.
    let published = cli_in(&a, "--format json publish orders poison-7 -H tenant=acme")
        .await
        .ok()
        .json();
    let id = published["ids"][0].as_str().unwrap().to_owned();
    cli_in(&a, "publish orders fine-1").await.ok();
    until("the dead letter", || async {
        let out = cli_in(&a, "--format json dead-letters orders billing").await;
        out.code == 0 && out.json().as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    until("fine-1 acked", || async { state.acked() == ["fine-1"] }).await;

    // Listed: JSON and table, through the endpoint and read-only on the
    // directory the app holds.
    let listed = cli_in(&a, "--format json dead-letters orders billing")
        .await
        .ok()
        .json();
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["original_id"], id.as_str());
    assert_eq!(listed[0]["reason"], GATE_REASON);
    assert_eq!(listed[0]["entry"]["headers"]["tenant"], "acme");
    let table = cli_in(&a, "dead-letters orders billing").await.ok().stdout;
    assert!(
        table.contains(GATE_REASON) && table.contains("poison-7"),
        "{table}"
    );
    let d = dir.arg();
    log.sync().await.unwrap();
    let on_disk = json_in(&["--dir", &d], "dead-letters orders billing").await;
    assert_eq!(on_disk[0]["id"], id.as_str());
    let described = cli_in(&a, "--format json describe orders billing")
        .await
        .ok()
        .json();
    assert_eq!(described["group"]["dead_letters"], 1);
    assert_eq!(described["stream"]["groups"], json!(["billing"]));
    let shown = cli_in(&a, &format!("dead-letters show orders billing {id}"))
        .await
        .ok()
        .stdout;
    assert!(
        shown.contains("tenant: acme") && shown.contains(&format!("reason       {GATE_REASON}")),
        "{shown}"
    );

    // The directory is held: changes there are refused, naming --admin.
    cli(&["--dir", &d, "redrive", "orders", "billing", &id])
        .await
        .fails(4, &[&format!("pid {}", std::process::id()), "--admin"]);
    // The endpoint wants the token.
    cli(&["--admin", &url, "redrive", "orders", "billing", &id])
        .await
        .fails(4, &["token"]);
    cli_in(
        &["--admin", &url],
        &format!("--token wrong redrive orders billing {id}"),
    )
    .await
    .fails(4, &["does not match"]);

    // Redriven, handled, gone.
    let dry = cli_in(&a, "--format json redrive orders billing --all --dry-run")
        .await
        .ok()
        .json();
    assert_eq!(
        dry,
        json!({ "dry_run": true, "selected": [id], "changed": 0, "skipped": [] })
    );
    state.open.store(true, Ordering::SeqCst);
    let redrive = [
        "redrive",
        "orders",
        "billing",
        "--reason-contains",
        "gate is closed",
    ];
    let done = cli_of(&a, &redrive).await.ok().stdout;
    assert_eq!(done, "redriven 1 of 1 selected dead letter(s)\n");
    until("the redriven entry acked", || async {
        state.acked() == ["fine-1", "poison-7"]
    })
    .await;
    let listed = cli_in(&a, "--format json dead-letters orders billing")
        .await
        .ok()
        .json();
    assert_eq!(listed, json!([]));
    until("nothing pending", || async {
        let out = cli_in(&a, "--format json describe orders billing")
            .await
            .json();
        out["group"]["pending"] == 0
    })
    .await;
    cli_in(&a, &format!("dead-letters show orders billing {id}"))
        .await
        .fails(3, &[&format!("no dead letter {id}")]);

    // Unknown names, a bad id, through the endpoint.
    cli(&["--admin", &url, "describe", "nowhere"])
        .await
        .fails(3, &["no stream \"nowhere\""]);
    cli(&["--admin", &url, "pending", "orders", "nobody"])
        .await
        .fails(3, &["\"nobody\""]);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_tail_and_prune_through_the_endpoint() {
    let (broker, app, url) = serve_memory("cli-admin-feed", "feed", "readers").await;

    // publish, then tail --count, then tail following new entries.
    let first = cli_in(
        &["--admin", &url, "--token", "t"],
        "publish feed one --key k",
    )
    .await
    .ok()
    .stdout
    .trim()
    .to_owned();
    let tailed = cli_in(
        &["--admin", &url],
        &format!("--format json tail feed --from {first} --count 1"),
    )
    .await
    .ok()
    .stdout;
    let entry: serde_json::Value = serde_json::from_str(tailed.trim()).unwrap();
    assert_eq!(entry["payload"], "one");
    assert_eq!(entry["headers"][ruststream::PARTITION_KEY_HEADER], "k");
    let words = format!("tail feed --from {first} --count 3 --interval 20ms");
    let follow = cli_in_background(&["--admin", &url], &words);
    tokio::time::sleep(Duration::from_millis(100)).await;
    cli_with_stdin(&url, "two\nthree\n").await;
    let followed = follow.ok().await.stdout;
    let payloads: Vec<&str> = followed
        .lines()
        .map(|l| l.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(payloads, ["one", "two", "three"], "{followed}");

    // In a second group: `empty` read and holds nothing, `holder` holds
    // an entry.
    broker
        .ensure_group("feed", "aux", StreamStart::New)
        .await
        .unwrap();
    read_new(&broker, ("feed", "aux", "empty"), 1).await;
    broker
        .publish("feed", ruststream::Message::new("four"))
        .await
        .unwrap();
    read_new(&broker, ("feed", "aux", "holder"), 1).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let dry = json_in(
        &["--admin", &url, "--token", "t"],
        "consumers prune feed aux --idle 5ms --dry-run",
    )
    .await;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted"], json!(["empty"]));
    assert_eq!(dry["kept_holding"][0]["name"], "holder");
    assert_eq!(dry["kept_holding"][0]["pending"], 1);
    assert_eq!(broker.consumers("feed", "aux").await.unwrap().len(), 2);
    cli_in(&["--admin", &url], "consumers prune feed aux --idle 5ms")
        .await
        .fails(4, &["token"]);
    let done = cli_in(
        &["--admin", &url, "--token", "t"],
        "consumers prune feed aux --idle 5ms",
    )
    .await
    .ok()
    .stdout;
    assert!(
        done.starts_with("deleted 1 consumer(s) idle over 5ms that hold nothing\n  empty\n"),
        "{done}"
    );
    assert!(done.contains("  holder  pending 1"), "{done}");
    let left = consumer_names(&broker, "feed", "aux").await;
    assert_eq!(left, ["holder"]);
    app.shutdown().await;
}

/// `publish feed --file -` with `lines` on stdin.
async fn cli_with_stdin(url: &str, lines: &str) {
    support::cli_with(
        &[
            "--admin", url, "--token", "t", "publish", "feed", "--file", "-",
        ],
        &[],
        Some(lines),
    )
    .await
    .ok();
}

/// A stream or group named `.` or `..` is a valid name, but a URL drops
/// such path segments: through `--admin`, the command is refused with a
/// usage error saying so, rather than sent to another route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_name_through_the_endpoint_is_a_usage_error_saying_why() {
    let (_broker, app, url) = serve_memory("cli-admin-dots", "orders", "billing").await;
    let a = ["--admin", url.as_str(), "--token", "t"];
    cli_in(&a, "pending orders ..")
        .await
        .fails(2, &["\"..\"", "--redis or --dir"]);
    cli_in(&a, "publish . x")
        .await
        .fails(2, &["\".\"", "--redis or --dir"]);
    app.shutdown().await;
}

/// `publish --file` through the endpoint makes one request a line. A line
/// the endpoint refuses as too large, after one was published, fails the
/// command saying what was published already and why the rest was not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_failing_part_way_says_what_was_published() {
    let (broker, app, url) = serve_memory("cli-admin-big", "orders", "billing").await;
    let dir = TempDir::new("admin-big");
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("lines.txt");
    std::fs::write(&file, format!("small\n{}\n", "x".repeat(3 << 20))).unwrap();
    let a = ["--admin", url.as_str(), "--token", "t"];
    cli_in(&a, &format!("publish feed --file {}", file.display()))
        .await
        .fails(
            4,
            &[
                "1 of 2 messages published",
                "then message 2",
                "--redis or --dir",
            ],
        );
    let info = broker.stream_info("feed").await.unwrap().unwrap();
    assert_eq!(info.length, 1, "the first line was published");
    app.shutdown().await;
}

/// `n` dead letters in group `dead` of stream `bulk` on a fault injector
/// whose second redrive request fails before it reaches the broker, behind
/// app `app_name`'s admin endpoint (token `t`): the injector, the dead
/// letters' ids, the app and the endpoint's URL.
async fn dead_letters_behind_a_failing_redrive(
    n: u32,
    app_name: &str,
) -> (
    std::sync::Arc<ruststream_testkit::FaultyBroker>,
    Vec<ruststream::EntryId>,
    ruststream::Running,
    String,
) {
    use ruststream_testkit::{CallKind, Fault, FaultyBroker};
    use std::sync::Arc;

    let faulty = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 1));
    let (stream, group) = ("bulk", "dead");
    faulty
        .ensure_group(stream, group, StreamStart::Beginning)
        .await
        .unwrap();
    for i in 0..n {
        let message = ruststream::Message::new(i.to_string().into_bytes());
        faulty.publish(stream, message).await.unwrap();
    }
    let mut ids = Vec::new();
    loop {
        let batch = read_new(&*faulty, (stream, group, "c"), 1_000).await;
        if batch.is_empty() {
            break;
        }
        ids.extend(batch.deliveries.iter().map(|d| d.id()));
    }
    let dead = faulty.dead_letter(stream, group, &ids, "failed").await;
    assert_eq!(dead.unwrap(), u64::from(n));
    faulty.script(CallKind::Redrive, 2, Fault::Before);
    let (gate, _state) = Gate::new("orders", "billing");
    let app =
        RustStream::new(AppInfo::new(app_name, "0")).with_shared_broker(faulty.clone(), |b| {
            b.include(gate);
        });
    let (app, url) = serve_admin(app, Some("t")).await.unwrap();
    (faulty, ids, app, url)
}

/// A redrive of more dead letters than one request takes (1,000) whose
/// second request fails: the error says how many were redriven before it,
/// and running the command again redrives the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_failing_part_way_says_how_many_were_redriven() {
    let (faulty, _ids, app, url) =
        dead_letters_behind_a_failing_redrive(2_500, "cli-admin-part-way").await;
    let (stream, group) = ("bulk", "dead");
    let a = ["--admin", url.as_str(), "--token", "t"];

    cli_in(&a, "redrive bulk dead --all --yes").await.fails(
        1,
        &["1000 dead letters redriven of the first 1000 of 2500 selected, then: "],
    );
    let info = faulty.group_info(stream, group).await.unwrap();
    assert_eq!(info.dead_letters, 1_500, "{info:?}");
    let again = json_in(&a, "redrive bulk dead --all --yes").await;
    assert_eq!(again["changed"], 1_500, "{again}");
    assert_eq!(
        faulty.group_info(stream, group).await.unwrap().dead_letters,
        0
    );
    app.shutdown().await;
}

/// A redrive naming 1,500 dead letters by id whose second request fails:
/// running the same command again skips the 1,000 already redriven
/// (listing them as `skipped`) and redrives the other 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_by_ids_run_again_after_failing_part_way_redrives_the_rest() {
    let (faulty, ids, app, url) =
        dead_letters_behind_a_failing_redrive(1_500, "cli-admin-rerun").await;
    let (stream, group) = ("bulk", "dead");

    let texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let mut command = vec![
        "--admin",
        url.as_str(),
        "--token",
        "t",
        "--format",
        "json",
        "redrive",
        stream,
        group,
        "--yes",
    ];
    command.extend(texts.iter().map(String::as_str));
    cli(&command).await.fails(
        1,
        &["1000 dead letters redriven of the first 1000 of 1500 selected"],
    );
    let info = faulty.group_info(stream, group).await.unwrap();
    assert_eq!(info.dead_letters, 500, "{info:?}");

    let again = cli(&command).await.ok().json();
    assert_eq!(
        (
            again["changed"].as_u64(),
            again["selected"].as_array().map(Vec::len),
            again["skipped"].as_array().map(Vec::len),
        ),
        (Some(500), Some(500), Some(1_000)),
        "{again}"
    );
    assert_eq!(again["skipped"][0].as_str(), Some(texts[0].as_str()));
    assert_eq!(
        faulty.group_info(stream, group).await.unwrap().dead_letters,
        0
    );
    app.shutdown().await;
}
