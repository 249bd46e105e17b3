//! `ruststream`, the command-line tool of the ruststream stream-worker
//! framework: look at streams and consumer groups, list pending entries
//! and dead letters, redrive or discard dead letters, publish and tail,
//! and prune idle consumers, on
//!
//! - a Redis server (`--redis redis://HOST:PORT`),
//! - a file-log directory (`--dir DIR`; read-only when a running service
//!   holds it), or
//! - a running service's admin endpoint (`--admin http://HOST:PORT
//!   [--token T]`),
//!
//! or the target `RUSTSTREAM_URL` names. Every command prints a table, or
//! JSON with `--format json`. `docs/cli.md` describes every command, the
//! JSON shapes and the exit codes.
//!
//! The modules, one role each:
//!
//! - [`cli`]: the command line (clap);
//! - [`target`]: what the tool talks to, behind one set of calls;
//! - [`commands`]: one module per command;
//! - [`model`]: the records the targets answer with;
//! - [`output`]: tables and JSON;
//! - [`error`]: errors and exit codes.

pub mod cli;
pub mod commands;
pub mod error;
pub mod model;
pub mod output;
pub mod target;

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use crate::error::EXIT_USAGE;

/// Parses the command line, runs the command and returns the exit code:
/// errors are printed on stderr as one line, `error: ...`.
pub fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(error::EXIT_RUNTIME);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error::one_line(e.message()));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Prints a clap error: help and version as clap does (exit 0); a bad
/// value as its first line, `error: invalid value ... for ...: why`; other
/// usage errors with clap's usage lines. Exit code 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            }
        }
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("error: invalid value");
            eprintln!("{first}");
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            let _ = e.print();
            ExitCode::from(EXIT_USAGE)
        }
    }
}
