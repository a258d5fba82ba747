//! `db-lock-table-naive`: the classic lock table as tutorials write it. A unique insert
//! takes the lock, a delete releases it; nothing expires, so a holder that dies between
//! the two leaves its row for ever.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::AnyPool;
use sqlx::{Executor as _, Row as _};
use tokio::time::Instant;

use super::sql_stock::SqlStock;
use super::variant::Store;

/// The lock's name in the table.
const NAME: &str = "stock";

/// The run's lock table.
#[derive(Debug, Clone)]
pub(crate) struct NaiveLockTable {
    table: String,
    store: Store,
}

impl NaiveLockTable {
    /// The lock table of the run whose tables `stock` names.
    pub(crate) fn of(stock: &SqlStock) -> Self {
        Self {
            table: stock.table("locks"),
            store: stock.store(),
        }
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// `CREATE TABLE locks (name PRIMARY KEY, owner)`: no expiry column.
    pub(crate) async fn create(&self, pool: &AnyPool) -> anyhow::Result<()> {
        pool.execute(
            format!(
                "CREATE TABLE {} (name VARCHAR(64) PRIMARY KEY, owner VARCHAR(64) NOT NULL)",
                self.table
            )
            .as_str(),
        )
        .await
        .with_context(|| format!("cannot create the lab's table {}", self.table))?;
        Ok(())
    }

    /// The insert that takes the lock: it wins when no row of the name is there (the
    /// primary key refuses a second one).
    pub(crate) fn insert_sql(&self) -> String {
        match self.store {
            Store::Postgres => format!(
                "INSERT INTO {} (name, owner) VALUES ('{NAME}', $1) ON CONFLICT (name) DO NOTHING",
                self.table
            ),
            _ => format!(
                "INSERT IGNORE INTO {} (name, owner) VALUES ('{NAME}', ?)",
                self.table
            ),
        }
    }

    /// Inserts the row until the insert wins or `wait` runs out (false), with a short
    /// random pause between tries.
    pub(crate) async fn acquire(
        &self,
        pool: &AnyPool,
        owner: &str,
        wait: Duration,
    ) -> anyhow::Result<bool> {
        let deadline = Instant::now() + wait;
        let insert = self.insert_sql();
        loop {
            let done = sqlx::query(&insert).bind(owner).execute(pool).await?;
            if done.rows_affected() == 1 {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(rand::random_range(2..=8))).await;
        }
    }

    /// `DELETE FROM locks WHERE name = 'stock' AND owner = <mine>`.
    pub(crate) async fn release(&self, pool: &AnyPool, owner: &str) -> anyhow::Result<()> {
        let arg = match self.store {
            Store::Postgres => "$1",
            _ => "?",
        };
        sqlx::query(&format!(
            "DELETE FROM {} WHERE name = '{NAME}' AND owner = {arg}",
            self.table
        ))
        .bind(owner)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// The owner of the row left in the table, if one is.
    pub(crate) async fn left(&self, pool: &AnyPool) -> anyhow::Result<Option<String>> {
        let row = sqlx::query(&format!(
            "SELECT owner FROM {} WHERE name = '{NAME}'",
            self.table
        ))
        .fetch_optional(pool)
        .await?;
        Ok(match row {
            Some(row) => Some(row.try_get(0)?),
            None => None,
        })
    }
}
