//! The Lua scripts that make each multi-step change atomic on the server.
//!
//! Each script has one typed wrapper, a method of [`Scripts`]: it takes
//! what the call is about (stream, group, ids, ...), builds the KEYS and
//! ARGV in the order its script reads them (written at the top of each
//! `lua/*.lua`), and parses the reply. Nothing else builds a script's
//! arguments, so that order is kept in one place on each side. The wrappers
//! sit beside the broker role that runs them: [`read`], [`settle`],
//! [`inspect`], [`consumers`], [`retain`] and [`position`].
//!
//! Each script is `lua/common.lua` followed by its own file. They run with
//! `EVALSHA` (`redis::Script` falls back to `EVAL` after a `NOSCRIPT`, as
//! after a server restart or `SCRIPT FLUSH`), except inside the `MULTI`
//! that makes appends too big for a script, where they run with `EVAL`.

mod consumers;
mod inspect;
mod position;
mod read;
mod retain;
mod settle;

use crate::broker::Conn;
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, Script, ToRedisArgs};
use ruststream_core::EntryId;

use crate::codec::BadReply;

pub(crate) use read::{Aside, Post, ScriptRead};
pub(crate) use retain::Retained;
pub(crate) use settle::Redriven;

const COMMON: &str = include_str!("lua/common.lua");

/// A script, and its code for `EVAL` inside a `MULTI` (where `EVALSHA`
/// could not fall back to the code after a `NOSCRIPT`).
struct Lua {
    script: Script,
    code: String,
}

fn script(body: &str) -> Lua {
    let code = format!("{COMMON}\n{body}");
    Lua {
        script: Script::new(&code),
        code,
    }
}

/// Declares [`Scripts`] from one list of the scripts' names: a field for
/// each, loaded from `lua/NAME.lua` by `Scripts::new`.
macro_rules! scripts {
    ($($name:ident),+ $(,)?) => {
        /// Every script the broker runs, hashed once.
        pub(crate) struct Scripts {
            $($name: Lua,)+
        }

        impl Scripts {
            pub(crate) fn new() -> Self {
                Scripts {
                    $($name: script(include_str!(concat!("lua/", stringify!($name), ".lua"))),)+
                }
            }
        }
    };
}

scripts!(
    read,
    post,
    ack,
    retry,
    dead_letter,
    redrive,
    discard,
    extend_claim,
    count_deliveries,
    delete_consumer,
    dead_letters,
    pending,
    retain,
    move_cursor,
);

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripts")
    }
}

/// Why a script call failed: the server said so (or the connection did),
/// or its reply could not be read.
#[derive(Debug)]
pub(crate) enum ScriptError {
    Server(RedisError),
    Reply(BadReply),
}

impl From<RedisError> for ScriptError {
    fn from(e: RedisError) -> Self {
        ScriptError::Server(e)
    }
}

impl From<BadReply> for ScriptError {
    fn from(e: BadReply) -> Self {
        ScriptError::Reply(e)
    }
}

/// One call of a script, its KEYS and ARGV in the order the script reads
/// them. Kept as arguments rather than an invocation so that the same call
/// can run as `EVALSHA` or, inside a `MULTI`, as `EVAL`; kept in one
/// buffer (a [`Cmd`] without a name) so that an ack of 500 ids makes no
/// allocation per id.
#[derive(Clone)]
struct Call<'a> {
    lua: &'a Lua,
    /// How many of `parts` are KEYS; the rest are ARGV.
    keys: usize,
    parts: Cmd,
}

impl<'a> Call<'a> {
    fn new(lua: &'a Lua, keys: &[&str]) -> Self {
        let mut parts = Cmd::new();
        for key in keys {
            parts.arg(*key);
        }
        Call {
            lua,
            keys: keys.len(),
            parts,
        }
    }

    fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.parts.arg(arg);
        self
    }

    fn ids(mut self, ids: &[EntryId]) -> Self {
        for id in ids {
            self.parts.arg(id.to_text().as_bytes());
        }
        self
    }

    /// `command` (`EVALSHA` or `EVAL`) with `script` (hash or code), then
    /// the KEYS count, the KEYS and the ARGV.
    fn command(&self, command: &str, script: &str) -> Cmd {
        let mut cmd = redis::cmd(command);
        cmd.arg(script).arg(self.keys);
        for part in self.parts.args_iter() {
            if let redis::Arg::Simple(bytes) = part {
                cmd.arg(bytes);
            }
        }
        cmd
    }

    /// Runs the call with `EVALSHA`; after a `NOSCRIPT` (a restarted
    /// server, `SCRIPT FLUSH`, a node that never saw the script) with
    /// `EVAL`, on the same node, which caches the script there again.
    async fn invoke<T: FromRedisValue>(&self, conn: &mut Conn) -> RedisResult<T> {
        match self
            .command("EVALSHA", self.lua.script.get_hash())
            .query_async(conn)
            .await
        {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.eval().query_async(conn).await
            }
            result => result,
        }
    }

    /// The call as `EVAL`, for inside a `MULTI`.
    fn eval(&self) -> Cmd {
        self.command("EVAL", &self.lua.code)
    }
}

/// A script with the shared helpers before `body`: for testing helpers.
#[cfg(test)]
fn with_helpers(body: &str) -> Script {
    script(body).script
}
