//! The relational store: SQLite by default, PostgreSQL or MySQL/MariaDB by URL, all
//! through sqlx's `Any` driver so one code path serves the three.
//!
//! Queries are written with `?` placeholders and rewritten to `$1, $2, ...` for
//! PostgreSQL. Times are stored as Unix epoch milliseconds (`BIGINT`), which every
//! backend stores and compares the same way.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use ferrisson::redis::FencingToken;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};

use crate::error::one_line;

mod listing;
pub mod schema;

/// Which database a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file (the default).
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
}

impl Backend {
    /// The backend of `url`, from its scheme.
    ///
    /// # Errors
    ///
    /// When the scheme is none of `sqlite:`, `postgres:`/`postgresql:`, `mysql:`/`mariadb:`.
    pub fn of_url(url: &str) -> anyhow::Result<Self> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Ok(Self::Sqlite),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "mysql" | "mariadb" => Ok(Self::MySql),
            other => {
                anyhow::bail!("unsupported database scheme {other:?} (sqlite, postgres, mysql)")
            }
        }
    }

    /// The name used in logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
        }
    }

    /// `BEGIN IMMEDIATE` on SQLite takes the write lock up front, so a transaction
    /// never fails half-way with `SQLITE_BUSY` when another process wrote meanwhile.
    pub(crate) fn begin_statement(self) -> &'static str {
        match self {
            Self::Sqlite => "BEGIN IMMEDIATE",
            Self::Postgres | Self::MySql => "BEGIN",
        }
    }
}

/// A pool on one database and the queries the service runs.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    redacted_url: String,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("backend", &self.backend)
            .field("url", &self.redacted_url)
            .finish_non_exhaustive()
    }
}

/// One voucher row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoucherRow {
    /// The voucher id.
    pub id: i64,
    /// Its title.
    pub title: String,
    /// Units left.
    pub stock: i64,
    /// Sale start, epoch milliseconds.
    pub begin_ms: i64,
    /// Sale end, epoch milliseconds.
    pub end_ms: i64,
}

/// One order row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    /// The order id.
    pub id: i64,
    /// Who ordered.
    pub user_id: i64,
    /// What was ordered.
    pub voucher_id: i64,
    /// When, epoch milliseconds.
    pub created_ms: i64,
}

/// What happened to one order attempt inside the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderOutcome {
    /// The stock was decremented and the order inserted, then committed.
    Created,
    /// `UPDATE ... AND stock > 0` changed nothing.
    SoldOut,
    /// The unique (user, voucher) index refused a second order.
    Duplicate,
    /// The order's fencing token is older than one that has written for this user: the
    /// lock it was taken under had expired. Nothing was written.
    Stale,
}

