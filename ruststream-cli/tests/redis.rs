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

use ruststream::{AppInfo, Broker, EntryId, Message, RedisBroker, Retry, RustStream, StreamStart};
use serde_json::json;
use support::{
    GATE_REASON, Gate, cli_in_background, cli_of, consumer_names, json_in, json_of, numbers,
    read_new, stdout_of, until,
};

/// Stream names no other test uses, on the server at
/// `RUSTSTREAM_REDIS_URL`; their keys (the stream and ruststream's side
/// keys `rs:{name}:*`) are deleted when dropped.
struct Keys {
    url: String,
    streams: Vec<String>,
}

impl Keys {
    /// A name for each of `what`, or `None` (the test is skipped, saying
    /// so) when `RUSTSTREAM_REDIS_URL` is not set.
    fn new(test: &str, what: &[&str]) -> Option<Self> {
        let url = match std::env::var("RUSTSTREAM_REDIS_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                eprintln!("{test}: skipped, RUSTSTREAM_REDIS_URL is not set");
                return None;
            }
        };
        let token = ruststream_redis::unique_token();
        Some(Keys {
            url,
            streams: what.iter().map(|w| format!("cli-{token}-{w}")).collect(),
        })
    }

    /// The options naming the server.
    fn target(&self) -> [&str; 2] {
        ["--redis", self.url.as_str()]
    }

    /// A broker on the server, with group `g` on `stream` from its
    /// beginning.
    async fn broker_with_group(&self, stream: &str) -> RedisBroker {
        let b = RedisBroker::standalone(self.url.clone());
        b.ensure_group(stream, "g", StreamStart::Beginning)
            .await
            .unwrap();
        b
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_prune_publish_and_tail_on_redis() {
    let Some(keys) = Keys::new("reads_prune_publish_and_tail_on_redis", &["jobs"]) else {
        return;
    };
    let (r, s) = (keys.target(), keys.streams[0].as_str());
    let b = keys.broker_with_group(s).await;
    for text in ["job-1", "poison-1", "poison-2"] {
        b.publish(s, Message::new(text)).await.unwrap();
    }
    read_new(&b, (s, "g", "c1"), 1).await;
    let batch = read_new(&b, (s, "g", "c2"), 2).await;
    let (poison1, poison2) = (batch.deliveries[0].id(), batch.deliveries[1].id());
    b.dead_letter(s, "g", &[poison1], "bad payload")
        .await
        .unwrap();
    // poison-2 fails once (retried as a copy), and its copy is dead-lettered.
    b.retry(s, "g", &[poison2], Retry::Copy).await.unwrap();
    let copy = read_new(&b, (s, "g", "c2"), 1).await;
    let copy_id = copy.deliveries[0].id();
    b.dead_letter(s, "g", &[copy_id], "gave up after 2 deliveries")
        .await
        .unwrap();

    let streams = json_of(&r, &["streams"]).await;
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
    let table = stdout_of(&r, &["streams"]).await;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(s) && l.ends_with("  g")),
        "{table}"
    );

    let described = json_of(&r, &["describe", s, "g"]).await;
    let g = &described["group"];
    assert_eq!(
        numbers(g, &["pending", "dead_letters", "consumers"]),
        [Some(1), Some(2), Some(2)]
    );
    let table = stdout_of(&r, &["describe", s, "g"]).await;
    assert!(
        table.contains("pending         1") && table.contains("CONSUMER"),
        "{table}"
    );

    let pending = json_of(&r, &["pending", s, "g"]).await;
    assert_eq!(pending[0]["consumer"], "c1");
    assert_eq!(pending[0]["times_delivered"], 1);

    let letters = json_of(&r, &["dead-letters", s, "g"]).await;
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
    let table = stdout_of(&r, &["dead-letters", s, "g"]).await;
    let copy_line = table
        .lines()
        .find(|l| l.starts_with(&copy_id.to_string()))
        .unwrap();
    assert!(
        copy_line.contains(&poison2.to_string()) && copy_line.contains("poison-2"),
        "{table}"
    );
    let shown = stdout_of(&r, &["dead-letters", "show", s, "g", &copy_id.to_string()]).await;
    assert!(
        shown.contains(&format!("original id  {poison2}")),
        "{shown}"
    );

    // Errors name what is missing.
    cli_of(&r, &["describe", s, "nope"])
        .await
        .fails(3, &["\"nope\""]);
    cli_of(&r, &["dead-letters", "show", s, "g", "1-1"])
        .await
        .fails(3, &["no dead letter 1-1"]);
    cli_of(&r, &["discard", s, "g", "--all"])
        .await
        .fails(4, &["--yes"]);

    // Prune: c2 holds nothing, c1 holds job-1.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let dry = json_in(&r, &format!("consumers prune {s} g --idle 5ms --dry-run")).await;
    assert_eq!(dry["deleted"], json!(["c2"]));
    assert_eq!(dry["kept_holding"][0]["name"], "c1");
    assert_eq!(b.consumers(s, "g").await.unwrap().len(), 2);
    let done = json_in(&r, &format!("consumers prune {s} g --idle 5ms")).await;
    assert_eq!(
        (done["dry_run"].as_bool(), &done["deleted"]),
        (Some(false), &json!(["c2"]))
    );
    let left = consumer_names(&b, s, "g").await;
    assert_eq!(left, ["c1"]);

    // Discard both dead letters.
    let done = json_in(&r, &format!("discard {s} g --all --yes")).await;
    assert_eq!(done["changed"], 2);
    assert_eq!(b.group_info(s, "g").await.unwrap().dead_letters, 0);

    // Publish, then tail --count (and following).
    let last: EntryId = b.stream_info(s).await.unwrap().unwrap().last_id;
    let from = last.next().to_string();
    let words = format!("--format json tail {s} --from {from} --count 2 --interval 20ms");
    let follow = cli_in_background(&r, &words);
    let ids = stdout_of(&r, &["publish", s, "hello", "-H", "x=y", "--key", "acct"]).await;
    assert_eq!(ids.lines().count(), 1);
    cli_of(&r, &["publish", s, "world"]).await.ok();
    let tailed = follow.ok().await.stdout;
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
    let Some(keys) = Keys::new("a_redrive_round_trip_on_redis", &["orders"]) else {
        return;
    };
    let (r, s) = (keys.target(), keys.streams[0].clone());
    let (gate, state) = Gate::new(&s, "billing");
    let app = RustStream::new(AppInfo::new("cli-redis", "0"))
        .with_broker(RedisBroker::standalone(keys.url.clone()), |b| {
            b.include(gate);
        })
        .start()
        .await
        .unwrap();
    let id = stdout_of(&r, &["publish", &s, "poison-9"])
        .await
        .trim()
        .to_owned();
    until("the dead letter", || async {
        let out = cli_of(&r, &["--format", "json", "dead-letters", &s, "billing"]).await;
        out.code == 0 && out.json().as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let letters = json_of(&r, &["dead-letters", &s, "billing"]).await;
    assert_eq!(
        (letters[0]["id"].as_str(), letters[0]["reason"].as_str()),
        (Some(id.as_str()), Some(GATE_REASON))
    );
    state.open.store(true, Ordering::SeqCst);
    let done = stdout_of(&r, &["redrive", &s, "billing", &id]).await;
    assert_eq!(done, "redriven 1 of 1 selected dead letter(s)\n");
    until("handled", || async { state.acked() == ["poison-9"] }).await;
    assert_eq!(
        json_of(&r, &["dead-letters", &s, "billing"]).await,
        json!([])
    );
    until("nothing pending", || async {
        cli_of(&r, &["--format", "json", "describe", &s, "billing"])
            .await
            .json()["group"]["pending"]
            == 0
    })
    .await;
    app.shutdown().await;
    drop(keys);
}

/// `streams` on a server that also holds a stream key whose name is not
/// UTF-8 (another application's): that key is left out, the others are
/// listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_lists_the_others_when_one_key_name_is_not_utf8() {
    let Some(keys) = Keys::new(
        "streams_lists_the_others_when_one_key_name_is_not_utf8",
        &["good", "bad"],
    ) else {
        return;
    };
    let good = keys.streams[0].as_str();
    let mut bad = keys.streams[1].clone().into_bytes();
    bad.push(0xff);
    let mut conn = redis::Client::open(keys.url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    for key in [good.as_bytes(), &bad[..]] {
        let _: String = redis::cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("payload")
            .arg("x")
            .query(&mut conn)
            .unwrap();
    }

    let out = cli_of(&keys.target(), &["--format", "json", "streams"]).await;
    // Keys deletes the names it made; the raw key is deleted here.
    let _: i64 = redis::cmd("DEL").arg(&bad[..]).query(&mut conn).unwrap();
    let streams = out.ok().json();
    let names: Vec<&str> = streams
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["stream"].as_str())
        .collect();
    assert!(names.contains(&good), "{names:?}");
}

