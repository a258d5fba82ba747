//! The voucher flash sale (S2): vouchers with stock and a sale window, and the seed's
//! order flow — window check, stock check, one order per user under `lock:order:{userId}`
//! held until the transaction commits, `UPDATE ... AND stock > 0`, an `IdGenerator` id.

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::app::{ApiJson, ApiPath, AppState, OrderFlow};
use crate::auth::CurrentUser;
use crate::db::{OrderOutcome, OrderRow, VoucherRow};
use crate::error::ApiError;

static RESERVE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/seckill_reserve.lua")));
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/seckill_release.lua")));

/// The Redis keys of the `lua` order flow for one voucher: its stock and its buyers.
/// One hash tag, so both scripts also run on Redis Cluster.
fn lua_keys(voucher_id: i64) -> (String, String) {
    (
        format!("{{seckill:{voucher_id}}}:stock"),
        format!("{{seckill:{voucher_id}}}:buyers"),
    )
}

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

/// A voucher as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct VoucherView {
    /// The voucher id.
    pub id: i64,
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
    /// The order id (an `IdGenerator` id with prefix `order`).
    pub id: i64,
    /// The buyer.
    pub user_id: i64,
    /// The voucher bought.
    pub voucher_id: i64,
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
            id: v.id,
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
    let title = req.title.trim();
    if title.is_empty() || title.chars().count() > MAX_TITLE_CHARS {
        return Err(ApiError::InvalidInput(format!(
            "title must be 1 to {MAX_TITLE_CHARS} characters"
        )));
    }
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
    let id = state.inner.ids.next_id("voucher").await?;
    let row = VoucherRow {
        id,
        title: title.to_owned(),
        stock: req.stock,
        begin_ms: req.begin_time.timestamp_millis(),
        end_ms: req.end_time.timestamp_millis(),
    };
    state
        .inner
        .db
        .insert_voucher(&row, Utc::now().timestamp_millis())
        .await?;
    // The `lua` order flow sells from a copy of the stock in Redis.
    let mut conn = state.inner.redis.clone();
    let () = redis::cmd("SET")
        .arg(lua_keys(id).0)
        .arg(row.stock)
        .query_async(&mut conn)
        .await?;
    Ok(Json(serde_json::json!({ "id": id })))
}

/// `GET /vouchers/{id}` → the voucher with its current stock.
pub async fn show(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
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
    ApiPath(id): ApiPath<i64>,
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
            id: o.id,
            user_id: o.user_id,
            voucher_id: o.voucher_id,
            created_at: rfc3339(o.created_ms),
        })
        .collect();
    Ok(Json(serde_json::json!({ "orders": orders })))
}

/// `POST /vouchers/{id}/seckill` → `{"order_id": ...}`, or 409 with `NOT_STARTED`,
/// `ENDED`, `SOLD_OUT` or `ALREADY_ORDERED`.
pub async fn seckill(
    State(state): State<AppState>,
    CurrentUser(user_id): CurrentUser,
    ApiPath(voucher_id): ApiPath<i64>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let inner = &state.inner;
    let voucher = inner
        .db
        .voucher(voucher_id)
        .await?
        .ok_or(ApiError::VoucherNotFound)?;
    let now = Utc::now().timestamp_millis();
    if now < voucher.begin_ms {
        return Err(ApiError::NotStarted);
    }
    if now > voucher.end_ms {
        return Err(ApiError::Ended);
    }
    if voucher.stock < 1 {
        return Err(ApiError::SoldOut);
    }
    let order_id = match inner.config.order_flow {
        OrderFlow::Lock => {
            let lock = inner.locks.lock(&format!("lock:order:{user_id}"))?;
            // The seed's tryLock(): a second concurrent attempt of one user is refused,
            // not queued.
            let Some(guard) = lock.try_lock().await? else {
                return Err(ApiError::AlreadyOrdered(
                    "another order of this user is in progress",
                ));
            };
            // The guard is released only after create_order has committed.
            let result = create_voucher_order(&state, user_id, voucher_id).await;
            if let Err(e) = guard.unlock().await {
                tracing::warn!(user_id, error = %e, "order lock release failed; it expires by itself");
            }
            result?
        }
        OrderFlow::NoLock => create_voucher_order(&state, user_id, voucher_id).await?,
        OrderFlow::Lua => lua_order(&state, user_id, &voucher).await?,
    };
    Ok(Json(serde_json::json!({ "order_id": order_id })))
}

/// The seed's `createVoucherOrder`: one order per user, then the conditional decrement
/// and the insert in one transaction, committed before returning.
async fn create_voucher_order(
    state: &AppState,
    user_id: i64,
    voucher_id: i64,
) -> Result<i64, ApiError> {
    let inner = &state.inner;
    if inner.db.order_count(user_id, voucher_id).await? > 0 {
        return Err(ApiError::AlreadyOrdered(
            "this user already ordered this voucher",
        ));
    }
    let order = OrderRow {
        id: inner.ids.next_id("order").await?,
        user_id,
        voucher_id,
        created_ms: Utc::now().timestamp_millis(),
    };
    match inner.db.create_order(&order).await? {
        OrderOutcome::Created => Ok(order.id),
        OrderOutcome::SoldOut => Err(ApiError::SoldOut),
        OrderOutcome::Duplicate => Err(ApiError::AlreadyOrdered(
            "this user already ordered this voucher",
        )),
    }
}

/// The `lua` flow: reserve the unit and the user's one order in Redis with one script,
/// then write the order; a refused write gives the reservation back.
async fn lua_order(state: &AppState, user_id: i64, voucher: &VoucherRow) -> Result<i64, ApiError> {
    let inner = &state.inner;
    let (stock_key, buyers_key) = lua_keys(voucher.id);
    let mut conn = inner.redis.clone();
    let mut code: i64 = RESERVE
        .key(&stock_key)
        .key(&buyers_key)
        .arg(user_id)
        .invoke_async(&mut conn)
        .await?;
    if code == -1 {
        // Not loaded (the Redis copy was lost): seed it from the database once. Buyers
        // are not restored; the unique index then refuses their second order.
        let _: bool = redis::cmd("SET")
            .arg(&stock_key)
            .arg(voucher.stock)
            .arg("NX")
            .query_async(&mut conn)
            .await?;
        code = RESERVE
            .key(&stock_key)
            .key(&buyers_key)
            .arg(user_id)
            .invoke_async(&mut conn)
            .await?;
    }
    match code {
        0 => {}
        1 => return Err(ApiError::SoldOut),
        2 => {
            return Err(ApiError::AlreadyOrdered(
                "this user already ordered this voucher",
            ));
        }
        other => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "seckill_reserve returned {other}"
            )));
        }
    }
    let order = OrderRow {
        id: inner.ids.next_id("order").await?,
        user_id,
        voucher_id: voucher.id,
        created_ms: Utc::now().timestamp_millis(),
    };
    let outcome = inner.db.create_order(&order).await;
    if !matches!(outcome, Ok(OrderOutcome::Created)) {
        let _: i64 = RELEASE
            .key(&stock_key)
            .key(&buyers_key)
            .arg(user_id)
            .invoke_async(&mut conn)
            .await?;
    }
    match outcome? {
        OrderOutcome::Created => Ok(order.id),
        OrderOutcome::SoldOut => Err(ApiError::SoldOut),
        OrderOutcome::Duplicate => Err(ApiError::AlreadyOrdered(
            "this user already ordered this voucher",
        )),
    }
}
