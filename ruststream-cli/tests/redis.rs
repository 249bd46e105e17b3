//! The binary on a real Redis server (`RUSTSTREAM_REDIS_URL`; skipped,
//! saying so, when it is not set): the read commands on a group the test
//! set up (with a dead retry copy, shown with its original id), prune,
//! publish and tail, and a full redrive round trip with a running
//! subscriber. Every test uses streams of its own and deletes their keys.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use ruststream::{
    AppInfo, Broker, EntryId, Message, ReadMode, ReadRequest, RedisBroker, Retry, RustStream,
    StreamStart,
};
use serde_json::json;
use support::{GATE_REASON, Gate, Out, cli, until};

/// The server's URL, or `None` (the test is skipped) when
/// `RUSTSTREAM_REDIS_URL` is not set.
fn redis_url(test: &str) -> Option<String> {
    match std::env::var("RUSTSTREAM_REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("{test}: skipped, RUSTSTREAM_REDIS_URL is not set");
            None
        }
    }
}

/// A stream name no other test uses; its keys (the stream and
/// ruststream's side keys `rs:{name}:*`) are deleted when dropped.
struct Keys {
    url: String,
    streams: Vec<String>,
}

impl Keys {
    fn new(url: &str, what: &[&str]) -> Self {
        let token = ruststream_redis::unique_token();
        Keys {
            url: url.to_owned(),
            streams: what.iter().map(|w| format!("cli-{token}-{w}")).collect(),
        }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        for stream in &self.streams {
            let mut keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("rs:{{{stream}}}:*"))
                .query(&mut conn)
                .unwrap_or_default();
            keys.push(stream.clone());
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&keys).query(&mut conn);
        }
    }
}

