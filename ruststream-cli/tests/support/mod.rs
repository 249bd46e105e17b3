//! What the tests of the `ruststream` binary share: running it, a
//! temporary directory, a subscriber whose dead letters can be redriven,
//! bounded polls, and reading numbers out of its JSON.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::{
    Broker, Context, HandlerOutcome, ReadBatch, ReadMode, ReadRequest, Settle, Stream, StreamStart,
    Subscriber, SubscriberInfo, Subscription,
};
use serde_json::Value;

/// What a run of the binary gave.
#[derive(Debug)]
pub struct Out {
    /// The exit code.
    pub code: i32,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl Out {
    /// Stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }

    /// Panics unless it exited 0.
    pub fn ok(self) -> Self {
        assert_eq!(self.code, 0, "failed: {self:#?}");
        self
    }

    /// Panics unless it failed with `code` and one line `error: ...`
    /// containing every one of `says`.
    pub fn fails(self, code: i32, says: &[&str]) -> Self {
        assert_eq!(self.code, code, "{self:#?}");
        let err = self.stderr.trim_end();
        assert!(err.starts_with("error: "), "{self:#?}");
        assert_eq!(err.lines().count(), 1, "not one line: {self:#?}");
        for s in says {
            assert!(err.contains(s), "{s:?} not in {err:?}");
        }
        assert!(self.stdout.is_empty(), "{self:#?}");
        self
    }
}

/// Runs `ruststream TARGET.. --format json COMMAND..`, which must succeed,
/// and parses what it prints.
pub async fn json_of(target: &[&str], command: &[&str]) -> Value {
    let mut args = vec!["--format", "json"];
    args.extend_from_slice(command);
    cli_of(target, &args).await.ok().json()
}

/// Runs `ruststream TARGET.. COMMAND..`, which must succeed; what it
/// printed.
pub async fn stdout_of(target: &[&str], command: &[&str]) -> String {
    cli_of(target, command).await.ok().stdout
}

/// Runs `ruststream TARGET.. COMMAND..`.
pub async fn cli_of(target: &[&str], command: &[&str]) -> Out {
    cli(&[target, command].concat()).await
}

/// Runs `ruststream TARGET.. COMMAND..`, the command given as one line
/// of words (split at spaces).
pub async fn cli_in(target: &[&str], command: &str) -> Out {
    let words: Vec<&str> = command.split_whitespace().collect();
    cli_of(target, &words).await
}

/// [`json_of`] with the command as one line of words (split at spaces).
pub async fn json_in(target: &[&str], command: &str) -> Value {
    let words: Vec<&str> = command.split_whitespace().collect();
    json_of(target, &words).await
}

/// A run of the binary in the background ([`cli_in_background`]).
pub struct Background(tokio::task::JoinHandle<Out>);

/// Starts `ruststream TARGET.. COMMAND..` in the background, the command
/// given as one line of words (split at spaces).
pub fn cli_in_background(target: &[&str], command: &str) -> Background {
    let words = target.iter().copied().chain(command.split_whitespace());
    let args: Vec<String> = words.map(str::to_owned).collect();
    Background(tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args).await
    }))
}

impl Background {
    /// Waits up to 20 s for the run to end; it must have succeeded.
    pub async fn ok(self) -> Out {
        let ended = tokio::time::timeout(Duration::from_secs(20), self.0).await;
        ended.unwrap().unwrap().ok()
    }
}

/// Runs the binary with `args`, stdin empty (not a terminal), and no
/// target or token from the environment.
pub async fn cli(args: &[&str]) -> Out {
    cli_with(args, &[], None).await
}

/// Runs the binary with `args`, the environment `env` added, and `stdin`.
pub async fn cli_with(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Out {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let stdin = stdin.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ruststream"));
        command
            .args(&args)
            .env_remove("RUSTSTREAM_URL")
            .env_remove("RUSTSTREAM_ADMIN_TOKEN")
            .envs(env)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    })
    .await
    .unwrap()
}

