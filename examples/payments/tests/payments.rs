//! The payments service on the testkit: a memory broker and a paused clock.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use payments::{MIN_IDLE, Migrations, Payment, Screened, service};
use ruststream::{Broker, MemoryBroker, Message, ReadMode, ReadRequest, Settlement, StreamStart};
use ruststream_testkit::TestApp;

fn payment(id: u64, account: &str, amount_cents: u64) -> Payment {
    Payment {
        id,
        account: account.to_owned(),
        amount_cents,
    }
}

fn app() -> ruststream::RustStream {
    // The broker given here is replaced by the testkit's memory broker.
    service(Arc::new(MemoryBroker::new()))
}

/// The guide's scenario: a payment for a migrating account is retried, the
/// clock moves by MIN_IDLE, the ledger receives it a second time with
/// DELIVERY_COUNT_HEADER = 1, and the stream holds no copy.
#[tokio::test]
async fn a_locked_payment_comes_back_after_min_idle_without_a_copy() {
    let tb = TestApp::start(app()).await.unwrap();
    let p = payment(1, "migrating-seed", 25_00);
    tb.publish(&p).partition_key(&p.account).await.unwrap();
    tb.run_until_quiet().await;

    let first = tb.received("post_payment");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].delivery_count, 0);
    assert_eq!(first[0].settlement, Settlement::Retried { reason: None });
    assert_eq!(tb.pending("payments", "ledger").await.len(), 1);

    tb.advance(MIN_IDLE).await;
    let ledger = tb.received("post_payment");
    assert_eq!(ledger.len(), 2, "received a second time after MIN_IDLE");
    assert_eq!(ledger[1].payload::<Payment>(), p);
    assert_eq!(ledger[1].id, ledger[0].id, "the same entry, not a copy");
    assert_eq!(ledger[1].delivery_count, 1);
    assert_eq!(
        tb.stream_len("payments").await,
        1,
        "the stream holds no copy"
    );

    Migrations::global().finish("migrating-seed");
    tb.advance(MIN_IDLE).await;
    let ledger = tb.received("post_payment");
    assert_eq!(ledger.len(), 3);
    assert_eq!(ledger[2].settlement, Settlement::Acked);
    assert!(tb.pending("payments", "ledger").await.is_empty());
    tb.shutdown().await;
}

/// Each redelivery of a locked payment counts the ones before it (the value
/// the handler reads from DELIVERY_COUNT_HEADER).
#[tokio::test]
async fn the_delivery_count_header_counts_earlier_deliveries() {
    let tb = TestApp::start(app()).await.unwrap();
    tb.publish(&payment(2, "migrating-header", 1_00))
        .await
        .unwrap();
    tb.run_until_quiet().await;
    tb.advance(MIN_IDLE).await;
    tb.advance(MIN_IDLE).await;
    let counts: Vec<u32> = tb
        .received("post_payment")
        .iter()
        .map(|r| r.delivery_count)
        .collect();
    assert_eq!(counts, [0, 1, 2]);
    tb.shutdown().await;
}

/// workers(8, by_key): each account's payments are posted in the order
/// they were published.
#[tokio::test]
async fn each_accounts_payments_are_posted_in_order() {
    let tb = TestApp::start(app()).await.unwrap();
    let accounts = ["acct-a", "acct-b", "acct-c", "acct-d", "acct-e"];
    for id in 0..100u64 {
        let account = accounts[(id as usize * 3 + id as usize / 4) % accounts.len()];
        let p = payment(id, account, 100 + id);
        tb.publish(&p).partition_key(&p.account).await.unwrap();
    }
    tb.run_until_quiet().await;
    let posted = tb.received_as::<Payment>("post_payment");
    assert_eq!(posted.len(), 100);
    for account in accounts {
        let ids: Vec<u64> = posted
            .iter()
            .filter(|p| p.account == account)
            .map(|p| p.id)
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{account} posted out of order: {ids:?}"
        );
    }
    tb.shutdown().await;
}

