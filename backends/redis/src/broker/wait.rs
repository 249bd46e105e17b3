//! A wait with the read queued behind it.
//!
//! A `New` read that finds nothing waits for an entry (`XREAD BLOCK` on
//! the stream and the group's wake stream) on a connection of its own. The
//! read that follows the wait is sent with it, behind it on the same
//! connection: the server runs it the moment the wait ends, and both
//! answers come back in one round trip. Sent after the wait's answer, the
//! read would cost a second round trip on every entry that finds an idle
//! subscriber (BENCHMARKS.md, "Latency and scaling curves").
//!
//! The queued read claims what it finds (`XREADGROUP ... >`), so a wait
//! its caller gives up on (the runtime stopped and dropped the read) must
//! not leave it to claim entries nobody takes. Dropping the wait hands it
//! to a task that wakes it at once (an entry on the group's wake stream,
//! which the wait watches; every reader of the group waiting then reads
//! once, finding nothing), awaits its answer and hands back, owed at once
//! as if never read, whatever the read claimed. A wait whose answer does
//! not come in time (a stalled server) is handed to the same task, which
//! awaits the answer for up to five minutes more. Until the task is done,
//! a listing of the consumer's own pending list waits for it, for up to a
//! reply's time (the runtime's last look at shutdown is one), so nothing
//! is left pending under a consumer that stopped.
//!
//! What is left (`docs/guarantees.md`, "What is not promised"): a process
//! that ends within a round trip of dropping the wait, a server that
//! answers after the task gave up, an answer lost with its connection, or
//! on a cluster a pipeline redirected and sent again after the first copy
//! of the read had run. Each leaves the claimed entries pending under the
//! consumer, where its next look at its own pending list (within a live
//! window while it runs, or its recovery read at its next start) or a
//! `reclaim` reader takes them: late, never lost. Were the process to end
//! before the server ran the queued read, its connection closes with it
//! and the server drops the read unrun.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use redis::{RedisError, Value};
use ruststream_core::{BrokerResult, ReadMode, ReadRequest};

use super::RedisBroker;
use super::connection::wait_command;
use super::read;
use super::read_mark::ReadMark;
use super::topology::Conn;
use crate::codec::BadReply;
use crate::keys::GroupKeys;
use crate::scripts::ScriptRead;

/// How long an abandoned wait's task awaits the answer before it gives up
/// (and leaves what the read may claim to the consumer's next look at its
/// pending list): long enough to outlast a stalled or failing-over server,
/// whose answer would otherwise come after the task had gone.
const PATIENCE: Duration = Duration::from_secs(300);

/// The answers to the wait and the read behind it, one a command.
type Replies = redis::RedisResult<Vec<Result<Value, RedisError>>>;

/// The wait and its read in flight, owning their connection.
type InFlight = Pin<Box<dyn Future<Output = (Conn, Replies)> + Send>>;

/// Waits up to `wait` for any of `keys` (stream, last id seen) to get an
/// entry after that id, then reads as [`read::read_new`] does, in one
/// round trip.
pub(super) async fn then_read_new(
    broker: &RedisBroker,
    req: &ReadRequest<'_>,
    keys: &[(String, String)],
    wait: Duration,
) -> BrokerResult<ScriptRead> {
    let scope = broker.scope(req.stream, Some(req.group));
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.add_command(wait_command(keys, wait));
    let mark = ReadMark::for_read(broker, req, wait);
    read::push_new_read(&mut pipe, req, mark.as_ref());
    let commands = 1 + read::new_read_commands(mark.as_ref());
    let mut conn = broker.blocking_conn(scope).await?;
    let in_flight: InFlight = Box::pin(async move {
        let replies = pipe.query_async(&mut conn).await;
        (conn, replies)
    });
    let limit = broker.wait_limit(wait);
    let mut queued = Queued {
        in_flight: Some(in_flight),
        broker,
        req,
        commands,
    };
    let Ok((conn, replies)) = tokio::time::timeout(limit, &mut queued).await else {
        // `queued` is dropped on return: should the server answer after
        // all, what the read claimed is handed back.
        return Err(broker.no_answer(wait, limit));
    };
    // An error here is the connection's: the answers are lost, whether or
    // not the read ran (the runtime's re-check after a failed read deals
    // with that).
    let mut replies = replies.map_err(|e| scope.error(&e))?;
    if replies.len() != commands {
        return Err(scope.bad_reply(BadReply(format!(
            "a wait and a read ({commands} commands) got {} answers",
            replies.len()
        ))));
    }
    broker.pool_blocking(conn);
    let woke = replies.remove(0);
    let read = read::finish_new(broker, req, replies, mark.as_ref()).await?;
    match woke {
        // A wait that fails at once would otherwise be asked again and
        // again until the read's block time ran out.
        Err(e) if read.deliveries.is_empty() && read.dead_lettered.is_empty() => {
            Err(scope.error(&e))
        }
        _ => Ok(read),
    }
}

/// A wait and its read in flight; dropped before its answer came, it hands
/// them to a task that wakes the wait and hands back what the read claimed
/// (only then is what that task needs of the read copied).
struct Queued<'a> {
    /// `None` once answered.
    in_flight: Option<InFlight>,
    broker: &'a RedisBroker,
    req: &'a ReadRequest<'a>,
    /// How many commands the pipeline holds (the read's is the last).
    commands: usize,
}

