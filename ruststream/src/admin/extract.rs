//! The admin endpoint's own extractors: axum's, with their rejections
//! answered as JSON errors (`{"error": ...}`) like every other error of
//! the endpoint.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::json::ApiError;

/// The route's path parameters, as [`axum::extract::Path`] takes them; a
/// parameter it cannot take (a name that is not UTF-8 once
/// percent-decoded, say) is a JSON error with the rejection's status and
/// text.
#[derive(Debug)]
pub(super) struct Path<T>(pub(super) T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(ApiError {
                status: rejection.status(),
                message: rejection.body_text(),
            }),
        }
    }
}
