//! The group routes, on the brokers of the app: read routes (a stream, a
//! group, its pending list and dead letters) for anyone who can reach the
//! endpoint, and write routes (redrive, discard) for requests carrying the
//! configured token. The command-line tool uses them for a broker only a
//! running service can open (a file log it holds).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use ruststream_core::{Broker, BrokerError, EntryId};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AdminState;
use super::extract::Path;
use super::json::{self, ApiError};

/// Most entries one listing returns.
const MAX_COUNT: usize = 10_000;
/// The page size when a write selects dead letters by reason or all.
const PAGE: usize = 1_000;

pub(super) fn router() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/streams", get(streams))
        .route("/streams/{stream}", get(stream))
        .route("/streams/{stream}/entries", get(entries))
        .route("/streams/{stream}/publish", post(publish))
        .route(
            "/groups/{stream}/{group}/dead-letters/{id}",
            get(dead_letter),
        )
        .route("/groups/{stream}/{group}/consumers/prune", post(prune))
        .route("/groups/{stream}/{group}", get(group))
        .route("/groups/{stream}/{group}/pending", get(pending))
        .route("/groups/{stream}/{group}/dead-letters", get(dead_letters))
        .route("/groups/{stream}/{group}/{write}", post(write_route))
}

/// Which of the app's brokers a route works on.
#[derive(Debug, Default, Deserialize)]
struct Which {
    /// The broker's index, in the order the app added them.
    broker: Option<usize>,
}

impl AdminState {
    /// The broker `index` names; by default the one a subscription reads
    /// `stream` from (preferring one that reads it as `group`, for a
    /// group's routes, then any group of the stream), else the app's
    /// first.
    fn broker(
        &self,
        index: Option<usize>,
        stream: &str,
        group: Option<&str>,
    ) -> Result<Arc<dyn Broker>, ApiError> {
        let brokers = &self.view.brokers;
        if let Some(ix) = index {
            return brokers.get(ix).cloned().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "broker={ix}: the app has {} broker(s), numbered from 0",
                    brokers.len()
                ))
            });
        }
        let subscriptions = &self.view.subscriptions;
        let of_stream = || {
            subscriptions
                .iter()
                .filter(|s| s.subscription.stream.stream_name() == stream)
        };
        let reading = group
            .and_then(|group| {
                of_stream().find(|s| s.subscription.stream.group_name() == Some(group))
            })
            .or_else(|| of_stream().next());
        reading
            .map(|s| Arc::clone(&s.broker))
            .or_else(|| brokers.first().cloned())
            .ok_or_else(|| ApiError::not_found("the app has no broker"))
    }
}

/// Every stream of the broker, with its summary.
async fn streams(
    State(state): State<Arc<AdminState>>,
    which: Result<Query<Which>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(which) = which.map_err(query_error)?;
    let broker = state.broker(which.broker, "", None)?;
    let mut out = Vec::new();
    for name in broker.streams().await? {
        if let Some(info) = broker.stream_info(&name).await? {
            out.push(json::stream(&info));
        }
    }
    Ok(Json(Value::Array(out)))
}

/// Entries of a stream from an id on, without joining a group (`tail`).
async fn entries(
    State(state): State<Arc<AdminState>>,
    Path(stream): Path<String>,
    listing: Result<Query<Listing>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let (_, broker, from, count) = Listing::on(&state, listing, &stream, None)?;
    let found = broker.range(&stream, from, EntryId::MAX, count).await?;
    Ok(Json(Value::Array(found.iter().map(json::entry).collect())))
}

/// What `POST /streams/{stream}/publish` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Publish {
    /// The payload, as text.
    payload: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    broker: Option<usize>,
}

/// Publishes one entry (a write route: it needs the token).
async fn publish(
    State(state): State<Arc<AdminState>>,
    Path(stream): Path<String>,
    headers: HeaderMap,
    body: Result<Json<Publish>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = accepted(&state, &headers, body)?;
    let broker = state.broker(body.broker, &stream, None)?;
    let mut message = ruststream_core::Message::new(body.payload.into_bytes());
    for (name, value) in body.headers {
        message = message.with_header(name, value);
    }
    let id = broker.publish(&stream, message).await?;
    Ok(Json(json!({ "id": id.to_string() })))
}

