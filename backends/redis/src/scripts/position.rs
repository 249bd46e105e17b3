//! The cursor script: `move_cursor.lua`, which moves a group's cursor
//! forward without passing over a retry still to run.

use crate::broker::Conn;
use ruststream_core::EntryId;

use super::{Call, ScriptError, Scripts};
use crate::keys::GroupKeys;

impl Scripts {
    /// `move_cursor.lua`: moves `group`'s cursor to `target`, first making
    /// owed the group's retry copies among `copies` that it has not read.
    /// Returns how many it made owed.
    pub(crate) async fn move_cursor(
        &self,
        mut conn: Conn,
        stream: &str,
        group: &str,
        target: EntryId,
        copies: &[EntryId],
    ) -> Result<u64, ScriptError> {
        let keys = GroupKeys::new(stream, group);
        let call = Call::new(
            &self.move_cursor,
            &[stream, &keys.due, &keys.owed, &keys.wake],
        )
        .arg(group)
        .arg(target.to_string())
        .ids(copies);
        Ok(call.invoke(&mut conn).await?)
    }
}
