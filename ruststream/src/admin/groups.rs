//! The group routes, on the brokers of the app: read routes (a stream, a
//! group, its pending list and dead letters) for anyone who can reach the
//! endpoint, and write routes (redrive, discard) for requests carrying the
//! configured token. The command-line tool uses them for a broker only a
//! running service can open (a file log it holds).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use ruststream_core::{Broker, EntryId};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AdminState;
use super::json::{self, ApiError};

/// Most entries one listing returns.
const MAX_COUNT: usize = 10_000;
/// The page size when a write selects dead letters by reason or all.
const PAGE: usize = 1_000;

pub(super) fn router() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/streams/{stream}", get(stream))
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
    /// The broker `which` names; by default the one a subscription reads
    /// `stream` from, else the app's first.
    fn broker(&self, which: &Which, stream: &str) -> Result<Arc<dyn Broker>, ApiError> {
        let brokers = &self.view.brokers;
        if let Some(ix) = which.broker {
            return brokers.get(ix).cloned().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "broker={ix}: the app has {} broker(s), numbered from 0",
                    brokers.len()
                ))
            });
        }
        let reading = self
            .view
            .subscriptions
            .iter()
            .find(|s| s.subscription.stream.stream_name() == stream);
        reading
            .map(|s| Arc::clone(&s.broker))
            .or_else(|| brokers.first().cloned())
            .ok_or_else(|| ApiError::not_found("the app has no broker"))
    }
}

async fn stream(
    State(state): State<Arc<AdminState>>,
    Path(stream): Path<String>,
    which: Result<Query<Which>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(which) = which.map_err(query_error)?;
    let broker = state.broker(&which, &stream)?;
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
    let broker = state.broker(&which, &stream)?;
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

impl Listing {
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

    fn which(&self) -> Which {
        Which {
            broker: self.broker,
        }
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
    let Query(listing) = listing.map_err(query_error)?;
    let broker = state.broker(&listing.which(), &stream)?;
    let entries = broker
        .pending(
            &stream,
            &group,
            listing.from()?,
            listing.count()?,
            listing.consumer.as_deref(),
        )
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
    let Query(listing) = listing.map_err(query_error)?;
    let broker = state.broker(&listing.which(), &stream)?;
    let letters = broker
        .dead_letters(&stream, &group, listing.from()?, listing.count()?)
        .await?;
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

impl Selection {
    /// The ids selected, checked against the group's dead letters.
    async fn resolve(
        &self,
        broker: &dyn Broker,
        stream: &str,
        group: &str,
    ) -> Result<Vec<EntryId>, ApiError> {
        let chosen = usize::from(self.ids.is_some())
            + usize::from(self.reason.is_some())
            + usize::from(self.all);
        if chosen != 1 {
            return Err(ApiError::bad_request(
                "select the dead letters with exactly one of \"ids\", \"reason\" or \"all\": true",
            ));
        }
        if let Some(ids) = &self.ids {
            return ids.iter().map(|id| parse_id(id, "ids")).collect();
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
        Ok(out)
    }
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
        .and_then(|v| v.strip_prefix("Bearer "));
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

async fn write(
    state: &AdminState,
    headers: &HeaderMap,
    stream: &str,
    group: &str,
    selection: &Selection,
    what: Write,
) -> Result<Json<Value>, ApiError> {
    authorize(state, headers)?;
    let broker = state.broker(
        &Which {
            broker: selection.broker,
        },
        stream,
    )?;
    let ids = selection.resolve(&*broker, stream, group).await?;
    let listed: Vec<String> = ids.iter().map(ToString::to_string).collect();
    if selection.dry_run {
        return Ok(Json(
            json!({ "dry_run": true, "selected": listed, "changed": 0 }),
        ));
    }
    let mut changed = 0;
    for chunk in ids.chunks(PAGE) {
        changed += match what {
            Write::Redrive => broker.redrive(stream, group, chunk).await?,
            Write::Discard => broker.discard(stream, group, chunk).await?,
        };
    }
    tracing::info!(
        stream,
        group,
        selected = ids.len(),
        changed,
        write = match what {
            Write::Redrive => "redrive",
            Write::Discard => "discard",
        },
        "admin write"
    );
    Ok(Json(
        json!({ "dry_run": false, "selected": listed, "changed": changed }),
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
    let Json(selection) = selection.map_err(|e| ApiError::bad_request(e.body_text()))?;
    write(&state, &headers, &stream, &group, &selection, what).await
}
