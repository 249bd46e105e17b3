//! `streams`: every stream with its summary.

use crate::error::CliResult;
use crate::output::{self, Format, Table};
use crate::target::{Access, Target};

/// Lists the streams.
pub(super) async fn run(target: &Target, format: Format) -> CliResult<()> {
    let conn = target.connect(Access::Read)?;
    let streams = conn.streams().await?;
    match format {
        Format::Json => output::emit_json(&streams),
        Format::Table => {
            if streams.is_empty() {
                return output::emit("no streams\n");
            }
            let mut table = Table::new(&["STREAM", "LENGTH", "FIRST ID", "LAST ID", "GROUPS"]);
            for s in &streams {
                table.row(vec![
                    s.stream.clone(),
                    s.length.to_string(),
                    s.first_id.clone().unwrap_or_else(|| "-".to_owned()),
                    s.last_id.clone(),
                    if s.groups.is_empty() {
                        "-".to_owned()
                    } else {
                        s.groups.join(",")
                    },
                ]);
            }
            output::emit(&table.render())
        }
    }
}
