//! Reads: the four read modes, owed entries first, and blocking.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::{RedisError, Value};
use ruststream_core::{BrokerResult, Delivery, EntryId, ReadBatch, ReadMode, ReadRequest};

use super::read_mark::{self, ReadMark};
use super::{RedisBroker, capability, inspect, settle, wait};
use crate::codec::{self, BadReply};
use crate::keys::GroupKeys;
use crate::scripts::{Aside, Post, ScriptRead};

/// Longest wait between two checks for idle entries in a blocking claiming
/// or reclaim read.
const MAX_IDLE_POLL: Duration = Duration::from_secs(1);
/// Shortest such wait.
const MIN_IDLE_POLL: Duration = Duration::from_millis(10);

/// `XAUTOCLAIM` cursors by (stream, group, consumer): a reclaim read goes
/// on where the consumer's last one stopped.
#[derive(Default)]
pub(super) struct Cursors(Mutex<HashMap<(String, String, String), String>>);

impl Cursors {
    fn key(req: &ReadRequest<'_>) -> (String, String, String) {
        (
            req.stream.to_owned(),
            req.group.to_owned(),
            req.consumer.to_owned(),
        )
    }

    fn get(&self, req: &ReadRequest<'_>) -> Option<String> {
        let cursors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cursors.get(&Cursors::key(req)).cloned()
    }

    fn set(&self, req: &ReadRequest<'_>, cursor: &str) {
        let mut cursors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cursors.insert(Cursors::key(req), cursor.to_owned());
    }
}

pub(super) async fn read(
    broker: &RedisBroker,
    mut req: ReadRequest<'_>,
) -> BrokerResult<ReadBatch> {
    req.validate()?;
    capability::check_claiming_once(broker, req.mode).await?;
    let deadline = req
        .block
        .filter(|_| !matches!(req.mode, ReadMode::OwnPending { .. }))
        .map(|block| tokio::time::Instant::now() + block);
    let mut read = read_once(broker, &req).await?;
    loop {
        // A page of the own pending list may hold only entries the script
        // passes over (trimmed away, or retry copies of other groups): it
        // comes back empty, which a caller takes for the list's end. Page
        // on past them instead, so nothing behind them is left stranded.
        if let ReadMode::OwnPending { after, min_idle } = req.mode
            && read.deliveries.is_empty()
            && read.dead_lettered.is_empty()
            && let Some(&last) = read.dropped.iter().chain(&read.passed).max()
            && last > after
        {
            req.mode = ReadMode::OwnPending {
                after: last,
                min_idle,
            };
            read = read_once(broker, &req).await?;
            continue;
        }
        let Some(deadline) = deadline else {
            return Ok(batch_of(read));
        };
        let now = tokio::time::Instant::now();
        if !read.deliveries.is_empty() || !read.dead_lettered.is_empty() || now >= deadline {
            return Ok(batch_of(read));
        }
        let mut wait = deadline - now;
        if let Some(due) = read.next_due_ms {
            let until_due = Duration::from_millis(due.saturating_sub(read.now_ms).max(1));
            wait = wait.min(until_due);
        }
        if let ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } = req.mode {
            wait = wait.min((min_idle / 4).clamp(MIN_IDLE_POLL, MAX_IDLE_POLL));
        }
        let mut keys = Vec::with_capacity(2);
        let wake = GroupKeys::new(req.stream, req.group).wake;
        if !matches!(req.mode, ReadMode::Reclaim { .. }) {
            // Past the group's cursor nothing is left to read (the read
            // just found nothing new), so anything appended later wakes
            // the wait, however late it starts.
            let after = match read.stream_last {
                Some(last) => last,
                None => inspect::cursor_of(broker, req.stream, req.group)
                    .await?
                    .to_string(),
            };
            keys.push((req.stream.to_owned(), after));
        }
        keys.push((wake, read.wake_last.unwrap_or_else(|| "$".to_owned())));
        if req.mode == ReadMode::New {
            // The read goes behind the wait on its connection: the server
            // runs it the moment the wait ends, in the same round trip.
            read = wait::then_read_new(broker, &req, &keys, wait).await?;
        } else {
            broker
                .wait_for(&keys, wait, broker.scope(req.stream, Some(req.group)))
                .await?;
            read = read_once(broker, &req).await?;
        }
    }
}

fn batch_of(read: ScriptRead) -> ReadBatch {
    ReadBatch {
        deliveries: read.deliveries,
        dead_lettered: read.dead_lettered,
    }
}

