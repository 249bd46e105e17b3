//! How results are printed: aligned tables for people, JSON for scripts
//! (`docs/cli.md`, "JSON output"), and the small formatters both use.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::model::Payload;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// JSON for scripts: one document (one line per entry for `tail`).
    Json,
}

/// Writes `text` to stdout. A closed pipe (`| head`) ends the process
/// quietly, as other command-line tools do.
pub fn emit(text: &str) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(CliError::Runtime(format!("cannot write to stdout: {e}"))),
    }
}

/// Prints `value` as pretty JSON, with a final newline.
pub fn emit_json(value: &impl Serialize) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Runtime(format!("cannot write JSON: {e}")))?;
    emit(&format!("{text}\n"))
}

/// Prints `value` as one line of JSON.
pub fn emit_json_line(value: &impl Serialize) -> CliResult<()> {
    let text = serde_json::to_string(value)
        .map_err(|e| CliError::Runtime(format!("cannot write JSON: {e}")))?;
    emit(&format!("{text}\n"))
}

/// Prints `rows` in `format`: as one JSON document, or as a table under
/// `header` with the `cells` of each row ([`emit_table`]).
pub fn emit_rows<T: Serialize>(
    format: Format,
    rows: &[T],
    none: &str,
    header: &[&str],
    cells: impl Fn(&T) -> Vec<String>,
) -> CliResult<()> {
    match format {
        Format::Json => emit_json(&rows),
        Format::Table => emit_table(rows, none, header, cells),
    }
}

/// Prints `rows` as a table under `header`, with the `cells` of each row;
/// only the line `none` when there are no rows.
pub fn emit_table<T>(
    rows: &[T],
    none: &str,
    header: &[&str],
    cells: impl Fn(&T) -> Vec<String>,
) -> CliResult<()> {
    if rows.is_empty() {
        return emit(&format!("{none}\n"));
    }
    let mut table = Table::new(header);
    for row in rows {
        table.row(cells(row));
    }
    emit(&table.render())
}

/// A table: a header row and rows of cells, printed in columns two spaces
/// apart (the last column unpadded).
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, each line ending in a newline.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths = vec![0; columns];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(columns) {
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Label-value lines, labels aligned (`key   value`).
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:width$}  {v}\n"))
        .collect()
}

/// A duration in milliseconds, short: `250ms`, `12.5s`, `4m05s`,
/// `3h07m`, `2d04h`.
pub fn age(ms: u64) -> String {
    const S: u64 = 1_000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    match ms {
        ms if ms < S => format!("{ms}ms"),
        ms if ms < 10 * S => format!("{}.{}s", ms / S, (ms % S) / 100),
        ms if ms < M => format!("{}s", ms / S),
        ms if ms < H => format!("{}m{:02}s", ms / M, (ms % M) / S),
        ms if ms < D => format!("{}h{:02}m", ms / H, (ms % H) / M),
        ms => format!("{}d{:02}h", ms / D, (ms % D) / H),
    }
}

/// A wall-clock time in milliseconds as RFC 3339 (UTC).
pub fn timestamp(ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// `text` on one line: line breaks and other control characters escaped
/// (`\n`, `\u{1b}`), quotes left as they are.
pub fn escaped(text: &str) -> String {
    let escaped: String = text.chars().flat_map(char::escape_debug).collect();
    escaped.replace("\\\"", "\"").replace("\\'", "'")
}

/// A header name or value as one token of `tail`'s `[name=value ...]`:
/// as [`escaped`], but in double quotes (with `"` and `\` escaped) when it
/// is empty or holds a space, `=`, `[`, `]`, `"` or `\`, so that the list
/// reads back one way.
pub fn header_token(text: &str) -> String {
    let plain = !text.is_empty()
        && !text
            .chars()
            .any(|c| matches!(c, ' ' | '=' | '[' | ']' | '"' | '\\'));
    if plain {
        escaped(text)
    } else {
        let inner: String = text.chars().flat_map(char::escape_debug).collect();
        format!("\"{}\"", inner.replace("\\'", "'"))
    }
}

/// The first `max` characters of `text` on one line ([`escaped`]), `…`
/// when cut.
pub fn cut(text: &str, max: usize) -> String {
    let escaped = escaped(text);
    if escaped.chars().count() > max {
        let cut: String = escaped.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        escaped
    }
}

/// A payload's first `max` characters ([`cut`]); a payload that is not
/// UTF-8 shows its size.
pub fn preview(payload: &Payload, max: usize) -> String {
    match payload {
        Payload::Text(text) => cut(text, max),
        Payload::Bytes(bytes) => format!("<{} bytes, not UTF-8>", bytes.len()),
    }
}

/// A payload, whole: its text, or its bytes in hex when it is not UTF-8.
pub fn whole(payload: &Payload) -> String {
    match payload {
        Payload::Text(text) => text.clone(),
        Payload::Bytes(bytes) => {
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "<{} bytes, not UTF-8, in hex> {}",
                bytes.len(),
                hex.join(" ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each header reads back one way from `[name=value ...]`.
    #[test]
    fn header_tokens_quote_what_would_be_ambiguous() {
        assert_eq!(header_token("acct-1"), "acct-1");
        assert_eq!(header_token("a\nb"), "a\\nb");
        assert_eq!(header_token("a b"), "\"a b\"");
        assert_eq!(header_token("k=v"), "\"k=v\"");
        assert_eq!(header_token("x]"), "\"x]\"");
        assert_eq!(header_token(""), "\"\"");
        assert_eq!(header_token("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(header_token("c:\\tmp"), "\"c:\\\\tmp\"");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(250), "250ms");
        assert_eq!(age(1_500), "1.5s");
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(245_000), "4m05s");
        assert_eq!(age(3 * 3_600_000 + 7 * 60_000), "3h07m");
        assert_eq!(age(2 * 86_400_000 + 4 * 3_600_000), "2d04h");
    }

    #[test]
    fn previews_cut_and_escape() {
        let p = Payload::Text("a\nb\"c".to_owned());
        assert_eq!(preview(&p, 20), "a\\nb\"c");
        let long = Payload::Text("x".repeat(30));
        assert_eq!(preview(&long, 10), format!("{}…", "x".repeat(9)));
        assert_eq!(
            preview(&Payload::Bytes(vec![0xff, 0]), 10),
            "<2 bytes, not UTF-8>"
        );
    }

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["A", "LONGER"]);
        t.row(vec!["wide cell".to_owned(), "x".to_owned()]);
        assert_eq!(t.render(), "A          LONGER\nwide cell  x\n");
    }
}
