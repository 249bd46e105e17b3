//! The tool's errors: a one-line message naming what was wrong, and the
//! exit code that goes with its kind (`docs/cli.md`, "Exit codes").

use std::fmt;

use ruststream::BrokerError;

/// Exit code of a runtime error: a broker or server that failed or could
/// not be reached, an I/O error.
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code of a usage error: a bad option, id, duration or target.
pub const EXIT_USAGE: u8 = 2;
/// Exit code when a stream, group, dead letter or file log does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code of a refusal: a write on a file log a running service holds
/// (use `--admin`), a change that needs confirmation (`--yes`), a token
/// the admin endpoint does not accept.
pub const EXIT_REFUSED: u8 = 4;

/// What went wrong, by kind; the text is the whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// A broker or server failed or could not be reached.
    Runtime(String),
    /// The command line asked for something malformed.
    Usage(String),
    /// What the command names does not exist.
    NotFound(String),
    /// The command was refused (confirmation, a held file log, a token).
    Refused(String),
}

/// Result of a command.
pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Runtime(_) => EXIT_RUNTIME,
            CliError::Usage(_) => EXIT_USAGE,
            CliError::NotFound(_) => EXIT_NOT_FOUND,
            CliError::Refused(_) => EXIT_REFUSED,
        }
    }

    /// The same error, its message preceded by `context` (what had been
    /// done when it happened).
    pub fn after(self, context: &str) -> Self {
        match self {
            CliError::Runtime(m) => CliError::Runtime(format!("{context}{m}")),
            CliError::Usage(m) => CliError::Usage(format!("{context}{m}")),
            CliError::NotFound(m) => CliError::NotFound(format!("{context}{m}")),
            CliError::Refused(m) => CliError::Refused(format!("{context}{m}")),
        }
    }

    /// The message, without the `error: ` prefix.
    pub fn message(&self) -> &str {
        match self {
            CliError::Runtime(m)
            | CliError::Usage(m)
            | CliError::NotFound(m)
            | CliError::Refused(m) => m,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CliError {}

impl From<BrokerError> for CliError {
    fn from(error: BrokerError) -> Self {
        // The broker's messages name the stream, group, file or server.
        let message = one_line(&error.to_string());
        match error {
            BrokerError::NoGroup { stream, group } => {
                CliError::NotFound(format!("no consumer group {group:?} on stream {stream:?}"))
            }
            BrokerError::InvalidArgument(_) => CliError::Usage(message),
            BrokerError::InUse { path, holder } => CliError::Refused(format!(
                "{} is held by a running service ({holder}): changes must go through it; \
                 use --admin with that service's admin endpoint",
                path.display()
            )),
            _ => CliError::Runtime(message),
        }
    }
}

/// `text` on one line: line breaks become spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
