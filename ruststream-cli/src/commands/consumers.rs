//! `consumers prune STREAM GROUP --idle D`.

use crate::cli::Prune;
use crate::error::CliResult;
use crate::output::{self, Format, age};
use crate::target::{Access, Pruning, Target};

/// Deletes idle consumers that hold nothing; reports those kept.
pub(super) async fn prune(target: &Target, format: Format, args: Prune) -> CliResult<()> {
    let access = if args.dry_run {
        Access::Read
    } else {
        Access::Write
    };
    let conn = target.connect(access)?;
    let pruning = Pruning {
        idle: args.idle,
        dry_run: args.dry_run,
    };
    let result = conn.prune(&args.stream, &args.group, pruning).await;
    let result = if args.dry_run {
        result?
    } else {
        conn.finishing(result).await?
    };
    match format {
        Format::Json => output::emit_json(&result),
        Format::Table => {
            let verb = if result.dry_run {
                "would delete"
            } else {
                "deleted"
            };
            let mut text = format!(
                "{verb} {} consumer(s) idle over {} that hold nothing\n",
                result.deleted.len(),
                humantime::format_duration(args.idle)
            );
            for name in &result.deleted {
                text.push_str(&format!("  {name}\n"));
            }
            if !result.kept_holding.is_empty() {
                text.push_str(&format!(
                    "kept {} consumer(s) that still hold entries (never deleted)\n",
                    result.kept_holding.len()
                ));
                for c in &result.kept_holding {
                    text.push_str(&format!(
                        "  {}  pending {}  idle {}\n",
                        c.name,
                        c.pending,
                        age(c.idle_ms)
                    ));
                }
            }
            output::emit(&text)
        }
    }
}