async fn run(url: &str, args: &[&str]) -> Out {
    let mut all = vec!["--redis", url];
    all.extend_from_slice(args);
    cli(&all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_prune_publish_and_tail_on_redis() {
    let Some(url) = redis_url("reads_prune_publish_and_tail_on_redis") else {
        return;
    };
    let keys = Keys::new(&url, &["jobs"]);
    let s = keys.streams[0].as_str();
    let b = RedisBroker::standalone(url.clone());
    b.ensure_group(s, "g", StreamStart::Beginning)
        .await
        .unwrap();
    for text in ["job-1", "poison-1", "poison-2"] {
        b.publish(s, Message::new(text)).await.unwrap();
    }
    b.read(ReadRequest::new(s, "g", "c1", ReadMode::New, 1))
        .await
        .unwrap();
    let batch = b
        .read(ReadRequest::new(s, "g", "c2", ReadMode::New, 2))
        .await
        .unwrap();
    let (poison1, poison2) = (batch.deliveries[0].id(), batch.deliveries[1].id());
    b.dead_letter(s, "g", &[poison1], "bad payload")
        .await
        .unwrap();
    // poison-2 fails once (retried as a copy), and its copy is dead-lettered.
    b.retry(s, "g", &[poison2], Retry::Copy).await.unwrap();
    let copy = b
        .read(ReadRequest::new(s, "g", "c2", ReadMode::New, 1))
        .await
        .unwrap();
    let copy_id = copy.deliveries[0].id();
    b.dead_letter(s, "g", &[copy_id], "gave up after 2 deliveries")
        .await
        .unwrap();

    let streams = run(&url, &["--format", "json", "streams"])
        .await
        .ok()
        .json();
    let ours = streams
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["stream"] == s)
        .unwrap();
    assert_eq!(
        (ours["length"].as_u64(), &ours["groups"]),
        (Some(4), &json!(["g"]))
    );
    let table = run(&url, &["streams"]).await.ok().stdout;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(s) && l.ends_with("  g")),
        "{table}"
    );

    let described = run(&url, &["--format", "json", "describe", s, "g"])
        .await
        .ok()
        .json();
    let g = &described["group"];
    assert_eq!(
        (
            g["pending"].as_u64(),
            g["dead_letters"].as_u64(),
            g["consumers"].as_u64()
        ),
        (Some(1), Some(2), Some(2))
    );
    let table = run(&url, &["describe", s, "g"]).await.ok().stdout;
    assert!(
        table.contains("pending         1") && table.contains("CONSUMER"),
        "{table}"
    );

    let pending = run(&url, &["--format", "json", "pending", s, "g"])
        .await
        .ok()
        .json();
    assert_eq!(pending[0]["consumer"], "c1");
    assert_eq!(pending[0]["times_delivered"], 1);

    let letters = run(&url, &["--format", "json", "dead-letters", s, "g"])
        .await
        .ok()
        .json();
    let letters = letters.as_array().unwrap();
    assert_eq!(letters.len(), 2);
    assert_eq!(
        (
            letters[0]["id"].as_str(),
            letters[0]["original_id"].as_str()
        ),
        (
            Some(poison1.to_string().as_str()),
            Some(poison1.to_string().as_str())
        )
    );
    assert_eq!(letters[1]["id"], copy_id.to_string());
    assert_eq!(
        letters[1]["original_id"],
        poison2.to_string(),
        "the copy names its original"
    );
    assert_eq!(letters[1]["times_delivered"], 2);
    let table = run(&url, &["dead-letters", s, "g"]).await.ok().stdout;
    let copy_line = table
        .lines()
        .find(|l| l.starts_with(&copy_id.to_string()))
        .unwrap();
    assert!(
        copy_line.contains(&poison2.to_string()) && copy_line.contains("poison-2"),
        "{table}"
    );
    let shown = run(
        &url,
        &["dead-letters", "show", s, "g", &copy_id.to_string()],
    )
    .await
    .ok()
    .stdout;
    assert!(
        shown.contains(&format!("original id  {poison2}")),
        "{shown}"
    );

    // Errors name what is missing.
    run(&url, &["describe", s, "nope"])
        .await
        .fails(3, &["\"nope\""]);
    run(&url, &["dead-letters", "show", s, "g", "1-1"])
        .await
        .fails(3, &["no dead letter 1-1"]);
    run(&url, &["discard", s, "g", "--all"])
        .await
        .fails(4, &["--yes"]);

    // Prune: c2 holds nothing, c1 holds job-1.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let dry = run(
        &url,
        &[
            "--format",
            "json",
            "consumers",
            "prune",
            s,
            "g",
            "--idle",
            "5ms",
            "--dry-run",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(dry["deleted"], json!(["c2"]));
    assert_eq!(dry["kept_holding"][0]["name"], "c1");
    assert_eq!(b.consumers(s, "g").await.unwrap().len(), 2);
    let done = run(
        &url,
        &[
            "--format",
            "json",
            "consumers",
            "prune",
            s,
            "g",
            "--idle",
            "5ms",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(
        (done["dry_run"].as_bool(), &done["deleted"]),
        (Some(false), &json!(["c2"]))
    );
    let left: Vec<String> = b
        .consumers(s, "g")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(left, ["c1"]);

    // Discard both dead letters.
    let done = run(
        &url,
        &["--format", "json", "discard", s, "g", "--all", "--yes"],
    )
    .await
    .ok()
    .json();
    assert_eq!(done["changed"], 2);
    assert_eq!(b.group_info(s, "g").await.unwrap().dead_letters, 0);

    // Publish, then tail --count (and following).
    let last: EntryId = b.stream_info(s).await.unwrap().unwrap().last_id;
    let from = last.next().to_string();
    let follow = {
        let url = url.clone();
        let (s, from) = (s.to_owned(), from.clone());
        tokio::spawn(async move {
            run(
                &url,
                &[
                    "--format",
                    "json",
                    "tail",
                    &s,
                    "--from",
                    &from,
                    "--count",
                    "2",
                    "--interval",
                    "20ms",
                ],
            )
            .await
        })
    };
    let ids = run(&url, &["publish", s, "hello", "-H", "x=y", "--key", "acct"])
        .await
        .ok()
        .stdout;
    assert_eq!(ids.lines().count(), 1);
    run(&url, &["publish", s, "world"]).await.ok();
    let tailed = tokio::time::timeout(Duration::from_secs(20), follow)
        .await
        .unwrap()
        .unwrap()
        .ok()
        .stdout;
    let entries: Vec<serde_json::Value> = tailed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 2, "{tailed}");
    assert_eq!(entries[0]["id"], ids.trim());
    assert_eq!(
        entries[0]["headers"],
        json!({ "x": "y", (ruststream::PARTITION_KEY_HEADER): "acct" })
    );
    assert_eq!(entries[1]["payload"], "world");
    drop(keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_round_trip_on_redis() {
    let Some(url) = redis_url("a_redrive_round_trip_on_redis") else {
        return;
    };
    let keys = Keys::new(&url, &["orders"]);
    let s = keys.streams[0].clone();
    let (gate, state) = Gate::new(&s, "billing");
    let app = RustStream::new(AppInfo::new("cli-redis", "0"))
        .with_broker(RedisBroker::standalone(url.clone()), |b| {
            b.include(gate);
        })
        .start()
        .await
        .unwrap();
    let id = run(&url, &["publish", &s, "poison-9"])
        .await
        .ok()
        .stdout
        .trim()
        .to_owned();
    until("the dead letter", || async {
        let out = run(&url, &["--format", "json", "dead-letters", &s, "billing"]).await;
        out.code == 0 && out.json().as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let letters = run(&url, &["--format", "json", "dead-letters", &s, "billing"])
        .await
        .ok()
        .json();
    assert_eq!(
        (letters[0]["id"].as_str(), letters[0]["reason"].as_str()),
        (Some(id.as_str()), Some(GATE_REASON))
    );
    state.open.store(true, Ordering::SeqCst);
    let done = run(&url, &["redrive", &s, "billing", &id])
        .await
        .ok()
        .stdout;
    assert_eq!(done, "redriven 1 of 1 selected dead letter(s)\n");
    until("handled", || async { state.acked() == ["poison-9"] }).await;
    assert_eq!(
        run(&url, &["--format", "json", "dead-letters", &s, "billing"])
            .await
            .ok()
            .json(),
        json!([])
    );
    until("nothing pending", || async {
        run(&url, &["--format", "json", "describe", &s, "billing"])
            .await
            .json()["group"]["pending"]
            == 0
    })
    .await;
    app.shutdown().await;
    drop(keys);
}
