//! Shared by the Redis broker's tests: the server's URL, unique names, and a
//! plain client for looking at what the broker wrote.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

/// The server under test: `RUSTSTREAM_REDIS_URL`, default
/// `redis://127.0.0.1:6379`. Tests never skip without one: they fail.
pub fn url() -> String {
    std::env::var("RUSTSTREAM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The same server, database `db` (tests that kill connections or flush use
/// a database of their own, so they disturb nothing else).
pub fn url_db(db: u32) -> String {
    let base = url();
    let trimmed = match base.rsplit_once('/') {
        Some((head, tail)) if !head.ends_with('/') && tail.chars().all(|c| c.is_ascii_digit()) => {
            head.to_owned()
        }
        _ => base.trim_end_matches('/').to_owned(),
    };
    format!("{trimmed}/{db}")
}

/// A name no other test or run uses.
pub fn unique(what: &str) -> String {
    format!("rs-test:{}:{what}", ruststream_redis::unique_token())
}

/// A plain connection to the server (database `db`), as another client
/// (redis-cli, redis-py) would see it.
pub async fn raw(db: u32) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url_db(db)).unwrap();
    // No response timeout (the client's default is short): replies of
    // entries with thousands of fields take a while on a loaded machine.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no Redis server at {} ({e}); start one or set RUSTSTREAM_REDIS_URL",
                url()
            )
        })
}

/// Sends `command` on a plain connection to database 0 ([`raw`]), as
/// another client would; its reply.
pub async fn raw_command<T: redis::FromRedisValue>(command: &redis::Cmd) -> T {
    command.query_async(&mut raw(0).await).await.unwrap()
}

/// `XRANGE key from to` on database 0, as another client reads it.
pub async fn xrange(key: &str, from: &str, to: &str) -> redis::Value {
    let mut cli = raw(0).await;
    redis::cmd("XRANGE")
        .arg(key)
        .arg(from)
        .arg(to)
        .query_async(&mut cli)
        .await
        .unwrap()
}

/// The first ten rows of `XPENDING key group - +` on database 0, as
/// another client reads them.
pub async fn xpending(key: &str, group: &str) -> Vec<redis::Value> {
    let mut cli = raw(0).await;
    redis::cmd("XPENDING")
        .arg(key)
        .arg(group)
        .arg("-")
        .arg("+")
        .arg(10)
        .query_async(&mut cli)
        .await
        .unwrap()
}

/// Kills every client connected to database `db` (but the one asking),
/// as a network failure or a server restart would.
pub async fn kill_clients_of_db(db: u32) -> usize {
    let mut admin = raw(db).await;
    let me: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut admin)
        .await
        .unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut killed = 0;
    for line in list.lines() {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .map(str::to_owned)
        };
        let (Some(id), Some(client_db)) = (field("id"), field("db")) else {
            continue;
        };
        if client_db == db.to_string() && id != me.to_string() {
            let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(&id)
                .query_async(&mut admin)
                .await;
            killed += 1;
        }
    }
    killed
}

/// Makes each of `groups` on `stream`, starting at `start`.
pub async fn ensure_groups(
    broker: &ruststream_redis::RedisBroker,
    stream: &str,
    groups: &[&str],
    start: ruststream_core::StreamStart,
) {
    use ruststream_core::Broker as _;
    for group in groups {
        broker.ensure_group(stream, group, start).await.unwrap();
    }
}

/// Publishes one entry with the payload `payload` to `stream`; its id.
pub async fn publish_bytes(
    broker: &ruststream_redis::RedisBroker,
    stream: &str,
    payload: &[u8],
) -> ruststream_core::EntryId {
    use ruststream_core::Broker as _;
    broker
        .publish(stream, ruststream_core::Message::new(payload.to_vec()))
        .await
        .unwrap()
}
