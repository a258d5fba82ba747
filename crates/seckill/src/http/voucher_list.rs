//! `GET /vouchers`: the newest vouchers with their current stock and sale window, for
//! the shop page and any other reader (no login: it shows what the shop sells).

use axum::Json;
use axum::extract::State;
use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::http::vouchers::VoucherView;
use crate::state::AppState;

/// Most vouchers one listing shows: the newest ones.
pub const MAX_LISTED: i64 = 100;

/// `GET /vouchers` reply.
///
/// ```
/// use seckill::http::voucher_list::VoucherList;
///
/// let list: VoucherList = serde_json::from_str(
///     r#"{"server_time": "2026-11-22T12:00:00.000Z", "vouchers": []}"#,
/// ).unwrap();
/// assert!(list.vouchers.is_empty());
/// ```
#[derive(Debug, Serialize, Deserialize)]
pub struct VoucherList {
    /// The service's clock when the listing was read, RFC 3339: a page compares the
    /// sale windows with it, not with the reader's clock.
    pub server_time: String,
    /// At most [`MAX_LISTED`] vouchers, newest first.
    pub vouchers: Vec<VoucherView>,
}

/// `GET /vouchers` → [`VoucherList`].
pub async fn list(State(state): State<AppState>) -> Result<Json<VoucherList>, ApiError> {
    let vouchers = state.inner.db.vouchers(MAX_LISTED).await?;
    Ok(Json(VoucherList {
        server_time: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        vouchers: vouchers.into_iter().map(VoucherView::from).collect(),
    }))
}