impl Db {
    /// Connects, creating a SQLite file if needed, and runs the migrations.
    ///
    /// SQLite connections use WAL and a 10 s busy timeout, so several processes can
    /// share one file: writers queue instead of failing with `database is locked`.
    ///
    /// One connection is opened first, bounded by `timeout`, so that an unreachable
    /// server fails at once with its reason ("connection refused"): the pool would
    /// retry a refused connection until its timeout and report only that it timed out.
    /// `timeout` then bounds every wait for a pooled connection.
    ///
    /// # Errors
    ///
    /// When the URL is unsupported, the database is unreachable or a migration fails.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of_url(url)?;
        let redacted_url = redact(url);
        match tokio::time::timeout(timeout, AnyConnection::connect(url)).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
            Ok(Err(e)) => anyhow::bail!("cannot open database {redacted_url}: {}", one_line(&e)),
            Err(_) => anyhow::bail!(
                "cannot open database {redacted_url}: no answer within {} (--db-timeout)",
                humantime::format_duration(timeout)
            ),
        }
        let sqlite = backend == Backend::Sqlite;
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if sqlite {
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await
            .map_err(|e| {
                anyhow::anyhow!("cannot open database {redacted_url}: {}", one_line(&e))
            })?;
        let db = Self {
            pool,
            backend,
            redacted_url,
        };
        schema::migrate(&db.pool, backend).await?;
        schema::check(&db.pool, backend)
            .await
            .map_err(|e| anyhow::anyhow!("database {}: {e}", db.redacted_url))?;
        Ok(db)
    }

    /// The backend this pool talks to.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `sql` with `?` placeholders rewritten for the backend.
    fn sql<'a>(&self, sql: &'a str) -> Cow<'a, str> {
        if self.backend != Backend::Postgres {
            return Cow::Borrowed(sql);
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        Cow::Owned(out)
    }

    /// Checks the database answers.
    ///
    /// # Errors
    ///
    /// When it does not.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
    }

    /// The id of the user with `phone`, if there is one.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn user_by_phone(&self, phone: &str) -> Result<Option<i64>, sqlx::Error> {
        let select = self.sql("SELECT id FROM users WHERE phone = ?");
        let row = sqlx::query(&select)
            .bind(phone)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| r.try_get(0)).transpose()
    }

    /// Creates the user `id` with `phone` and returns the id; if a concurrent first login
    /// of the same phone created it first, returns that user's id.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn insert_user(&self, id: i64, phone: &str, now_ms: i64) -> Result<i64, sqlx::Error> {
        let insert = self.sql("INSERT INTO users (id, phone, created_at) VALUES (?, ?, ?)");
        match sqlx::query(&insert)
            .bind(id)
            .bind(phone)
            .bind(now_ms)
            .execute(&self.pool)
            .await
        {
            Ok(_) => Ok(id),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => self
                .user_by_phone(phone)
                .await?
                .ok_or_else(|| sqlx::Error::RowNotFound),
            Err(e) => Err(e),
        }
    }

    /// Inserts a voucher.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn insert_voucher(&self, v: &VoucherRow, now_ms: i64) -> Result<(), sqlx::Error> {
        let sql = self.sql(
            "INSERT INTO seckill_voucher (id, title, stock, begin_time, end_time, created_at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        );
        sqlx::query(&sql)
            .bind(v.id)
            .bind(&v.title)
            .bind(v.stock)
            .bind(v.begin_ms)
            .bind(v.end_ms)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The voucher `id`, if it exists.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn voucher(&self, id: i64) -> Result<Option<VoucherRow>, sqlx::Error> {
        let sql = self
            .sql("SELECT id, title, stock, begin_time, end_time FROM seckill_voucher WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r: AnyRow| {
            Ok(VoucherRow {
                id: r.try_get(0)?,
                title: r.try_get(1)?,
                stock: r.try_get(2)?,
                begin_ms: r.try_get(3)?,
                end_ms: r.try_get(4)?,
            })
        })
        .transpose()
    }

    /// How many orders `user_id` has for `voucher_id` (the one-order-per-user check).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn order_count(&self, user_id: i64, voucher_id: i64) -> Result<i64, sqlx::Error> {
        let sql =
            self.sql("SELECT COUNT(*) FROM voucher_order WHERE user_id = ? AND voucher_id = ?");
        sqlx::query(&sql)
            .bind(user_id)
            .bind(voucher_id)
            .fetch_one(&self.pool)
            .await?
            .try_get(0)
    }

    /// In one transaction: with a fencing token, `UPDATE users SET order_fence = token
    /// WHERE id = ? AND order_fence <= token` (refused as [`OrderOutcome::Stale`] when a
    /// newer holder of the user's order lock has written); then `UPDATE ... SET stock =
    /// stock - 1 WHERE id = ? AND stock > 0`, then the insert; committed before this
    /// returns.
    ///
    /// # Errors
    ///
    /// Database errors other than the unique (user, voucher) index refusing the order,
    /// and a token beyond `i64::MAX` (a column is a signed 64-bit integer).
    pub async fn create_order(
        &self,
        order: &OrderRow,
        fence: Option<FencingToken>,
    ) -> Result<OrderOutcome, sqlx::Error> {
        let fence = fence
            .map(|token| {
                i64::try_from(token.get()).map_err(|_| {
                    sqlx::Error::Encode(format!("fencing token {token} is beyond i64").into())
                })
            })
            .transpose()?;
        let mut tx = self.pool.begin_with(self.backend.begin_statement()).await?;
        if let Some(token) = fence {
            let fenced =
                self.sql("UPDATE users SET order_fence = ? WHERE id = ? AND order_fence <= ?");
            let done = sqlx::query(&fenced)
                .bind(token)
                .bind(order.user_id)
                .bind(token)
                .execute(&mut *tx)
                .await?;
            // (MySQL counts matched rows here too: sqlx connects with CLIENT_FOUND_ROWS.)
            if done.rows_affected() == 0 {
                tx.rollback().await?;
                return Ok(OrderOutcome::Stale);
            }
        }
        let update =
            self.sql("UPDATE seckill_voucher SET stock = stock - 1 WHERE id = ? AND stock > 0");
        let done = sqlx::query(&update)
            .bind(order.voucher_id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(OrderOutcome::SoldOut);
        }
        let insert = self.sql(
            "INSERT INTO voucher_order (id, user_id, voucher_id, created_at) VALUES (?, ?, ?, ?)",
        );
        match sqlx::query(&insert)
            .bind(order.id)
            .bind(order.user_id)
            .bind(order.voucher_id)
            .bind(order.created_ms)
            .execute(&mut *tx)
            .await
        {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                tx.rollback().await?;
                return Ok(OrderOutcome::Duplicate);
            }
            Err(e) => return Err(e),
        }
        tx.commit().await?;
        Ok(OrderOutcome::Created)
    }

    /// The user's order fence: the highest fencing token that has written an order.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn order_fence(&self, user_id: i64) -> Result<Option<i64>, sqlx::Error> {
        let sql = self.sql("SELECT order_fence FROM users WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(user_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| r.try_get(0)).transpose()
    }

    /// The orders of a voucher, oldest first.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn orders(&self, voucher_id: i64) -> Result<Vec<OrderRow>, sqlx::Error> {
        let sql = self.sql(
            "SELECT id, user_id, voucher_id, created_at FROM voucher_order WHERE voucher_id = ? ORDER BY id",
        );
        sqlx::query(&sql)
            .bind(voucher_id)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(|r| {
                Ok(OrderRow {
                    id: r.try_get(0)?,
                    user_id: r.try_get(1)?,
                    voucher_id: r.try_get(2)?,
                    created_ms: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// How many users hold more than one order of `voucher_id` (must be 0).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn users_with_several_orders(&self, voucher_id: i64) -> Result<i64, sqlx::Error> {
        let sql = self.sql(
            "SELECT COUNT(*) FROM (SELECT user_id FROM voucher_order WHERE voucher_id = ? \
             GROUP BY user_id HAVING COUNT(*) > 1) dup",
        );
        sqlx::query(&sql)
            .bind(voucher_id)
            .fetch_one(&self.pool)
            .await?
            .try_get(0)
    }

    /// Sets the lab's database stock row (`db-optimistic`) to `stock`, sold 0.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn lab_reset(&self, stock: i64) -> Result<(), sqlx::Error> {
        let delete = self.sql("DELETE FROM lab_stock WHERE id = ?");
        sqlx::query(&delete).bind(1_i64).execute(&self.pool).await?;
        let insert = self.sql("INSERT INTO lab_stock (id, stock, sold) VALUES (?, ?, ?)");
        sqlx::query(&insert)
            .bind(1_i64)
            .bind(stock)
            .bind(0_i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The `db-optimistic` step: one conditional decrement that also counts the sale.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn lab_deduct(&self) -> Result<bool, sqlx::Error> {
        let sql = self.sql(
            "UPDATE lab_stock SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0",
        );
        let done = sqlx::query(&sql).bind(1_i64).execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }

    /// The lab row's `(stock, sold)`, if set.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn lab_state(&self) -> Result<Option<(i64, i64)>, sqlx::Error> {
        let sql = self.sql("SELECT stock, sold FROM lab_stock WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(1_i64)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    /// Closes the pool, waiting for connections in use to come back.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// `url` with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Backend, redact};

    #[test]
    fn backends_from_urls() {
        assert_eq!(
            Backend::of_url("sqlite://x.db?mode=rwc").ok(),
            Some(Backend::Sqlite)
        );
        assert_eq!(
            Backend::of_url("postgres://u@h/db").ok(),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::of_url("mysql://root@h/db").ok(),
            Some(Backend::MySql)
        );
        assert!(Backend::of_url("oracle://h").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(redact("sqlite://a.db"), "sqlite://a.db");
    }
}
