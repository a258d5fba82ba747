//! The HTTP side of the service: the routes, the extractors that turn bad input into
//! coded 4xx replies, the Prometheus metrics, and `serve` with graceful shutdown.

pub mod extract;
pub mod id;
pub mod lab;
pub mod metrics;
pub mod purchases;
pub mod shop;
pub mod users;
pub mod voucher_list;
pub mod vouchers;

use std::net::SocketAddr;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::error::ApiError;
use crate::settings::ServeConfig;
use crate::state::AppState;

/// The line `seckill serve` prints on stdout once it listens: this prefix, then the
/// address (the lab reads it to learn the port).
pub const LISTENING_PREFIX: &str = "seckill listening on ";

/// The service's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics::render))
        .route("/users/login", post(users::login))
        .route("/vouchers", post(vouchers::create))
        .route("/vouchers", get(voucher_list::list))
        .route("/vouchers/{id}", get(vouchers::show))
        .route("/vouchers/{id}/seckill", post(vouchers::seckill))
        .route("/vouchers/{id}/orders", get(vouchers::orders))
        .route("/lab/stock", post(lab::set_stock).get(lab::stock))
        .route("/lab/deduct/{variant}", post(lab::deduct))
        .merge(shop::routes())
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(purchases::count))
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .with_state(state)
}

async fn health(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let mut conn = state.inner.redis.clone();
    let _: String = redis::cmd("PING").query_async(&mut conn).await?;
    state.inner.db.ping().await?;
    Ok(Json(serde_json::json!({
        "status": "ok",
        "database": state.inner.db.backend().name(),
        "order_flow": state.inner.config.order_flow,
    })))
}

/// Runs the service until SIGINT or SIGTERM, then stops accepting, lets requests in
/// flight finish and closes the database pool.
///
/// `on_listening` receives the bound address (useful with port 0).
///
/// # Errors
///
/// When a store cannot be reached or the address cannot be bound.
pub async fn serve(
    config: ServeConfig,
    on_listening: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let state = AppState::connect(config).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, database = state.db().backend().name(), "seckill listening");
    on_listening(addr);
    metrics::spawn_upkeep();
    axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    state.inner.db.close().await;
    tracing::info!("seckill stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
    tracing::info!("shutting down: finishing requests in flight");
}
