//! The admin endpoint: an HTTP server on the app's tokio runtime, opt-in
//! with [`crate::RustStream::admin`] (or [`ADMIN_ADDR_VAR`] for
//! `run_main` binaries). `docs/operations.md` lists its routes.
//!
//! - `routes`: metrics, liveness, readiness and the subscribers;
//! - `groups`: the group routes (describe, pending, dead letters, redrive,
//!   discard) on the app's brokers;
//! - `json`: how broker types and errors are written as JSON;
//! - `extract`: axum's extractors with their rejections as JSON errors.

mod extract;
mod groups;
mod json;
mod routes;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::running::AppView;

/// The environment variable that makes `run_main` binaries serve the
/// admin endpoint: `HOST:PORT`, or `PORT` for `127.0.0.1:PORT`.
pub const ADMIN_ADDR_VAR: &str = "RUSTSTREAM_ADMIN_ADDR";

/// The environment variable holding the admin endpoint's token (write
/// routes are off without one).
pub const ADMIN_TOKEN_VAR: &str = "RUSTSTREAM_ADMIN_TOKEN";

/// Where the admin endpoint listens, and the token of its write routes.
#[derive(Clone, Debug)]
pub(crate) struct AdminOptions {
    pub(crate) addr: SocketAddr,
    pub(crate) token: Option<String>,
}

impl AdminOptions {
    /// The options [`ADMIN_ADDR_VAR`] and [`ADMIN_TOKEN_VAR`] ask for;
    /// `None` when the address is not set.
    pub(crate) fn from_env() -> Result<Option<Self>, String> {
        let Ok(addr) = std::env::var(ADMIN_ADDR_VAR) else {
            return Ok(None);
        };
        let addr = parse_addr(&addr).map_err(|e| format!("{ADMIN_ADDR_VAR}: {e}"))?;
        let token = AdminOptions::token_from_env();
        Ok(Some(AdminOptions { addr, token }))
    }

    /// The token [`ADMIN_TOKEN_VAR`] holds, if set and not empty.
    pub(crate) fn token_from_env() -> Option<String> {
        std::env::var(ADMIN_TOKEN_VAR)
            .ok()
            .filter(|t| !t.is_empty())
    }
}

/// `HOST:PORT`, or a bare `PORT` on loopback.
fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("{text:?} is not PORT or HOST:PORT (for example 127.0.0.1:9464)"))
}

/// Bucket bounds, in seconds, of the duration histograms.
const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

static PROMETHEUS: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// Installs the Prometheus recorder for the process (once; later calls
/// return the same handle), so that the metrics handles an app registers
/// from now on record. Fails if another recorder is installed already.
pub(crate) fn prometheus() -> Result<&'static PrometheusHandle, &'static str> {
    let installed = PROMETHEUS.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &DURATION_BUCKETS)
            .and_then(PrometheusBuilder::install_recorder)
            .map_err(|e| {
                format!("cannot serve /metrics: {e} (another metrics recorder is installed in this process: scrape that one)")
            })
    });
    installed.as_ref().map_err(String::as_str)
}

/// How often the recorder's histograms are drained when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// What the routes share.
pub(crate) struct AdminState {
    pub(crate) view: Arc<AppView>,
    pub(crate) token: Option<String>,
}

/// Binds the endpoint's address (before the app starts, so that a taken
/// port stops the start).
pub(crate) async fn bind(options: &AdminOptions) -> std::io::Result<TcpListener> {
    TcpListener::bind(options.addr).await
}

/// Serves the endpoint on `listener` until `shutdown` says stop.
pub(crate) fn serve(
    listener: TcpListener,
    state: AdminState,
    mut shutdown: watch::Receiver<Option<Duration>>,
) -> JoinHandle<()> {
    let router = router(Arc::new(state));
    tokio::spawn(async move {
        let mut stop = shutdown.clone();
        let upkeep = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(UPKEEP_EVERY) => {}
                    _ = stop.wait_for(Option::is_some) => return,
                }
                if let Ok(handle) = prometheus() {
                    handle.run_upkeep();
                }
            }
        });
        let stopped = async move {
            let _ = shutdown.wait_for(Option::is_some).await;
        };
        if let Err(error) = axum::serve(listener, router)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::error!(%error, "the admin endpoint stopped");
        }
        upkeep.abort();
    })
}

fn router(state: Arc<AdminState>) -> Router {
    routes::router()
        .merge(groups::router())
        .fallback(|uri: axum::http::Uri| async move {
            json::ApiError::not_found(format!("no route {uri} (see docs/operations.md)"))
        })
        .method_not_allowed_fallback(
            |method: axum::http::Method, uri: axum::http::Uri| async move {
                json::ApiError {
                    status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
                    message: format!("{uri} does not take {method} (see docs/operations.md)"),
                }
            },
        )
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_a_port_or_host_and_port() {
        assert_eq!(
            parse_addr("9464"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9464)))
        );
        assert_eq!(
            parse_addr("0.0.0.0:80"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 80)))
        );
        let err = parse_addr("localhost:x").unwrap_err();
        assert!(err.contains("PORT or HOST:PORT"), "{err}");
    }
}
