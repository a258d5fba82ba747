//! The voucher routes: create a voucher with stock and a sale window, show it, list
//! its orders, and buy it (`POST /vouchers/{id}/seckill`, see [`crate::orders`]).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::db::VoucherRow;
use crate::error::ApiError;
use crate::http::admin::Admin;
use crate::http::extract::JsonBody;
use crate::http::extract::{ApiJson, ApiPath, bearer_token};
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

/// `POST /vouchers` (admin) → `{"id": ...}`.
pub async fn create(
    _admin: Admin,
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

/// Most orders on one page of `GET /vouchers/{id}/orders`.
pub const MAX_PAGE: u32 = 1000;
/// Orders on a page when `limit` is not given.
pub const DEFAULT_PAGE: u32 = 100;

/// The query of `GET /vouchers/{id}/orders`: `?limit=N&after=ORDER_ID` (the admin's
/// pages; a buyer's own orders fit on one).
#[derive(Debug, Default, Deserialize)]
pub struct OrdersPage {
    /// Orders on the page, 1 to [`MAX_PAGE`]; [`DEFAULT_PAGE`] when not given.
    pub limit: Option<u32>,
    /// Only orders with a higher id: the previous page's `next`.
    pub after: Option<Id>,
}

/// Who asks for a voucher's orders: the admin (every buyer's, by pages) or a logged-in
/// buyer (their own only).
#[derive(Debug, Clone, Copy)]
pub enum OrdersCaller {
    /// The request carried the admin token.
    Admin,
    /// The request carried this user's login token.
    Buyer(i64),
}

impl FromRequestParts<AppState> for OrdersCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let admin = state.inner.config.admin_token.as_ref();
        if bearer_token(&parts.headers).is_some_and(|t| admin.is_some_and(|a| a.matches(t))) {
            return Ok(Self::Admin);
        }
        let CurrentUser(user) = CurrentUser::from_request_parts(parts, state).await?;
        Ok(Self::Buyer(user))
    }
}

/// `GET /vouchers/{id}/orders` → `{"orders": [...], "next": ...}`: for the admin, one
/// page of every buyer's orders (`next`: the `after` of the next page, `null` on the
/// last); for a buyer, their own orders (`next` always `null`).
pub async fn orders(
    State(state): State<AppState>,
    caller: OrdersCaller,
    ApiPath(Id(id)): ApiPath<Id>,
    page: Result<Query<OrdersPage>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(page) = page.map_err(|_| {
        ApiError::InvalidInput(format!(
            "the query takes `limit` (1 to {MAX_PAGE}) and `after` (an order id from the previous page's `next`)"
        ))
    })?;
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidInput(format!(
            "`limit` must be 1 to {MAX_PAGE}"
        )));
    }
    let db = &state.inner.db;
    db.voucher(id).await?.ok_or(ApiError::VoucherNotFound)?;
    let (rows, next) = match caller {
        OrdersCaller::Buyer(user) => (db.user_orders(id, user).await?, None),
        OrdersCaller::Admin => {
            // One more than the page: whether another page follows.
            let mut rows = db
                .orders_page(id, page.after.map(|Id(after)| after), limit + 1)
                .await?;
            let more = rows.len() > limit as usize;
            rows.truncate(limit as usize);
            let next = more.then(|| rows.last().map(|o| Id(o.id))).flatten();
            (rows, next)
        }
    };
    let orders: Vec<OrderView> = rows
        .into_iter()
        .map(|o| OrderView {
            id: Id(o.id),
            user_id: Id(o.user_id),
            voucher_id: Id(o.voucher_id),
            created_at: rfc3339(o.created_ms),
        })
        .collect();
    Ok(Json(serde_json::json!({ "orders": orders, "next": next })))
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
