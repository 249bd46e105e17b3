//! `RustStream::instance`: generated consumer names carry the instance's
//! name, so processes of one service reading one group keep their pending
//! lists apart.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use ruststream::prelude::*;

#[derive(Debug, Deserialize)]
struct Job {}

#[subscriber(RedisStream::new("inst").group("g"))]
async fn generated(_job: &Job) {}

#[subscriber(RedisStream::new("inst").group("h").consumer("fixed"))]
async fn named(_job: &Job) {}

/// Starts service "svc" as `instance` on a fresh memory broker with the
/// subscribers `include` adds.
async fn start_as(
    instance: &str,
    include: impl FnOnce(&mut ruststream::BrokerScope<'_>),
) -> Result<ruststream::Running, ruststream::StartError> {
    RustStream::new(AppInfo::new("svc", "0"))
        .instance(instance)
        .with_broker(MemoryBroker::new(), include)
        .start()
        .await
}

#[tokio::test(start_paused = true)]
async fn an_instance_name_qualifies_generated_consumer_names_only() {
    let app = start_as("host-a", |b| {
        b.include(generated);
        b.include(named);
    })
    .await
    .unwrap();
    let names: Vec<String> = app.consumers().map(|(_, c)| c.to_owned()).collect();
    let n = names[0]
        .strip_prefix("host-a-ruststream-")
        .expect("qualified");
    assert!(n.parse::<usize>().is_ok(), "{names:?}");
    assert_eq!(names[1], "fixed");
    app.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_bad_instance_name_stops_the_start_with_the_rule() {
    let err = start_as("host\na", |b| {
        b.include(generated);
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("instance name") && err.contains("control character"),
        "{err}"
    );
}
