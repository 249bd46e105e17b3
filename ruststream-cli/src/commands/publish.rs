//! `publish STREAM PAYLOAD` or `publish STREAM --file F`: entries with
//! headers and a partition key.

use std::collections::BTreeMap;
use std::io::Read;

use ruststream::PARTITION_KEY_HEADER;
use serde::Serialize;

use crate::cli::Publish;
use crate::error::{CliError, CliResult};
use crate::output::{self, Format};
use crate::target::{Access, Outgoing, Target};

/// What `publish --format json` prints.
#[derive(Debug, Serialize)]
struct Published {
    stream: String,
    /// The new entries' ids, in order.
    ids: Vec<String>,
}

/// Publishes the entries.
pub(super) async fn run(target: &Target, format: Format, args: Publish) -> CliResult<()> {
    let mut headers: BTreeMap<String, String> = args.headers.into_iter().collect();
    if let Some(key) = args.key {
        headers.insert(PARTITION_KEY_HEADER.to_owned(), key);
    }
    let payloads = match (&args.payload, &args.file) {
        (Some(payload), None) => vec![payload.clone()],
        (None, Some(file)) => lines(file)?,
        _ => {
            return Err(CliError::Usage(
                "publish takes a PAYLOAD or --file F, not both".to_owned(),
            ));
        }
    };
    if payloads.is_empty() {
        return Err(CliError::Usage(
            "nothing to publish: the file has no non-empty line".to_owned(),
        ));
    }
    let messages = payloads
        .into_iter()
        .map(|payload| Outgoing {
            payload,
            headers: headers.clone(),
        })
        .collect();
    let conn = target.connect(Access::Write)?;
    let ids = conn
        .finishing(conn.publish(&args.stream, messages).await)
        .await?;
    let published = Published {
        stream: args.stream,
        ids: ids.iter().map(ToString::to_string).collect(),
    };
    match format {
        Format::Json => output::emit_json(&published),
        Format::Table => {
            let text: String = published.ids.iter().map(|id| format!("{id}\n")).collect();
            output::emit(&text)
        }
    }
}

/// The non-empty lines of `file` (`-`: stdin), without line ends.
fn lines(file: &std::path::Path) -> CliResult<Vec<String>> {
    let mut text = String::new();
    let read = if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_string(&mut text))
    };
    read.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            CliError::NotFound(format!("--file {}: no such file", file.display()))
        }
        std::io::ErrorKind::InvalidData => CliError::Usage(format!(
            "--file {}: not UTF-8 text (payloads are published as text lines)",
            file.display()
        )),
        _ => CliError::Runtime(format!("--file {}: {e}", file.display())),
    })?;
    Ok(text
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect())
}