/// One non-blocking read. A `New` read is the hot path: plain commands in
/// one round trip (so that entries never pass through Lua, which would cost
/// more than the read itself); every other mode is one script.
async fn read_once(broker: &RedisBroker, req: &ReadRequest<'_>) -> BrokerResult<ScriptRead> {
    if req.mode == ReadMode::New {
        return read_new(broker, req).await;
    }
    read_script(broker, req, false).await
}

/// The read script: the whole read for `req.mode`, or with `owed_only`
/// just the owed entries that are due.
async fn read_script(
    broker: &RedisBroker,
    req: &ReadRequest<'_>,
    owed_only: bool,
) -> BrokerResult<ScriptRead> {
    let scope = broker.scope(req.stream, Some(req.group));
    let cursors = &broker.inner.cursors;
    let cursor = match req.mode {
        ReadMode::Reclaim { .. } => cursors.get(req),
        _ => None,
    };
    // A re-read of the own pending list with no idle bound hands out the
    // same entries again when sent twice: only reads that claim carry a
    // mark (one with an idle bound claims: its `XCLAIM` makes what it takes
    // fresh, so a second attempt would pass those over).
    let mark = match req.mode {
        ReadMode::OwnPending { min_idle, .. } if !owed_only && min_idle.is_zero() => None,
        _ => ReadMark::for_read(broker, req, Duration::ZERO),
    };
    let mut read = broker
        .script(scope, |s, conn| {
            s.read(conn, req, owed_only, cursor.as_deref(), mark.as_ref())
        })
        .await?;
    if read.resent {
        return Err(read_mark::resent(&scope, req.consumer));
    }
    if let (ReadMode::Reclaim { .. }, Some(cursor)) = (req.mode, &read.cursor) {
        cursors.set(req, cursor);
    }
    let aside = std::mem::take(&mut read.aside);
    settle_aside(broker, req, aside, &mut read.dead_lettered).await;
    if !read.dropped.is_empty() {
        tracing::warn!(
            stream = req.stream,
            group = req.group,
            consumer = req.consumer,
            ids = ?read.dropped,
            "pending entries no longer in the stream (trimmed while pending): acked away"
        );
    }
    Ok(read)
}

async fn read_new(broker: &RedisBroker, req: &ReadRequest<'_>) -> BrokerResult<ScriptRead> {
    let scope = broker.scope(req.stream, Some(req.group));
    let mark = ReadMark::for_read(broker, req, Duration::ZERO);
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    push_new_read(&mut pipe, req, mark.as_ref());
    let replies: Vec<Result<Value, RedisError>> = broker.query(&pipe, scope).await?;
    finish_new(broker, req, replies, mark.as_ref()).await
}

/// How many commands [`push_new_read`] appends: five, and the mark.
pub(super) fn new_read_commands(mark: Option<&ReadMark>) -> usize {
    5 + usize::from(mark.is_some())
}

/// Appends the commands of a `New` read to `pipe` (see
/// [`new_read_commands`]), whose replies [`finish_new`] makes sense of.
///
/// One round trip of plain commands: the server's clock, the first owed
/// entry's due time, the wake stream's and the stream's last ids (where a
/// blocking wait starts), and the read itself. The stream's last id is
/// asked for before the read: if the read comes back short, the group has
/// read past it, and anything appended later (after the read or in
/// between, which the read would have returned) is after it, so a wait
/// from there misses nothing. (A full read that hands out nothing, all of
/// it retry copies for other groups, waits from the cursor instead.) With
/// a `mark` (on a cluster), its `SET` goes right before the read.
pub(super) fn push_new_read(
    pipe: &mut redis::Pipeline,
    req: &ReadRequest<'_>,
    mark: Option<&ReadMark>,
) {
    let keys = GroupKeys::new(req.stream, req.group);
    pipe.cmd("TIME");
    pipe.cmd("ZRANGE")
        .arg(&keys.due)
        .arg(0)
        .arg(0)
        .arg("WITHSCORES");
    pipe.cmd("XREVRANGE")
        .arg(&keys.wake)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1);
    pipe.cmd("XREVRANGE")
        .arg(req.stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1);
    if let Some(mark) = mark {
        pipe.add_command(mark.command());
    }
    pipe.cmd("XREADGROUP")
        .arg("GROUP")
        .arg(req.group)
        .arg(req.consumer)
        .arg("COUNT")
        .arg(req.count)
        .arg("STREAMS")
        .arg(req.stream)
        .arg(">");
}

