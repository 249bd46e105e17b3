//! A private Redis Cluster for tests that kill a master or move slots:
//! six `redis-server` processes (3 masters, 3 replicas) on free loopback
//! ports, made a cluster by `redis-cli --cluster create`. Never the shared
//! cluster of `scripts/redis-cluster`. Nodes time a silent peer out after
//! 1 s, so a failover takes a few seconds. Dropping it kills every node.
//!
//! Cluster commands go through `redis-cli`, as an operator would run them.
//! [`RedisCluster::start_tls`] makes the cluster speak TLS (clients, the
//! cluster bus and replication) on ports of its own, beside plain ports
//! kept for readiness checks and set-up.

use std::process::Command;
use std::time::{Duration, Instant};

use super::redis_server::{Persistence, RedisServer, free_port};
use super::tls::TestCerts;

/// A node as `CLUSTER NODES` lists it.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// The slot ranges it serves (masters), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Node {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Each node's TLS port, on a TLS cluster.
    tls_ports: Vec<u16>,
}

impl RedisCluster {
    /// Starts six nodes and makes them a cluster; waits until every node
    /// reports it ok.
    pub fn start(what: &str) -> RedisCluster {
        RedisCluster::start_with(what, None)
    }

    /// [`RedisCluster::start`] on TLS: clients, the cluster bus and
    /// replication use TLS ports with `certs` (clients must present the
    /// client certificate).
    pub fn start_tls(what: &str, certs: &TestCerts) -> RedisCluster {
        RedisCluster::start_with(what, Some(certs))
    }

    fn start_with(what: &str, tls: Option<&TestCerts>) -> RedisCluster {
        let mut tls_ports = Vec::new();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|i| {
                let mut args: Vec<String> = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    // Replicas sync at once (the default waits 5 s for
                    // more replicas to share a transfer).
                    "--repl-diskless-sync-delay",
                    "0",
                ]
                .map(str::to_owned)
                .to_vec();
                if let Some(certs) = tls {
                    let port = free_port();
                    tls_ports.push(port);
                    args.extend(certs.server_args(port));
                    args.extend(
                        ["--tls-cluster", "yes", "--tls-replication", "yes"].map(str::to_owned),
                    );
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                RedisServer::start_with(&format!("{what}-node{i}"), Persistence::None, &args)
            })
            .collect();
        let cluster = RedisCluster { nodes, tls_ports };
        let mut create = Command::new("redis-cli");
        if let Some(certs) = tls {
            create.args(certs.cli_args());
        }
        create.arg("--cluster").arg("create");
        for port in cluster.client_ports() {
            create.arg(format!("127.0.0.1:{port}"));
        }
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = create
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli (is it installed?): {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_healthy(Duration::from_secs(20));
        cluster.wait_replicas_synced(Duration::from_secs(20));
        cluster
    }

    /// Waits until every replica has synced with its master: before that,
    /// a replica cannot take over.
    fn wait_replicas_synced(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        for node in self.nodes().iter().filter(|n| !n.master) {
            while !self
                .cli(node.port, &["info", "replication"])
                .lines()
                .any(|l| l.trim() == "master_link_status:up")
            {
                assert!(
                    Instant::now() < deadline,
                    "replica :{} did not sync within {limit:?}",
                    node.port
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// `redis://127.0.0.1:<port>` of every node (`rediss://` and the TLS
    /// port on a TLS cluster): the seeds a broker takes.
    pub fn urls(&self) -> Vec<String> {
        let scheme = if self.tls_ports.is_empty() {
            "redis"
        } else {
            "rediss"
        };
        self.client_ports()
            .into_iter()
            .map(|port| format!("{scheme}://127.0.0.1:{port}"))
            .collect()
    }

    /// The ports clients use: the TLS ones on a TLS cluster.
    fn client_ports(&self) -> Vec<u16> {
        if self.tls_ports.is_empty() {
            self.nodes.iter().map(RedisServer::port).collect()
        } else {
            self.tls_ports.clone()
        }
    }

    /// The plain port of every node, for set-up commands.
    pub fn plain_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// Runs `redis-cli -p <port> <args>` and returns what it printed.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A node that is running, to ask about the cluster.
    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(RedisServer::port)
            .expect("a node of the cluster is running")
    }

    /// The slot `key` hashes to.
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = self.cli(self.live_port(), &["cluster", "keyslot", key]);
        reply
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT {key} answered {reply:?}"))
    }

    /// The nodes as a running node sees them.
    pub fn nodes(&self) -> Vec<Node> {
        self.cli(self.live_port(), &["cluster", "nodes"])
            .lines()
            .filter_map(parse_node)
            .collect()
    }

    /// The master serving `slot` now, as a running node sees it.
    pub fn master_of(&self, slot: u16) -> Node {
        self.nodes()
            .into_iter()
            .find(|n| n.master && !n.failed && n.serves(slot))
            .unwrap_or_else(|| panic!("no live master serves slot {slot}"))
    }

    /// Kills (SIGKILL) the node on `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port() == port) {
            node.kill();
        }
    }