/// The fraud group starts at the beginning, so it screens payments
/// published before it existed; the ledger (new entries only) does not
/// post them.
#[tokio::test]
async fn the_fraud_group_screens_payments_published_before_it_existed() {
    let broker = MemoryBroker::new();
    let publisher = ruststream::Publisher::new(Arc::new(broker.clone()));
    publisher
        .publish(&payment(10, "acct-old", 5_00))
        .await
        .unwrap();
    publisher
        .publish(&payment(11, "acct-old", 200_000_000))
        .await
        .unwrap();

    let tb = TestApp::start_on(app(), broker).await.unwrap();
    let screened = tb.received_as::<Payment>("screen_payment");
    assert_eq!(screened.iter().map(|p| p.id).collect::<Vec<_>>(), [10, 11]);
    let verdicts = tb.published_as::<Screened>("payments.screened").await;
    assert_eq!(
        verdicts,
        [
            Screened {
                payment_id: 10,
                suspicious: false
            },
            Screened {
                payment_id: 11,
                suspicious: true
            },
        ]
    );
    assert!(
        tb.received("post_payment").is_empty(),
        "the ledger starts at New"
    );
    assert!(
        tb.pending("payments", "fraud").await.is_empty(),
        "replies acked"
    );
    tb.shutdown().await;
}

/// A ledger worker that crashed holding payments: another consumer takes
/// them over once they have been idle MIN_IDLE, counting the earlier
/// delivery.
#[tokio::test]
async fn a_crashed_workers_payments_are_recovered_after_min_idle() {
    let broker = MemoryBroker::new();
    broker
        .ensure_group("payments", "ledger", StreamStart::New)
        .await
        .unwrap();
    let publisher = ruststream::Publisher::new(Arc::new(broker.clone()));
    for id in 20..23 {
        publisher
            .publish(&payment(id, "acct-crash", 7_00))
            .await
            .unwrap();
    }
    // The worker that crashed: it read three payments and never acked.
    let read = ReadRequest::new("payments", "ledger", "crashed-worker", ReadMode::New, 10);
    assert_eq!(broker.read(read).await.unwrap().deliveries.len(), 3);

    let tb = TestApp::start_on(app(), broker).await.unwrap();
    assert!(
        tb.received("post_payment").is_empty(),
        "their claim still stands"
    );
    tb.advance(MIN_IDLE).await;
    let recovered = tb.received("post_payment");
    assert_eq!(
        recovered
            .iter()
            .map(|r| r.payload::<Payment>().id)
            .collect::<Vec<_>>(),
        [20, 21, 22]
    );
    assert!(recovered.iter().all(|r| r.delivery_count == 1));
    assert!(recovered.iter().all(|r| r.consumer != "crashed-worker"));
    assert!(tb.pending("payments", "ledger").await.is_empty());
    tb.shutdown().await;
}

/// A payload that is not a payment is dead-lettered at once by both groups,
/// blocks nothing behind it, and can be redriven.
#[tokio::test]
async fn a_poison_payload_is_dead_lettered_and_can_be_redriven() {
    let tb = TestApp::start(app()).await.unwrap();
    let poison = tb
        .publish_raw(
            "payments",
            Message::new(br#"{"id":"not a number"}"#.to_vec()),
        )
        .await
        .unwrap();
    tb.publish(&payment(30, "acct-fine", 1_00)).await.unwrap();
    tb.run_until_quiet().await;

    let posted: Vec<_> = tb
        .received("post_payment")
        .into_iter()
        .filter(|r| r.settlement == Settlement::Acked)
        .collect();
    assert_eq!(posted.len(), 1, "the good one is posted");
    assert_eq!(posted[0].payload::<Payment>().id, 30);
    let dead = tb.dead_letters("payments", "ledger").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id(), poison);
    assert!(
        dead[0].reason.contains("cannot decode"),
        "{}",
        dead[0].reason
    );
    assert_eq!(tb.dead_letters("payments", "fraud").await.len(), 1);

    let redriven = tb
        .broker()
        .redrive("payments", "ledger", &[poison])
        .await
        .unwrap();
    assert_eq!(redriven, 1);
    tb.run_until_quiet().await;
    let again: Vec<_> = tb
        .received("post_payment")
        .into_iter()
        .filter(|r| r.id == poison)
        .collect();
    assert_eq!(again.len(), 2, "handed out again after the redrive");
    assert_eq!(again[1].delivery_count, 0, "with its attempts reset");
    assert!(matches!(
        again[1].settlement,
        Settlement::DeadLettered { .. }
    ));
    assert_eq!(tb.dead_letters("payments", "ledger").await.len(), 1);
    tb.shutdown().await;
}