impl Future for Queued<'_> {
    type Output = (Conn, Replies);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(in_flight) = self.in_flight.as_mut() else {
            // Answered already: never polled again by `then_read_new`.
            return Poll::Pending;
        };
        let answered = ready!(in_flight.as_mut().poll(cx));
        self.in_flight = None;
        Poll::Ready(answered)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        // Outside a runtime (dropped by a thread of its own, or while the
        // runtime shuts down) nothing can be awaited: the wait is left to
        // end by itself, and the consumer's next look at its pending list
        // hands back what its read claimed.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let owner = Owner::of(self.broker, self.req, self.commands);
            let ticket = Abandoned::begin(&owner.broker, owner.key());
            runtime.spawn(owner.hand_back(in_flight, ticket));
        }
    }
}

/// What an abandoned wait's task needs of the read: its group, consumer
/// and bounds, owned.
struct Owner {
    broker: RedisBroker,
    stream: String,
    group: String,
    consumer: String,
    count: usize,
    max_deliveries: Option<u32>,
    /// How many commands the pipeline holds (the read's is the last).
    commands: usize,
}

impl Owner {
    fn of(broker: &RedisBroker, req: &ReadRequest<'_>, commands: usize) -> Self {
        Owner {
            broker: broker.clone(),
            stream: req.stream.to_owned(),
            group: req.group.to_owned(),
            consumer: req.consumer.to_owned(),
            count: req.count,
            max_deliveries: req.max_deliveries,
            commands,
        }
    }

    fn key(&self) -> Key {
        (
            self.stream.clone(),
            self.group.clone(),
            self.consumer.clone(),
        )
    }

    /// Wakes the wait, awaits its answer and hands back what its read
    /// claimed.
    async fn hand_back(self, in_flight: InFlight, _ticket: Ticket) {
        let scope = self.broker.scope(&self.stream, Some(&self.group));
        let mut wake = redis::cmd("XADD");
        wake.arg(GroupKeys::new(&self.stream, &self.group).wake)
            .arg("MAXLEN")
            .arg(1)
            .arg("*")
            .arg("at")
            .arg("abandoned");
        if let Err(error) = self.broker.query::<Value>(&wake, scope).await {
            // The wait still ends when its block time passes.
            tracing::warn!(
                stream = self.stream,
                group = self.group,
                %error,
                "could not wake an abandoned wait; its read is handed back when the wait ends"
            );
        }
        let answered = tokio::time::timeout(PATIENCE, in_flight).await;
        let new = match answered {
            Ok((_, Ok(mut replies))) if replies.len() == self.commands => {
                replies.swap_remove(self.commands - 1)
            }
            _ => {
                tracing::warn!(
                    stream = self.stream,
                    group = self.group,
                    consumer = self.consumer,
                    "an abandoned read got no answer: what it claimed, if anything, stays pending \
                     under the consumer until its next look at its pending list"
                );
                return;
            }
        };
        // The read's own error (`NOGROUP` after a flush): it claimed nothing.
        let Ok(new) = new else {
            return;
        };
        let mut req = ReadRequest::new(
            &self.stream,
            &self.group,
            &self.consumer,
            ReadMode::New,
            self.count,
        );
        req.max_deliveries = self.max_deliveries;
        match read::hand_back_claimed(&self.broker, &req, new).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                stream = self.stream,
                group = self.group,
                consumer = self.consumer,
                entries = n,
                "handed back the entries a read took after its caller had stopped waiting"
            ),
            Err(error) => tracing::warn!(
                stream = self.stream,
                group = self.group,
                consumer = self.consumer,
                %error,
                "could not hand back what an abandoned read took: it stays pending under the \
                 consumer until its next look at its pending list"
            ),
        }
    }
}

/// (stream, group, consumer).
type Key = (String, String, String);

/// The hand-backs of abandoned waits still running, by consumer: a listing
/// of a consumer's own pending list waits for its hand-backs first.
#[derive(Default)]
pub(super) struct Abandoned {
    running: Mutex<HashMap<Key, usize>>,
    done: tokio::sync::Notify,
}

impl Abandoned {
    fn begin(broker: &RedisBroker, key: Key) -> Ticket {
        let abandoned = &broker.inner.abandoned;
        let mut running = abandoned.running.lock().unwrap_or_else(|p| p.into_inner());
        *running.entry(key.clone()).or_insert(0) += 1;
        Ticket {
            broker: broker.clone(),
            key,
        }
    }

    fn end(&self, key: &Key) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = running.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                running.remove(key);
            }
        }
        drop(running);
        self.done.notify_waiters();
    }

    fn is_running(&self, stream: &str, group: &str, consumer: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        !running.is_empty()
            && running.contains_key(&(stream.to_owned(), group.to_owned(), consumer.to_owned()))
    }

    /// Waits until no hand-back of `consumer`'s abandoned waits runs, or
    /// for `at_most`, whichever comes first; false if it gave up.
    pub(super) async fn settled(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        at_most: Duration,
    ) -> bool {
        let settled = async {
            loop {
                let done = self.done.notified();
                tokio::pin!(done);
                done.as_mut().enable();
                if !self.is_running(stream, group, consumer) {
                    return;
                }
                done.await;
            }
        };
        tokio::time::timeout(at_most, settled).await.is_ok()
    }
}

/// One running hand-back, counted in [`Abandoned`] until dropped (also
/// when its task is cancelled).
struct Ticket {
    broker: RedisBroker,
    key: Key,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.broker.inner.abandoned.end(&self.key);
    }
}
