//! The app's own routes: `/metrics`, `/health/live`, `/health/ready` and
//! `/subscribers`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::AdminState;
use super::json::ApiError;
use crate::Kind;

pub(super) fn router() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/subscribers", get(subscribers))
}

/// Prometheus text.
async fn metrics() -> Response {
    match super::prometheus() {
        Ok(handle) => {
            handle.run_upkeep();
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                handle.render(),
            )
                .into_response()
        }
        Err(message) => ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.to_owned(),
        }
        .into_response(),
    }
}

/// Live while the app is healthy: no subscription has died, no broker
/// has stopped taking writes (a restart is what helps then).
async fn live(State(state): State<Arc<AdminState>>) -> Response {
    let health = state.view.health();
    if health.is_healthy() {
        return Json(json!({ "status": "live" })).into_response();
    }
    let problems: Vec<String> = health.problems.iter().map(ToString::to_string).collect();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "status": "not live", "problems": problems })),
    )
        .into_response()
}

/// Ready while work flows (see `crate::readiness`).
async fn ready(State(state): State<Arc<AdminState>>) -> Response {
    let readiness = state.view.readiness();
    if readiness.is_ready() {
        return Json(json!({ "status": "ready" })).into_response();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "status": "not ready", "reasons": readiness.reasons })),
    )
        .into_response()
}

/// Each subscriber: what it reads, its options, its consumer and its live
/// stats.
async fn subscribers(State(state): State<Arc<AdminState>>) -> Json<Value> {
    let stats = state.view.stats().await;
    let list: Vec<Value> = state
        .view
        .subscriptions
        .iter()
        .zip(stats)
        .map(|(s, stats)| {
            let sub = &s.subscription;
            let (kind, min_idle_ms) = match sub.stream.kind() {
                Kind::New => ("new", None),
                Kind::Claiming { min_idle } => ("claiming", Some(min_idle.as_millis())),
                Kind::Reclaim { min_idle } => ("reclaim", Some(min_idle.as_millis())),
            };
            json!({
                "subscriber": s.info.name,
                "defined_at": format!("{}:{}", s.info.file, s.info.line),
                "broker": s.broker.name(),
                "stream": sub.stream.stream_name(),
                "group": sub.stream.group_name(),
                "kind": kind,
                "min_idle_ms": min_idle_ms,
                "workers": sub.workers,
                "by_key": sub.by_key,
                "read_ahead": sub.read_ahead(),
                "max_deliveries": sub.max_deliveries,
                "backoff": sub.backoff.as_ref().map(|b| format!("{b:?}")),
                "consumer": s.consumer,
                "stats": {
                    "delivered": stats.delivered,
                    "acked": stats.acked,
                    "retried": stats.retried,
                    "dead_lettered": stats.dead_lettered,
                    "failed": stats.failed,
                    "panicked": stats.panicked,
                    "handed_back": stats.handed_back,
                    "in_flight": s.counters.in_flight(),
                    "handler_seconds": stats.handler_time.as_secs_f64(),
                    "handler_max_seconds": stats.handler_max.as_secs_f64(),
                    "consumer_name_shared": stats.consumer_name_shared,
                    "lag": stats.lag,
                    "pending": stats.pending,
                    "oldest_pending_ms": stats.oldest_pending_ms,
                },
            })
        })
        .collect();
    Json(Value::Array(list))
}