/// An entry with no payload (on Redis: written by another client without a
/// `payload` field) is dead-lettered saying so, not with serde's "EOF while
/// parsing a value".
#[tokio::test]
async fn an_entry_without_a_payload_is_dead_lettered_saying_so() {
    let tb = TestApp::start(app()).await.unwrap();
    let mut message = Message::new(Vec::new());
    message.headers.insert("tenant", "acme");
    let empty = tb.publish_raw("payments", message).await.unwrap();
    tb.run_until_quiet().await;

    for group in ["ledger", "fraud"] {
        let dead = tb.dead_letters("payments", group).await;
        assert_eq!(dead.len(), 1, "{group}");
        assert_eq!(dead[0].id(), empty);
        let reason = &dead[0].reason;
        assert!(
            reason.contains("the entry has no `payload` field"),
            "{group}: {reason}"
        );
        assert!(reason.contains("payments::Payment"), "{group}: {reason}");
        assert!(!reason.contains("EOF"), "{group}: {reason}");
    }
    tb.shutdown().await;
}

/// The demo refuses a broker that holds its streams already, saying why,
/// before publishing anything (it would otherwise count the old entries and
/// report that it "did not settle" after ten simulated minutes).
#[tokio::test(start_paused = true)]
async fn the_demo_refuses_a_broker_an_earlier_run_left_data_in() {
    let broker = MemoryBroker::new();
    ruststream::Publisher::new(Arc::new(broker.clone()))
        .publish(&payment(1, "acct-old", 1_00))
        .await
        .unwrap();
    let error = payments::demo::run(Arc::new(broker.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, payments::demo::DemoError::Leftover(_)),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains("earlier run"), "{message}");
    assert!(message.contains(r#"stream "payments" exists"#), "{message}");
    assert!(!message.contains("did not settle"), "{message}");
    assert_eq!(
        broker
            .stream_info("payments")
            .await
            .unwrap()
            .unwrap()
            .length,
        1,
        "nothing published"
    );
}

/// `payments demo --data DIR` run twice on one directory: the second run
/// says the directory holds an earlier run's data and what to do, and
/// exits with an error at once.
#[test]
fn the_demo_binary_refuses_a_data_directory_an_earlier_run_left() {
    let dir = std::env::temp_dir().join(format!(
        "ruststream-payments-test-leftover-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let demo = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_payments"))
            .args(["demo", "--data"])
            .arg(&dir)
            .output()
            .unwrap()
    };
    let first = demo();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = demo();
    let stderr = String::from_utf8_lossy(&second.stderr);
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(!second.status.success(), "{stdout}");
    assert!(stderr.contains("data from an earlier run"), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is a data directory", dir.display())),
        "{stderr}"
    );
    assert!(!stderr.contains("did not settle"), "{stderr}");
    assert!(!stdout.contains("publishing"), "published again: {stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The demo publishes its samples and finishes once everything is settled.
#[tokio::test(start_paused = true)]
async fn the_demo_settles_every_payment() {
    let summary = payments::demo::run(Arc::new(MemoryBroker::new()))
        .await
        .unwrap();
    let n = payments::demo::sample_payments().len() as u64;
    assert_eq!(summary.posted, n);
    assert_eq!(summary.screened, n);
    assert_eq!(summary.suspicious, 1);
    assert!(summary.retried >= 1);
    assert!(summary.took >= payments::demo::MIGRATION_DONE_AFTER);
}

/// The demo on the durable file log, as `cargo run -p payments -- demo`
/// runs it.
#[tokio::test(start_paused = true)]
async fn the_demo_settles_every_payment_on_the_file_log() {
    let dir = std::env::temp_dir().join(format!("ruststream-payments-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let broker = ruststream::FileLogBroker::open(&dir).unwrap();
    let summary = payments::demo::run(Arc::new(broker)).await.unwrap();
    let n = payments::demo::sample_payments().len() as u64;
    assert_eq!((summary.posted, summary.screened), (n, n));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The service on a real Redis server (`RUSTSTREAM_REDIS_URL`, set by
/// `.ci/run`), in its own database: the broker says which ledger it can
/// serve (`claiming` needs Redis 8.4; older servers get `new` + `reclaim`),
/// and a payment is posted and screened. Real time: Redis keeps the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_redis() {
    let base =
        std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let url = format!("{}/12", base.trim_end_matches('/'));
    let broker: Arc<dyn ruststream::Broker> =
        Arc::new(ruststream::RedisBroker::standalone(url.clone()));
    // Start from an empty database: drop what an earlier run left.
    for stream in ["payments", "payments.screened"] {
        if broker.stream_info(stream).await.unwrap().is_some() {
            broker
                .trim(stream, ruststream::Trim::MaxLen(0))
                .await
                .unwrap();
        }
    }
    let running = payments::service_for(Arc::clone(&broker))
        .await
        .start()
        .await
        .unwrap();
    let publisher = ruststream::Publisher::new(Arc::clone(&broker));
    let p = payment(40, "acct-redis", 2_00);
    let id = publisher
        .publish(&p)
        .partition_key(&p.account)
        .await
        .unwrap();
    let mut screened = Vec::new();
    for _ in 0..100 {
        let replies = broker
            .range(
                "payments.screened",
                ruststream::EntryId::ZERO,
                ruststream::EntryId::MAX,
                100,
            )
            .await
            .unwrap();
        screened = replies
            .iter()
            .filter_map(|e| serde_json::from_slice::<Screened>(e.payload()).ok())
            .filter(|s| s.payment_id == 40)
            .collect();
        let ledger = broker
            .pending("payments", "ledger", id, 1, None)
            .await
            .unwrap();
        if !screened.is_empty() && ledger.first().is_none_or(|e| e.id != id) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        screened,
        [Screened {
            payment_id: 40,
            suspicious: false
        }],
        "on {url}"
    );
    let ledger = broker.group_info("payments", "ledger").await.unwrap();
    assert_eq!(ledger.pending, 0, "the ledger posted it");
    running.shutdown().await;
}

/// `payments --memory --admin HOST:PORT` serves the admin endpoint: ready
/// once its subscriptions read, with both subscribers listed.
#[tokio::test]
async fn the_service_binary_serves_the_admin_endpoint() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_payments"))
        .args(["--memory", "--admin"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut ready = false;
    for _ in 0..500 {
        if let Ok(response) = reqwest::get(format!("{base}/health/ready")).await
            && response.status() == 200
        {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let subscribers: serde_json::Value = match ready {
        true => reqwest::get(format!("{base}/subscribers"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
        false => serde_json::Value::Null,
    };
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "never ready");
    let names: Vec<&str> = subscribers
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subscriber"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["post_payment", "screen_payment"]);
    assert!(
        metrics.contains(r#"ruststream_received_total{app="payments""#),
        "{metrics}"
    );
}
