//! One module per command; [`run`] sends a parsed command line to its
//! command.

mod consumers;
mod dead_letters;
mod describe;
mod pending;
mod publish;
mod settle;
mod streams;
mod tail;

use crate::cli::{Cli, Command, ConsumersAction, DeadLettersAction};
use crate::error::CliResult;
use crate::target::{Target, URL_VAR};

/// Runs the command `cli` names on its target.
pub async fn run(cli: Cli) -> CliResult<()> {
    let global = cli.global;
    let target = Target::choose(
        global.redis,
        global.dir,
        global.admin,
        global.token,
        std::env::var(URL_VAR).ok(),
    )?;
    let format = global.format;
    match cli.command {
        Command::Streams => streams::run(&target, format).await,
        Command::Describe(args) => describe::run(&target, format, args).await,
        Command::Pending(args) => pending::run(&target, format, args).await,
        Command::DeadLetters(args) => match args.action {
            None => dead_letters::list(&target, format, args.list).await,
            Some(DeadLettersAction::List(list)) => dead_letters::list(&target, format, list).await,
            Some(DeadLettersAction::Show(show)) => dead_letters::show(&target, format, show).await,
        },
        Command::Redrive(args) => settle::run(&target, format, args, settle::Change::Redrive).await,
        Command::Discard(args) => settle::run(&target, format, args, settle::Change::Discard).await,
        Command::Publish(args) => publish::run(&target, format, args).await,
        Command::Tail(args) => tail::run(&target, format, args).await,
        Command::Consumers(args) => match args.action {
            ConsumersAction::Prune(prune) => consumers::prune(&target, format, prune).await,
        },
    }
}