/// Makes sense of the replies to [`push_new_read`]'s commands: hands out
/// owed entries first where they are due (a second call), settles the
/// retry copies the plain read met, and hands back what does not fit.
///
/// A read that finds its own `mark` fails (see [`ReadMark`]): the entries
/// both attempts claimed are left for the caller's re-check, which hands
/// them back together and in order.
pub(super) async fn finish_new(
    broker: &RedisBroker,
    req: &ReadRequest<'_>,
    mut replies: Vec<Result<Value, RedisError>>,
    mark: Option<&ReadMark>,
) -> BrokerResult<ScriptRead> {
    let scope = broker.scope(req.stream, Some(req.group));
    let expected = new_read_commands(mark);
    if replies.len() != expected {
        return Err(scope.bad_reply(BadReply(format!(
            "a {expected}-command read pipeline got {} answers",
            replies.len()
        ))));
    }
    if let Some(mark) = mark {
        match replies.remove(4) {
            Ok(old) if mark.seen_before(&old) => {
                return Err(read_mark::resent(&scope, req.consumer));
            }
            Ok(_) => {}
            Err(error) => read_mark::refused(broker, req, &error),
        }
    }
    let [time, first_due, wake, last, new] = <[_; 5]>::try_from(replies).map_err(|_| {
        scope.bad_reply(BadReply(
            "a five-command pipeline did not answer five times".to_owned(),
        ))
    })?;
    let new = new.map_err(|e| scope.error(&e))?;
    let time = time.map_err(|e| scope.error(&e))?;
    let first_due = first_due.map_err(|e| scope.error(&e))?;
    let wake = wake.map_err(|e| scope.error(&e))?;
    let last = last.map_err(|e| scope.error(&e))?;
    let now_ms =
        codec::server_time_ms(&time).ok_or_else(|| scope.bad_reply(codec::bad("TIME", &time)))?;
    let next_due_ms = codec::array(&first_due)
        .get(1)
        .and_then(codec::text)
        .and_then(|t| t.parse::<f64>().ok())
        .map(|due| due as u64);
    let last_id = |reply: &Value| {
        codec::array(reply)
            .first()
            .and_then(|e| codec::array(e).first())
            .and_then(codec::text)
            .unwrap_or("0-0")
            .to_owned()
    };
    let mut read = ScriptRead {
        now_ms,
        next_due_ms,
        wake_last: Some(last_id(&wake)),
        stream_last: Some(last_id(&last)),
        ..ScriptRead::default()
    };
    if next_due_ms.is_some_and(|due| due <= now_ms) {
        // Owed entries are due: they go first. The new entries read
        // beside them that leave no room are handed back below.
        // A failure fails the read: the script may have run and its reply
        // been lost, leaving the owed entries it took pending under this
        // consumer, never handed out. The caller's look at its own pending
        // list after a failed read (the runtime's re-check) hands them back,
        // with the new entries read beside them.
        let owed = read_script(broker, req, true).await?;
        read.deliveries = owed.deliveries;
        read.dead_lettered = owed.dead_lettered;
        read.next_due_ms = owed.next_due_ms;
    }
    let raw = codec::into_stream_entries(new);
    if raw.len() >= req.count {
        // A full read may come back empty all the same (retry copies of
        // other groups, acked away here): entries up to the stream's last
        // id may still be unread, so a wait must start from the group's
        // cursor, not from that id.
        read.stream_last = None;
    }
    let mut sorted = Sorted::with_capacity(raw.len());
    for entry in raw {
        sorted.add(
            req,
            codec::entry_of_read(entry).map_err(|e| scope.bad_reply(e))?,
        );
    }
    let Sorted {
        mut post,
        mut fresh,
    } = sorted;
    let room = req.count.saturating_sub(read.deliveries.len());
    let beyond = if fresh.len() > room {
        fresh.split_off(room)
    } else {
        Vec::new()
    };
    post.back = beyond.iter().map(read_left).collect();
    read.deliveries.extend(fresh);
    if post.is_empty() {
        return Ok(read);
    }
    let posted = broker
        .script(scope, |s, conn| s.post(conn, req, &post))
        .await;
    match posted {
        Ok(posted) => {
            read.dead_lettered.extend(posted.buried);
            settle_aside(broker, req, posted.aside, &mut read.dead_lettered).await;
        }
        Err(e) => {
            // Entries that could not be handed back are delivered after
            // all (over the count, rather than stuck pending unseen).
            // Copies left unsettled stay pending and are settled by their
            // next claim.
            tracing::error!(
                stream = req.stream,
                group = req.group,
                error = %e,
                "could not settle retry copies or hand back entries read beyond the count"
            );
            read.deliveries.extend(beyond);
        }
    }
    Ok(read)
}

