//! The payments service.
//!
//! ```text
//! payments          run the service until Ctrl-C (SIGINT) or SIGTERM
//! payments demo     publish sample payments, print what happens, exit
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use payments::demo;
use ruststream::{App, MemoryBroker};

fn app() -> impl App {
    payments::service(Arc::new(MemoryBroker::new()))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => {
            ruststream::run_main(app);
            ExitCode::SUCCESS
        }
        ["demo"] => run_demo(),
        _ => {
            eprintln!("usage: payments [demo]");
            ExitCode::from(2)
        }
    }
}

fn run_demo() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "payments demo: ledger (claiming, workers(8, by_key)) and fraud (from the beginning, replies)"
    );
    println!("the clock is simulated: waits pass at once, times are simulated seconds\n");
    match runtime.block_on(demo::run(MemoryBroker::new())) {
        Ok(summary) => {
            println!(
                "\nsummary: {} payments posted, {} retries while an account was locked, {} screened ({} suspicious), all settled after {:.1}s simulated",
                summary.posted,
                summary.retried,
                summary.screened,
                summary.suspicious,
                summary.took.as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