/// One dead letter, by id.
async fn dead_letter(
    State(state): State<Arc<AdminState>>,
    Path((stream, group, id)): Path<(String, String, String)>,
    which: Result<Query<Which>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(which) = which.map_err(query_error)?;
    let broker = state.broker(which.broker, &stream, Some(&group))?;
    let id = parse_id(&id, "id")?;
    let found = broker.dead_letters(&stream, &group, id, 1).await?;
    match found.first().filter(|d| d.id() == id) {
        Some(letter) => Ok(Json(json::dead_letter(letter))),
        None => Err(ApiError::not_found(format!(
            "no dead letter {id} in group {group:?} of stream {stream:?}"
        ))),
    }
}

/// What `POST /groups/{stream}/{group}/consumers/prune` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Prune {
    /// Consumers idle at least this long, holding nothing, are deleted.
    idle_ms: u64,
    #[serde(default)]
    dry_run: bool,
    broker: Option<usize>,
}

/// Deletes the group's consumers idle longer than `idle_ms` that hold
/// nothing (a write route: it needs the token). Consumers holding entries
/// are listed as kept, never deleted.
async fn prune(
    State(state): State<Arc<AdminState>>,
    Path((stream, group)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<Prune>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = accepted(&state, &headers, body)?;
    let broker = state.broker(body.broker, &stream, Some(&group))?;
    let idle = std::time::Duration::from_millis(body.idle_ms);
    let mut deleted = Vec::new();
    let mut kept = Vec::new();
    for c in broker.consumers(&stream, &group).await? {
        if c.idle_ms < body.idle_ms {
            continue;
        }
        if c.pending > 0 {
            kept.push(json!({ "name": c.name, "pending": c.pending, "idle_ms": c.idle_ms }));
            continue;
        }
        if body.dry_run
            || broker
                .delete_consumer(&stream, &group, &c.name, idle)
                .await?
        {
            deleted.push(c.name);
        }
    }
    Ok(Json(
        json!({ "dry_run": body.dry_run, "deleted": deleted, "kept_holding": kept }),
    ))
}

async fn stream(
    State(state): State<Arc<AdminState>>,
    Path(stream): Path<String>,
    which: Result<Query<Which>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(which) = which.map_err(query_error)?;
    let broker = state.broker(which.broker, &stream, None)?;
    match broker.stream_info(&stream).await? {
        Some(info) => Ok(Json(json::stream(&info))),
        None => Err(ApiError::not_found(format!("no stream {stream:?}"))),
    }
}

async fn group(
    State(state): State<Arc<AdminState>>,
    Path((stream, group)): Path<(String, String)>,
    which: Result<Query<Which>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(which) = which.map_err(query_error)?;
    let broker = state.broker(which.broker, &stream, Some(&group))?;
    let info = broker.group_info(&stream, &group).await?;
    let consumers: Vec<Value> = broker
        .consumers(&stream, &group)
        .await?
        .into_iter()
        .map(|c| json!({ "name": c.name, "pending": c.pending, "idle_ms": c.idle_ms }))
        .collect();
    let mut out = json::group(&info);
    out["consumer_list"] = Value::Array(consumers);
    Ok(Json(out))
}

/// Paging of a listing: ids at or after `from`, at most `count`.
#[derive(Debug, Deserialize)]
struct Listing {
    from: Option<String>,
    count: Option<usize>,
    consumer: Option<String>,
    broker: Option<usize>,
}

/// A checked listing: the query, the broker it names, `from` and `count`.
type Checked = (Listing, Arc<dyn Broker>, EntryId, usize);

impl Listing {
    /// Checks a listing's query for `stream` on `state`'s brokers.
    fn on(
        state: &AdminState,
        query: Result<Query<Listing>, QueryRejection>,
        stream: &str,
        group: Option<&str>,
    ) -> Result<Checked, ApiError> {
        let Query(listing) = query.map_err(query_error)?;
        let broker = state.broker(listing.broker, stream, group)?;
        let (from, count) = (listing.from()?, listing.count()?);
        Ok((listing, broker, from, count))
    }

    fn from(&self) -> Result<EntryId, ApiError> {
        match &self.from {
            None => Ok(EntryId::ZERO),
            Some(text) => parse_id(text, "from"),
        }
    }

    fn count(&self) -> Result<usize, ApiError> {
        let count = self.count.unwrap_or(100);
        if count == 0 || count > MAX_COUNT {
            return Err(ApiError::bad_request(format!(
                "count={count}: ask for 1 to {MAX_COUNT} entries"
            )));
        }
        Ok(count)
    }
}

fn query_error(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request(rejection.body_text())
}

fn parse_id(text: &str, what: &str) -> Result<EntryId, ApiError> {
    text.parse::<EntryId>().map_err(|e| {
        ApiError::bad_request(format!("{what}={text:?} is not an entry id (MS-SEQ): {e}"))
    })
}

async fn pending(
    State(state): State<Arc<AdminState>>,
    Path((stream, group)): Path<(String, String)>,
    listing: Result<Query<Listing>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let (listing, broker, from, count) = Listing::on(&state, listing, &stream, Some(&group))?;
    let entries = broker
        .pending(&stream, &group, from, count, listing.consumer.as_deref())
        .await?;
    Ok(Json(Value::Array(
        entries.iter().map(json::pending).collect(),
    )))
}

async fn dead_letters(
    State(state): State<Arc<AdminState>>,
    Path((stream, group)): Path<(String, String)>,
    listing: Result<Query<Listing>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let (_, broker, from, count) = Listing::on(&state, listing, &stream, Some(&group))?;
    let letters = broker.dead_letters(&stream, &group, from, count).await?;
    Ok(Json(Value::Array(
        letters.iter().map(json::dead_letter).collect(),
    )))
}

/// Which dead letters a write works on: exactly one of `ids`, `reason`
/// (every dead letter with that reason) or `all`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Selection {
    ids: Option<Vec<String>>,
    reason: Option<String>,
    #[serde(default)]
    all: bool,
    /// Report what would be changed, change nothing.
    #[serde(default)]
    dry_run: bool,
    broker: Option<usize>,
}

