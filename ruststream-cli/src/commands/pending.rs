//! `pending STREAM GROUP`: the pending list, filtered by consumer and
//! idle time.

use ruststream::EntryId;

use crate::cli::Pending;
use crate::error::CliResult;
use crate::model::PendingRow;
use crate::output::{self, Format, age};
use crate::target::{Access, Page, Target};

/// Entries asked for per call while paging.
const PAGE: usize = 1_000;

/// Lists the pending entries.
pub(super) async fn run(target: &Target, format: Format, args: Pending) -> CliResult<()> {
    let conn = target.connect(Access::Read)?;
    let min_idle_ms = args
        .min_idle
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut found: Vec<PendingRow> = Vec::new();
    let mut from = EntryId::ZERO;
    loop {
        let page = Page { from, count: PAGE };
        let page = conn
            .pending(&args.stream, &args.group, page, args.consumer.as_deref())
            .await?;
        let Some(last) = page.last().map(|p| p.id) else {
            break;
        };
        let full = page.len() == PAGE;
        found.extend(page.into_iter().filter(|p| p.idle_ms >= min_idle_ms));
        if found.len() >= args.limit || !full {
            break;
        }
        from = last.next();
    }
    found.truncate(args.limit);
    let header = ["ID", "CONSUMER", "DELIVERIES", "IDLE", "OWED IN"];
    output::emit_rows(format, &found, "no pending entries", &header, |p| {
        vec![
            p.id.to_string(),
            p.consumer.clone().unwrap_or_else(|| "(owed)".to_owned()),
            p.times_delivered.to_string(),
            age(p.idle_ms),
            p.owed_in_ms.map_or_else(|| "-".to_owned(), age),
        ]
    })
}
