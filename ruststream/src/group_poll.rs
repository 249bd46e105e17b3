//! The group gauges (lag, pending, oldest pending age, dead letters,
//! consumers; see `crate::metrics::names`): a task of the running app asks
//! the broker about each group its subscriptions read, every
//! [`GROUP_POLL_EVERY`], until shutdown. A failed poll leaves the gauges as
//! they were; the health checks report a broker that does not answer.

use std::sync::Arc;
use std::time::Duration;

use ruststream_core::{Broker, EntryId};
use tokio::sync::watch;

use crate::metrics::GroupGauges;

/// How often the group gauges are refreshed.
pub(crate) const GROUP_POLL_EVERY: Duration = Duration::from_secs(5);

/// One group to poll.
pub(crate) struct PolledGroup {
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) stream: String,
    pub(crate) group: String,
    pub(crate) gauges: GroupGauges,
}

impl PolledGroup {
    async fn poll(&self) {
        let (stream, group) = (self.stream.as_str(), self.group.as_str());
        let Ok(info) = self.broker.group_info(stream, group).await else {
            return;
        };
        let oldest = match self
            .broker
            .pending(stream, group, EntryId::ZERO, 1, None)
            .await
        {
            Ok(first) => first.first().map(|p| p.idle_ms),
            Err(_) => None,
        };
        self.gauges.set(&info, oldest);
    }
}

/// Polls `groups` every [`GROUP_POLL_EVERY`] until `shutdown` says stop.
pub(crate) async fn poll_groups(
    groups: Vec<PolledGroup>,
    mut shutdown: watch::Receiver<Option<Duration>>,
) {
    loop {
        for g in &groups {
            g.poll().await;
        }
        tokio::select! {
            () = tokio::time::sleep(GROUP_POLL_EVERY) => {}
            _ = shutdown.wait_for(Option::is_some) => return,
        }
    }
}