/// A selection checked against the group's dead letters.
#[derive(Debug, Default)]
struct Resolved {
    /// The dead letters selected, in id order.
    selected: Vec<EntryId>,
    /// Ids asked for by `ids` that are not dead letters of the group (not
    /// on the stream, pending, acked, already redriven or discarded): left
    /// alone, as the broker's write would ignore them.
    skipped: Vec<EntryId>,
}

impl Selection {
    /// The ids selected, checked against the group's dead letters, dry run
    /// or not: an unknown stream or group is an error (404), and ids that
    /// are not dead letters of the group are skipped.
    async fn resolve(
        &self,
        broker: &dyn Broker,
        stream: &str,
        group: &str,
    ) -> Result<Resolved, ApiError> {
        let chosen = usize::from(self.ids.is_some())
            + usize::from(self.reason.is_some())
            + usize::from(self.all);
        if chosen != 1 {
            return Err(ApiError::bad_request(
                "select the dead letters with exactly one of \"ids\", \"reason\" or \"all\": true",
            ));
        }
        if let Some(ids) = &self.ids {
            let ids = ids
                .iter()
                .map(|id| parse_id(id, "ids"))
                .collect::<Result<Vec<_>, _>>()?;
            return by_ids(broker, stream, group, ids).await;
        }
        let mut out = Vec::new();
        let mut from = EntryId::ZERO;
        loop {
            let page = broker.dead_letters(stream, group, from, PAGE).await?;
            let Some(last) = page.last().map(ruststream_core::DeadLetter::id) else {
                break;
            };
            out.extend(
                page.iter()
                    .filter(|d| self.reason.as_ref().is_none_or(|r| &d.reason == r))
                    .map(ruststream_core::DeadLetter::id),
            );
            if page.len() < PAGE {
                break;
            }
            from = last.next();
        }
        Ok(Resolved {
            selected: out,
            skipped: Vec::new(),
        })
    }
}

/// Splits `ids` into the group's dead letters and the rest, a page of
/// dead letters at a time from the lowest id not yet looked up.
async fn by_ids(
    broker: &dyn Broker,
    stream: &str,
    group: &str,
    mut ids: Vec<EntryId>,
) -> Result<Resolved, ApiError> {
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        // Nothing to look up: still, an unknown stream or group is not found.
        broker.group_info(stream, group).await?;
    }
    let mut out = Resolved::default();
    let mut rest = &ids[..];
    while let Some(&first) = rest.first() {
        let page = broker.dead_letters(stream, group, first, PAGE).await?;
        let found: Vec<EntryId> = page.iter().map(ruststream_core::DeadLetter::id).collect();
        // The page answers for every id up to its last (all, if short).
        let covered = match found.last() {
            Some(&last) if found.len() >= PAGE => last,
            _ => EntryId::MAX,
        };
        let n = rest.partition_point(|id| *id <= covered);
        for &id in &rest[..n] {
            if found.binary_search(&id).is_ok() {
                out.selected.push(id);
            } else {
                out.skipped.push(id);
            }
        }
        rest = &rest[n..];
    }
    Ok(out)
}

