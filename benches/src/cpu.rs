//! CPU time, the figure other processes on a shared machine do not
//! inflate: this process's, and a Redis server's.

use std::time::Duration;

/// The on-CPU time of every thread of this process so far, from
/// `/proc/self/task/*/schedstat` (Linux; nanoseconds, as the scheduler
/// accounts it). `None` where that cannot be read. A running thread's
/// figure is brought up to date only at the scheduler's tick or when it is
/// switched out, so it can lag by a few milliseconds: compare it over
/// windows of 100 ms or more.
pub fn process_time() -> Option<Duration> {
    let mut total: u64 = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let mut path = task.ok()?.path();
        path.push("schedstat");
        // A thread may end between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

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
