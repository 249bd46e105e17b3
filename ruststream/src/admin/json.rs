//! How the admin endpoint writes broker types, and errors, as JSON.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ruststream_core::{
    BrokerError, DeadLetter, Entry, GroupInfo, Headers, PendingEntry, StreamInfo,
};
use serde_json::{Value, json};

/// A request the endpoint refuses: its status and a message that names
/// the problem, as `{"error": "..."}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl From<BrokerError> for ApiError {
    fn from(error: BrokerError) -> Self {
        let status = match &error {
            BrokerError::NoGroup { .. } => StatusCode::NOT_FOUND,
            BrokerError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            BrokerError::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError {
            status,
            message: error.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// A payload as text when it is UTF-8, else as a list of bytes.
fn payload(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!(text),
        Err(_) => json!(bytes),
    }
}

fn headers(headers: &Headers) -> Value {
    let map: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    Value::Object(map)
}

pub(crate) fn entry(entry: &Entry) -> Value {
    json!({
        "id": entry.id.to_string(),
        "headers": headers(entry.headers()),
        "payload": payload(entry.payload()),
    })
}

pub(crate) fn group(info: &GroupInfo) -> Value {
    json!({
        "stream": info.stream,
        "group": info.name,
        "last_delivered": info.last_delivered.to_string(),
        "lag": info.lag,
        "pending": info.pending,
        "dead_letters": info.dead_letters,
        "consumers": info.consumers,
    })
}

pub(crate) fn stream(info: &StreamInfo) -> Value {
    json!({
        "stream": info.name,
        "length": info.length,
        "first_id": info.first_id.map(|id| id.to_string()),
        "last_id": info.last_id.to_string(),
        "groups": info.groups,
    })
}

pub(crate) fn pending(p: &PendingEntry) -> Value {
    json!({
        "id": p.id.to_string(),
        "consumer": p.consumer,
        "idle_ms": p.idle_ms,
        "times_delivered": p.times_delivered,
        "owed_in_ms": p.owed_in_ms,
    })
}

pub(crate) fn dead_letter(d: &DeadLetter) -> Value {
    json!({
        "id": d.id().to_string(),
        "reason": d.reason,
        "times_delivered": d.times_delivered,
        "dead_at_ms": d.dead_at_ms,
        "entry": entry(&d.entry),
    })
}
