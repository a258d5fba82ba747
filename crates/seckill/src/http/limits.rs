//! What one request may send, and how slowly: the limits every route shares, checked
//! before any handler runs.
//!
//! The request head is bounded by the protocol layer ([`MAX_HEAD_BYTES`],
//! [`MAX_HEADERS`], and `--read-timeout` for the whole head, see
//! [`crate::http::server`]). Here, for every request: the path and query against
//! [`MAX_URI_BYTES`] (414), the declared `Content-Length` against
//! [`MAX_BODY_BYTES`] before a byte of the body is read (413), and the body read whole,
//! within `--read-timeout` (408) and the same limit (413 for a body in chunks without a
//! declared length). A refused request's connection is closed: its unread body would
//! otherwise be taken for the next request.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use crate::error::ApiError;
pub use crate::http::extract::MAX_BODY_BYTES;
use crate::state::AppState;

/// Longest path and query accepted, in bytes.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest request head (request line and headers) accepted, in bytes.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most headers one request may have.
pub const MAX_HEADERS: usize = 64;

/// The declared body length, if the request declares one that is a number.
///
/// ```
/// use axum::http::{HeaderMap, HeaderValue, header::CONTENT_LENGTH};
/// use seckill::http::limits::declared_length;
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(declared_length(&headers), None);
/// headers.insert(CONTENT_LENGTH, HeaderValue::from_static("99999999"));
/// assert_eq!(declared_length(&headers), Some(99_999_999));
/// ```
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The reply to a refused request, asking the client to close the connection.
fn refuse(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The middleware: checks the URI and the declared length, then reads the body whole
/// within `--read-timeout` and hands the route a body already in memory.
pub async fn bound_request(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let uri_bytes = request
        .uri()
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len());
    if uri_bytes > MAX_URI_BYTES {
        return refuse(ApiError::UriTooLong);
    }
    if declared_length(request.headers()).is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return refuse(ApiError::PayloadTooLarge(MAX_BODY_BYTES));
    }
    let read_timeout = state.inner.config.read_timeout;
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(read_timeout, Limited::new(body, MAX_BODY_BYTES).collect());
    let bytes: Bytes = match read.await {
        Err(_elapsed) => return refuse(ApiError::RequestTimeout(read_timeout)),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return refuse(ApiError::PayloadTooLarge(MAX_BODY_BYTES));
        }
        // The client went away or sent a broken chunked encoding.
        Ok(Err(_)) => return refuse(ApiError::MalformedRequest),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
