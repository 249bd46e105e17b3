//! The consumer and group scripts: `delete_consumer.lua`, which prunes a
//! consumer that holds nothing, and `set_position.lua`, which moves a
//! group's cursor.

use std::time::Duration;

use crate::broker::Conn;

use super::{Call, ScriptError, Scripts};
use crate::codec::ms;
use crate::keys::GroupKeys;

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

    /// `set_position.lua`: moves `group`'s cursor to `position` (`$`, `0`
    /// or an id) and forgets the owed records of the entries past it (read
    /// again as new); returns how many it forgot.
    pub(crate) async fn set_position(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        position: &str,
    ) -> Result<u64, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let call = Call::new(&self.set_position, &[stream, &keys.due, &keys.owed])
            .arg(group)
            .arg(position);
        Ok(call.invoke(&mut conn).await?)
    }
}
