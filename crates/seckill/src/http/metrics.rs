//! `GET /metrics`: the ferrisson metrics and the service's own request metrics in the
//! Prometheus text format, and the middleware that counts every request.
//!
//! The recorder is the process's (`metrics` recorders are global): the `seckill` binary
//! installs it with [`install_recorder`] before anything connects, so that ferrisson's
//! metric descriptions reach it. A process without it answers `/metrics` with 404.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::error::ApiError;

/// Counter: HTTP requests answered, by `method`, `route` (the route's pattern, such as
/// `/vouchers/{id}/seckill`, or `unmatched`) and `status`.
pub const REQUESTS: &str = "seckill_http_requests_total";
/// Histogram (seconds): time to answer one HTTP request, with the labels of [`REQUESTS`].
pub const REQUEST_SECONDS: &str = "seckill_http_request_duration_seconds";

/// Bucket bounds of every histogram (seconds): from half a millisecond, a lock taken at
/// once, to a minute, a wait behind a stalled holder.
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// How often histogram samples are folded into their buckets.
const UPKEEP: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's Prometheus recorder and describes the request metrics.
///
/// # Errors
///
/// When another recorder is installed already.
pub fn install_recorder() -> anyhow::Result<()> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&BUCKETS)?
        .install_recorder()?;
    metrics::describe_counter!(REQUESTS, metrics::Unit::Count, "HTTP requests answered.");
    metrics::describe_histogram!(
        REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Time to answer one HTTP request."
    );
    // ferrisson describes its metrics on connect; once more costs nothing.
    ferrisson::redis::metrics::describe();
    // Set once: the recorder above would have failed to install a second time.
    let _ = HANDLE.set(handle);
    Ok(())
}

/// Folds histogram samples into buckets every few seconds, for as long as the runtime
/// runs; nothing to do without a recorder.
pub(crate) fn spawn_upkeep() {
    if let Some(handle) = HANDLE.get() {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(UPKEEP);
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        });
    }
}

/// `GET /metrics`.
pub(crate) async fn render() -> Response {
    match HANDLE.get() {
        Some(handle) => (
            [(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            handle.render(),
        )
            .into_response(),
        None => ApiError::RouteNotFound.into_response(),
    }
}

/// Counts the request and its duration under its route's pattern (a bounded label: one
/// value per route, not per voucher id).
pub(crate) async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let labels = [
        ("method", method.to_owned()),
        ("route", route),
        ("status", response.status().as_str().to_owned()),
    ];
    metrics::counter!(REQUESTS, &labels).increment(1);
    metrics::histogram!(REQUEST_SECONDS, &labels).record(started.elapsed().as_secs_f64());
    response
}

/// The method as a label: the service's methods by name, anything else `other` (the
/// label stays bounded whatever clients send).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        _ => "other",
    }
}
