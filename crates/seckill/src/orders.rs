//! The order flows of `POST /vouchers/{id}/seckill`: sale window, stock, one order per
//! user under `lock:order:{userId}` held until the transaction commits and fenced with
//! the lock's token, `UPDATE ... AND stock > 0`, an `IdGenerator` id; or the same
//! without the lock, or the Lua flow.

use std::sync::LazyLock;

use chrono::Utc;
use ferrisson::redis::FencingToken;
use ferrisson::{DistributedLock as _, Guard as _};

use crate::db::{OrderOutcome, OrderRow, VoucherRow};
use crate::error::ApiError;
use crate::settings::OrderFlow;
use crate::state::AppState;

static RESERVE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/seckill_reserve.lua")));
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/seckill_release.lua")));

/// The Redis keys of the `lua` order flow for one voucher: its stock and its buyers.
/// One hash tag, so both scripts also run on Redis Cluster.
pub(crate) fn lua_keys(voucher_id: i64) -> (String, String) {
    (
        format!("{{seckill:{voucher_id}}}:stock"),
        format!("{{seckill:{voucher_id}}}:buyers"),
    )
}

/// Places `user_id`'s order of `voucher_id` with the configured order flow and returns
/// the order id, or the reason it was refused.
pub async fn place(state: &AppState, user_id: i64, voucher_id: i64) -> Result<i64, ApiError> {
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
    match inner.config.order_flow {
        OrderFlow::Lock => {
            let lock = inner.order_locks.lock(&order_lock_name(user_id))?;
            // try_lock: a second concurrent attempt of one user is refused, not queued.
            let Some(guard) = state.within_redis_timeout(lock.try_lock()).await? else {
                return Err(ApiError::AlreadyOrdered(
                    "another order of this user is in progress",
                ));
            };
            // Released only after the order has committed; the write carries the token
            // (every store's lock but a database session lock has one), so that a holder
            // whose lease ran out meanwhile cannot write after a newer holder has.
            let result =
                create_voucher_order(state, user_id, voucher_id, guard.fencing_token()).await;
            if let Err(e) = state.within_redis_timeout(guard.unlock()).await {
                tracing::warn!(user_id, error = %e, "order lock release failed; it expires by itself");
            }
            result
        }
        OrderFlow::NoLock => create_voucher_order(state, user_id, voucher_id, None).await,
        OrderFlow::Lua => lua_order(state, user_id, &voucher).await,
    }
}

/// The name of the lock that keeps one order of `user_id` at a time.
pub fn order_lock_name(user_id: i64) -> String {
    format!("lock:order:{user_id}")
}

/// One order per user, then (fenced with `fence` when given) the conditional
/// decrement and the insert in one transaction, committed before returning.
async fn create_voucher_order(
    state: &AppState,
    user_id: i64,
    voucher_id: i64,
    fence: Option<FencingToken>,
) -> Result<i64, ApiError> {
    let inner = &state.inner;
    if inner.db.order_count(user_id, voucher_id).await? > 0 {
        return Err(ApiError::AlreadyOrdered(
            "this user already ordered this voucher",
        ));
    }
    let order = OrderRow {
        id: state
            .within_redis_timeout(inner.ids.next_id("order"))
            .await?,
        user_id,
        voucher_id,
        created_ms: Utc::now().timestamp_millis(),
    };
    outcome(order.id, inner.db.create_order(&order, fence).await?)
}

/// The reply to a write's outcome: the order id, or why it was refused.
fn outcome(order_id: i64, outcome: OrderOutcome) -> Result<i64, ApiError> {
    match outcome {
        OrderOutcome::Created => Ok(order_id),
        OrderOutcome::SoldOut => Err(ApiError::SoldOut),
        OrderOutcome::Duplicate => Err(ApiError::AlreadyOrdered(
            "this user already ordered this voucher",
        )),
        OrderOutcome::Stale => Err(ApiError::LockLost),
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
        // Not loaded (the Redis copy was lost): load it from the database once. Buyers
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
        id: state
            .within_redis_timeout(inner.ids.next_id("order"))
            .await?,
        user_id,
        voucher_id: voucher.id,
        created_ms: Utc::now().timestamp_millis(),
    };
    let written = inner.db.create_order(&order, None).await;
    if !matches!(written, Ok(OrderOutcome::Created)) {
        let _: i64 = RELEASE
            .key(&stock_key)
            .key(&buyers_key)
            .arg(user_id)
            .invoke_async(&mut conn)
            .await?;
    }
    outcome(order.id, written?)
}
