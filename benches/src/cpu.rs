//! A Redis server's CPU time, the figure other processes on a shared
//! machine do not inflate (this process's own is [`crate::cpu_time`]).

use std::time::Duration;

/// A Redis server's CPU time so far (user and system, every thread), from
/// `INFO cpu`. `None` if the reply lacks the fields.
pub async fn redis_server_time<C: redis::aio::ConnectionLike>(conn: &mut C) -> Option<Duration> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.ok()?;
    let mut seconds = 0.0;
    for field in ["used_cpu_user:", "used_cpu_sys:"] {
        let line = info.lines().find_map(|l| l.strip_prefix(field))?;
        seconds += line.trim().parse::<f64>().ok()?;
    }
    Some(Duration::from_secs_f64(seconds))
}
