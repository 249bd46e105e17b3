//! The Redis Streams broker: ruststream's consumer groups on a Redis
//! server, shared by every machine that runs the service.
//!
//! ```no_run
//! use ruststream_core::{Broker, Message, ReadMode, ReadRequest, StreamStart};
//! use ruststream_redis::RedisBroker;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ruststream_core::BrokerError> {
//! // Nothing connects yet: the first call does.
//! let broker = RedisBroker::standalone("redis://127.0.0.1:6379");
//! broker.ensure_group("jobs", "workers", StreamStart::New).await?;
//! let id = broker.publish("jobs", Message::new(br#"{"n":1}"#.to_vec())).await?;
//! let batch = broker
//!     .read(ReadRequest::new("jobs", "workers", "w1", ReadMode::New, 100))
//!     .await?;
//! broker.ack("jobs", "workers", &[id]).await?;
//! # let _ = batch; Ok(()) }
//! ```
//!
//! # The client
//!
//! The broker uses the [`redis`](https://docs.rs/redis) crate (redis-rs)
//! on tokio rather than `fred`. Both are maintained and both pipeline;
//! redis-rs is the one the Redis project itself maintains, it is the most
//! used Rust client (so the one a reader of this code knows), it tracks new
//! server features (it already speaks 8.4's `XREADGROUP ... CLAIM`), and
//! its `ConnectionManager` reconnects a multiplexed connection in the
//! background, which is all the resilience this broker needs. Its cluster
//! support is there too, behind a feature this crate does not enable yet
//! (see *Cluster* below).
//!
//! Connections:
//!
//! - One multiplexed connection (a `ConnectionManager`) carries every
//!   command, pipelined: concurrent calls share it without waiting for each
//!   other. It is made on first use, never at construction: an app is built
//!   before its runtime starts, and the testkit swaps brokers out.
//! - Blocking waits get connections of their own (pooled, one per waiting
//!   reader), so a reader blocked for seconds never holds up an ack.
//!
//! # Field layout
//!
//! An entry's fields, readable and writable by any client (`redis-cli`,
//! redis-py):
//!
//! | field | holds |
//! |---|---|
//! | `payload` | the payload bytes (ruststream writes JSON here) |
//! | `h:<name>` | header `<name>`, in the order the headers were set |
//! | `rs:group`, `rs:count`, `rs:orig` | on a retry copy only, first: the group it is for, the deliveries of its original, and the id of the entry it was first copied from (a copy of a copy keeps the first original's) |
//!
//! `XADD payments * payload '{"id":1,"account":"a","amount_cents":5}'`
//! makes an entry a ruststream subscriber consumes as is (no headers). A
//! field without the `h:` prefix that is not `payload` and not `rs:...` is
//! read as a header under its own name, so `XADD s * payload .. tenant acme`
//! carries the header `tenant`. An entry without `payload` has an empty
//! payload (which a JSON subscriber dead-letters as undecodable).
//!
//! Beside each stream `S`, for each group `G`, ruststream keeps (all with
//! the hash tag `{S}`):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `rs:{S}:due:G` | sorted set | owed entries as zero-padded ids (`<20-digit ms>-<20-digit seq>`), scored by due time (server ms) |
//! | `rs:{S}:owed:G` | hash | owed entry id -> `"<times delivered> <owed since ms>"` |
//! | `rs:{S}:dead:G` | stream | one entry per dead letter: `rs:id` (the id the group held), `rs:reason`, `rs:times_delivered`, `rs:dead_at`, `rs:orig` (the original's id; differs from `rs:id` for a retry copy), then the entry's own fields (or `rs:lost 1` when the stream no longer held it) |
//! | `rs:{S}:dead-index:G` | sorted set | `<zero-padded id>:<dead-letter entry id>`, for lookups and listing in id order |
//! | `rs:{S}:wake:G` | stream | one entry, appended to when entries become owed, to wake blocked readers |
//! | `rs:{S}:read-mark:<length of G>:G:C` | string | on a cluster only: the token of consumer `C`'s last read, so that a read the client sends twice is noticed (see "Cluster"); expires a minute after the read |
//!
//! `XRANGE rs:{payments}:dead:ledger - +` lists a group's dead letters
//! with their reasons and payloads; [`Broker::dead_letters`](ruststream_core::Broker::dead_letters)
//! shows a dead retry copy's original id as the header [`ORIGINAL_ID_HEADER`].
//!
//! The due set's members are padded so that entries due at the same time
//! (a hand-back at shutdown, a redrive of many entries) come back in id
//! order: a sorted set orders equal scores by member text, and `5-10` sorts
//! before `5-2` as text. Members written as plain ids by earlier versions
//! are still read (and a member left without its owed record owes nothing:
//! a read removes it). A worker of an earlier version cannot read padded
//! members, so upgrade every worker of a group together.
//!
//! ## Names
//!
//! Every call checks the stream, group and consumer names it takes before
//! it sends anything, with the rules every broker applies
//! ([`ruststream_core::check_name`]): not empty, at most
//! [`MAX_NAME_LEN`](ruststream_core::MAX_NAME_LEN) bytes, no control
//! characters, and no `{` or `}` in stream and group names. A bad name is a
//! [`BrokerError::InvalidArgument`](ruststream_core::BrokerError::InvalidArgument)
//! naming the name and the rule. Those rules are enough to keep the keys
//! apart, so the Redis broker adds none: the first `}` of a side key ends
//! the stream's name, the kind (`due`, `owed`, `dead`, `dead-index`,
//! `wake`, `read-mark`: no `:` in any) runs to the next `:`, and the
//! group's name is the rest (for a read mark, the group's length comes
//! first, then the group and the consumer), so no two (stream, kind, group) share a key (a group `x:idx` has
//! `rs:{S}:dead:x:idx`, never `rs:{S}:dead-index:x`); and no stream is named
//! like a side key, which has braces.
//!
//! # How it maps onto Redis
//!
//! | call | Redis |
//! |---|---|
//! | publish | one pipelined `XADD` per message, one round trip per batch |
//! | ensure group | `XGROUP CREATE ... MKSTREAM` (`$`, `0` or an id); `BUSYGROUP` means it exists |
//! | start at | `XGROUP SETID` |
//! | read `New` | `XREADGROUP ... >` |
//! | read `Reclaim` | `XAUTOCLAIM` from a cursor kept per consumer |
//! | read `Claiming` | `XREADGROUP ... CLAIM min_idle ... >` (Redis 8.4 and later) |
//! | read `OwnPending` | `XREADGROUP ... <id>` |
//! | ack | `XACK` of the whole batch; only if it did not find them all, a script that also clears the ids `XACK` did not find from the owed entries (held by nobody) |
//! | retry with copy | `XADD` of the copy and `XACK` of the original, in one script |
//! | retry after a delay, nack | `XACK` and an entry in the due set, in one script |
//! | dead letter, redrive, discard | scripts over the dead-letter stream and index |
//! | extend claim | `XCLAIM ... 0 ... JUSTID` (no delivery counted) of the ids `XPENDING` shows under the consumer and the stream still holds, in one script |
//! | count deliveries | `XCLAIM ... 0 <id> RETRYCOUNT <n> JUSTID` per id that `XPENDING` shows under the consumer (the count raised, never lowered) and the stream still holds, in one script |
//! | group info | `XINFO GROUPS` (lag, pending, consumers, cursor) |
//! | consumers, pending | `XINFO CONSUMERS`, `XPENDING` plus the due set |
//!
//! An id given to ensure group or start at must not be past the last id the
//! stream ever had (`XINFO STREAM`; `0-0` for a missing stream): the group
//! would pass over everything appended until the clock reached it, so the
//! call is refused before the group is made or moved
//! ([`StreamStart::check_within`](ruststream_core::StreamStart::check_within)).
//!
//! Reads. A `New` read, the hot path, is one round trip of plain commands:
//! `TIME`, the due set's first score, the wake stream's and the stream's
//! last ids (where a blocking wait after an empty read starts), and
//! `XREADGROUP ... >`. Entries never pass through Lua, which would cost
//! more server time than the read itself. Only when that round trip shows
//! owed entries due, or finds retry copies, is a script run after it: the
//! owed entries are handed out first (and new entries read beyond the
//! request's count handed back, owed at once, as if never read); copies
//! meant for other groups are acked for this one; the group's own copies get
//! their pending records counted across copies, or are dead-lettered at the
//! attempt bound. Every other mode is one Lua script (`EVALSHA`) doing all of
//! that and the mode's own read atomically: `XAUTOCLAIM` (entries reported
//! trimmed while pending are acked away and logged, not retried forever),
//! `XREADGROUP ... CLAIM`, or `XREADGROUP ... <id>`.
//!
//! A blocking read that finds nothing waits with `XREAD BLOCK` on the stream
//! (after the group's cursor) and on the group's wake stream, on its own
//! connection, and reads again when either moves, when the next owed entry
//! falls due, or (claiming, reclaim) when an entry may have become idle
//! enough. A `New` read sends its next read (the round trip above) behind
//! the wait on that connection, so the server runs it the moment the wait
//! ends and an entry that finds the subscriber idle costs one round trip,
//! not two. That read claims what it finds, so a wait given up on half-way
//! (the runtime shutting down drops its read) is not left to claim entries
//! for nobody: the broker wakes it (an entry on the wake stream), awaits its
//! answer and hands back, owed at once, whatever its read claimed; a listing
//! of that consumer's pending list waits until it has. Other modes wait
//! with `XREAD` alone, which delivers nothing to the group.
//!
//! Delivery counts: Redis counts a delivery as it happens (`times_delivered`
//! is 1 after the first), ruststream's [`Delivery::delivery_count`](ruststream_core::Delivery::delivery_count) counts
//! the deliveries *before* this one, so it is Redis's count minus one. A
//! retry copy's pending record is set to its original's count plus one when
//! its group first reads it, so `XPENDING` and claims count across copies.
//! (On the `New` path that takes a second round trip: a worker killed
//! between the two leaves that copy counting from 1 on its next claim.)
//!
//! ## Settling is all or nothing
//!
//! Every settle call (retry with copy, retry after a delay, dead letter,
//! redrive, discard) is one script call over all its ids, and every
//! script reads and checks first (the group exists, each side key is
//! missing or of its type, the ids are pending, owed or dead-lettered) and
//! writes last, with writes that cannot fail. A script that fails is not
//! rolled back by Redis, so this order is what makes the call all or
//! nothing: when it returns an error, nothing was applied and the entries
//! are as they were. (A call whose reply is lost may have been applied;
//! made again, it ignores entries that are no longer pending.) This is the
//! Redis side of the promise in `docs/guarantees.md` about multi-step
//! changes that fail part-way.
//!
//! An ack changes each entry on its own (nothing else depends on it), and
//! it is the hot path, so it is cheaper: one plain `XACK` (itself atomic)
//! when every id is pending, as it is for what the runtime holds. When
//! some id was not pending, the ack script then looks for it among the
//! entries owed again. An error from that second step leaves the entries
//! `XACK` found acked and the rest as they were (each entry is acked or
//! not, never half-way), and the same ack made again finishes it.
//!
//! No entry `XADD` accepts can break a script. Lua passes at most about
//! 8000 values to one command, so a script cannot append a copy or a dead
//! letter of an entry with thousands of fields. Such a script changes
//! nothing and returns the appends it planned instead; the broker then
//! sends, in one `MULTI`/`EXEC`, an `XADD` of each followed by the same
//! script, which finds them at the end of their stream, settles the entries
//! with them, and deletes any it no longer needs (an entry settled by
//! another worker in between). Ids are never unpacked into one command
//! more than a thousand at a time.
//!
//! Reads never fail half-way either. An entry at its attempt bound whose
//! dead letter is too big for the read script is left where it is and
//! dead-lettered by the broker right after the read; an owed entry that
//! cannot be handed out or dead-lettered for any other reason is set aside
//! (owed again ten seconds later) with an error logged naming the stream,
//! group, id and the server's error. Either way the entries behind it are
//! read on: one bad entry never wedges a group.
//!
//! A dead letter whose entry was trimmed from the stream before it was
//! dead-lettered has no copy of its fields (`rs:lost`). Redriving it is
//! refused with [`BrokerError::InvalidArgument`](ruststream_core::BrokerError::InvalidArgument)
//! naming it, and the dead letter stays (discard it instead).
//!
//! # Where Redis differs from the local brokers
//!
//! The conformance suite in `ruststream-testkit` runs against a real server
//! and encodes each of these explicitly (see `Target` there):
//!
//! - **Owed entries leave the pending list.** The engine re-times an entry
//!   in place; here `retry_after(d)` and a nack ack the entry and put its id
//!   in the group's due set (with its delivery count), and a read puts it
//!   back under the reader with `XCLAIM ... FORCE`, under its own id, before
//!   anything else. While owed, `XPENDING` does not show it (the broker's
//!   `pending()` does, held by nobody) and no idle claim can take it early.
//!   An owed entry a read finds held by a consumer (read again as new
//!   after the group's cursor was moved back) is dropped from the due set
//!   rather than claimed from its holder.
//! - **Trimming deletes what groups still need.** Redis trims entries that
//!   are pending, owed or unread retry copies; a claim then finds them gone,
//!   acks them away and logs their ids. Dead letters keep a copy of their
//!   fields, so a redrive after trimming appends the entry again (as a retry
//!   copy for the group, delivered behind newer entries); only an entry
//!   already trimmed when it was dead-lettered cannot be redriven.
//! - **A redriven retry copy comes back as a fresh copy.** A copy carries
//!   its earlier deliveries in its fields (`rs:count`), which cannot be
//!   changed in place; so that a redrive resets its count as on the local
//!   brokers, redriving a copy that carries any appends a new copy counting
//!   0 (same payload and headers, same original id) and deletes the old
//!   one. It comes back under the new id, behind newer entries, like a
//!   redrive after trimming.
//! - **`Claiming` needs Redis 8.4.** [`Broker::check_mode`](ruststream_core::Broker::check_mode)
//!   probes the command itself: it runs `XREADGROUP ... CLAIM` on a scratch
//!   stream (made and deleted in the same round trip) and refuses a server
//!   that answers with a syntax error, naming the server's version, so an
//!   app with a `claiming` subscription does not start; use `new` plus
//!   `reclaim` on the same group there. The version alone is not trusted:
//!   a development build reports 255.255.255 whatever it has. No Redis 8.4
//!   server is part of this crate's tests: the `CLAIM` path is tested on
//!   recorded 8.4 replies (the probe's answers and the read's reply shape)
//!   and by probing the test server, which must refuse it.
//! - **Lag counts copies for other groups.** `XINFO GROUPS` counts every
//!   entry past the cursor, including retry copies another group appended
//!   (which this group will pass over); the engine leaves those out.
//! - **Moving a cursor back** re-delivers entries the group still has
//!   pending (Redis reassigns them to the reader with a count of 1); the
//!   engine passes over them.
//! - **Acking an unknown group** returns 0 (`XACK` does), where the local
//!   brokers say `NoGroup`.
//! - **A read abandoned in flight** (its future dropped after the request
//!   left, as at shutdown) may have delivered entries nobody receives: they
//!   stay pending under the consumer until a `reclaim`/`claiming` read takes
//!   them over or the consumer re-reads its own pending list (the runtime
//!   looks at it when it stops). A `New` read abandoned while it waits is
//!   woken by the broker, which hands back what its queued read claimed
//!   (see above).
//! - **Idle claims are polled.** A blocking claiming or reclaim read checks
//!   for entries that reached `min_idle` every quarter of `min_idle` (at
//!   most every second), where the engine wakes at the exact moment.
//!
//! # Cluster
//!
//! [`RedisBroker::cluster`] (or a `redis+cluster://` URL) runs on a Redis
//! Cluster: every key a call touches carries its stream's hash tag, so each
//! call goes to one slot's master, and redirections after a failover or a
//! reshard are followed. What holds through a failover is in
//! `docs/guarantees.md`, "Redis Cluster".
//!
//! The cluster client sends a command again by itself when its connection
//! drops before the reply, whether or not the server ran it. A read is not
//! safe to run twice (the first attempt's entries would be pending under
//! the consumer, handed to no one), so on a cluster each read sets a read
//! mark first, `SET rs:{S}:read-mark:.. <token> GET`, in its pipeline or
//! its script: a read that finds its own token fails as a lost read does,
//! and the caller's re-check hands back what both attempts claimed. Reads
//! on one server carry no mark (a lost reply there is an error).

#![forbid(unsafe_code)]

mod broker;
mod codec;
mod keys;
mod scripts;
#[cfg(test)]
mod testing;

pub use broker::{
    CLUSTER_REDIRECTIONS, RETENTION_EVERY, RedisBroker, RedisConfig, RedisRetention, RedisTls,
    ReplicaAck, split_urls,
};

/// Test support: a token unique across calls and processes
/// (`<pid>-<nanoseconds, hex>-<counter>`), for names no other test or run
/// uses.
#[doc(hidden)]
pub use keys::unique_token;

/// The header a dead letter of a retry copy carries in
/// [`Broker::dead_letters`](ruststream_core::Broker::dead_letters): the id
/// of the entry the copy was first made from. The dead letter's own id is
/// the copy's (the id the group held, which `redrive` and `discard` take).
/// Dead letters of ordinary entries do not carry it.
pub const ORIGINAL_ID_HEADER: &str = "ruststream-original-id";
