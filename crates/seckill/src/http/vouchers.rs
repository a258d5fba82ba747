//! The voucher routes: create a voucher with stock and a sale window, show it, list
//! its orders, and buy it (`POST /vouchers/{id}/seckill`, see [`crate::orders`]).

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::db::VoucherRow;
use crate::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::extract::{ApiJson, ApiPath};
use crate::http::id::Id;
use crate::http::text::checked_text;
use crate::http::users::CurrentUser;
use crate::orders::{self, lua_keys};
use crate::state::AppState;

/// Longest accepted title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Largest accepted stock.
pub const MAX_STOCK: i64 = 1_000_000_000;

/// `POST /vouchers` body.
#[derive(Debug, Deserialize)]
pub struct NewVoucher {
    /// Shown to buyers; 1 to 200 characters.
    pub title: String,
    /// Units for sale, 0 or more.
    pub stock: i64,
    /// Sale start, RFC 3339 (`2026-11-22T12:00:00Z`).
    pub begin_time: DateTime<Utc>,
    /// Sale end, RFC 3339; after `begin_time`.
    pub end_time: DateTime<Utc>,
}

impl JsonBody for NewVoucher {
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("title", "a string of 1 to 200 characters"),
        ("stock", "an integer from 0 to 1000000000"),
        (
            "begin_time",
            "a time in RFC 3339 as a string, e.g. \"2026-11-22T12:00:00Z\"",
        ),
        (
            "end_time",
            "a time in RFC 3339 as a string, e.g. \"2026-11-22T13:00:00Z\"",
        ),
    ];
}

/// A voucher as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct VoucherView {
    /// The voucher id (a string in JSON).
    pub id: Id,
    /// Its title.
    pub title: String,
    /// Units left now.
    pub stock: i64,
    /// Sale start, RFC 3339.
    pub begin_time: String,
    /// Sale end, RFC 3339.
    pub end_time: String,
}

/// An order as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct OrderView {
    /// The order id (an `IdGenerator` id with prefix `order`; a string in JSON).
    pub id: Id,
    /// The buyer.
    pub user_id: Id,
    /// The voucher bought.
    pub voucher_id: Id,
    /// When, RFC 3339.
    pub created_at: String,
}

fn rfc3339(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms).single().map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

impl From<VoucherRow> for VoucherView {
    fn from(v: VoucherRow) -> Self {
        Self {
            id: Id(v.id),
            title: v.title,
            stock: v.stock,
            begin_time: rfc3339(v.begin_ms),
            end_time: rfc3339(v.end_ms),
        }
    }
}

/// `POST /vouchers` → `{"id": ...}`.
pub async fn create(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<NewVoucher>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let title = checked_text("title", &req.title, MAX_TITLE_CHARS)?;
    if !(0..=MAX_STOCK).contains(&req.stock) {
        return Err(ApiError::InvalidInput(format!(
            "stock must be between 0 and {MAX_STOCK}"
        )));
    }
    if req.end_time <= req.begin_time {
        return Err(ApiError::InvalidInput(
            "end_time must be after begin_time".into(),
        ));
    }
    let id = state
        .within_redis_timeout(state.inner.ids.next_id("voucher"))
        .await?;
    let row = VoucherRow {
        id,
        title: title.to_owned(),
        stock: req.stock,
        begin_ms: req.begin_time.timestamp_millis(),
        end_ms: req.end_time.timestamp_millis(),
    };
    // The `lua` order flow sells from a copy of the stock in Redis. Written first: if
    // the database then refuses the voucher, the copy is an unused key, not a voucher
    // the caller was never told about.
    let mut conn = state.inner.redis.clone();
    let () = redis::cmd("SET")
        .arg(lua_keys(id).0)
        .arg(row.stock)
        .query_async(&mut conn)
        .await?;
    state
        .inner
        .db
        .insert_voucher(&row, Utc::now().timestamp_millis())
        .await?;
    Ok(Json(serde_json::json!({ "id": Id(id) })))
}

/// `GET /vouchers/{id}` → the voucher with its current stock.
pub async fn show(
    State(state): State<AppState>,
    ApiPath(Id(id)): ApiPath<Id>,
) -> Result<Json<VoucherView>, ApiError> {
    let voucher = state
        .inner
        .db
        .voucher(id)
        .await?
        .ok_or(ApiError::VoucherNotFound)?;
    Ok(Json(voucher.into()))
}

/// `GET /vouchers/{id}/orders` → `{"orders": [...]}`.
pub async fn orders(
    State(state): State<AppState>,
    ApiPath(Id(id)): ApiPath<Id>,
) -> Result<Json<serde_json::Value>, ApiError> {
    state
        .inner
        .db
        .voucher(id)
        .await?
        .ok_or(ApiError::VoucherNotFound)?;
    let orders: Vec<OrderView> = state
        .inner
        .db
        .orders(id)
        .await?
        .into_iter()
        .map(|o| OrderView {
            id: Id(o.id),
            user_id: Id(o.user_id),
            voucher_id: Id(o.voucher_id),
            created_at: rfc3339(o.created_ms),
        })
        .collect();
    Ok(Json(serde_json::json!({ "orders": orders })))
}

/// `POST /vouchers/{id}/seckill` → `{"order_id": ...}`, or 409 with `NOT_STARTED`,
/// `ENDED`, `SOLD_OUT` or `ALREADY_ORDERED`, or 429 `RATE_LIMITED` with `Retry-After`
/// when the user tries more often than `--buy-rate` allows (counted first, before any
/// database work).
pub async fn seckill(
    State(state): State<AppState>,
    CurrentUser(user_id): CurrentUser,
    ApiPath(Id(voucher_id)): ApiPath<Id>,
) -> Result<Json<serde_json::Value>, ApiError> {
    state.count_buy_attempt(user_id).await?;
    let order_id = orders::place(&state, user_id, voucher_id).await?;
    Ok(Json(serde_json::json!({ "order_id": Id(order_id) })))
}
