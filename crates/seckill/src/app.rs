//! The service: shared state, the router, extractors that turn bad input into coded 4xx
//! replies, and `serve` with graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::routing::{get, post};
use axum::{Json, Router};
use ferrisson::{Client, IdGenerator};
use redis::aio::ConnectionManager;
use serde::de::DeserializeOwned;
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::db::Db;
use crate::error::ApiError;
use crate::oversell::Lab;
use crate::{auth, oversell, vouchers};

/// How the order flow keeps one order per user and the stock above zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderFlow {
    /// The seed's flow: the ferrisson `Lock` on `lock:order:{userId}` around the
    /// per-user check, the conditional decrement and the insert, held until the commit.
    Lock,
    /// The same flow without the lock: only the unique index (if present) stops a
    /// second order. For the lab and as the benchmark's floor.
    NoLock,
    /// The seed project's later flow: one Lua script checks and takes the stock and the
    /// user's one order in Redis, then the order is written to the database.
    Lua,
}

impl OrderFlow {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::NoLock => "no-lock",
            Self::Lua => "lua",
        }
    }
}

/// Everything `seckill serve` is configured with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Redis URL for tokens, locks, ids and the lab's stock.
    pub redis: String,
    /// Database URL (`sqlite://...`, `postgres://...`, `mysql://...`).
    pub database: String,
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// The independent Redis servers of the lab's `redlock` variant.
    pub redlock: Vec<String>,
    /// How orders keep one per user.
    pub order_flow: OrderFlow,
    /// Login token lifetime, refreshed on each authenticated request (the seed: 30 min).
    pub token_ttl: Duration,
    /// The watchdog lease of ferrisson locks (Redisson's 30 s).
    pub watchdog_lease: Duration,
    /// The oversell lab's settings.
    pub lab: oversell::LabConfig,
    /// Database pool size.
    pub db_connections: u32,
}

/// The state every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) db: Db,
    pub(crate) redis: ConnectionManager,
    pub(crate) locks: Client,
    pub(crate) ids: IdGenerator,
    pub(crate) config: ServeConfig,
    pub(crate) lab: Lab,
}

impl AppState {
    /// Connects to Redis (and the redlock servers) and the database, running migrations.
    ///
    /// # Errors
    ///
    /// When a store cannot be reached or the configuration is invalid.
    pub async fn connect(config: ServeConfig) -> anyhow::Result<Self> {
        let db = Db::connect(&config.database, config.db_connections).await?;
        let locks = Client::builder(&config.redis)
            .watchdog_lease(config.watchdog_lease)
            .connect()
            .await?;
        let redis = redis::Client::open(config.redis.as_str())?
            .get_connection_manager()
            .await?;
        let mut redlock_clients = Vec::new();
        for url in &config.redlock {
            redlock_clients.push(Client::connect(url).await?);
        }
        let lab = Lab::new(&config.lab, &locks, &redlock_clients)?;
        let ids = locks.id_generator();
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                redis,
                locks,
                ids,
                config,
                lab,
            }),
        })
    }

    /// The database handle.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }
}

/// The service's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/users/login", post(auth::login))
        .route("/vouchers", post(vouchers::create))
        .route("/vouchers/{id}", get(vouchers::show))
        .route("/vouchers/{id}/seckill", post(vouchers::seckill))
        .route("/vouchers/{id}/orders", get(vouchers::orders))
        .route("/lab/stock", post(oversell::set_stock).get(oversell::stock))
        .route("/lab/deduct/{variant}", post(oversell::deduct))
        .fallback(|| async { ApiError::RouteNotFound })
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

/// `Json<T>` whose rejection is a coded `MALFORMED_JSON` error.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Self(v)),
            Err(e) => Err(ApiError::MalformedJson(json_rejection_text(&e))),
        }
    }
}

fn json_rejection_text(e: &JsonRejection) -> String {
    e.body_text()
}

/// `Path<T>` whose rejection is a coded `INVALID_PATH` error.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Self(v)),
            Err(e) => Err(ApiError::InvalidPath(path_rejection_text(&e))),
        }
    }
}

fn path_rejection_text(e: &PathRejection) -> String {
    e.body_text()
}
