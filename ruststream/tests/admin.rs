//! The admin endpoint, through a real HTTP client against a running app:
//! metrics after a scenario, liveness and readiness, the subscribers, the
//! group routes, the token on write routes, and JSON errors for bad
//! requests.
//!
//! Real sockets need tokio's real clock: these tests wait for conditions
//! with a bounded poll, never for a fixed time.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use reqwest::StatusCode;
use ruststream::prelude::*;
use serde_json::Value;

#[derive(Debug, Deserialize)]
struct Job {
    n: u32,
}

/// Acks even numbers, always fails on 5 (dead-lettered at the attempt
/// bound, after 3 deliveries), fails the other odd ones once.
#[subscriber(RedisStream::new("admin-jobs").group("g").start_id(StreamStart::Beginning), max_deliveries(3))]
async fn jobs(job: &Job, ctx: &mut Context<'_>) -> Result<(), String> {
    if job.n.is_multiple_of(2) {
        return Ok(());
    }
    if job.n == 5 || ctx.delivery_count() == 0 {
        return Err(format!("job {} failed", job.n));
    }
    Ok(())
}

const TOKEN: &str = "s3cret";

/// Starts `app` serving the admin endpoint on a free local port, its write
/// routes behind `token` if one is given; the app and the endpoint's URL.
async fn serve(app: RustStream, token: Option<&str>) -> (ruststream::Running, String) {
    let mut app = app.admin(([127, 0, 0, 1], 0).into());
    if let Some(token) = token {
        app = app.admin_token(token);
    }
    let running = app.start().await.unwrap();
    let base = format!("http://{}", running.admin_addr().unwrap());
    (running, base)
}

/// App `app_name` on two brokers, each with its one subscriber.
fn on_two_brokers(
    app_name: &str,
    (first, first_reads): (MemoryBroker, impl ruststream::Subscriber),
    (second, second_reads): (MemoryBroker, impl ruststream::Subscriber),
) -> RustStream {
    RustStream::new(AppInfo::new(app_name, "0"))
        .with_broker(first, |b| {
            b.include(first_reads);
        })
        .with_broker(second, |b| {
            b.include(second_reads);
        })
}

/// A fresh memory broker and app `app_name` on it with the `jobs`
/// subscriber, serving the admin endpoint (behind `token` if one is given).
async fn start(app_name: &str, token: Option<&str>) -> (MemoryBroker, ruststream::Running, String) {
    let broker = MemoryBroker::new();
    let app = RustStream::new(AppInfo::new(app_name, "0")).with_broker(broker.clone(), |b| {
        b.include(jobs);
    });
    let (running, base) = serve(app, token).await;
    (broker, running, base)
}

async fn publish(broker: &MemoryBroker, n: std::ops::Range<u32>) {
    for n in n {
        let payload = serde_json::to_vec(&serde_json::json!({ "n": n })).unwrap();
        broker
            .publish("admin-jobs", ruststream::Message::new(payload))
            .await
            .unwrap();
    }
}

/// Polls `cond` every 10 ms for up to 10 s.
async fn until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    for _ in 0..1_000 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Waits until the admin server at `base` reports the app ready.
async fn until_ready(base: &str) {
    until("ready", async || {
        get(&format!("{base}/health/ready")).await.0 == StatusCode::OK
    })
    .await;
}

/// The JSON body of the response to `request`.
async fn json_reply(request: impl Future<Output = reqwest::Result<reqwest::Response>>) -> Value {
    request.await.unwrap().json().await.unwrap()
}

async fn get(url: &str) -> (StatusCode, String) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status();
    (status, response.text().await.unwrap())
}

async fn get_json(url: &str) -> (StatusCode, Value) {
    let (status, body) = get(url).await;
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"));
    (status, json)
}

/// The status of a dry run redriving all of group `g` of `admin-jobs`,
/// sent with `authorization` as its `Authorization` header.
async fn dry_run_redrive_all(base: &str, authorization: &str) -> StatusCode {
    reqwest::Client::new()
        .post(format!("{base}/groups/admin-jobs/g/redrive"))
        .header("authorization", authorization)
        .json(&serde_json::json!({ "all": true, "dry_run": true }))
        .send()
        .await
        .unwrap()
        .status()
}

