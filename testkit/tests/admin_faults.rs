//! The admin endpoint's redrive of more dead letters than one broker call
//! takes (1,000), when the broker fails part-way: the reply says how many
//! were redriven before the failure, and sending the request again
//! redrives the rest. A real HTTP client against a running app; the broker
//! is a memory broker behind a [`FaultyBroker`] with a scripted failure.
//!
//! Real sockets need tokio's real clock: nothing here waits for time.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use ruststream::prelude::*;
use ruststream_core::{EntryId, Message, ReadMode, ReadRequest};
use ruststream_testkit::{CallKind, Fault, FaultyBroker, serve_admin};
use serde_json::Value;

const STREAM: &str = "admin-faults";
const GROUP: &str = "dead";
const TOKEN: &str = "s3cret";
const DEAD: u64 = 2_500;

#[subscriber(RedisStream::new("admin-faults-other").group("g"))]
async fn other(_payload: &[u8]) {}

/// `DEAD` entries published, read by group `dead` and dead-lettered.
async fn dead_letters(broker: &dyn Broker) {
    broker
        .ensure_group(STREAM, GROUP, StreamStart::Beginning)
        .await
        .unwrap();
    for n in 0..DEAD {
        broker
            .publish(STREAM, Message::new(n.to_string().into_bytes()))
            .await
            .unwrap();
    }
    let mut ids: Vec<EntryId> = Vec::new();
    loop {
        let batch = broker
            .read(ReadRequest::new(STREAM, GROUP, "c", ReadMode::New, 1_000))
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        ids.extend(batch.deliveries.iter().map(|d| d.id()));
    }
    assert_eq!(ids.len() as u64, DEAD);
    let dead = broker
        .dead_letter(STREAM, GROUP, &ids, "failed")
        .await
        .unwrap();
    assert_eq!(dead, DEAD);
}

async fn redrive_all(base: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/groups/{STREAM}/{GROUP}/redrive"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "all": true }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn a_redrive_that_fails_part_way_says_what_it_did_and_can_be_sent_again() {
    let faulty = Arc::new(FaultyBroker::new(Arc::new(MemoryBroker::new()), 1));
    dead_letters(&*faulty).await;
    // The second page of the redrive fails before it reaches the broker.
    faulty.script(CallKind::Redrive, 2, Fault::Before);
    let app = RustStream::new(AppInfo::new("admin-faults", "0")).with_shared_broker(
        faulty.clone(),
        |b| {
            b.include(other);
        },
    );
    let (app, base) = serve_admin(app, Some(TOKEN)).await.unwrap();

    let (status, body) = redrive_all(&base).await;
    assert_eq!(status, 503, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.starts_with(
            "1000 dead letters redriven of the first 1000 of 2500 selected, then the redrive of the rest failed"
        ),
        "{message}"
    );
    let info = faulty.group_info(STREAM, GROUP).await.unwrap();
    assert_eq!(info.dead_letters, DEAD - 1_000, "{info:?}");

    // Again: the first thousand are no longer dead letters, the rest are
    // redriven.
    let (status, body) = redrive_all(&base).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], DEAD - 1_000, "{body}");
    let info = faulty.group_info(STREAM, GROUP).await.unwrap();
    assert_eq!(info.dead_letters, 0, "{info:?}");
    app.shutdown().await;
}
