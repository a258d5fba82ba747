//! The stock row of the database variants, in a table of the run's own (a random name,
//! so that parallel runs do not collide), with the statements each variant sells with.

use anyhow::Context as _;
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use sqlx::{Executor as _, Row as _};

use super::variant::Store;

/// Connections of one instance's pool: the database is shared with other work, and a
/// handful per instance keeps the contention in the locks, not in the pool.
pub(crate) const POOL_SIZE: u32 = 4;

/// A pool of `POOL_SIZE` connections to `url`.
///
/// # Errors
///
/// When the database cannot be reached.
pub(crate) async fn pool(url: &str) -> anyhow::Result<AnyPool> {
    sqlx::any::install_default_drivers();
    AnyPoolOptions::new()
        .max_connections(POOL_SIZE)
        .connect(url)
        .await
        .context("cannot connect to the database")
}

/// The run's tables on one database: their common prefix, and the stock statements.
#[derive(Debug, Clone)]
pub(crate) struct SqlStock {
    store: Store,
    /// `seckill_lab_<random>`: every table of the run starts with it.
    prefix: String,
}

impl SqlStock {
    /// The names of a new run on `store`.
    pub(crate) fn new(store: Store) -> Self {
        Self {
            store,
            prefix: format!("seckill_lab_{:012x}", rand::random::<u64>() >> 16),
        }
    }

    pub(crate) fn store(&self) -> Store {
        self.store
    }

    /// The run's table called `what` (`stock`, `locks`, ...).
    pub(crate) fn table(&self, what: &str) -> String {
        format!("{}_{what}", self.prefix)
    }

    /// A placeholder: `$n` on PostgreSQL, `?` on MySQL.
    fn arg(&self, n: usize) -> String {
        match self.store {
            Store::Postgres => format!("${n}"),
            _ => "?".into(),
        }
    }

    /// Creates the stock table with one row holding `stock`.
    pub(crate) async fn create(&self, pool: &AnyPool, stock: i64) -> anyhow::Result<()> {
        let table = self.table("stock");
        pool.execute(
            format!(
                "CREATE TABLE {table} (id INT PRIMARY KEY, stock BIGINT NOT NULL, sold BIGINT NOT NULL)"
            )
            .as_str(),
        )
        .await
        .with_context(|| format!("cannot create the lab's table {table}"))?;
        sqlx::query(&format!(
            "INSERT INTO {table} (id, stock, sold) VALUES (1, {}, 0)",
            self.arg(1)
        ))
        .bind(stock)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Drops the run's tables named in `whats` (those that exist).
    pub(crate) async fn drop_tables(&self, pool: &AnyPool, whats: &[&str]) -> anyhow::Result<()> {
        for what in whats {
            pool.execute(format!("DROP TABLE IF EXISTS {}", self.table(what)).as_str())
                .await
                .with_context(|| format!("cannot drop the lab's table {}", self.table(what)))?;
        }
        Ok(())
    }

    /// The stock and the units sold.
    pub(crate) async fn state(&self, pool: &AnyPool) -> anyhow::Result<(i64, i64)> {
        let row = sqlx::query(&format!(
            "SELECT stock, sold FROM {} WHERE id = 1",
            self.table("stock")
        ))
        .fetch_one(pool)
        .await?;
        Ok((row.try_get(0)?, row.try_get(1)?))
    }

    /// The naive step a lock guards: read the stock, and if it is positive write it back
    /// one less and count the sale (two statements: only the lock orders them).
    pub(crate) async fn step(&self, pool: &AnyPool) -> anyhow::Result<bool> {
        let (stock, _) = self.state(pool).await?;
        if stock <= 0 {
            return Ok(false);
        }
        sqlx::query(&format!(
            "UPDATE {} SET stock = {}, sold = sold + 1 WHERE id = 1",
            self.table("stock"),
            self.arg(1)
        ))
        .bind(stock - 1)
        .execute(pool)
        .await?;
        Ok(true)
    }

    /// `db-for-update`: the same step in a transaction that reads the row with `SELECT
    /// ... FOR UPDATE`, which locks it until the commit.
    pub(crate) async fn step_for_update(&self, pool: &AnyPool) -> anyhow::Result<bool> {
        let table = self.table("stock");
        let mut tx = pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT stock FROM {table} WHERE id = 1 FOR UPDATE"
        ))
        .fetch_one(&mut *tx)
        .await?;
        let stock: i64 = row.try_get(0)?;
        if stock <= 0 {
            tx.commit().await?;
            return Ok(false);
        }
        sqlx::query(&format!(
            "UPDATE {table} SET stock = {}, sold = sold + 1 WHERE id = 1",
            self.arg(1)
        ))
        .bind(stock - 1)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// `db-version-cas`: read the stock, then one conditional write that succeeds only
    /// if nobody wrote since the read. `Ok(None)`: sold out; `Ok(Some(false))`: the
    /// compare failed (stock was left, another buyer wrote first).
    pub(crate) async fn step_version_cas(&self, pool: &AnyPool) -> anyhow::Result<Option<bool>> {
        let (stock, _) = self.state(pool).await?;
        if stock <= 0 {
            return Ok(None);
        }
        let done = sqlx::query(&self.version_cas_sql())
            .bind(stock)
            .execute(pool)
            .await?;
        Ok(Some(done.rows_affected() == 1))
    }

    /// The conditional write of `db-version-cas`.
    pub(crate) fn version_cas_sql(&self) -> String {
        format!(
            "UPDATE {} SET stock = stock - 1, sold = sold + 1 WHERE id = 1 AND stock = {}",
            self.table("stock"),
            self.arg(1)
        )
    }
}