/// Reads up to `count` new entries of `stream` as `consumer` of `group`.
pub async fn read_new(
    broker: &impl Broker,
    (stream, group, consumer): (&str, &str, &str),
    count: usize,
) -> ReadBatch {
    let request = ReadRequest::new(stream, group, consumer, ReadMode::New, count);
    broker.read(request).await.unwrap()
}

/// The names of the consumers of `group` on `stream`.
pub async fn consumer_names(broker: &impl Broker, stream: &str, group: &str) -> Vec<String> {
    let consumers = broker.consumers(stream, group).await.unwrap();
    consumers.into_iter().map(|c| c.name).collect()
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory name (not created) for `what`.
    pub fn new(what: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "ruststream-cli-{what}-{}-{nanos}",
            std::process::id()
        ));
        TempDir(dir)
    }

    /// The path as text, for the command line.
    pub fn arg(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Opens the file log in `dir`, publishes `payload` to `stream`, makes it
/// durable and closes the log: a log a service wrote and let go of.
pub async fn log_with_one_entry(dir: &TempDir, stream: &str, payload: &str) {
    let b = ruststream::FileLogBroker::open(&dir.0).unwrap();
    b.publish(stream, ruststream::Message::new(payload.to_owned()))
        .await
        .unwrap();
    b.sync().await.unwrap();
}

/// Polls `cond` every 20 ms for up to 20 s.
pub async fn until<F: Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    for _ in 0..1_000 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// What a [`Gate`] saw.
#[derive(Default)]
pub struct GateState {
    /// While false, payloads starting with `poison` are dead-lettered.
    pub open: AtomicBool,
    /// Payloads acked, in order.
    pub acked: Mutex<Vec<String>>,
}

impl GateState {
    /// The payloads acked so far.
    pub fn acked(&self) -> Vec<String> {
        self.acked.lock().unwrap().clone()
    }
}

/// A subscriber that dead-letters `poison…` payloads until its gate is
/// opened, and acks everything else (and, once open, those too).
pub struct Gate {
    info: SubscriberInfo,
    subscription: Subscription,
    /// What it saw.
    pub state: Arc<GateState>,
}

/// The reason a [`Gate`] gives.
pub const GATE_REASON: &str = "poisoned: the gate is closed";

impl Gate {
    /// A gate on `stream`, group `group`, from the beginning.
    pub fn new(stream: &str, group: &str) -> (Self, Arc<GateState>) {
        let state = Arc::new(GateState::default());
        let info = SubscriberInfo {
            name: "gate",
            module: module_path!(),
            file: file!(),
            line: line!(),
        };
        let gate = Gate {
            info,
            subscription: Subscription::new(
                Stream::new(stream)
                    .group(group)
                    .start_id(StreamStart::Beginning),
            ),
            state: Arc::clone(&state),
        };
        (gate, state)
    }
}

impl Subscriber for Gate {
    fn info(&self) -> SubscriberInfo {
        self.info
    }

    fn subscription(&self) -> Subscription {
        self.subscription.clone()
    }

    fn handle<'a>(&'a self, ctx: &'a mut Context<'_>) -> impl Future<Output = Settle> + Send + 'a {
        let payload = String::from_utf8_lossy(ctx.payload()).into_owned();
        let state = Arc::clone(&self.state);
        async move {
            if payload.starts_with("poison") && !state.open.load(Ordering::SeqCst) {
                return Settle::Outcome(HandlerOutcome::dead_letter(GATE_REASON));
            }
            state.acked.lock().unwrap().push(payload);
            Settle::Outcome(HandlerOutcome::ack())
        }
    }
}

/// The numbers `json` holds under each of `fields`, in order (`None` for
/// one that is missing or not a whole number).
pub fn numbers(json: &serde_json::Value, fields: &[&str]) -> Vec<Option<u64>> {
    fields.iter().map(|f| json[*f].as_u64()).collect()
}