/// Makes `broker` fail its next fsync, and checks that the publish to
/// `stream` it fails is refused: the log has stopped taking writes.
async fn fail_stop(broker: &FileLogBroker, stream: &str) {
    broker.inject_fsync_failure();
    let publisher = ruststream::Publisher::new(std::sync::Arc::new(broker.clone()));
    assert!(
        publisher
            .publish_raw(stream, ruststream::Message::new(b"{}".to_vec()))
            .await
            .is_err()
    );
}

/// The value of the sample of `metric` whose labels include all of
/// `labels`, from Prometheus text.
fn sample(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter(|l| l[metric.len()..].starts_with('{') || l[metric.len()..].starts_with(' '))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_count_a_scenario_by_outcome_and_kind() {
    let (broker, app, base) = start("admin-metrics", None).await;
    // 0..10: evens acked at once (5 deliveries), 1 3 7 9 fail once then
    // ack (8), 5 fails 3 times and is dead-lettered (3).
    publish(&broker, 0..10).await;
    let app_label = r#"app="admin-metrics""#;
    let text = || async { get(&format!("{base}/metrics")).await.1 };
    let settled =
        |t: &str, outcome: &str| sample(t, "ruststream_settled_total", &[app_label, outcome]);
    until("all settled in the metrics", async || {
        let t = text().await;
        settled(&t, r#"outcome="ack""#) == Some(9.0)
            && settled(&t, r#"outcome="dead_letter""#) == Some(1.0)
    })
    .await;
    let t = text().await;
    let at = |metric: &str, extra: &[&str]| {
        let mut labels = vec![
            app_label,
            r#"subscriber="jobs""#,
            r#"stream="admin-jobs""#,
            r#"group="g""#,
        ];
        labels.extend_from_slice(extra);
        sample(&t, metric, &labels)
    };
    assert_eq!(at("ruststream_received_total", &[]), Some(16.0), "{t}");
    assert_eq!(
        at("ruststream_settled_total", &[r#"outcome="retry""#]),
        Some(7.0)
    );
    assert_eq!(
        at("ruststream_handler_errors_total", &[r#"kind="error""#]),
        Some(7.0)
    );
    assert_eq!(
        at("ruststream_handler_errors_total", &[r#"kind="panic""#]),
        Some(0.0)
    );
    assert_eq!(
        at("ruststream_handler_duration_seconds_count", &[]),
        Some(16.0)
    );
    assert_eq!(at("ruststream_in_flight", &[]), Some(0.0));
    assert!(t.contains("# HELP ruststream_received_total"), "{t}");
    // The group gauges, polled every few seconds.
    let dead_letters = [app_label, r#"group="g""#];
    until("group gauges", async || {
        sample(
            &text().await,
            "ruststream_group_dead_letters",
            &dead_letters,
        ) == Some(1.0)
    })
    .await;
    let t = text().await;
    assert_eq!(
        sample(&t, "ruststream_group_pending", &[app_label]),
        Some(0.0)
    );
    assert_eq!(sample(&t, "ruststream_group_lag", &[app_label]), Some(0.0));
    assert_eq!(
        sample(&t, "ruststream_group_consumers", &[app_label]),
        Some(1.0)
    );
    app.shutdown().await;
}

#[tokio::test]
async fn health_and_subscribers_describe_the_app() {
    let (_broker, app, base) = start("admin-health", None).await;
    until_ready(&base).await;
    let (status, live) = get_json(&format!("{base}/health/live")).await;
    assert_eq!(
        (status, live["status"].as_str()),
        (StatusCode::OK, Some("live"))
    );
    let (status, subs) = get_json(&format!("{base}/subscribers")).await;
    assert_eq!(status, StatusCode::OK);
    let sub = &subs[0];
    assert_eq!(sub["subscriber"], "jobs");
    assert_eq!(sub["stream"], "admin-jobs");
    assert_eq!(sub["group"], "g");
    assert_eq!(sub["kind"], "new");
    assert_eq!(sub["max_deliveries"], 3);
    assert_eq!(sub["consumer"], app.consumers().next().unwrap().1);
    assert_eq!(sub["stats"]["delivered"], 0);
    app.shutdown().await;
}

#[tokio::test]
async fn group_routes_list_and_the_token_guards_the_writes() {
    let (broker, app, base) = start("admin-groups", Some(TOKEN)).await;
    publish(&broker, 5..6).await;
    let letters = format!("{base}/groups/admin-jobs/g/dead-letters");
    until("the dead letter", async || {
        get_json(&letters)
            .await
            .1
            .as_array()
            .is_some_and(|a| a.len() == 1)
    })
    .await;
    let (_, listed) = get_json(&letters).await;
    let reason = listed[0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("max_deliveries"), "{reason}");
    assert_eq!(listed[0]["times_delivered"], 3);
    assert_eq!(listed[0]["entry"]["payload"], r#"{"n":5}"#);
    let (status, group) = get_json(&format!("{base}/groups/admin-jobs/g")).await;
    assert_eq!(
        (status, group["dead_letters"].as_u64()),
        (StatusCode::OK, Some(1))
    );
    let (status, pending) = get_json(&format!("{base}/groups/admin-jobs/g/pending")).await;
    assert_eq!((status, pending), (StatusCode::OK, serde_json::json!([])));
    let (status, stream) = get_json(&format!("{base}/streams/admin-jobs")).await;
    // The entry and a retry copy per failed delivery (a `new` subscription
    // retries by copying).
    assert_eq!(
        (status, stream["length"].as_u64()),
        (StatusCode::OK, Some(4))
    );

    let client = reqwest::Client::new();
    let discard = format!("{base}/groups/admin-jobs/g/discard");
    let body = serde_json::json!({ "reason": reason, "dry_run": true });
    let post = |token: Option<&str>, body: &Value| {
        let mut request = client.post(&discard).json(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let refused = post(None, &body).await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let refused: Value = refused.json().await.unwrap();
    assert!(
        refused["error"].as_str().unwrap().contains("Bearer"),
        "{refused}"
    );
    let wrong = post(Some("guess"), &body).await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let dry: Value = json_reply(post(Some(TOKEN), &body)).await;
    assert_eq!(
        (
            dry["selected"].as_array().map(Vec::len),
            dry["changed"].as_u64()
        ),
        (Some(1), Some(0))
    );
    assert_eq!(
        get_json(&letters).await.1.as_array().map(Vec::len),
        Some(1),
        "dry run"
    );
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let (status, one) = get_json(&format!("{letters}/{id}")).await;
    assert_eq!((status, &one["id"]), (StatusCode::OK, &listed[0]["id"]));
    let body = serde_json::json!({ "all": true });
    let done: Value = json_reply(post(Some(TOKEN), &body)).await;
    assert_eq!(done["changed"], 1);
    assert_eq!(get_json(&letters).await.1, serde_json::json!([]));
    let (status, gone) = get_json(&format!("{letters}/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{gone}");

    // Streams, entries, publish and prune.
    let (_, streams) = get_json(&format!("{base}/streams")).await;
    assert_eq!(streams[0]["stream"], "admin-jobs");
    let published: Value = json_reply(
        client
            .post(format!("{base}/streams/admin-other/publish"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({ "payload": "hello", "headers": { "k": "v" } }))
            .send(),
    )
    .await;
    let (_, entries) = get_json(&format!("{base}/streams/admin-other/entries")).await;
    assert_eq!(entries[0]["id"], published["id"]);
    assert_eq!(entries[0]["payload"], "hello");
    assert_eq!(entries[0]["headers"]["k"], "v");
    let pruned: Value = json_reply(
        client
            .post(format!("{base}/groups/admin-jobs/g/consumers/prune"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({ "idle_ms": 3_600_000, "dry_run": true }))
            .send(),
    )
    .await;
    assert_eq!(pruned["deleted"], serde_json::json!([]), "{pruned}");
    app.shutdown().await;
}

#[tokio::test]
async fn writes_are_off_without_a_token_and_bad_requests_get_json_errors() {
    let (_broker, app, base) = start("admin-errors", None).await;
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{base}/groups/admin-jobs/g/redrive"))
        .bearer_auth("anything")
        .json(&serde_json::json!({ "all": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("configure a token"),
        "{error}"
    );

    for (url, status, says) in [
        (
            "/groups/admin-jobs/g/pending?count=0",
            StatusCode::BAD_REQUEST,
            "count=0",
        ),
        (
            "/groups/admin-jobs/g/pending?from=yesterday",
            StatusCode::BAD_REQUEST,
            "not an entry id",
        ),
        (
            "/groups/admin-jobs/g/pending?count=many",
            StatusCode::BAD_REQUEST,
            "count",
        ),
        ("/groups/admin-jobs/nope", StatusCode::NOT_FOUND, "nope"),
        (
            "/streams/nothing-here",
            StatusCode::NOT_FOUND,
            "nothing-here",
        ),
        (
            "/groups/admin-jobs/g/pending?broker=7",
            StatusCode::BAD_REQUEST,
            "broker=7",
        ),
        ("/no/such/route", StatusCode::NOT_FOUND, "no route"),
    ] {
        let (got, body) = get_json(&format!("{base}{url}")).await;
        assert_eq!(got, status, "{url}: {body}");
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{url}: {message}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_taken_port_stops_the_start_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = RustStream::new(AppInfo::new("admin-port", "0"))
        .admin(addr)
        .with_broker(MemoryBroker::new(), |b| {
            b.include(jobs);
        })
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("admin endpoint") && err.contains(&addr.to_string()),
        "{err}"
    );
}

/// A file log that could not make a write durable stops taking writes:
/// the app is neither live nor ready, and both say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_stopped_file_log_is_neither_live_nor_ready() {
    let dir = std::env::temp_dir().join(format!("ruststream-admin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let broker = FileLogBroker::open(&dir).unwrap();
    let app =
        RustStream::new(AppInfo::new("admin-filelog", "0")).with_broker(broker.clone(), |b| {
            b.include(jobs);
        });
    let (app, base) = serve(app, None).await;
    until_ready(&base).await;
    fail_stop(&broker, "admin-jobs").await;
    for (check, why) in [("live", "problems"), ("ready", "reasons")] {
        let (status, body) = get_json(&format!("{base}/health/{check}")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{check}");
        assert!(
            body[why][0]
                .as_str()
                .unwrap()
                .starts_with("filelog broker:"),
            "{body}"
        );
    }
    app.shutdown_within(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without the token, every write route answers 401, whatever its body: the
/// token is looked at before the body is read.
#[tokio::test]
async fn a_write_without_the_token_is_refused_before_its_body_is_read() {
    let (_broker, app, base) = start("admin-token-first", Some(TOKEN)).await;
    let client = reqwest::Client::new();
    for route in ["redrive", "discard", "consumers/prune"] {
        let status = client
            .post(format!("{base}/groups/admin-jobs/g/{route}"))
            .header("content-type", "application/json")
            .body("{\"not\": \"a selection\"}")
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{route}");
    }
    app.shutdown().await;
}

#[subscriber(RedisStream::new("admin-two").group("g"))]
async fn on_first(_job: &Job) {}

#[subscriber(RedisStream::new("admin-two").group("h"))]
async fn on_second(_job: &Job) {}

/// An app that reads one stream as group `g` on one broker and as group
/// `h` on another: a group's routes go to the broker that reads that group.
#[tokio::test]
async fn a_group_route_goes_to_the_broker_that_reads_the_group() {
    let (first, second) = (MemoryBroker::new(), MemoryBroker::new());
    let app = on_two_brokers("admin-two", (first, on_first), (second, on_second));
    let (app, base) = serve(app, None).await;
    for group in ["g", "h"] {
        let (status, body) = get(&format!("{base}/groups/admin-two/{group}")).await;
        assert_eq!(status, StatusCode::OK, "group {group}: {body}");
    }
    app.shutdown().await;
}

#[subscriber(RedisStream::new("admin-elsewhere").group("g"))]
async fn elsewhere(_job: &Job) {}

/// A group route for a group no subscription reads (another service's,
/// on a file log this one holds) goes to the broker a subscription reads
/// that stream from, not to the app's first broker.
#[tokio::test]
async fn a_route_for_a_group_not_read_here_goes_to_the_broker_of_its_stream() {
    let (first, second) = (MemoryBroker::new(), MemoryBroker::new());
    second
        .ensure_group("admin-two", "audit", StreamStart::Beginning)
        .await
        .unwrap();
    let app = on_two_brokers("admin-audit", (first, elsewhere), (second, on_second));
    let (app, base) = serve(app, None).await;
    let (status, body) = get(&format!("{base}/groups/admin-two/audit")).await;
    app.shutdown().await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A dry run checks its selection against the group as the write does:
/// by `ids` or by `all`, an unknown group is 404 (a typo does not pass the
/// dry run), and on a known group ids that are not dead letters are
/// listed as skipped, not selected.
#[tokio::test]
async fn a_dry_run_by_ids_on_an_unknown_group_is_not_found() {
    let (_broker, app, base) = start("admin-dry-ids", Some(TOKEN)).await;
    let client = reqwest::Client::new();
    let mut got = Vec::new();
    for (group, selection) in [
        ("typo", serde_json::json!({ "all": true, "dry_run": true })),
        (
            "typo",
            serde_json::json!({ "ids": ["1-0"], "dry_run": true }),
        ),
        ("g", serde_json::json!({ "ids": ["1-0"], "dry_run": true })),
    ] {
        let response = client
            .post(format!("{base}/groups/admin-jobs/{group}/redrive"))
            .bearer_auth(TOKEN)
            .json(&selection)
            .send()
            .await
            .unwrap();
        let status = response.status();
        got.push((status, response.text().await.unwrap()));
    }
    app.shutdown().await;
    assert_eq!(got[0].0, StatusCode::NOT_FOUND, "{got:?}");
    assert_eq!(got[1].0, StatusCode::NOT_FOUND, "{got:?}");
    assert_eq!(got[2].0, StatusCode::OK, "{got:?}");
    let known: Value = serde_json::from_str(&got[2].1).unwrap();
    assert_eq!(
        (&known["selected"], &known["skipped"]),
        (&serde_json::json!([]), &serde_json::json!(["1-0"])),
        "{known}"
    );
}

/// The auth scheme is case-insensitive (RFC 9110, 11.1): `bearer` is
/// `Bearer`.
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let (_broker, app, base) = start("admin-bearer-case", Some(TOKEN)).await;
    let status = dry_run_redrive_all(&base, &format!("bearer {TOKEN}")).await;
    app.shutdown().await;
    assert_eq!(status, StatusCode::OK);
}

/// A route asked with a method it does not take answers 405 with a JSON
/// error, as every other error does.
#[tokio::test]
async fn a_wrong_method_gets_a_json_error() {
    let (_broker, app, base) = start("admin-wrong-method", None).await;
    let response = reqwest::Client::new()
        .post(format!("{base}/health/live"))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    app.shutdown().await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert!(
        json["error"].as_str().is_some_and(|e| e.contains("POST")),
        "{body}"
    );
}

/// The token works whichever builder call comes first: `admin_token`
/// before `admin(addr)` turns the write routes on just the same.
#[tokio::test]
async fn a_token_set_before_the_address_turns_the_write_routes_on() {
    let app = RustStream::new(AppInfo::new("admin-token-first", "0"))
        .with_broker(MemoryBroker::new(), |b| {
            b.include(jobs);
        })
        .admin_token(TOKEN)
        .admin(([127, 0, 0, 1], 0).into());
    let running = app.start().await.unwrap();
    let base = format!("http://{}", running.admin_addr().unwrap());
    let status = dry_run_redrive_all(&base, &format!("Bearer {TOKEN}")).await;
    running.shutdown().await;
    assert_eq!(status, StatusCode::OK);
}

/// Liveness checks every broker of the app: a file log the app only
/// publishes to (no subscriber reads it) that has stopped taking writes
/// makes `/health/live` answer 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_stopped_file_log_the_app_only_publishes_to_is_not_live() {
    let dir = std::env::temp_dir().join(format!("ruststream-admin-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = FileLogBroker::open(&dir).unwrap();
    let app = RustStream::new(AppInfo::new("admin-out", "0"))
        .with_broker(MemoryBroker::new(), |b| {
            b.include(jobs);
        })
        .with_broker(out.clone(), |_| {});
    let (app, base) = serve(app, None).await;
    until_ready(&base).await;
    fail_stop(&out, "admin-out").await;
    let (status, body) = get(&format!("{base}/health/live")).await;
    app.shutdown_within(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}

/// Every error is JSON, `{"error": "..."}`, path rejections included: a
/// stream name that is not UTF-8 once percent-decoded is a 400 in JSON,
/// not axum's plain text.
#[tokio::test]
async fn a_name_that_is_not_utf8_gets_a_json_error() {
    let (_broker, app, base) = start("admin-not-utf8", None).await;
    let (status, body) = get(&format!("{base}/streams/%FF")).await;
    app.shutdown().await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let json: Result<Value, _> = serde_json::from_str(&body);
    assert!(json.is_ok_and(|j| j["error"].is_string()), "{body}");
}
