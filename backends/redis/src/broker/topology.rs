//! What the broker is connected to: one server, or a Redis Cluster.
//!
//! [`Conn`] is the one connection type the rest of the broker sends
//! commands, pipelines and scripts on, whatever the topology:
//!
//! - on one server, a `ConnectionManager` (one multiplexed connection that
//!   reconnects by itself), or a plain multiplexed connection for a
//!   blocking wait;
//! - on a cluster, redis-rs's cluster connection: it routes each command by
//!   its key's slot, follows `MOVED` and `ASK`, refreshes the slot map
//!   after a failover or a reshard, and sends a pipeline to the node of its
//!   first key (a pipeline whose keys cross slots fails before it is sent).
//!
//! Every script and pipeline the broker sends touches the keys of one
//! stream, and those share the stream's hash tag (see [`crate::keys`]),
//! so each lands on one slot. The conformance suite runs on a cluster to
//! keep it so.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How to reach the server(s): the client a broker makes connections with.
pub(super) enum Topology {
    /// One server (or a proxy in front of several).
    Standalone(Box<Client>),
    /// A Redis Cluster, found from its seed nodes.
    Cluster(Box<ClusterClients>),
}

/// A cluster's clients: one for every call, one without a response
/// timeout for blocking waits.
pub(super) struct ClusterClients {
    pub(super) shared: ClusterClient,
    pub(super) blocking: ClusterClient,
}

/// A connection on which the broker sends commands.
#[derive(Clone)]
pub(crate) enum Conn {
    /// The shared, self-reconnecting connection to one server.
    Managed(ConnectionManager),
    /// A plain connection to one server (blocking waits).
    Direct(MultiplexedConnection),
    /// A connection to a cluster (shared, or for blocking waits).
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Managed(conn) => conn.req_packed_command(cmd),
            Conn::Direct(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Managed(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Direct(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(conn) => conn.get_db(),
            Conn::Direct(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A server among those that hold keys: on a cluster, one master by its
/// address; on one server, that server.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum KeyHolder {
    /// The one server.
    Only,
    /// A cluster master at `host:port`.
    Master { host: String, port: u16 },
}

impl Conn {
    /// The servers that hold keys, for commands that look at every key
    /// (`SCAN`): on a cluster, every master as the cluster sees it now.
    pub(super) async fn key_holders(&mut self) -> RedisResult<Vec<KeyHolder>> {
        let Conn::Cluster(conn) = self else {
            return Ok(vec![KeyHolder::Only]);
        };
        // A command sent to all masters without a reply policy answers with
        // a map from each master's address to its reply.
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = conn.route_command(redis::cmd("PING"), routing).await?;
        let mut holders = Vec::new();
        if let Value::Map(pairs) = reply {
            for (address, _) in pairs {
                let address: String = redis::from_redis_value(address)?;
                if let Some(holder) = parse_address(&address) {
                    holders.push(holder);
                }
            }
        }
        holders.sort();
        Ok(holders)
    }

    /// Sends `cmd` to `holder` (on one server, just sends it).
    pub(super) async fn query_on<T: redis::FromRedisValue>(
        &mut self,
        holder: &KeyHolder,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match (self, holder) {
            (Conn::Cluster(conn), KeyHolder::Master { host, port }) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let reply = conn.route_command(cmd.clone(), routing).await?;
                Ok(redis::from_redis_value(reply)?)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

/// `host:port` (IPv6 hosts keep their colons: the port is after the last).
fn parse_address(address: &str) -> Option<KeyHolder> {
    let (host, port) = address.rsplit_once(':')?;
    Some(KeyHolder::Master {
        host: host.to_owned(),
        port: port.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_addresses_are_split_at_the_last_colon() {
        assert_eq!(
            parse_address("127.0.0.1:7000"),
            Some(KeyHolder::Master {
                host: "127.0.0.1".into(),
                port: 7000
            })
        );
        assert_eq!(
            parse_address("::1:7001"),
            Some(KeyHolder::Master {
                host: "::1".into(),
                port: 7001
            })
        );
        assert_eq!(parse_address("nonsense"), None);
    }
}
