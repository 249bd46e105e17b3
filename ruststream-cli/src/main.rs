//! The `ruststream` binary: see the crate `ruststream_cli` and
//! `docs/cli.md`.

fn main() -> std::process::ExitCode {
    ruststream_cli::main()
}
