//! The command line: the clap types, with the `--help` texts.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ruststream::{BrokerError, EntryId, NameKind, check_name};

use crate::output::Format;

/// Inspect and repair ruststream streams and consumer groups.
///
/// Give one target: --redis URL, --dir DIR (a file log) or --admin URL (a
/// running service's admin endpoint), or set RUSTSTREAM_URL to
/// redis://HOST:PORT, redis+cluster://HOST:PORT,HOST:PORT, file:DIR or
/// http://HOST:PORT.
///
/// Exit codes: 0 success, 1 runtime error (a broker or server failed or
/// could not be reached), 2 usage error (bad option, id, duration or
/// target), 3 not found (stream, group, dead letter, file log), 4 refused
/// (needs --yes, --admin for a held file log, or the admin token).
#[derive(Debug, Parser)]
#[command(name = "ruststream", version, max_term_width = 100)]
pub struct Cli {
    /// The target and the output format.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// A Redis server: redis://[USER:PASSWORD@]HOST:PORT[/DB] (rediss:// for
    /// TLS), or a Redis Cluster: redis+cluster://HOST:PORT,HOST:PORT,...
    #[arg(long, global = true, value_name = "URL")]
    pub redis: Option<String>,
    /// A file-log directory. Read commands work on a directory a running
    /// service holds (read-only, as of its last sync); changes to it go
    /// through the service's --admin endpoint.
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// A running service's admin endpoint: http://HOST:PORT.
    #[arg(long, global = true, value_name = "URL")]
    pub admin: Option<String>,
    /// The admin endpoint's token, for its write routes (publish, redrive,
    /// discard, consumers prune).
    #[arg(
        long,
        global = true,
        value_name = "T",
        env = "RUSTSTREAM_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Output: a table for people, or JSON for scripts (see docs/cli.md).
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every stream: length, first and last id, groups.
    Streams,
    /// A stream's summary; with GROUP, the group's lag, pending entries,
    /// dead letters, cursor and consumers.
    Describe(Describe),
    /// A group's pending entries: id, consumer, delivery count, idle time.
    Pending(Pending),
    /// A group's dead letters (`dead-letters STREAM GROUP` lists them,
    /// `dead-letters show STREAM GROUP ID` shows one whole).
    #[command(name = "dead-letters")]
    DeadLetters(DeadLetters),
    /// Make dead letters owed again (delivery counts reset): the group's
    /// consumers get them once more.
    Redrive(Selection),
    /// Drop dead letters for good.
    Discard(Selection),
    /// Publish entries to a stream.
    Publish(Publish),
    /// Print a stream's entries as they arrive, without joining a group.
    Tail(Tail),
    /// Manage a group's consumers.
    Consumers(Consumers),
}

/// `describe STREAM [GROUP]`.
#[derive(Debug, Args)]
pub struct Describe {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// A group of the stream.
    #[arg(value_parser = parse_group)]
    pub group: Option<String>,
    /// Flag consumers idle longer than this while they hold entries.
    #[arg(long, value_name = "D", default_value = "5m", value_parser = parse_duration)]
    pub idle_threshold: Duration,
}

/// `pending STREAM GROUP`.
#[derive(Debug, Args)]
pub struct Pending {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// The group.
    #[arg(value_parser = parse_group)]
    pub group: String,
    /// Only this consumer's entries.
    #[arg(long, value_name = "C", value_parser = parse_consumer)]
    pub consumer: Option<String>,
    /// Only entries idle at least this long (30s, 5m, 1h, 250ms).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub min_idle: Option<Duration>,
    /// At most this many entries.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = parse_limit)]
    pub limit: usize,
}

/// `dead-letters [list] STREAM GROUP` or `dead-letters show STREAM GROUP ID`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DeadLetters {
    /// `list` (the default) or `show`.
    #[command(subcommand)]
    pub action: Option<DeadLettersAction>,
    /// Listing without `list`.
    #[command(flatten)]
    pub list: DeadLettersList,
}

/// What `dead-letters` does.
#[derive(Debug, Subcommand)]
pub enum DeadLettersAction {
    /// List dead letters: id, original id, reason, deliveries, payload
    /// preview (the default).
    List(DeadLettersList),
    /// Show one dead letter whole: payload and headers.
    Show(DeadLetterShow),
}

/// `dead-letters list STREAM GROUP`.
#[derive(Debug, Args)]
pub struct DeadLettersList {
    /// The stream.
    #[arg(required = true, value_parser = parse_stream)]
    pub stream: Option<String>,
    /// The group.
    #[arg(required = true, value_parser = parse_group)]
    pub group: Option<String>,
    /// At most this many dead letters.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = parse_limit)]
    pub limit: usize,
}

/// `dead-letters show STREAM GROUP ID`.
#[derive(Debug, Args)]
pub struct DeadLetterShow {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// The group.
    #[arg(value_parser = parse_group)]
    pub group: String,
    /// The dead letter's id (as `dead-letters` lists it).
    #[arg(value_parser = parse_id)]
    pub id: EntryId,
}

