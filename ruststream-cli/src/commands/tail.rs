//! `tail STREAM`: entries as they arrive, read with `range` (or the admin
//! endpoint's `entries` route), never through a group. A file log is
//! opened again for each look (read-only when a service holds it), so the
//! tool holds no lock between looks and sees what the holder synced.

use ruststream::EntryId;

use crate::cli::Tail;
use crate::error::{CliError, CliResult};
use crate::model::EntryRow;
use crate::output::{self, Format, header_token, preview};
use crate::target::{Access, Conn, Page, Target};

/// Entries asked for per look.
const PAGE: usize = 1_000;

/// Follows the stream.
pub(super) async fn run(target: &Target, format: Format, args: Tail) -> CliResult<()> {
    let reopen = matches!(target, Target::FileLog(_));
    let mut conn = Some(target.connect(Access::Read)?);
    let mut cursor = match args.from {
        Some(from) => {
            // An unknown stream is an error, as for the other commands.
            open(&mut conn, target)?.stream(&args.stream).await?;
            from
        }
        None => {
            let last = open(&mut conn, target)?.stream(&args.stream).await?.last_id;
            last.parse::<EntryId>()
                .map_err(|e| CliError::Runtime(format!("the target sent a bad last id: {e}")))?
                .next()
        }
    };
    let mut printed = 0;
    loop {
        let want = args.count.map_or(PAGE, |n| (n - printed).min(PAGE));
        let batch = open(&mut conn, target)?
            .entries(
                &args.stream,
                Page {
                    from: cursor,
                    count: want,
                },
            )
            .await?;
        if reopen {
            conn = None;
        }
        for entry in &batch {
            print(format, entry)?;
        }
        printed += batch.len();
        if let Some(last) = batch.last() {
            cursor = last.id.next();
        }
        if args.count.is_some_and(|n| printed >= n) {
            return Ok(());
        }
        if batch.len() < want {
            if args.no_follow {
                return Ok(());
            }
            tokio::time::sleep(args.interval).await;
        }
    }
}

/// The open connection, opening it again when it was dropped.
fn open<'a>(conn: &'a mut Option<Conn>, target: &Target) -> CliResult<&'a Conn> {
    if conn.is_none() {
        *conn = Some(target.connect(Access::Read)?);
    }
    conn.as_ref()
        .ok_or_else(|| CliError::Runtime("the target could not be opened".to_owned()))
}

fn print(format: Format, entry: &EntryRow) -> CliResult<()> {
    match format {
        Format::Json => output::emit_json_line(entry),
        Format::Table => {
            let mut line = entry.id.to_string();
            if !entry.headers.is_empty() {
                let headers: Vec<String> = entry
                    .headers
                    .iter()
                    .map(|(k, v)| format!("{}={}", header_token(k), header_token(v)))
                    .collect();
                line.push_str(&format!("  [{}]", headers.join(" ")));
            }
            line.push_str("  ");
            line.push_str(&preview(&entry.payload, usize::MAX));
            line.push('\n');
            output::emit(&line)
        }
    }
}
