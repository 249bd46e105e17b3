//! The Lua scripts that make each multi-step change atomic on the server.
//!
//! Each script is `lua/common.lua` followed by its own file. They run with
//! `EVALSHA` (`redis::Script` falls back to `EVAL` after a `NOSCRIPT`, as
//! after a server restart or `SCRIPT FLUSH`), except inside the `MULTI`
//! that makes appends too big for a script, where they run with `EVAL`.

use redis::Script;

const COMMON: &str = include_str!("lua/common.lua");

/// A script, and its code for `EVAL` inside a `MULTI` (where `EVALSHA`
/// could not fall back to the code after a `NOSCRIPT`).
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) code: String,
}

fn script(body: &str) -> Lua {
    let code = format!("{COMMON}\n{body}");
    Lua {
        script: Script::new(&code),
        code,
    }
}

/// Every script the broker runs, hashed once.
pub(crate) struct Scripts {
    pub(crate) read: Lua,
    pub(crate) post: Lua,
    pub(crate) ack: Lua,
    pub(crate) retry: Lua,
    pub(crate) dead_letter: Lua,
    pub(crate) redrive: Lua,
    pub(crate) discard: Lua,
    pub(crate) dead_letters: Lua,
    pub(crate) pending: Lua,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            read: script(include_str!("lua/read.lua")),
            post: script(include_str!("lua/post.lua")),
            ack: script(include_str!("lua/ack.lua")),
            retry: script(include_str!("lua/retry.lua")),
            dead_letter: script(include_str!("lua/dead_letter.lua")),
            redrive: script(include_str!("lua/redrive.lua")),
            discard: script(include_str!("lua/discard.lua")),
            dead_letters: script(include_str!("lua/dead_letters.lua")),
            pending: script(include_str!("lua/pending.lua")),
        }
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripts")
    }
}

#[cfg(test)]
pub(crate) fn with_helpers(body: &str) -> Script {
    script(body).script
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use redis::Value;

    use super::with_helpers;

    /// Runs `claim_reply_entries` (the read script's parser of an
    /// `XREADGROUP ... CLAIM` reply) on a recorded reply, on the test
    /// server (any version: the reply is given, not asked for).
    async fn parse_recorded(reply_literal: &str) -> Vec<(String, Vec<String>, i64, i64)> {
        let url = std::env::var("RUSTSTREAM_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let body = format!(
            "local out = {{}}\n\
             for _, e in ipairs(claim_reply_entries({reply_literal})) do\n\
               out[#out + 1] = {{ e[1], e[2] or {{}}, e[3], e[4] }}\n\
             end\n\
             return out"
        );
        let value: Value = with_helpers(&body).invoke_async(&mut conn).await.unwrap();
        let Value::Array(rows) = value else {
            panic!("{value:?}")
        };
        rows.into_iter()
            .map(|row| {
                let Value::Array(parts) = row else { panic!() };
                let text = |v: &Value| match v {
                    Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                    other => panic!("{other:?}"),
                };
                let Value::Array(fields) = &parts[1] else {
                    panic!()
                };
                let Value::Int(idle) = parts[2] else { panic!() };
                let Value::Int(count) = parts[3] else {
                    panic!()
                };
                (
                    text(&parts[0]),
                    fields.iter().map(text).collect(),
                    idle,
                    count,
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn an_append_made_for_an_entry_settled_meanwhile_is_deleted_again() {
        // The broker's second pass of a retry with copy (see `plan_appends`)
        // for an entry that another worker settled after the first pass: the
        // copy appended in the same MULTI must not stay.
        let url = std::env::var("RUSTSTREAM_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let s = format!("rs-test:{}-{nanos:x}:precopy", std::process::id());
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&s)
            .arg("g")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .unwrap();
        // Never read, so not pending: settled, as far as the group goes.
        let id: String = redis::cmd("XADD")
            .arg(&s)
            .arg("*")
            .arg("payload")
            .arg("x")
            .query_async(&mut conn)
            .await
            .unwrap();
        let keys = crate::codec::GroupKeys::new(&s, "g");
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("XADD")
            .arg(&s)
            .arg("*")
            .arg("rs:group")
            .arg("g")
            .arg("rs:count")
            .arg(1)
            .arg("rs:orig")
            .arg(&id)
            .arg("payload")
            .arg("x")
            .ignore();
        pipe.cmd("EVAL")
            .arg(&super::Scripts::new().retry.code)
            .arg(4)
            .arg(&s)
            .arg(&keys.due)
            .arg(&keys.owed)
            .arg(&keys.wake)
            .arg("g")
            .arg("copy")
            .arg(0)
            .arg(1)
            .arg(&id)
            .arg(&id);
        let (reply,): (Value,) = pipe.query_async(&mut conn).await.unwrap();
        assert_eq!(
            reply,
            Value::Array(vec![Value::Int(0), Value::Array(vec![])]),
            "nothing retried"
        );
        let len: i64 = redis::cmd("XLEN")
            .arg(&s)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(len, 1, "the copy was deleted again");
    }

    #[tokio::test]
    async fn parses_a_claim_reply_with_string_metadata_as_redis_8_4_0_sends() {
        // The shape Redis 8.4.0 replies in: one claimed entry (idle 287341
        // ms, 22 deliveries) then one new entry, the metadata as strings.
        let reply = "{ { 'payments', { \
            { '1764497928656-0', { 'payload', '{}' }, '287341', '22' }, \
            { '1764497928700-0', { 'payload', '[]' }, '0', '0' } } } }";
        let rows = parse_recorded(reply).await;
        assert_eq!(
            rows,
            [
                (
                    "1764497928656-0".to_owned(),
                    vec!["payload".to_owned(), "{}".to_owned()],
                    287_341,
                    22
                ),
                (
                    "1764497928700-0".to_owned(),
                    vec!["payload".to_owned(), "[]".to_owned()],
                    0,
                    0
                ),
            ]
        );
    }

    #[tokio::test]
    async fn parses_a_claim_reply_with_integer_metadata_and_a_trimmed_entry() {
        // Redis 8.4.2 and later send integers; a claimed entry trimmed from
        // the stream comes with no fields (nil, false in Lua).
        let reply = "{ { 's', { \
            { '5-0', false, 1200, 3 }, \
            { '6-0', { 'payload', 'x', 'h:k', 'v' }, 0, 0 } } } }";
        let rows = parse_recorded(reply).await;
        assert_eq!(rows[0], ("5-0".to_owned(), vec![], 1200, 3));
        assert_eq!(rows[1].1, ["payload", "x", "h:k", "v"]);
        assert_eq!((rows[1].2, rows[1].3), (0, 0));
        // No entries at all (BLOCK timed out, or nothing to read): nil.
        assert!(parse_recorded("false").await.is_empty());
    }
}
