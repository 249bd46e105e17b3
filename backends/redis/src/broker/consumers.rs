//! Consumer bookkeeping: pruning a consumer that holds nothing (see
//! `lua/delete_consumer.lua`).

use std::time::Duration;

use ruststream_core::BrokerResult;

use super::{RedisBroker, check_names};

pub(super) async fn delete_consumer(
    broker: &RedisBroker,
    stream: &str,
    group: &str,
    consumer: &str,
    min_idle: Duration,
) -> BrokerResult<bool> {
    check_names(stream, Some(group), Some(consumer))?;
    let scope = broker.scope(stream, Some(group));
    broker
        .script(scope, |s, conn| {
            s.delete_consumer(conn, stream, group, consumer, min_idle)
        })
        .await
}
