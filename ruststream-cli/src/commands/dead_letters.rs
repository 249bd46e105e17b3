//! `dead-letters [list] STREAM GROUP` and `dead-letters show STREAM GROUP
//! ID`.

use ruststream::EntryId;
use serde::Serialize;

use crate::cli::{DeadLetterShow, DeadLettersList};
use crate::error::{CliError, CliResult};
use crate::model::DeadLetterRow;
use crate::output::{self, Format, age, cut, escaped, fields, preview, timestamp, whole};
use crate::target::{Access, Conn, Page, Target};

/// Dead letters asked for per call while paging.
const PAGE: usize = 1_000;

/// Characters of payload a listing shows.
const PREVIEW: usize = 60;

/// Characters of a reason a listing shows (`show` prints it whole).
const REASON: usize = 100;

/// A dead letter as the tool prints it: the admin endpoint's, plus the
/// original id.
#[derive(Debug, Serialize)]
struct Letter<'a> {
    #[serde(flatten)]
    letter: &'a DeadLetterRow,
    /// The header `ruststream-original-id` when the entry carries it (a
    /// dead retry copy on Redis), else `id`.
    original_id: String,
}

impl<'a> Letter<'a> {
    fn of(letter: &'a DeadLetterRow) -> Self {
        Letter {
            original_id: letter.original_id(),
            letter,
        }
    }
}

/// Every dead letter of a group from the start, page by page, while
/// `keep` wants more.
pub(super) async fn each_dead_letter(
    conn: &Conn,
    stream: &str,
    group: &str,
    mut keep: impl FnMut(DeadLetterRow) -> bool,
) -> CliResult<()> {
    let mut from = EntryId::ZERO;
    loop {
        let page = conn
            .dead_letters(stream, group, Page { from, count: PAGE })
            .await?;
        let Some(last) = page.last().map(|d| d.id) else {
            return Ok(());
        };
        let full = page.len() == PAGE;
        for letter in page {
            if !keep(letter) {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
        from = last.next();
    }
}

/// Lists dead letters.
pub(super) async fn list(target: &Target, format: Format, args: DeadLettersList) -> CliResult<()> {
    let (Some(stream), Some(group)) = (args.stream, args.group) else {
        return Err(CliError::Usage(
            "dead-letters needs STREAM and GROUP".to_owned(),
        ));
    };
    let conn = target.connect(Access::Read)?;
    let mut found = Vec::new();
    each_dead_letter(&conn, &stream, &group, |letter| {
        found.push(letter);
        found.len() < args.limit
    })
    .await?;
    let now_ms = now_ms();
    match format {
        Format::Json => output::emit_json(&found.iter().map(Letter::of).collect::<Vec<_>>()),
        Format::Table => {
            let header = [
                "ID",
                "ORIGINAL ID",
                "REASON",
                "DELIVERIES",
                "AGE",
                "PAYLOAD",
            ];
            output::emit_table(&found, "no dead letters", &header, |d| {
                vec![
                    d.id.to_string(),
                    d.original_id(),
                    cut(&d.reason, REASON),
                    d.times_delivered.to_string(),
                    age(now_ms.saturating_sub(d.dead_at_ms)),
                    preview(&d.entry.payload, PREVIEW),
                ]
            })
        }
    }
}

/// Shows one dead letter whole.
pub(super) async fn show(target: &Target, format: Format, args: DeadLetterShow) -> CliResult<()> {
    let conn = target.connect(Access::Read)?;
    let letter = conn.dead_letter(&args.stream, &args.group, args.id).await?;
    match format {
        Format::Json => output::emit_json(&Letter::of(&letter)),
        Format::Table => {
            let mut out = fields(&[
                ("id", letter.id.to_string()),
                ("original id", letter.original_id()),
                ("reason", escaped(&letter.reason)),
                ("deliveries", letter.times_delivered.to_string()),
                ("dead since", timestamp(letter.dead_at_ms)),
            ]);
            out.push_str("headers\n");
            if letter.entry.headers.is_empty() {
                out.push_str("  (none)\n");
            }
            for (name, value) in &letter.entry.headers {
                out.push_str(&format!("  {}: {}\n", escaped(name), escaped(value)));
            }
            out.push_str("payload\n");
            out.push_str(&whole(&letter.entry.payload));
            out.push('\n');
            output::emit(&out)
        }
    }
}

/// Wall-clock milliseconds now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
