//! The HTTP/1.1 connection loop: accepts connections, bounds how long a client may take
//! to send a request head, and shuts down within a bound.
//!
//! - A connection that has not sent a whole request head within `--read-timeout` is
//!   closed; that includes an idle keep-alive connection waiting for its next request.
//!   (The body's own bound is in [`crate::http::limits`].)
//! - On shutdown the listener closes at once, idle connections are closed, requests in
//!   flight get up to `--shutdown-timeout` to finish, and then every connection still
//!   open (a slow client, a request that has not finished) is closed.
//! - Replies the protocol layer makes itself (400, 414, 431) carry the service's JSON
//!   error body ([`ProtocolErrors`]).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::http::limits::{MAX_HEAD_BYTES, MAX_HEADERS};
use crate::http::protocol_errors::ProtocolErrors;

/// How long the loop pauses after a failed accept (out of file descriptors, say)
/// before it accepts again, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Bounds of the connection loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most a client may take to send a request head (and, in the middleware, a
    /// body).
    pub read_timeout: Duration,
    /// The most shutdown waits for requests in flight before it closes every
    /// connection.
    pub shutdown_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then shuts down within
/// `bounds.shutdown_timeout`.
///
/// # Errors
///
/// Never today (a failed accept is logged and retried); the `Result` leaves room for a
/// listener error that cannot be retried.
///
/// # Cancel safety
///
/// Dropping the future drops every connection at once.
pub async fn run(
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.read_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // Replies are small: send them without waiting for more.
                    let _ = stream.set_nodelay(true);
                    let io = TokioIo::new(ProtocolErrors::new(stream));
                    let conn = builder.serve_connection(io, TowerToHyperService::new(app.clone()));
                    let conn = graceful.watch(conn);
                    connections.spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "connection closed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            // Reap finished connections as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let open = connections.len();
    tracing::info!(
        open,
        bound = %humantime::format_duration(bounds.shutdown_timeout),
        "shutting down: closing idle connections, finishing requests in flight"
    );
    if tokio::time::timeout(bounds.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "closing the connections still open after --shutdown-timeout"
        );
    }
    connections.shutdown().await;
    Ok(())
}
