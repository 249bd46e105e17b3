//! Pruning consumer names: with [`crate::RustStream::prune_idle_consumers`]
//! set, a subscription deletes, once at start-up, the other consumers of
//! its group that hold nothing and have been idle that long: the names of
//! instances that were replaced (a new pod name, a new host), which would
//! otherwise pile up in the group's consumer list. The broker checks and
//! deletes in one step (`Broker::delete_consumer`), so a consumer that
//! reads meanwhile is kept, with what it was handed.

use std::time::Duration;

use super::Env;

/// How long the pruning may take; it is only housekeeping.
const PRUNE_TIMEOUT: Duration = Duration::from_secs(30);

/// Deletes the group's idle, empty consumers other than this
/// subscription's own. Failures are logged and change nothing.
pub(super) async fn prune_idle_consumers(env: Env) {
    let Some(idle) = env.prune_idle_consumers else {
        return;
    };
    match tokio::time::timeout(PRUNE_TIMEOUT, prune(&env, idle)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(deleted)) => group_event!(
            info,
            env,
            deleted,
            idle_for = ?idle,
            "deleted consumers that held nothing and were idle"
        ),
        Ok(Err(error)) => group_event!(
            warn,
            env,
            %error,
            "could not prune idle consumers; they are kept"
        ),
        Err(_) => group_event!(
            warn,
            env,
            "pruning idle consumers took too long; the rest are kept"
        ),
    }
}

async fn prune(env: &Env, idle: Duration) -> ruststream_core::BrokerResult<u64> {
    let (stream, group) = (env.stream(), env.group());
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    let mut deleted = 0;
    for c in env.broker.consumers(stream, group).await? {
        if c.name == env.consumer || c.pending > 0 || c.idle_ms < idle_ms {
            continue;
        }
        if env
            .broker
            .delete_consumer(stream, group, &c.name, idle)
            .await?
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}
