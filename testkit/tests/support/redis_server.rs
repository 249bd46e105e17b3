//! A private `redis-server` for tests that kill or restart the server: its
//! own loopback port and data directory, never the shared server at
//! 127.0.0.1:6379. The guard kills it (SIGKILL) when dropped, a failing
//! test included, and removes its directory.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started server may take to answer (loading an AOF
/// included).
const READY_WITHIN: Duration = Duration::from_secs(15);

/// What the server keeps across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: `--save "" --appendonly no`; a restart starts empty.
    None,
    /// Every write: `--appendonly yes --appendfsync always` (and no RDB
    /// snapshots); a restart reloads the AOF.
    AofAlways,
}

impl Persistence {
    fn args(self) -> &'static [&'static str] {
        match self {
            Persistence::None => &["--save", "", "--appendonly", "no"],
            Persistence::AofAlways => &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
        }
    }
}

/// A running private server (or one killed, to be restarted on its port).
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// Arguments given to every start (cluster mode, say).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free loopback port, in a fresh directory named
    /// after `what`, and waits until it answers.
    pub fn start(what: &str, persistence: Persistence) -> RedisServer {
        RedisServer::start_with(what, persistence, &[])
    }

    /// [`RedisServer::start`] with more `redis-server` arguments.
    pub fn start_with(what: &str, persistence: Persistence, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "ruststream-redis-{what}-{}-{}",
            std::process::id(),
            nanos()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        // The port is free when picked, but another process may take it
        // before the server binds it: then try another.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn(persistence) {
                return server;
            }
        }
        panic!(
            "redis-server did not start on any of 5 ports; its log:\n{}",
            server.log_tail()
        );
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's directory (its working directory, logs included).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Whether the server is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (after
    /// [`RedisServer::kill`]) and waits until it answers.
    pub fn restart(&mut self, persistence: Persistence) {
        assert!(self.child.is_none(), "restart: the server is still running");
        // The killed server's port may take a moment to be free again.
        for _ in 0..20 {
            if self.spawn(persistence) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "redis-server did not restart on port {}; its log:\n{}",
            self.port,
            self.log_tail()
        );
    }

    /// Spawns the server and waits until it answers. Returns `false` if it exited
    /// (the port was taken); panics if it neither exits nor answers.
    fn spawn(&mut self, persistence: Persistence) -> bool {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(["--daemonize", "no"])
            .args(persistence.args())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run redis-server (is it installed?): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Ok(Some(_)) = child.try_wait()
            {
                self.child = None;
                return false;
            }
            let pid = self.child.as_ref().map(Child::id);
            if pid.is_some_and(|pid| answers(self.port, pid)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        panic!(
            "redis-server on port {} did not answer within {READY_WITHIN:?}; its log:\n{}",
            self.port,
            self.log_tail()
        );
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    listener.local_addr().expect("a bound address").port()
}

/// Whether the server on `port` is up (not loading) and is process `pid`
/// (not some other server that took the port first).
fn answers(port: u16, pid: u32) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"INFO server\r\n").is_err() {
        return false;
    }
    let want = format!("process_id:{pid}\r\n");
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while reply.len() < 64 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
        if reply.starts_with(b"-") {
            return false; // -LOADING: not ready yet
        }
        if String::from_utf8_lossy(&reply).contains(&want) {
            return true;
        }
    }
    false
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