/// `redrive|discard STREAM GROUP (ID… | --all | --reason-contains TEXT)`.
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("selection").required(true).args(["ids", "all", "reason_contains"])
))]
pub struct Selection {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// The group.
    #[arg(value_parser = parse_group)]
    pub group: String,
    /// The dead letters, by id.
    #[arg(value_name = "ID", value_parser = parse_id)]
    pub ids: Vec<EntryId>,
    /// Every dead letter of the group.
    #[arg(long)]
    pub all: bool,
    /// Every dead letter whose reason contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub reason_contains: Option<String>,
    /// Show what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation (needed when more than one dead letter
    /// is selected and stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `publish STREAM (PAYLOAD | --file F)`.
#[derive(Debug, Args)]
pub struct Publish {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// The payload, as text.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub payload: Option<String>,
    /// Publish one entry per line of F (`-` for stdin); empty lines are
    /// skipped.
    #[arg(long, value_name = "F")]
    pub file: Option<PathBuf>,
    /// A header, name=value (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// The partition key (the header `ruststream-partition-key`): entries
    /// with the same key run in order on `by_key` lanes.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
}

/// `tail STREAM`.
#[derive(Debug, Args)]
pub struct Tail {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// Start at this id (inclusive; `0` for the beginning). Default: only
    /// entries appended from now on.
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pub from: Option<EntryId>,
    /// Exit after this many entries.
    #[arg(long, value_name = "N", value_parser = parse_limit)]
    pub count: Option<usize>,
    /// Print what is there and exit, instead of waiting for more.
    #[arg(long)]
    pub no_follow: bool,
    /// How often to look for new entries.
    #[arg(long, value_name = "D", default_value = "500ms", value_parser = parse_duration)]
    pub interval: Duration,
}

/// `consumers prune`.
#[derive(Debug, Args)]
pub struct Consumers {
    /// What to do with the consumers.
    #[command(subcommand)]
    pub action: ConsumersAction,
}

/// What `consumers` does.
#[derive(Debug, Subcommand)]
pub enum ConsumersAction {
    /// Delete consumers idle longer than --idle that hold nothing; a
    /// consumer still holding entries is reported and kept.
    Prune(Prune),
}

/// `consumers prune STREAM GROUP --idle D`.
#[derive(Debug, Args)]
pub struct Prune {
    /// The stream.
    #[arg(value_parser = parse_stream)]
    pub stream: String,
    /// The group.
    #[arg(value_parser = parse_group)]
    pub group: String,
    /// Only consumers idle at least this long (30s, 5m, 1h).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub idle: Duration,
    /// List what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A duration: `30s`, `5m`, `1h`, `250ms`, `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e} (write a number and a unit: 250ms, 30s, 5m, 1h)"))
}

/// An entry id, `ms-seq` (or `ms`).
pub fn parse_id(text: &str) -> Result<EntryId, String> {
    text.parse::<EntryId>().map_err(|e| e.to_string())
}

/// A stream name that meets every broker's rules (`docs/semantics.md`,
/// "Where the rules leave a choice"): the same usage error on every
/// target, before anything is asked of it.
pub fn parse_stream(text: &str) -> Result<String, String> {
    parse_name(NameKind::Stream, text)
}

/// A group name, as [`parse_stream`].
pub fn parse_group(text: &str) -> Result<String, String> {
    parse_name(NameKind::Group, text)
}

/// A consumer name, as [`parse_stream`].
pub fn parse_consumer(text: &str) -> Result<String, String> {
    parse_name(NameKind::Consumer, text)
}

fn parse_name(kind: NameKind, text: &str) -> Result<String, String> {
    match check_name(kind, text) {
        Ok(()) => Ok(text.to_owned()),
        Err(BrokerError::InvalidArgument(rule)) => Err(rule),
        Err(other) => Err(other.to_string()),
    }
}

/// A count of at least 1.
pub fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err("not a positive whole number".to_owned()),
    }
}

/// A header, `name=value`.
pub fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err("write a header as name=value".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_ids_and_headers_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_id("5-1"), Ok(EntryId::new(5, 1)));
        assert!(parse_id("x").unwrap_err().contains("ms-seq"));
        assert_eq!(parse_header("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_header("=x").is_err());
        assert!(parse_limit("0").is_err());
    }

    #[test]
    fn dead_letters_lists_by_default_and_shows_with_show() {
        let cli = Cli::try_parse_from(["ruststream", "dead-letters", "s", "g", "--limit", "5"])
            .expect("parses");
        let Command::DeadLetters(d) = cli.command else {
            panic!("not dead-letters");
        };
        assert!(d.action.is_none());
        assert_eq!(d.list.stream.as_deref(), Some("s"));
        assert_eq!(d.list.limit, 5);
        let cli = Cli::try_parse_from(["ruststream", "dead-letters", "show", "s", "g", "1-0"])
            .expect("parses");
        let Command::DeadLetters(d) = cli.command else {
            panic!("not dead-letters");
        };
        assert!(matches!(d.action, Some(DeadLettersAction::Show(_))));
    }
}
