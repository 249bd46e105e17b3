//! The payments service.
//!
//! ```text
//! payments [--data DIR]          run the service on the durable file log in DIR
//!                                (default ./payments-data) until Ctrl-C or SIGTERM
//! payments demo [--data DIR]     publish sample payments, print what happens, exit
//!                                (default: a fresh temporary directory, removed after;
//!                                a DIR an earlier run left data in is refused)
//! payments ... --memory          use the in-memory broker instead of the file log
//! payments ... --redis URL       use Redis Streams at URL (the demo then runs in
//!                                real time, about a minute, on an empty database)
//! payments --admin HOST:PORT     serve the admin endpoint (metrics, health,
//!                                subscribers, group routes) while the service
//!                                runs; the write routes need RUSTSTREAM_ADMIN_TOKEN
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use payments::demo;
use ruststream::{Broker, FileLogBroker, MemoryBroker, RedisBroker, RedisConfig};

/// What the command line asked for.
struct Args {
    demo: bool,
    data: Option<PathBuf>,
    memory: bool,
    redis: Option<String>,
    admin: Option<std::net::SocketAddr>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        demo: false,
        data: None,
        memory: false,
        redis: None,
        admin: None,
    };
    let mut words = std::env::args().skip(1);
    while let Some(word) = words.next() {
        match word.as_str() {
            "demo" => args.demo = true,
            "--memory" => args.memory = true,
            "--data" => match words.next() {
                Some(dir) => args.data = Some(PathBuf::from(dir)),
                None => return Err("--data needs a directory".into()),
            },
            "--redis" => match words.next() {
                Some(url) => args.redis = Some(url),
                None => return Err("--redis needs a URL such as redis://127.0.0.1:6379".into()),
            },
            "--admin" => match words.next().map(|a| a.parse()) {
                Some(Ok(addr)) => args.admin = Some(addr),
                _ => return Err("--admin needs HOST:PORT, such as 127.0.0.1:9464".into()),
            },
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

const USAGE: &str =
    "usage: payments [demo] [--data DIR | --memory | --redis URL] [--admin HOST:PORT]";

fn open_broker(args: &Args, default_dir: PathBuf) -> Result<Arc<dyn Broker>, String> {
    if args.memory {
        println!("broker: in memory (nothing is kept)");
        return Ok(Arc::new(MemoryBroker::new()));
    }
    if let Some(url) = &args.redis {
        let broker = RedisBroker::from_url_with(url, RedisConfig::default());
        // The broker's URL masks any password.
        println!("broker: Redis Streams at {}", broker.url());
        return Ok(Arc::new(broker));
    }
    let dir = args.data.clone().unwrap_or(default_dir);
    let broker = FileLogBroker::open(&dir).map_err(|e| e.to_string())?;
    println!("broker: durable file log in {}", dir.display());
    Ok(Arc::new(broker))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.demo {
        if args.admin.is_some() {
            eprintln!("error: --admin serves the running service, not the demo\n{USAGE}");
            return ExitCode::from(2);
        }
        return run_demo(&args);
    }
    ruststream::run_main_with(async move {
        let broker = open_broker(&args, PathBuf::from("payments-data"))?;
        // Which ledger the broker can serve is the broker's to say.
        let mut service = payments::service_for(broker).await;
        if let Some(addr) = args.admin {
            service = service.admin(addr);
            if let Ok(token) = std::env::var(ruststream::ADMIN_TOKEN_VAR) {
                service = service.admin_token(token);
            }
            println!("admin endpoint: http://{addr}/metrics, /health/ready, /subscribers");
        }
        Ok::<_, String>(service)
    });
    ExitCode::SUCCESS
}

/// What to do about a broker an earlier run left data in.
fn leftover_hint(args: &Args) -> String {
    if args.redis.is_some() {
        "run the demo on an empty database, e.g. redis://127.0.0.1:6379/15 after FLUSHDB".into()
    } else if let Some(dir) = &args.data {
        format!(
            "{} is a data directory an earlier run left: remove it, name a new directory with --data, or leave --data out for a fresh temporary one",
            dir.display()
        )
    } else {
        "start from an empty broker".into()
    }
}

fn run_demo(args: &Args) -> ExitCode {
    // Redis measures idle and due times on the server: its demo runs in
    // real time. The local brokers follow tokio's clock, paused here.
    let simulated = args.redis.is_none();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(simulated)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let scratch =
        std::env::temp_dir().join(format!("ruststream-payments-demo-{}", std::process::id()));
    let remove_after = args.data.is_none() && !args.memory;
    if remove_after {
        // Ours alone: a crashed run with the same process id may have left it.
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let result = runtime.block_on(async {
        let broker = open_broker(args, scratch.clone())?;
        let explain = |e: demo::DemoError| match e {
            demo::DemoError::Leftover(_) => format!("{e}\n{}", leftover_hint(args)),
            e => e.to_string(),
        };
        demo::check_empty(&*broker).await.map_err(explain)?;
        println!("payments demo: ledger (claiming, workers(8, by_key)) and fraud (from the beginning, replies)");
        if simulated {
            println!("the clock is simulated: waits pass at once, times are simulated seconds\n");
        } else {
            println!("on Redis the demo runs in real time: about a minute\n");
        }
        demo::run(broker).await.map_err(explain)
    });
    if remove_after {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    match result {
        Ok(summary) => {
            println!(
                "\nsummary: {} payments posted, {} retries while an account was locked, {} screened ({} suspicious), all settled after {:.1}s{}",
                summary.posted,
                summary.retried,
                summary.screened,
                summary.suspicious,
                summary.took.as_secs_f64(),
                if simulated { " simulated" } else { "" }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