/// A prune deletes a consumer that holds nothing, and leaves the entries
/// owed again (a delayed retry, held by nobody) where they are: still
/// pending, and a redrive adds the dead letter to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_leaves_owed_entries_pending() {
    let Some(keys) = Keys::new("prune_leaves_owed_entries_pending", &["owed"]) else {
        return;
    };
    let (r, s) = (keys.target(), keys.streams[0].as_str());
    let b = keys.broker_with_group(s).await;
    b.publish(s, Message::new("a")).await.unwrap();
    b.publish(s, Message::new("b")).await.unwrap();
    let batch = read_new(&b, (s, "g", "c"), 2).await;
    let ids: Vec<_> = batch.deliveries.iter().map(|d| d.id()).collect();
    b.retry(s, "g", &ids[..1], Retry::After(Duration::from_secs(3600)))
        .await
        .unwrap();
    b.dead_letter(s, "g", &ids[1..], "x").await.unwrap();

    let pruned = json_in(&r, &format!("consumers prune {s} g --idle 0s")).await;
    assert_eq!(pruned["deleted"], json!(["c"]), "{pruned}");
    let pending = json_in(&r, &format!("pending {s} g")).await;
    assert_eq!(pending[0]["id"], ids[0].to_string(), "{pending}");
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
    json_in(&r, &format!("redrive {s} g --all --yes")).await;
    let pending = json_in(&r, &format!("pending {s} g")).await;
    assert_eq!(pending.as_array().map(Vec::len), Some(2), "{pending}");
}