/// Hands back, owed at once as if never read, every entry that `new`
/// (the reply to an `XREADGROUP ... >` nobody takes, see [`super::wait`])
/// claimed for `req`'s consumer; copies meant for other groups are acked
/// for this one, and the group's own copies at the attempt bound are
/// dead-lettered, as a read would. An entry whose fields cannot be parsed
/// is passed over and stays pending for the consumer's next look at its
/// pending list. Returns how many were handed back.
/// An entry a `New` read handed out, with the delivery count that read
/// left it at (its deliveries before, plus this one).
fn read_left(delivery: &Delivery) -> (EntryId, u32) {
    (delivery.id(), delivery.delivery_count.saturating_add(1))
}

pub(super) async fn hand_back_claimed(
    broker: &RedisBroker,
    req: &ReadRequest<'_>,
    new: Value,
) -> BrokerResult<u64> {
    let mut sorted = Sorted::with_capacity(0);
    for entry in codec::into_stream_entries(new) {
        match codec::entry_of_read(entry) {
            Ok(entry) => sorted.add(req, entry),
            Err(BadReply(error)) => tracing::warn!(
                stream = req.stream,
                group = req.group,
                consumer = req.consumer,
                %error,
                "an entry a read claimed for nobody could not be parsed: it stays pending under \
                 the consumer until its next look at its pending list"
            ),
        }
    }
    let Sorted { mut post, fresh } = sorted;
    post.back = fresh.iter().map(read_left).collect();
    if post.is_empty() {
        return Ok(0);
    }
    let scope = broker.scope(req.stream, Some(req.group));
    let posted = broker
        .script(scope, |s, conn| s.post(conn, req, &post))
        .await?;
    let mut dead = posted.buried;
    settle_aside(broker, req, posted.aside, &mut dead).await;
    if !dead.is_empty() {
        tracing::warn!(
            stream = req.stream,
            group = req.group,
            ids = ?dead,
            "retry copies a read claimed for nobody had reached max_deliveries: dead-lettered"
        );
    }
    Ok(posted.handed_back)
}

/// The entries of a plain `XREADGROUP ... >` reply, sorted for `req`'s
/// group.
struct Sorted {
    /// What the post script must do: ack the copies for other groups, fix
    /// the counts of this group's own copies, dead-letter those at the
    /// attempt bound (`back` is left to the caller).
    post: Post,
    /// The entries to hand out, in stream order.
    fresh: Vec<Delivery>,
}

impl Sorted {
    fn with_capacity(entries: usize) -> Self {
        Sorted {
            post: Post::default(),
            fresh: Vec::with_capacity(entries),
        }
    }

    /// Sorts in the next entry of the reply.
    fn add(&mut self, req: &ReadRequest<'_>, entry: codec::NewEntry) {
        let post = &mut self.post;
        match entry.copy_for {
            Some(group) if group != req.group => post.ack.push(entry.delivery.id()),
            Some(_) => {
                let carried = entry.delivery.delivery_count;
                if req
                    .max_deliveries
                    .is_some_and(|max| max > 0 && carried >= max)
                {
                    post.dead.push((entry.delivery.id(), carried));
                } else {
                    if carried > 0 {
                        post.fix.push((entry.delivery.id(), carried));
                    }
                    self.fresh.push(entry.delivery);
                }
            }
            None => self.fresh.push(entry.delivery),
        }
    }
}

/// Deals with the entries a read script set aside rather than fail
/// half-way: an entry at its attempt bound whose dead letter was too big
/// for a script is dead-lettered from here (the dead-letter script takes
/// such appends from the broker); any other is logged. Either way the
/// entries behind it were read on.
async fn settle_aside(
    broker: &RedisBroker,
    req: &ReadRequest<'_>,
    aside: Vec<Aside>,
    dead_lettered: &mut Vec<EntryId>,
) {
    if aside.is_empty() {
        return;
    }
    for entry in aside {
        if !entry.error.is_empty() {
            tracing::error!(
                stream = req.stream,
                group = req.group,
                id = %entry.id,
                error = %entry.error,
                "an owed entry could neither be handed out nor dead-lettered: set aside (owed again in 10 s), \
                 the entries behind it are read on"
            );
            continue;
        }
        let dead = settle::dead_letter_counted(
            broker,
            (req.stream, req.group),
            &[entry.id],
            &entry.reason,
            Some(entry.times),
        )
        .await;
        match dead {
            Ok(0) => {} // settled by another worker meanwhile
            Ok(_) => dead_lettered.push(entry.id),
            Err(e) => tracing::error!(
                stream = req.stream,
                group = req.group,
                id = %entry.id,
                error = %e,
                "an entry at max_deliveries could not be dead-lettered: it stays where it was \
                 (an owed one is owed again in 10 s) and the entries behind it are read on"
            ),
        }
    }
    dead_lettered.sort_unstable();
}
