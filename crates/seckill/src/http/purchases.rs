//! The purchase counter: every answer of `POST /vouchers/{id}/seckill`, by outcome
//! (`ORDERED`, or the refusal's code: `SOLD_OUT`, `ALREADY_ORDERED`, `NOT_STARTED`,
//! `ENDED`, `RATE_LIMITED`, ...), in `GET /metrics`. The shop page's live view reads it
//! there, and so can any Prometheus.
//!
//! A middleware rather than a line in the handler: the refusals leave the handler as
//! [`ApiError`](crate::error::ApiError)s turned into replies, and so does a refusal
//! before it runs (no login: `UNAUTHORIZED`); the code is read back from the reply's
//! small JSON body, which keeps the handler and the error type as they are.

use std::sync::Once;

use axum::body::{Body, HttpBody as _};
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::ErrorBody;

/// Counter: answers to purchase attempts (`POST /vouchers/{id}/seckill`), by `outcome`:
/// `ORDERED` for an order placed, else the refusal's error code (`HTTP_<status>` for a
/// reply without one).
///
/// ```
/// use seckill::http::purchases::PURCHASES;
///
/// // One line of `GET /metrics`:
/// let line = r#"seckill_purchases_total{outcome="SOLD_OUT"} 12"#;
/// assert!(line.starts_with(PURCHASES));
/// ```
pub const PURCHASES: &str = "seckill_purchases_total";

/// The outcome of a purchase that placed an order.
pub const ORDERED: &str = "ORDERED";

/// The purchase route's pattern, as the router matches it.
const ROUTE: &str = "/vouchers/{id}/seckill";

/// Describes [`PURCHASES`] once, at the first purchase: the recorder is installed by
/// then.
static DESCRIBED: Once = Once::new();

/// Largest reply body read back for its code: the service's error bodies are a code
/// and a sentence.
const MAX_ERROR_BODY: u64 = 16 * 1024;

/// Counts the reply of every purchase attempt under its outcome; passes every other
/// request through untouched.
pub(crate) async fn count(request: Request, next: Next) -> Response {
    let purchase = request.method() == Method::POST
        && request
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|path| path.as_str() == ROUTE);
    let response = next.run(request).await;
    if !purchase {
        return response;
    }
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            PURCHASES,
            metrics::Unit::Count,
            "Answers to purchase attempts, by outcome: ORDERED or the refusal's code."
        );
    });
    let (outcome, response) = outcome(response).await;
    metrics::counter!(PURCHASES, "outcome" => outcome).increment(1);
    response
}

/// The outcome of a purchase reply, and the reply to send (rebuilt from the bytes read).
async fn outcome(response: Response) -> (String, Response) {
    let status = response.status();
    if status.is_success() {
        return (ORDERED.to_owned(), response);
    }
    let by_status = format!("HTTP_{}", status.as_u16());
    // Read only a body known to be small (the service's JSON replies have an exact
    // length); a streamed or large one is passed on unread.
    if response
        .body()
        .size_hint()
        .upper()
        .is_none_or(|n| n > MAX_ERROR_BODY)
    {
        return (by_status, response);
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, MAX_ERROR_BODY as usize).await {
        Ok(bytes) => {
            let code = serde_json::from_slice::<ErrorBody>(&bytes)
                .ok()
                .map(|b| b.code)
                // The service's codes only: upper case and `_`, a bounded label.
                .filter(|c| {
                    !c.is_empty()
                        && c.len() <= 32
                        && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                })
                .unwrap_or(by_status);
            (code, Response::from_parts(parts, Body::from(bytes)))
        }
        // A body that failed while being read fails the same way for the client.
        Err(_) => (by_status, Response::from_parts(parts, Body::empty())),
    }
}
