//! The admin endpoint of a running service, over HTTP: the routes of
//! `docs/operations.md` ("The admin endpoint"), with the token as
//! `Authorization: Bearer` on the write routes.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use ruststream::EntryId;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Outgoing, Page, Pruning};
use crate::error::{CliError, CliResult, one_line};
use crate::model::{DeadLetterRow, GroupSummary, PruneResult, StreamSummary, WriteResult};

/// Most ids one redrive or discard request carries.
const WRITE_BATCH: usize = 1_000;

/// A client of one admin endpoint.
pub struct AdminClient {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
}

impl AdminClient {
    /// A client of the endpoint at `url` (`http://HOST:PORT`, maybe with a
    /// path prefix).
    pub fn new(url: &str, token: Option<String>) -> CliResult<Self> {
        let base = Url::parse(url).map_err(|e| {
            CliError::Usage(format!(
                "--admin {url:?} is not a URL ({e}): give http://HOST:PORT"
            ))
        })?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(CliError::Usage(format!(
                "--admin {url:?} is not an http:// URL: give http://HOST:PORT"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CliError::Runtime(format!("cannot make an HTTP client: {e}")))?;
        Ok(AdminClient { http, base, token })
    }

    /// The URL of the route made of `segments` (each one escaped), with
    /// `query`. A name `.` or `..` has no URL: a URL drops such segments
    /// (even escaped, as `%2E`), and the request would reach another route.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> CliResult<Url> {
        if let Some(dots) = segments.iter().find(|s| matches!(**s, "." | "..")) {
            return Err(CliError::Usage(format!(
                "the name {dots:?} cannot be sent to the admin endpoint (a URL drops `.` and \
                 `..` path segments); reach it with --redis or --dir"
            )));
        }
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// Sends a request and decodes the answer; an error answer becomes
    /// the [`CliError`] of its status, with the endpoint's message.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<Value>,
    ) -> CliResult<T> {
        let mut request = self.http.request(method, url.clone());
        if let Some(body) = body {
            request = request.json(&body);
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
        }
        let failed = |what: String, e: reqwest::Error| {
            CliError::Runtime(format!("{what}: {}", cause_chain(&e)))
        };
        let base = &self.base;
        let response = request
            .send()
            .await
            .map_err(|e| failed(format!("cannot reach the admin endpoint at {base}"), e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            failed(
                format!("the admin endpoint at {base} broke off its answer"),
                e,
            )
        })?;
        if !status.is_success() {
            return Err(self.error(status, &text));
        }
        serde_json::from_str(&text).map_err(|e| {
            CliError::Runtime(format!(
                "the admin endpoint answered {url} with something unexpected ({e}); \
                 is it a ruststream service of the same version?"
            ))
        })
    }

    /// The error an error answer means.
    fn error(&self, status: StatusCode, body: &str) -> CliError {
        let said = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(one_line))
            .unwrap_or_else(|| format!("HTTP {status}"));
        match status {
            StatusCode::BAD_REQUEST => CliError::Usage(said),
            StatusCode::PAYLOAD_TOO_LARGE => CliError::Refused(format!(
                "the admin endpoint takes no request this large ({said}); use --redis or --dir"
            )),
            StatusCode::NOT_FOUND => CliError::NotFound(said),
            StatusCode::UNAUTHORIZED if self.token.is_none() => CliError::Refused(format!(
                "the admin endpoint wants its token: give --token T (or RUSTSTREAM_ADMIN_TOKEN) ({said})"
            )),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                CliError::Refused(format!("the admin endpoint refused the change: {said}"))
            }
            _ => CliError::Runtime(format!("the admin endpoint at {}: {said}", self.base)),
        }
    }

    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> CliResult<T> {
        self.call(Method::GET, self.url(segments, query)?, None)
            .await
    }

    async fn post<T: DeserializeOwned>(&self, segments: &[&str], body: Value) -> CliResult<T> {
        self.call(Method::POST, self.url(segments, &[])?, Some(body))
            .await
    }

    /// `GET /streams`.
    pub(super) async fn streams(&self) -> CliResult<Vec<StreamSummary>> {
        self.get(&["streams"], &[]).await
    }

    /// `GET /streams/{stream}`.
    pub(super) async fn stream(&self, stream: &str) -> CliResult<StreamSummary> {
        self.get(&["streams", stream], &[]).await
    }

    /// `GET /groups/{stream}/{group}`.
    pub(super) async fn group(&self, stream: &str, group: &str) -> CliResult<GroupSummary> {
        self.get(&["groups", stream, group], &[]).await
    }

    /// `GET` the listing at `segments` (`/groups/{stream}/{group}/pending`,
    /// `/groups/{stream}/{group}/dead-letters`, `/streams/{stream}/entries`):
    /// one `page` of it, narrowed by the `extra` query pairs.
    pub(super) async fn listing<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        page: Page,
        extra: &[(&str, String)],
    ) -> CliResult<Vec<T>> {
        let mut query = vec![
            ("from", page.from.to_string()),
            ("count", page.count.to_string()),
        ];
        query.extend_from_slice(extra);
        self.get(segments, &query).await
    }

    /// `GET /groups/{stream}/{group}/dead-letters/{id}`.
    pub(super) async fn dead_letter(
        &self,
        stream: &str,
        group: &str,
        id: EntryId,
    ) -> CliResult<DeadLetterRow> {
        let id = id.to_string();
        self.get(&["groups", stream, group, "dead-letters", &id], &[])
            .await
    }

    /// `POST /groups/{stream}/{group}/{redrive|discard}` with `ids`.
    pub(super) async fn write(
        &self,
        stream: &str,
        group: &str,
        what: &str,
        ids: &[EntryId],
    ) -> CliResult<u64> {
        let mut changed = 0;
        for chunk in ids.chunks(WRITE_BATCH) {
            let ids: Vec<String> = chunk.iter().map(ToString::to_string).collect();
            let done: WriteResult = self
                .post(&["groups", stream, group, what], json!({ "ids": ids }))
                .await?;
            changed += done.changed;
        }
        Ok(changed)
    }

    /// `POST /streams/{stream}/publish`.
    pub(super) async fn publish(&self, stream: &str, message: Outgoing) -> CliResult<EntryId> {
        #[derive(serde::Deserialize)]
        struct Published {
            #[serde(with = "crate::model::id_text")]
            id: EntryId,
        }
        let body = json!({ "payload": message.payload, "headers": message.headers });
        let done: Published = self.post(&["streams", stream, "publish"], body).await?;
        Ok(done.id)
    }

    /// `POST /groups/{stream}/{group}/consumers/prune`.
    pub(super) async fn prune(
        &self,
        stream: &str,
        group: &str,
        how: Pruning,
    ) -> CliResult<PruneResult> {
        let idle_ms = u64::try_from(how.idle.as_millis()).unwrap_or(u64::MAX);
        self.post(
            &["groups", stream, group, "consumers", "prune"],
            json!({ "idle_ms": idle_ms, "dry_run": how.dry_run }),
        )
        .await
    }
}

/// An error and its causes, on one line (`error sending request: ...:
/// Connection refused`).
fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    one_line(&text)
}
