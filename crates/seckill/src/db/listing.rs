//! The voucher listing the shop page reads: the newest vouchers with their stock and
//! sale window.

use sqlx::Row as _;
use sqlx::any::AnyRow;

use super::{Db, VoucherRow};

impl Db {
    /// The `limit` newest vouchers (highest id first: ids grow with time), with their
    /// current stock.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn vouchers(&self, limit: i64) -> Result<Vec<VoucherRow>, sqlx::Error> {
        let sql = self.sql(
            "SELECT id, title, stock, begin_time, end_time FROM seckill_voucher \
             ORDER BY id DESC LIMIT ?",
        );
        sqlx::query(&sql)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(|r: AnyRow| {
                Ok(VoucherRow {
                    id: r.try_get(0)?,
                    title: r.try_get(1)?,
                    stock: r.try_get(2)?,
                    begin_ms: r.try_get(3)?,
                    end_ms: r.try_get(4)?,
                })
            })
            .collect()
    }
}
