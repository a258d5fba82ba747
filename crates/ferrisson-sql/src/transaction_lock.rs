//! PostgreSQL's transaction-scoped advisory lock (`pg_advisory_xact_lock`): held for the
//! life of a transaction the caller runs, freed by its commit or rollback.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Decided, Kind, Probe, observe_decision};
use ferrisson_core::{Error, Result};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Executor as _, Postgres, Transaction};

use crate::client::Client;
use crate::error::db_error;
use crate::session::{Mode, advisory_key, is_lock_timeout};
use crate::session_lock::{check_name, raw_key_name};
use crate::statements::Db;

/// A transaction-scoped advisory lock: `pg_advisory_xact_lock(key)` (or its `_shared`
/// form) taken as the first statement of a transaction the guard owns and hands to you.
/// Committing or rolling the transaction back frees the lock, and so does dropping the
/// guard (a rollback) or losing the connection.
///
/// **The form that works behind PgBouncer in transaction mode.** There a client's
/// statements reach one server session only for the length of a transaction, so a
/// session lock ([`SessionLock`](crate::SessionLock), `pg_advisory_lock`) may be taken on
/// one server session and "released" on another, and `SET` leaks between clients. A
/// transaction lock lives exactly as long as the transaction and needs neither: the
/// wait's `lock_timeout` is set with `SET LOCAL` inside it, and put back before the
/// transaction is handed over.
///
/// - **Waiting** happens in PostgreSQL's own queue, on the transaction's connection
///   (one pool connection per waiter): [`lock_timeout`](Self::lock_timeout) bounds it
///   with `lock_timeout`; an expired wait (`55P03`) is `Ok(None)`. The grant that can
///   land as `lock_timeout` fires is never kept by mistake: the statement failed, so
///   the transaction is rolled back, and the lock with it. [`lock`](Self::lock) waits
///   without a limit (`lock_timeout = 0`, whatever the server's default).
/// - **Deadlocks** between transactions waiting on each other's locks end one wait with
///   [`SqlError::Deadlock`](crate::SqlError::Deadlock).
/// - **No lost signal and no fencing token**: the lock is exactly as valid as the
///   transaction, which your own statements see fail.
/// - **Not reentrant across guards**: each guard is its own transaction, so a second
///   guard on the same lock waits for the first (in one task: forever).
/// - **PostgreSQL only**: MySQL/MariaDB have no lock freed by commit or rollback
///   (`GET_LOCK` outlives both); [`Client::transaction_lock`] refuses there.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// let mut held = client.transaction_lock("voucher:42")?.lock().await?;
/// sqlx::query("UPDATE stock SET n = n - 1 WHERE id = 42 AND n > 0")
///     .execute(&mut **held.transaction())
///     .await?;
/// held.commit().await?; // the lock is freed with the commit
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct TransactionLock {
    pool: PgPool,
    table: String,
    probe: Probe,
    key: i64,
    mode: Mode,
}

impl fmt::Debug for TransactionLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransactionLock")
            .field("name", &self.probe.name)
            .field("key", &self.key)
            .field("shared", &(self.mode == Mode::Shared))
            .finish_non_exhaustive()
    }
}

impl TransactionLock {
    pub(crate) fn new(client: &Client, name: &str) -> Result<Self> {
        check_name(name)?;
        Self::with_key(client, name, advisory_key(name))
    }

    pub(crate) fn by_key(client: &Client, key: i64) -> Result<Self> {
        Self::with_key(client, &raw_key_name(key), key)
    }

    fn with_key(client: &Client, name: &str, key: i64) -> Result<Self> {
        let shared = client.shared();
        let Db::Postgres(pool) = &shared.db else {
            return Err(Error::Unsupported {
                store: client.dialect().store(),
                what: "hold a lock for a transaction (GET_LOCK outlives commit and rollback)"
                    .into(),
            });
        };
        Ok(Self {
            pool: pool.clone(),
            table: shared.tables.lock.clone(),
            probe: shared.classes.probe(Kind::Lock, &Arc::from(name)),
            key,
            mode: Mode::Exclusive,
        })
    }

    /// The same lock in shared mode (`pg_advisory_xact_lock_shared`): many shared
    /// holders at once, none while an exclusive one holds it.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let readers = client.transaction_lock("prices")?.shared();
    /// let a = readers.lock().await?;
    /// let b = readers.try_lock().await?;
    /// assert!(b.is_some());
    /// # drop((a, b)); Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    #[must_use]
    pub fn shared(mut self) -> Self {
        self.mode = Mode::Shared;
        self
    }

