//! `describe STREAM [GROUP]`: a stream's summary, and a group's state with
//! its consumers, flagging those idle past a threshold while they hold
//! entries.

use serde::Serialize;

use ruststream::EntryId;

use crate::cli::Describe;
use crate::error::CliResult;
use crate::model::{GroupSummary, StreamSummary};
use crate::output::{self, Format, Table, age, fields};
use crate::target::{Access, Page, Target};

/// What `describe --format json` prints.
#[derive(Debug, Serialize)]
struct Described {
    stream: StreamSummary,
    /// `null` without GROUP.
    group: Option<GroupView>,
}

/// A group as `describe` shows it: the admin endpoint's group, plus the
/// oldest pending age and the idle flag of each consumer.
#[derive(Debug, Serialize)]
struct GroupView {
    stream: String,
    group: String,
    last_delivered: String,
    lag: u64,
    pending: u64,
    /// Idle time of the first entry of the pending list; `null` when it
    /// is empty.
    oldest_pending_ms: Option<u64>,
    dead_letters: u64,
    consumers: u64,
    idle_threshold_ms: u64,
    consumer_list: Vec<ConsumerView>,
}

#[derive(Debug, Serialize)]
struct ConsumerView {
    name: String,
    pending: u64,
    idle_ms: u64,
    /// Idle longer than the threshold while holding entries.
    idle_over_threshold: bool,
}

/// Describes the stream, and the group when given.
pub(super) async fn run(target: &Target, format: Format, args: Describe) -> CliResult<()> {
    let conn = target.connect(Access::Read)?;
    let stream = conn.stream(&args.stream).await?;
    let threshold_ms = u64::try_from(args.idle_threshold.as_millis()).unwrap_or(u64::MAX);
    let group = match &args.group {
        None => None,
        Some(group) => {
            let summary = conn.group(&args.stream, group).await?;
            let oldest = conn
                .pending(
                    &args.stream,
                    group,
                    Page {
                        from: EntryId::ZERO,
                        count: 1,
                    },
                    None,
                )
                .await?
                .first()
                .map(|p| p.idle_ms);
            Some(view(summary, oldest, threshold_ms))
        }
    };
    let described = Described { stream, group };
    match format {
        Format::Json => output::emit_json(&described),
        Format::Table => output::emit(&table(&described, &args)),
    }
}

fn view(g: GroupSummary, oldest_pending_ms: Option<u64>, threshold_ms: u64) -> GroupView {
    GroupView {
        stream: g.stream,
        group: g.group,
        last_delivered: g.last_delivered,
        lag: g.lag,
        pending: g.pending,
        oldest_pending_ms,
        dead_letters: g.dead_letters,
        consumers: g.consumers,
        idle_threshold_ms: threshold_ms,
        consumer_list: g
            .consumer_list
            .into_iter()
            .map(|c| ConsumerView {
                idle_over_threshold: c.pending > 0 && c.idle_ms > threshold_ms,
                name: c.name,
                pending: c.pending,
                idle_ms: c.idle_ms,
            })
            .collect(),
    }
}

fn table(d: &Described, args: &Describe) -> String {
    let s = &d.stream;
    let mut out = fields(&[
        ("stream", s.stream.clone()),
        ("length", s.length.to_string()),
        (
            "first id",
            s.first_id.clone().unwrap_or_else(|| "-".to_owned()),
        ),
        ("last id", s.last_id.clone()),
        (
            "groups",
            if s.groups.is_empty() {
                "-".to_owned()
            } else {
                s.groups.join(", ")
            },
        ),
    ]);
    let Some(g) = &d.group else {
        return out;
    };
    out.push('\n');
    out.push_str(&fields(&[
        ("group", g.group.clone()),
        ("last delivered", g.last_delivered.clone()),
        ("lag", g.lag.to_string()),
        ("pending", g.pending.to_string()),
        (
            "oldest pending",
            g.oldest_pending_ms.map_or_else(|| "-".to_owned(), age),
        ),
        ("dead letters", g.dead_letters.to_string()),
        ("consumers", g.consumers.to_string()),
    ]));
    if g.consumer_list.is_empty() {
        return out;
    }
    out.push('\n');
    let mut consumers = Table::new(&["CONSUMER", "PENDING", "IDLE", ""]);
    let threshold = humantime::format_duration(args.idle_threshold);
    for c in &g.consumer_list {
        consumers.row(vec![
            c.name.clone(),
            c.pending.to_string(),
            age(c.idle_ms),
            if c.idle_over_threshold {
                format!("! idle over {threshold} while holding entries")
            } else {
                String::new()
            },
        ]);
    }
    out.push_str(&consumers.render());
    out
}
