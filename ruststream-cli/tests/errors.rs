//! Errors: a one-line `error: ...` on stderr naming what was wrong, and
//! the documented exit code (1 runtime, 2 usage, 3 not found, 4 refused).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use support::{TempDir, cli, cli_with, log_with_one_entry};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_missing_doubled_or_malformed_are_usage_errors() {
    cli(&["streams"])
        .await
        .fails(2, &["no target", "--redis", "RUSTSTREAM_URL"]);
    cli(&[
        "--redis",
        "redis://127.0.0.1:6379",
        "--dir",
        "/tmp",
        "streams",
    ])
    .await
    .fails(2, &["exactly one target"]);
    cli_with(&["streams"], &[("RUSTSTREAM_URL", "ftp://example")], None)
        .await
        .fails(2, &["\"ftp://example\"", "RUSTSTREAM_URL"]);
    cli(&["--admin", "not a url", "streams"])
        .await
        .fails(2, &["\"not a url\""]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_log_is_not_found_and_never_created() {
    let dir = TempDir::new("missing");
    cli_with(
        &["streams"],
        &[("RUSTSTREAM_URL", &format!("file:{}", dir.arg()))],
        None,
    )
    .await
    .fails(3, &["no file log at", &dir.arg()]);
    cli(&["--dir", &dir.arg(), "publish", "s", "x"])
        .await
        .fails(3, &["no file log at"]);
    assert!(!dir.0.exists());
    std::fs::create_dir_all(&dir.0).unwrap();
    cli(&["--dir", &dir.arg(), "streams"])
        .await
        .fails(3, &["is not a file log"]);
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers_are_runtime_errors_naming_them() {
    cli(&["--redis", "redis://127.0.0.1:1", "streams"])
        .await
        .fails(1, &["redis://127.0.0.1:1"]);
    cli_with(
        &["describe", "s"],
        &[("RUSTSTREAM_URL", "redis://127.0.0.1:1")],
        None,
    )
    .await
    .fails(1, &["redis://127.0.0.1:1"]);
    cli(&["--admin", "http://127.0.0.1:1", "streams"])
        .await
        .fails(
            1,
            &["cannot reach the admin endpoint at http://127.0.0.1:1/"],
        );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_durations_and_counts_are_one_line_usage_errors() {
    let d = ["--dir", "/nonexistent"];
    let with =
        |rest: &[&str]| -> Vec<String> { d.iter().chain(rest).map(|s| (*s).to_owned()).collect() };
    for (args, says) in [
        (
            with(&["redrive", "s", "g", "12-x"]),
            vec!["12-x", "invalid entry id", "ms-seq"],
        ),
        (
            with(&["dead-letters", "show", "s", "g", "yesterday"]),
            vec!["yesterday", "invalid entry id"],
        ),
        (
            with(&["tail", "s", "--from=-1"]),
            vec!["-1", "invalid entry id"],
        ),
        (
            with(&["pending", "s", "g", "--min-idle", "soon"]),
            vec!["soon", "--min-idle"],
        ),
        (
            with(&["describe", "s", "--idle-threshold", "5 parsecs"]),
            vec!["5 parsecs"],
        ),
        (
            with(&["pending", "s", "g", "--limit", "0"]),
            vec!["--limit", "at least 1"],
        ),
        (
            with(&["publish", "s", "x", "-H", "novalue"]),
            vec!["novalue", "name=value"],
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args).await.fails(2, &says);
    }
    // Missing arguments: clap's usage message, exit 2.
    let out = cli(&["--dir", "/x", "redrive", "s", "g"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--all"), "{out:?}");
    let out = cli(&["--dir", "/x", "dead-letters"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    let help = cli(&["--help"]).await.ok().stdout;
    assert!(
        help.contains("Exit codes") && help.contains("dead-letters"),
        "{help}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_can_come_from_the_environment() {
    let dir = TempDir::new("env");
    log_with_one_entry(&dir, "env-stream", "x").await;
    let url = format!("file:{}", dir.arg());
    let out = cli_with(
        &["--format", "json", "streams"],
        &[("RUSTSTREAM_URL", &url)],
        None,
    )
    .await
    .ok();
    assert_eq!(out.json()[0]["stream"], "env-stream");
    // An option wins over the environment.
    cli_with(
        &["--redis", "redis://127.0.0.1:1", "streams"],
        &[("RUSTSTREAM_URL", &url)],
        None,
    )
    .await
    .fails(1, &["127.0.0.1:1"]);
}

/// A name no broker accepts is the same usage error on every target,
/// before the target is asked anything (a file log, Redis and an admin
/// endpoint used to answer "not found" or a broker error, by target).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_usage_errors_on_every_target() {
    let dir = TempDir::new("names");
    log_with_one_entry(&dir, "s", "x").await;
    let targets = [
        vec!["--dir".to_owned(), dir.arg()],
        vec!["--redis".to_owned(), "redis://127.0.0.1:1".to_owned()],
        vec!["--admin".to_owned(), "http://127.0.0.1:1".to_owned()],
    ];
    for target in &targets {
        let with = |rest: &[&str]| -> Vec<String> {
            let mut args = target.clone();
            args.extend(rest.iter().map(|s| (*s).to_owned()));
            args
        };
        let run = |args: Vec<String>| async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&args).await
        };
        run(with(&["describe", ""]))
            .await
            .fails(2, &["stream name is empty"]);
        run(with(&["pending", "s", "a}b"]))
            .await
            .fails(2, &["group name \"a}b\""]);
        run(with(&["pending", "s", "g", "--consumer", ""]))
            .await
            .fails(2, &["consumer name is empty"]);
        run(with(&["redrive", "x\u{1}", "g", "--all", "--yes"]))
            .await
            .fails(2, &["stream name", "control character"]);
    }
}