    /// The lock's name (`advisory key N` for a raw key).
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.transaction_lock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The advisory key it takes.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.transaction_lock("a")?.key(), ferrisson_sql::advisory_key("a"));
    /// assert_eq!(client.transaction_lock_by_key(7)?.key(), 7);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn key(&self) -> i64 {
        self.key
    }

    fn err(&self, e: sqlx::Error) -> Error {
        db_error(crate::Dialect::Postgres, &self.table, e)
    }

    /// Begins a transaction and takes the lock in it, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`SqlError::Deadlock`](crate::SqlError::Deadlock) when the server ends the wait
    /// to break a deadlock; when the database cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the transaction: sqlx rolls it back before its
    /// connection is used again, which frees a lock granted meanwhile. A wait in flight
    /// keeps that connection until the server answers it.
    pub async fn lock(&self) -> Result<TransactionLockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    /// Begins a transaction and takes the lock in it if it is free now
    /// (`pg_try_advisory_xact_lock`); `Ok(None)` (the transaction rolled back) when it
    /// is not.
    ///
    /// # Errors
    ///
    /// When the database cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<TransactionLockGuard>> {
        self.acquire(Some(Duration::ZERO)).await
    }

    /// Begins a transaction and takes the lock in it, waiting at most `wait` in the
    /// server's queue (`SET LOCAL lock_timeout`, put back once granted); `Ok(None)` (the
    /// transaction rolled back) when the wait runs out. The wait is whole milliseconds,
    /// rounded up.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<TransactionLockGuard>> {
        self.acquire(Some(wait)).await
    }

    /// Takes the lock without waiting inside a transaction of yours (on PgBouncer, the
    /// transaction you already run): true when taken; it is then freed by that
    /// transaction's end. On a connection outside any transaction the lock would end
    /// with the statement itself: use it inside `BEGIN ... COMMIT`.
    ///
    /// # Errors
    ///
    /// When the statement fails.
    ///
    /// # Cancel safety
    ///
    /// The statement may or may not have run when the future is dropped; if it did, the
    /// lock lasts until your transaction ends.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let mut tx = pool.begin().await?;
    /// if client.transaction_lock("nightly")?.try_lock_in(&mut tx).await? {
    ///     // ... the work, in tx ...
    /// }
    /// tx.commit().await?;
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub async fn try_lock_in(&self, transaction: &mut PgConnection) -> Result<bool> {
        sqlx::query_scalar::<_, bool>(&format!(
            "SELECT pg_try_advisory_xact_lock{}($1)",
            self.mode.suffix()
        ))
        .bind(self.key)
        .fetch_one(transaction)
        .await
        .map_err(|e| self.err(e))
    }

    /// Takes the lock inside a transaction of yours, waiting as long as it takes; it is
    /// then freed by that transaction's end. The wait runs in a savepoint, so a wait
    /// that fails (a deadlock) leaves your transaction usable.
    ///
    /// # Errors
    ///
    /// [`SqlError::Deadlock`](crate::SqlError::Deadlock) when the server ends the wait
    /// to break a deadlock; any error of the statements (outside a transaction block,
    /// `SAVEPOINT` fails).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped wait leaves the savepoint open and, if the grant came,
    /// the lock held until your transaction ends. Roll back after dropping it.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let mut tx = pool.begin().await?;
    /// client.transaction_lock("nightly")?.lock_in(&mut tx).await?;
    /// // ... the work, in tx ...
    /// tx.commit().await?;
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub async fn lock_in(&self, transaction: &mut PgConnection) -> Result<()> {
        if self.wait_in(transaction, None).await? {
            Ok(())
        } else {
            Err(Error::wait_ended(self.name()))
        }
    }

    /// Takes the lock inside a transaction of yours, waiting at most `wait`
    /// (`lock_timeout`, whole milliseconds rounded up): true when taken. A wait that
    /// runs out (`55P03`) is rolled back to its savepoint, a grant that landed as the
    /// timeout fired with it, so false always means not held.
    ///
    /// # Errors
    ///
    /// As [`lock_in`](Self::lock_in).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_in`](Self::lock_in).
    pub async fn lock_timeout_in(
        &self,
        transaction: &mut PgConnection,
        wait: Duration,
    ) -> Result<bool> {
        self.wait_in(transaction, Some(wait)).await
    }

    async fn wait_in(&self, conn: &mut PgConnection, wait: Option<Duration>) -> Result<bool> {
        let wait_ms = wait_ms(wait);
        let statements = format!(
            "SAVEPOINT ferrisson_wait; {}; RELEASE SAVEPOINT ferrisson_wait",
            wait_statement(self.key, self.mode, wait_ms)
        );
        match (&mut *conn).execute(statements.as_str()).await {
            Ok(_) => Ok(true),
            Err(e) => {
                if matches!(e, sqlx::Error::Database(_)) {
                    // Undoes the wait, its settings and any grant it got.
                    let undone = (&mut *conn)
                        .execute("ROLLBACK TO SAVEPOINT ferrisson_wait; RELEASE SAVEPOINT ferrisson_wait")
                        .await;
                    if let Err(undo) = undone {
                        return Err(self.err(undo));
                    }
                }
                if is_lock_timeout(&e) {
                    Ok(false)
                } else {
                    Err(self.err(e))
                }
            }
        }
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<TransactionLockGuard>> {
        let acquired = async {
            let mut transaction = self.pool.begin().await.map_err(|e| self.err(e))?;
            let granted = match wait {
                Some(wait) if wait.is_zero() => self.try_lock_in(&mut transaction).await?,
                _ => {
                    let wait_ms = wait_ms(wait);
                    // Without arguments sqlx sends the simple-query protocol: the
                    // statements go in one round trip.
                    let statements = wait_statement(self.key, self.mode, wait_ms);
                    match (&mut *transaction).execute(statements.as_str()).await {
                        Ok(_) => true,
                        Err(e) if is_lock_timeout(&e) => false,
                        Err(e) => {
                            let _ = transaction.rollback().await;
                            return Err(self.err(e));
                        }
                    }
                }
            };
            if granted {
                Ok(Some(TransactionLockGuard {
                    name: Arc::clone(&self.probe.name),
                    transaction,
                }))
            } else {
                // A grant that landed as lock_timeout fired is freed here too.
                transaction.rollback().await.map_err(|e| self.err(e))?;
                Ok(None)
            }
        };
        observe_decision(&self.probe, wait, acquired, |granted| match granted {
            Some(_) => Decided::Granted(None),
            None => Decided::Refused,
        })
        .await
    }
}

