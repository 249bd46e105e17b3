//! Shared by the crash tests (`crash_filelog.rs`, `crash_redis.rs`): a
//! child process publishes and consumes and is killed with SIGKILL, over
//! and over; this module runs the children, reads what they printed, checks
//! the broker after each kill and, at the end, reports duplicates per kill.
//!
//! The children print one line per event (a line cut by the kill is
//! ignored):
//!
//! - `SUBSCRIPTION <group> <read-ahead>` at start, one per subscription;
//! - `STARTED` once its app has started (its groups exist from then on:
//!   a child killed before has maybe made none);
//! - `PUBLISHED <id> <payload>` once a publish has returned;
//! - `HANDLED <id>` when a handler of group `workers` ran on an entry,
//!   `AUDITED <id>` for group `audit`.
//!
//! Each child's life is numbered (0, 1, ...); kill `k` ends life `k`, and
//! the last life (a draining child) is not killed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::ops::Bound;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ruststream::{Broker, EntryId};

use super::assert_none;

/// The stream the children use.
pub const STREAM: &str = "jobs";

/// A small deterministic generator for kill timings. The seed is
/// `RUSTSTREAM_CRASH_SEED` if set (to replay a failure), else the pid, so
/// runs differ; the tests print it.
pub struct Lcg(u64);

impl Lcg {
    pub fn seeded() -> (Lcg, u64) {
        let seed = std::env::var("RUSTSTREAM_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| u64::from(std::process::id()));
        (Lcg(seed), seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Kills (SIGKILL) and reaps a child when dropped, a failing test
/// included.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` with its stdout collected on a thread.
fn spawn(command: &mut Command) -> (ChildGuard, std::thread::JoinHandle<String>) {
    let mut child = ChildGuard(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}")),
    );
    let mut stdout = child.0.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    (child, reader)
}

/// Runs `command` for `life`, kills it with SIGKILL, and returns what it
/// printed.
pub async fn run_and_kill(command: &mut Command, life: Duration) -> String {
    let (mut child, reader) = spawn(command);
    tokio::time::sleep(life).await;
    child.0.kill().expect("SIGKILL the child");
    child.0.wait().expect("reap the child");
    reader.join().expect("the stdout reader")
}

/// Runs `command` until it exits (killing it past `limit`) and returns its
/// status and what it printed.
pub async fn run_to_exit(command: &mut Command, limit: Duration) -> (ExitStatus, String) {
    let (mut child, reader) = spawn(command);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("poll the child") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{command:?} did not exit within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(child);
    (status, reader.join().expect("the stdout reader"))
}

/// What the children reported about one group.
pub struct Group {
    pub name: &'static str,
    /// The line tag of its handlers (`HANDLED`, `AUDITED`).
    tag: &'static str,
    /// The read-ahead bound of each of the group's subscriptions.
    read_ahead: Vec<usize>,
    /// For each entry handled, the life of each handling, in order.
    pub handled: HashMap<EntryId, Vec<usize>>,
    /// The group's cursor at the last check.
    checked: EntryId,
    /// Entries at or before `checked` that were pending and never handled
    /// at the last check.
    recheck: BTreeSet<EntryId>,
}

impl Group {
    fn new(name: &'static str, tag: &'static str) -> Self {
        Group {
            name,
            tag,
            read_ahead: Vec::new(),
            handled: HashMap::new(),
            checked: EntryId::ZERO,
            recheck: BTreeSet::new(),
        }
    }

    /// Records a handling of `id` in `life`.
    pub fn handle(&mut self, id: EntryId, life: usize) {
        self.handled.entry(id).or_default().push(life);
    }
}

/// Everything the children reported.
pub struct Seen {
    /// Every publish acknowledged to a child, with its payload.
    pub published: BTreeMap<EntryId, String>,
    /// `workers` (`HANDLED`), `audit` (`AUDITED`).
    pub groups: Vec<Group>,
    /// The last publish a check found in the stream.
    published_checked: Option<EntryId>,
    /// Whether a child's app has started (`STARTED`): its groups exist.
    started: bool,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            published: BTreeMap::new(),
            groups: vec![
                Group::new("workers", "HANDLED"),
                Group::new("audit", "AUDITED"),
            ],
            published_checked: None,
            started: false,
        }
    }
}

impl Seen {
    pub fn group_mut(&mut self, name: &str) -> &mut Group {
        self.groups
            .iter_mut()
            .find(|g| g.name == name)
            .unwrap_or_else(|| panic!("no group {name:?}"))
    }

