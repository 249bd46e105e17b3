//! `streams`: every stream with its summary.

use crate::error::CliResult;
use crate::output::{self, Format};
use crate::target::{Access, Target};

/// Lists the streams.
pub(super) async fn run(target: &Target, format: Format) -> CliResult<()> {
    let conn = target.connect(Access::Read)?;
    let streams = conn.streams().await?;
    let header = ["STREAM", "LENGTH", "FIRST ID", "LAST ID", "GROUPS"];
    output::emit_rows(format, &streams, "no streams", &header, |s| {
        vec![
            s.stream.clone(),
            s.length.to_string(),
            s.first_id.clone().unwrap_or_else(|| "-".to_owned()),
            s.last_id.clone(),
            if s.groups.is_empty() {
                "-".to_owned()
            } else {
                s.groups.join(",")
            },
        ]
    })
}