/// A wait in whole milliseconds, rounded up; 0 (no limit, to PostgreSQL) for `None`.
fn wait_ms(wait: Option<Duration>) -> u128 {
    wait.map_or(0, |w| w.as_micros().div_ceil(1000).max(1))
}

/// The wait in one round trip: the current `lock_timeout` and `statement_timeout` kept
/// aside in custom settings, both replaced for the wait (`SET LOCAL`: this transaction
/// only), then put back so that the caller's statements run under their usual limits.
/// Numbers only: the key and the wait are ours, never text from a caller.
fn wait_statement(key: i64, mode: Mode, wait_ms: u128) -> String {
    format!(
        "SELECT set_config('ferrisson.lock_timeout', current_setting('lock_timeout'), true), \
                set_config('ferrisson.statement_timeout', current_setting('statement_timeout'), true); \
         SET LOCAL lock_timeout = '{wait_ms}ms'; SET LOCAL statement_timeout = 0; \
         SELECT pg_advisory_xact_lock{suffix}({key}); \
         SELECT set_config('lock_timeout', current_setting('ferrisson.lock_timeout'), true), \
                set_config('statement_timeout', current_setting('ferrisson.statement_timeout'), true)",
        suffix = mode.suffix()
    )
}

/// A [`TransactionLock`] held: the transaction it lives in, for your statements.
/// Committing or rolling back frees the lock; dropping the guard rolls back.
#[must_use = "dropping the guard rolls the transaction back, which frees the lock"]
pub struct TransactionLockGuard {
    name: Arc<str>,
    transaction: Transaction<'static, Postgres>,
}

impl fmt::Debug for TransactionLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransactionLockGuard")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TransactionLockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The transaction the lock lives in: run your statements on it
    /// (`&mut **guard.transaction()` is a `&mut PgConnection`).
    pub fn transaction(&mut self) -> &mut Transaction<'static, Postgres> {
        &mut self.transaction
    }

    /// The transaction itself; the lock lasts until it ends.
    pub fn into_transaction(self) -> Transaction<'static, Postgres> {
        self.transaction
    }

    /// Commits the transaction, which frees the lock.
    ///
    /// # Errors
    ///
    /// When the commit fails (the lock is then freed by the rollback that follows, or by
    /// the connection's end).
    ///
    /// # Cancel safety
    ///
    /// The commit may or may not have happened when the future is dropped; either way
    /// the lock is freed.
    pub async fn commit(self) -> Result<()> {
        self.transaction
            .commit()
            .await
            .map_err(|e| db_error(crate::Dialect::Postgres, "", e))
    }

    /// Rolls the transaction back, which frees the lock.
    ///
    /// # Errors
    ///
    /// When the rollback cannot be sent (the lock is then freed with the connection).
    ///
    /// # Cancel safety
    ///
    /// As [`commit`](Self::commit).
    pub async fn rollback(self) -> Result<()> {
        self.transaction
            .rollback()
            .await
            .map_err(|e| db_error(crate::Dialect::Postgres, "", e))
    }
}
