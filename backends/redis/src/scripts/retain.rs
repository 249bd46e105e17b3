//! The retention script: `retain.lua`, which trims a stream by its rule
//! but never past what a group still needs.

use std::time::Duration;

use crate::broker::Conn;

use super::{Call, ScriptError, Scripts};
use crate::codec::{array, bad, int, ms};
use crate::keys::GroupKeys;

/// What a retention pass did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Retained {
    /// Entries removed (0 when the rule or the groups kept everything).
    Trimmed(u64),
    /// A group appeared after the caller listed them: nothing was trimmed.
    GroupsChanged,
}

impl Scripts {
    /// `retain.lua` on `stream`, whose groups are `groups`.
    pub(crate) async fn retain(
        &self,
        mut conn: Conn,
        stream: &str,
        groups: &[String],
        max_len: Option<u64>,
        max_age: Option<Duration>,
    ) -> Result<Retained, ScriptError> {
        let group_keys: Vec<GroupKeys> = groups.iter().map(|g| GroupKeys::new(stream, g)).collect();
        let mut keys = vec![stream];
        for k in &group_keys {
            keys.push(&k.owed);
            keys.push(&k.dead_index);
        }
        let mut call = Call::new(&self.retain, &keys)
            .arg(max_len.unwrap_or(0))
            .arg(max_age.map_or(0, ms));
        for group in groups {
            call = call.arg(group.as_str());
        }
        let reply: redis::Value = call.invoke(&mut conn).await?;
        let removed = array(&reply)
            .first()
            .and_then(int)
            .ok_or_else(|| bad("retain reply", &reply))?;
        Ok(match u64::try_from(removed) {
            Ok(n) => Retained::Trimmed(n),
            Err(_) => Retained::GroupsChanged,
        })
    }
}