/// A write route's check: the token is configured and the request carries
/// it.
fn authorize(state: &AdminState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.token else {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: "write routes are off: configure a token (RustStream::admin_token, or RUSTSTREAM_ADMIN_TOKEN)".to_owned(),
        });
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match sent {
        Some(sent) if same(sent.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "the token does not match".to_owned(),
        }),
        None => Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "send the token as `Authorization: Bearer <token>`".to_owned(),
        }),
    }
}

/// The token of an `Authorization` value using the bearer scheme. The
/// scheme is case-insensitive (RFC 9110, 11.1): `Bearer`, `bearer` and
/// `BEARER` all name it.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// A write route's body, once the request is authorized.
fn accepted<T>(
    state: &AdminState,
    headers: &HeaderMap,
    body: Result<Json<T>, JsonRejection>,
) -> Result<T, ApiError> {
    authorize(state, headers)?;
    // The rejection's own status: 400 for a bad body, 413 for one too large.
    let Json(body) = body.map_err(|e| ApiError {
        status: e.status(),
        message: e.body_text(),
    })?;
    Ok(body)
}

/// Compares in time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Which write a route makes.
#[derive(Clone, Copy)]
enum Write {
    Redrive,
    Discard,
}

impl Write {
    fn verb(self) -> &'static str {
        match self {
            Write::Redrive => "redrive",
            Write::Discard => "discard",
        }
    }

    /// A write of more than one page that failed after its first: the
    /// broker's error, saying what had been done. Sending the request
    /// again is safe: an id already redriven or discarded is no longer a
    /// dead letter, and is skipped.
    fn failed_part_way(
        self,
        error: BrokerError,
        sent: usize,
        selected: usize,
        changed: u64,
    ) -> ApiError {
        let mut error = ApiError::from(error);
        let done = match self {
            Write::Redrive => "redriven",
            Write::Discard => "discarded",
        };
        error.message = format!(
            "{changed} dead letters {done} of the first {sent} of {selected} selected, then the {} of the rest failed (sending the request again is safe): {}",
            self.verb(),
            error.message
        );
        error
    }
}

/// A redrive or discard, once authorized (see [`accepted`]).
async fn write(
    state: &AdminState,
    stream: &str,
    group: &str,
    selection: &Selection,
    what: Write,
) -> Result<Json<Value>, ApiError> {
    let broker = state.broker(selection.broker, stream, Some(group))?;
    let Resolved {
        selected: ids,
        skipped,
    } = selection.resolve(&*broker, stream, group).await?;
    let listed: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let skipped: Vec<String> = skipped.iter().map(ToString::to_string).collect();
    if selection.dry_run {
        return Ok(Json(
            json!({ "dry_run": true, "selected": listed, "skipped": skipped, "changed": 0 }),
        ));
    }
    let mut changed = 0;
    for (sent, chunk) in ids.chunks(PAGE).enumerate() {
        let done = match what {
            Write::Redrive => broker.redrive(stream, group, chunk).await,
            Write::Discard => broker.discard(stream, group, chunk).await,
        };
        match done {
            Ok(n) => changed += n,
            Err(error) if sent == 0 => return Err(error.into()),
            Err(error) => return Err(what.failed_part_way(error, sent * PAGE, ids.len(), changed)),
        }
    }
    tracing::info!(
        stream,
        group,
        selected = ids.len(),
        changed,
        write = what.verb(),
        "admin write"
    );
    Ok(Json(
        json!({ "dry_run": false, "selected": listed, "skipped": skipped, "changed": changed }),
    ))
}

/// `POST /groups/{stream}/{group}/{redrive|discard}`.
async fn write_route(
    State(state): State<Arc<AdminState>>,
    Path((stream, group, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    selection: Result<Json<Selection>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let what = match action.as_str() {
        "redrive" => Write::Redrive,
        "discard" => Write::Discard,
        other => {
            return Err(ApiError::not_found(format!(
                "no write {other:?}: POST .../redrive or .../discard"
            )));
        }
    };
    let selection = accepted(&state, &headers, selection)?;
    write(&state, &stream, &group, &selection, what).await
}
