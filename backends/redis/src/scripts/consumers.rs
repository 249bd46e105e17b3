//! The consumer scripts: `delete_consumer.lua`, which prunes a consumer
//! that holds nothing.

use std::time::Duration;

use crate::broker::Conn;

use super::{Call, ScriptError, Scripts};
use crate::codec::ms;

impl Scripts {
    /// `delete_consumer.lua`: deletes `consumer` if it holds nothing and
    /// has been idle for `min_idle`; returns whether it did.
    pub(crate) async fn delete_consumer(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        consumer: &str,
        min_idle: Duration,
    ) -> Result<bool, ScriptError> {
        let call = Call::new(&self.delete_consumer, &[stream])
            .arg(group)
            .arg(consumer)
            .arg(ms(min_idle));
        let deleted: i64 = call.invoke(&mut conn).await?;
        Ok(deleted == 1)
    }
}
