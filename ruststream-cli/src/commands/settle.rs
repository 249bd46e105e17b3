//! `redrive` and `discard`: select dead letters (by id, all, or by
//! reason), confirm, change them, and say how many changed.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};

use ruststream::EntryId;

use super::dead_letters::each_dead_letter;
use crate::cli::Selection;
use crate::error::{CliError, CliResult};
use crate::model::WriteResult;
use crate::output::{self, Format};
use crate::target::{Access, Conn, Target};

/// Ids per broker call.
const CHUNK: usize = 1_000;

/// Which change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// Make the dead letters owed again.
    Redrive,
    /// Drop them.
    Discard,
}

impl Change {
    fn verb(self) -> &'static str {
        match self {
            Change::Redrive => "redrive",
            Change::Discard => "discard",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Change::Redrive => "redriven",
            Change::Discard => "discarded",
        }
    }
}

/// Runs a redrive or discard.
pub(super) async fn run(
    target: &Target,
    format: Format,
    args: Selection,
    change: Change,
) -> CliResult<()> {
    let access = if args.dry_run {
        Access::Read
    } else {
        Access::Write
    };
    let conn = target.connect(access)?;
    let Selected { ids, skipped } = select(&conn, &args).await?;
    let selected: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let skipped: Vec<String> = skipped.iter().map(ToString::to_string).collect();
    if args.dry_run || ids.is_empty() {
        return report(
            format,
            change,
            &WriteResult {
                dry_run: args.dry_run,
                selected,
                changed: 0,
                skipped,
            },
        );
    }
    if ids.len() > 1 && !args.yes {
        confirm(change, ids.len(), &args)?;
    }
    let changed = conn
        .finishing(apply(&conn, &args, change, &ids).await)
        .await?;
    report(
        format,
        change,
        &WriteResult {
            dry_run: false,
            selected,
            changed,
            skipped,
        },
    )
}

/// Redrives or discards `ids`, [`CHUNK`] at a time; how many changed. A
/// part failing after others changed is an error that says how many did.
async fn apply(conn: &Conn, args: &Selection, change: Change, ids: &[EntryId]) -> CliResult<u64> {
    let mut changed = 0;
    for (sent, chunk) in ids.chunks(CHUNK).enumerate() {
        let done = match change {
            Change::Redrive => conn.redrive(&args.stream, &args.group, chunk).await,
            Change::Discard => conn.discard(&args.stream, &args.group, chunk).await,
        };
        match done {
            Ok(n) => changed += n,
            Err(error) if sent == 0 => return Err(error),
            // Running the command again is safe: an id already changed is
            // no longer a dead letter, and is skipped.
            Err(error) => {
                return Err(error.after(&format!(
                    "{changed} dead letters {} of the first {} of {} selected, then: ",
                    change.done(),
                    sent * CHUNK,
                    ids.len()
                )));
            }
        }
    }
    Ok(changed)
}

/// What a selection holds: the dead letters to change, and the ids named
/// on the command line that are not dead letters of the group.
struct Selected {
    /// The dead letters, in id order.
    ids: Vec<EntryId>,
    /// The named ids that are not dead letters (already changed by an
    /// earlier run, or never one), in id order; left alone.
    skipped: Vec<EntryId>,
}

/// The dead letters the selection names. Ids named on the command line are
/// each checked to be a dead letter of the group; those that are not are
/// skipped (so that running a command again after it failed part-way
/// changes the rest). The group must exist.
async fn select(conn: &Conn, args: &Selection) -> CliResult<Selected> {
    let (stream, group) = (&args.stream, &args.group);
    let mut ids = Vec::new();
    let mut skipped = Vec::new();
    if !args.ids.is_empty() {
        // An unknown stream or group is an error, not a skip of every id.
        conn.group(stream, group).await?;
        let named: BTreeSet<EntryId> = args.ids.iter().copied().collect();
        for id in named {
            match conn.dead_letter(stream, group, id).await {
                Ok(_) => ids.push(id),
                Err(CliError::NotFound(_)) => skipped.push(id),
                Err(error) => return Err(error),
            }
        }
        return Ok(Selected { ids, skipped });
    }
    let contains = args.reason_contains.as_deref();
    each_dead_letter(conn, stream, group, |letter| {
        if contains.is_none_or(|text| letter.reason.contains(text)) {
            ids.push(letter.id);
        }
        true
    })
    .await?;
    Ok(Selected { ids, skipped })
}

/// Asks on the terminal; refuses when stdin is not one.
fn confirm(change: Change, count: usize, args: &Selection) -> CliResult<()> {
    let what = format!(
        "{} {count} dead letters of group {:?} on stream {:?}",
        change.verb(),
        args.group,
        args.stream
    );
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::Refused(format!(
            "refusing to {what} without confirmation: stdin is not a terminal; \
             pass --yes (or --dry-run to see them)"
        )));
    }
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{}? [y/N] ", capitalized(&what));
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::Runtime(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::Refused(format!(
            "not confirmed: nothing {}",
            change.done()
        ))),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn report(format: Format, change: Change, result: &WriteResult) -> CliResult<()> {
    match format {
        Format::Json => output::emit_json(result),
        Format::Table => {
            let selected = result.selected.len();
            let mut text = if result.dry_run {
                let mut text = format!(
                    "dry run: would {} {selected} dead letter(s); nothing changed\n",
                    change.verb()
                );
                for id in &result.selected {
                    text.push_str(&format!("  {id}\n"));
                }
                text
            } else if selected == 0 {
                format!("no dead letters selected: 0 {}\n", change.done())
            } else {
                format!(
                    "{} {} of {selected} selected dead letter(s)\n",
                    change.done(),
                    result.changed
                )
            };
            if !result.skipped.is_empty() {
                text.push_str(&format!(
                    "skipped {} id(s) that are not dead letters of the group \
                     (already changed, or never one):\n",
                    result.skipped.len()
                ));
                for id in &result.skipped {
                    text.push_str(&format!("  {id}\n"));
                }
            }
            output::emit(&text)
        }
    }
}
