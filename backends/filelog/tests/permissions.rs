//! The file log's directory and files are readable by their owner only
//! (payment data must not be readable by every user on the machine), and
//! opening a directory others can get into logs a warning.

#![cfg(unix)]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{TempDir, open_with_jobs_group, publish_bytes};
use ruststream_filelog::FileLogBroker;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn the_directory_and_every_file_in_it_are_private() {
    let dir = TempDir::new();
    let b = open_with_jobs_group(&dir.0).await;
    publish_bytes(&b, "jobs", b"card 4111").await;
    // A snapshot and a fresh journal.
    b.compact().unwrap();
    publish_bytes(&b, "jobs", b"card 5500").await;

    let mut dirs = vec![dir.0.clone()];
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for item in fs::read_dir(&d).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                dirs.push(path.clone());
            } else {
                files.push(path.clone());
            }
            let want = if path.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode(&path), want, "{}", path.display());
        }
    }
    assert_eq!(mode(&dir.0), 0o700);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for kind in ["LOCK", ".seg", "snapshot-", "journal-"] {
        assert!(
            names.iter().any(|n| n.contains(kind)),
            "a {kind} file was checked: {names:?}"
        );
    }
}

/// Collects every event as `LEVEL field=value ...`.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = event.metadata().level().to_string();
        event.record(&mut Fields(&mut text));
        self.0.lock().unwrap().push(text);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Opens `dir` and returns the warnings logged meanwhile.
fn warnings_on_open(dir: &Path) -> Vec<String> {
    let capture = Capture::default();
    let broker =
        tracing::subscriber::with_default(capture.clone(), || FileLogBroker::open(dir).unwrap());
    drop(broker);
    let events = capture.0.lock().unwrap();
    events
        .iter()
        .filter(|e| e.starts_with("WARN"))
        .cloned()
        .collect()
}

#[test]
fn opening_a_directory_others_can_enter_logs_a_warning() {
    let dir = TempDir::new();
    fs::create_dir_all(&dir.0).unwrap();
    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o755)).unwrap();
    let warnings = warnings_on_open(&dir.0);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&dir.0.display().to_string()) && w.contains("755")),
        "{warnings:?}"
    );
    // Left as it is: changing an operator's permissions is theirs to do.
    assert_eq!(mode(&dir.0), 0o755);

    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o700)).unwrap();
    let warnings = warnings_on_open(&dir.0);
    assert!(warnings.is_empty(), "{warnings:?}");
}
