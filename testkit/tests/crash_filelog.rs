//! Crash test of the file log: a child process publishes and consumes, and
//! is killed with SIGKILL at random moments, over and over. After each kill
//! a checker opens the log and verifies that every publish acknowledged to
//! the producer is there (0 lost) and that neither group skipped anything:
//! every entry at or before a group's cursor was handled or is still
//! pending or dead-lettered (0 skipped). At the end a last child drains
//! both groups and exits: every published entry was then handled by both,
//! the `new` group `audit` included, which gets back what a killed child
//! held only through the restarted child's recovery of its own pending
//! list. Entries handled more than once (allowed: delivery is at least
//! once) are counted and reported.
//!
//! This test kills real processes, so it runs in real time (about ten
//! seconds); every other test of time uses the paused clock.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use ruststream::{Broker, EntryId, FileLogBroker, ReadMode, ReadRequest};

const KILLS: usize = 24;

/// A small deterministic generator for kill timings (seeded from the pid, so
/// runs differ but a failure's seed is printed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[derive(Default)]
struct Seen {
    published: BTreeMap<EntryId, String>,
    handled: HashMap<EntryId, u32>,
    audited: HashMap<EntryId, u32>,
}

impl Seen {
    fn take(&mut self, stdout: &str) {
        // A line cut by the kill has no newline: ignore it.
        let complete = match stdout.rfind('\n') {
            Some(end) => &stdout[..=end],
            None => "",
        };
        for line in complete.lines() {
            let mut words = line.split(' ');
            match (words.next(), words.next(), words.next()) {
                (Some("PUBLISHED"), Some(id), Some(payload)) => {
                    self.published
                        .insert(id.parse().unwrap(), payload.to_owned());
                }
                (Some("HANDLED"), Some(id), None) => {
                    *self.handled.entry(id.parse().unwrap()).or_default() += 1;
                }
                (Some("AUDITED"), Some(id), None) => {
                    *self.audited.entry(id.parse().unwrap()).or_default() += 1;
                }
                _ => panic!("unexpected line from the child: {line:?}"),
            }
        }
    }
}

/// Opens the log the child left and checks it. Returns (entries, pending).
async fn check(dir: &std::path::Path, seen: &Seen, round: usize) -> (usize, u64) {
    let broker =
        FileLogBroker::open(dir).unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
    let entries = broker
        .range("jobs", EntryId::ZERO, EntryId::MAX, usize::MAX)
        .await
        .unwrap();
    let stored: HashMap<EntryId, &[u8]> = entries.iter().map(|e| (e.id, e.payload())).collect();
    let lost: Vec<_> = seen
        .published
        .iter()
        .filter(|(id, payload)| stored.get(id).copied() != Some(payload.as_bytes()))
        .collect();
    assert!(
        lost.is_empty(),
        "round {round}: {} acknowledged publishes lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(3)]
    );

    let mut held = 0;
    for (group, handled) in [("workers", &seen.handled), ("audit", &seen.audited)] {
        let info = broker.group_info("jobs", group).await.unwrap();
        let pending: BTreeSet<EntryId> = broker
            .pending("jobs", group, EntryId::ZERO, usize::MAX, None)
            .await
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect();
        let dead: BTreeSet<EntryId> = broker
            .dead_letters("jobs", group, EntryId::ZERO, usize::MAX)
            .await
            .unwrap()
            .iter()
            .map(|d| d.id())
            .collect();
        let skipped: Vec<EntryId> = entries
            .iter()
            .map(|e| e.id)
            .filter(|id| *id <= info.last_delivered)
            .filter(|id| !pending.contains(id) && !dead.contains(id) && !handled.contains_key(id))
            .collect();
        assert!(
            skipped.is_empty(),
            "round {round}: group {group}: {} entries skipped, e.g. {:?}",
            skipped.len(),
            &skipped[..skipped.len().min(3)]
        );
        held += info.pending;
    }
    (entries.len(), held)
}

/// Runs a child with `--drain`: it handles what is left and exits once
/// both groups are empty.
fn drain_with_child(dir: &std::path::Path, seen: &mut Seen) {
    let out = Command::new(env!("CARGO_BIN_EXE_filelog-crash-child"))
        .arg(dir)
        .arg("--drain")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the draining child failed: {}",
        out.status
    );
    seen.take(&String::from_utf8(out.stdout).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_and_skips_nothing() {
    let dir = std::env::temp_dir().join(format!("ruststream-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let seed = u64::from(std::process::id());
    let mut rng = Lcg(seed);
    let mut seen = Seen::default();
    for round in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_filelog-crash-child"))
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let life = Duration::from_millis(80 + rng.below(400));
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        tokio::time::sleep(life).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        seen.take(&reader.join().unwrap());
        let (entries, pending) = check(&dir, &seen, round).await;
        println!("round {round:2}: killed after {life:?}; {entries} entries, {pending} pending");
    }
    assert!(
        seen.published.len() > 1000,
        "the child published too little to test: {}",
        seen.published.len()
    );

    // A last child drains both groups: what killed children held comes
    // back to it by claiming (`workers`) and by its own pending list
    // (`audit`, where nothing else would hand it out again).
    drain_with_child(&dir, &mut seen);
    let never_audited: Vec<_> = seen
        .published
        .keys()
        .filter(|id| !seen.audited.contains_key(id))
        .collect();
    assert!(
        never_audited.is_empty(),
        "{} published entries never handled by the `new` group, e.g. {:?}",
        never_audited.len(),
        &never_audited[..never_audited.len().min(3)]
    );

    // Whatever `workers` still has (nothing, after the drain) is claimed
    // here; then every published entry was handled.
    let broker = FileLogBroker::open(&dir).unwrap();
    loop {
        let mode = ReadMode::Claiming {
            min_idle: Duration::ZERO,
        };
        let batch = broker
            .read(ReadRequest::new("jobs", "workers", "drain", mode, 1000))
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        let ids: Vec<EntryId> = batch.deliveries.iter().map(|d| d.id()).collect();
        for id in &ids {
            *seen.handled.entry(*id).or_default() += 1;
        }
        broker.ack("jobs", "workers", &ids).await.unwrap();
    }
    let never: Vec<_> = seen
        .published
        .keys()
        .filter(|id| !seen.handled.contains_key(id))
        .collect();
    assert!(
        never.is_empty(),
        "{} published entries never handled, e.g. {:?}",
        never.len(),
        &never[..never.len().min(3)]
    );
    let duplicates = seen.handled.values().filter(|n| **n > 1).count();
    let audited_twice = seen.audited.values().filter(|n| **n > 1).count();
    println!(
        "seed {seed}: {KILLS} kills, {} acknowledged publishes, 0 lost, 0 skipped, \
         {duplicates} handled more than once by `workers`, {audited_twice} by `audit`",
        seen.published.len()
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