    /// Takes in what the child of `life` printed.
    pub fn take(&mut self, stdout: &str, life: usize) {
        // A line cut by the kill has no newline: ignore it.
        let complete = match stdout.rfind('\n') {
            Some(end) => &stdout[..=end],
            None => "",
        };
        let mut subscriptions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for line in complete.lines() {
            let mut words = line.split(' ');
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("STARTED"), None, None, None) => self.started = true,
                (Some("SUBSCRIPTION"), Some(group), Some(read_ahead), None) => {
                    subscriptions
                        .entry(group.to_owned())
                        .or_default()
                        .push(read_ahead.parse().expect("a read-ahead count"));
                }
                (Some("PUBLISHED"), Some(id), Some(payload), None) => {
                    self.published
                        .insert(parse_id(id, line), payload.to_owned());
                }
                (Some(tag), Some(id), None, None) => {
                    let group = self
                        .groups
                        .iter_mut()
                        .find(|g| g.tag == tag)
                        .unwrap_or_else(|| panic!("unexpected line from the child: {line:?}"));
                    group.handle(parse_id(id, line), life);
                }
                _ => panic!("unexpected line from the child: {line:?}"),
            }
        }
        // Every child runs the same subscriptions (a child killed before it
        // printed them says nothing here).
        for group in &mut self.groups {
            if let Some(mut read_ahead) = subscriptions.remove(group.name) {
                read_ahead.sort_unstable();
                if group.read_ahead.is_empty() {
                    group.read_ahead = read_ahead;
                } else {
                    assert_eq!(
                        group.read_ahead, read_ahead,
                        "life {life}: group {}: other subscriptions than before",
                        group.name
                    );
                }
            }
        }
        assert!(
            subscriptions.is_empty(),
            "life {life}: subscriptions of unknown groups: {subscriptions:?}"
        );
    }

    /// Checks the broker a killed child left: every publish acknowledged
    /// to a child is in `STREAM` with its payload (0 lost), and neither
    /// group skipped anything: every entry at or before a group's cursor
    /// was handled or is still pending or dead-lettered (0 skipped).
    /// Returns (entries, pending).
    ///
    /// Incremental, so that a round costs what it added rather than the
    /// whole stream: publishes are looked up once (the stream is never
    /// trimmed and the server never restarted in these tests, and
    /// [`Seen::check_all`] looks at all of them again at the end), and a
    /// group's entries from its cursor at the previous check on, plus those
    /// that were pending and not yet handled then (whose state may have
    /// changed since).
    pub async fn check(&mut self, broker: &dyn Broker, round: usize) -> (u64, u64) {
        self.check_from(broker, round, false).await
    }

    /// [`Seen::check`] after kill `round`, which ended a life of `life`;
    /// prints what the broker holds.
    pub async fn check_kill(&mut self, broker: &dyn Broker, round: usize, life: Duration) {
        let (entries, pending) = self.check(broker, round).await;
        println!("round {round:2}: killed after {life:?}; {entries} entries, {pending} pending");
    }

    /// Asserts that `who` (the child, or the children) published enough
    /// for the test to mean something: more than a thousand entries.
    pub fn assert_published_enough(&self, who: &str) {
        assert!(
            self.published.len() > 1000,
            "{who} published too little to test: {}",
            self.published.len()
        );
    }

    /// [`Seen::check`] over the whole stream.
    pub async fn check_all(&mut self, broker: &dyn Broker, round: usize) -> (u64, u64) {
        self.check_from(broker, round, true).await
    }

    async fn check_from(&mut self, broker: &dyn Broker, round: usize, all: bool) -> (u64, u64) {
        let range = async |from: EntryId, to: EntryId| {
            broker
                .range(STREAM, from, to, usize::MAX)
                .await
                .unwrap_or_else(|e| panic!("round {round}: range: {e}"))
        };
        let length = broker
            .stream_info(STREAM)
            .await
            .unwrap_or_else(|e| panic!("round {round}: stream_info: {e}"))
            .map_or(0, |info| info.length);

        let unchecked: Vec<(EntryId, &String)> = match self.published_checked {
            Some(last) if !all => self
                .published
                .range((Bound::Excluded(last), Bound::Unbounded))
                .map(|(id, payload)| (*id, payload))
                .collect(),
            _ => self.published.iter().map(|(id, p)| (*id, p)).collect(),
        };
        if let Some((first, _)) = unchecked.first() {
            let entries = range(*first, EntryId::MAX).await;
            let stored: HashMap<EntryId, &[u8]> =
                entries.iter().map(|e| (e.id, e.payload())).collect();
            let lost: Vec<_> = unchecked
                .iter()
                .filter(|(id, payload)| stored.get(id).copied() != Some(payload.as_bytes()))
                .collect();
            assert_none(
                &lost,
                3,
                format!("round {round}"),
                "acknowledged publishes lost",
            );
        }
        self.published_checked = self.published.keys().next_back().copied();

        let mut held = 0;
        for group in &mut self.groups {
            let name = group.name;
            let failed = |what: &str, e: ruststream::BrokerError| -> ! {
                panic!("round {round}: group {name}: {what}: {e}")
            };
            let info = match broker.group_info(STREAM, name).await {
                Ok(info) => info,
                // Every child so far was killed before its app started:
                // no group made yet, nothing delivered to check.
                Err(ruststream::BrokerError::NoGroup { .. }) if !self.started => continue,
                Err(e) => failed("group_info", e),
            };
            let pending: BTreeSet<EntryId> = broker
                .pending(STREAM, name, EntryId::ZERO, usize::MAX, None)
                .await
                .unwrap_or_else(|e| failed("pending", e))
                .iter()
                .map(|p| p.id)
                .collect();
            let dead: BTreeSet<EntryId> = broker
                .dead_letters(STREAM, name, EntryId::ZERO, usize::MAX)
                .await
                .unwrap_or_else(|e| failed("dead_letters", e))
                .iter()
                .map(|d| d.id())
                .collect();
            let from = if all { EntryId::ZERO } else { group.checked };
            let mut candidates: BTreeSet<EntryId> = if all {
                BTreeSet::new()
            } else {
                std::mem::take(&mut group.recheck)
            };
            if from <= info.last_delivered {
                candidates.extend(range(from, info.last_delivered).await.iter().map(|e| e.id));
            }
            let skipped: Vec<EntryId> = candidates
                .iter()
                .copied()
                .filter(|id| {
                    !pending.contains(id) && !dead.contains(id) && !group.handled.contains_key(id)
                })
                .collect();
            assert_none(
                &skipped,
                3,
                format!("round {round}: group {name}"),
                "entries skipped",
            );
            // Pending and never handled: looked at again next time.
            group.recheck = candidates
                .into_iter()
                .filter(|id| !dead.contains(id) && !group.handled.contains_key(id))
                .collect();
            group.checked = info.last_delivered;
            held += info.pending;
        }
        (length, held)
    }

    /// Asserts that every published entry was handled by every group.
    pub fn assert_all_handled(&self) {
        for group in &self.groups {
            let never: Vec<_> = self
                .published
                .keys()
                .filter(|id| !group.handled.contains_key(id))
                .collect();
            assert_none(
                &never,
                3,
                format!("group {}", group.name),
                "published entries never handled",
            );
        }
    }

    /// Prints the entries handled more than once, per kill and group, and
    /// asserts that no kill caused more duplicates in a group than its
    /// subscriptions' read-ahead plus one settle batch each.
    ///
    /// A handling of an entry after its first is charged to the kill that
    /// ended the life of the handling before it: that kill cut the entry
    /// off between handler and ack (whichever later life handles it again,
    /// after the restarted child's recovery or a reclaim). A second
    /// handling in the same life was not caused by a kill (a reclaim took
    /// an entry its own process held too long): those are counted apart.
    pub fn report_duplicates(&self, seed: u64, kills: usize) {
        let mut over = Vec::new();
        for group in &self.groups {
            let mut per_kill = vec![0usize; kills];
            let mut same_life = 0usize;
            for lives in group.handled.values() {
                for pair in lives.windows(2) {
                    let (before, again) = (pair[0], pair[1]);
                    if before == again {
                        same_life += 1;
                    } else {
                        // `before` ended with kill `before`.
                        per_kill[before] += 1;
                    }
                }
            }
            let total: usize = per_kill.iter().sum();
            let max = per_kill.iter().copied().max().unwrap_or(0);
            let mean = total as f64 / kills.max(1) as f64;
            let read_ahead: usize = group.read_ahead.iter().sum();
            // The runtime counts an entry against the read-ahead until the
            // broker confirms its settle, so a kill can cut off at most
            // the read-ahead of each of the group's subscriptions.
            let bound = read_ahead;
            println!(
                "seed {seed}: group {}: {total} duplicates over {kills} kills: max {max}, \
                 mean {mean:.1} per kill (bound {bound} = the read-ahead of its {} \
                 subscriptions); {same_life} more handled twice in one life; per kill: \
                 {per_kill:?}",
                group.name,
                group.read_ahead.len(),
            );
            assert!(
                !group.read_ahead.is_empty(),
                "group {}: no child reported its subscriptions",
                group.name
            );
            for (kill, n) in per_kill.iter().enumerate() {
                if *n > bound {
                    over.push(format!(
                        "group {}: kill {kill}: {n} duplicates > {bound}",
                        group.name
                    ));
                }
            }
        }
        assert!(
            over.is_empty(),
            "seed {seed}: kills caused more duplicates than the read-ahead: {over:?}"
        );
    }
}

fn parse_id(id: &str, line: &str) -> EntryId {
    id.parse()
        .unwrap_or_else(|_| panic!("a bad entry id in {line:?}"))
}
