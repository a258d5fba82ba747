//! The oversell lab's routes (see [`crate::oversell`]); every one requires the admin
//! token ([`Admin`]): they reset and spend the lab's stock.

use axum::Json;
use axum::extract::State;

use crate::error::ApiError;
use crate::http::admin::Admin;
use crate::http::extract::{ApiJson, ApiPath};
use crate::oversell::{self, DeductReply, LabState, SetStock, Variant};
use crate::state::AppState;

/// `POST /lab/stock` `{"stock": 200}`: sets the stock in Redis and the database and
/// clears the counters of the previous run.
pub async fn set_stock(
    _admin: Admin,
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SetStock>,
) -> Result<Json<LabState>, ApiError> {
    let mut conn = state.inner.redis.clone();
    Ok(Json(
        oversell::reset(&state.inner.lab, &mut conn, &state.inner.db, req.stock).await?,
    ))
}

/// `GET /lab/stock`: the lab's state.
pub async fn stock(
    _admin: Admin,
    State(state): State<AppState>,
) -> Result<Json<LabState>, ApiError> {
    let mut conn = state.inner.redis.clone();
    Ok(Json(LabState::read(&mut conn, &state.inner.db).await?))
}

/// `POST /lab/deduct/{variant}`: one deduction; 200 with `{"sold": ...}` whether or not
/// a unit was sold.
pub async fn deduct(
    _admin: Admin,
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<DeductReply>, ApiError> {
    let variant = Variant::parse(&name).ok_or(ApiError::UnknownVariant(name))?;
    let inner = &state.inner;
    Ok(Json(
        oversell::deduct(&inner.lab, inner.redis.clone(), &inner.db, variant).await?,
    ))
}