    /// Kills the master of `slot` and waits until one of its replicas
    /// serves the slot and the cluster is healthy again. Returns the old
    /// master and the new.
    pub fn fail_over(&mut self, slot: u16, limit: Duration) -> (Node, Node) {
        let old = self.master_of(slot);
        self.kill(old.port);
        let deadline = Instant::now() + limit;
        loop {
            let new = self
                .nodes()
                .into_iter()
                .find(|n| n.master && !n.failed && n.serves(slot) && n.id != old.id);
            if let Some(new) = new {
                self.wait_healthy(deadline.saturating_duration_since(Instant::now()));
                return (old, new);
            }
            assert!(
                Instant::now() < deadline,
                "no replica took slot {slot} over within {limit:?}: {}",
                self.cli(self.live_port(), &["cluster", "nodes"])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every running node reports the cluster ok and sees a
    /// live master for every slot.
    pub fn wait_healthy(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                self.cli(n.port(), &["cluster", "info"])
                    .lines()
                    .any(|l| l.trim() == "cluster_state:ok")
            });
            let covered: u32 = self
                .nodes()
                .iter()
                .filter(|n| n.master && !n.failed)
                .flat_map(|n| n.slots.iter())
                .map(|&(a, b)| u32::from(b - a) + 1)
                .sum();
            if ok && covered == 16384 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster is not healthy after {limit:?}: {}",
                self.cli(self.live_port(), &["cluster", "nodes"])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Moves `slot`, keys and all, to the master on `to`, as
    /// `redis-cli --cluster reshard` does: the target imports, the source
    /// migrates, the keys go `batch` at a time with `MIGRATE` (a pause
    /// between batches, so clients meet `ASK` and `TRYAGAIN` on the way),
    /// then every master is told the new owner.
    pub fn move_slot(&self, slot: u16, to: &Node, batch: usize, pause: Duration) {
        let from = self.master_of(slot);
        assert_ne!(from.id, to.id, "slot {slot} is already on {}", to.port);
        let slot_arg = slot.to_string();
        let ok = |reply: String, what: &str| {
            assert!(reply.starts_with("OK"), "{what}: {reply}");
        };
        ok(
            self.cli(
                to.port,
                &["cluster", "setslot", &slot_arg, "importing", &from.id],
            ),
            "SETSLOT IMPORTING",
        );
        ok(
            self.cli(
                from.port,
                &["cluster", "setslot", &slot_arg, "migrating", &to.id],
            ),
            "SETSLOT MIGRATING",
        );
        loop {
            let keys = self.cli(
                from.port,
                &["cluster", "getkeysinslot", &slot_arg, &batch.to_string()],
            );
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_port = to.port.to_string();
            let mut migrate = vec!["migrate", "127.0.0.1", &to_port, "", "0", "5000", "keys"];
            migrate.extend(keys.iter().copied());
            let reply = self.cli(from.port, &migrate);
            assert!(
                reply.starts_with("OK") || reply.starts_with("NOKEY"),
                "MIGRATE: {reply}"
            );
            std::thread::sleep(pause);
        }
        for node in self.nodes().iter().filter(|n| n.master && !n.failed) {
            ok(
                self.cli(
                    node.port,
                    &["cluster", "setslot", &slot_arg, "node", &to.id],
                ),
                "SETSLOT NODE",
            );
        }
    }
}

/// One line of `CLUSTER NODES`:
/// `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`
fn parse_node(line: &str) -> Option<Node> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let address = fields.get(1)?;
    let port = address
        .split('@')
        .next()?
        .rsplit_once(':')?
        .1
        .parse()
        .ok()?;
    let flags = fields.get(2)?;
    let slots = fields
        .iter()
        .skip(8)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(Node {
        id: (*fields.first()?).to_owned(),
        port,
        master: flags.contains("master"),
        failed: flags.contains("fail") && !flags.contains("fail?"),
        slots,
    })
}
