//! A client of one database: its connection pool, its lock table, its record of the
//! holds it has, and its waiters' wake-ups.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferrisson_core::observe::Classes;
use ferrisson_core::{Error, Result};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use tokio::task::AbortHandle;

use crate::dialect::{DEFAULT_TABLE, Dialect, Tables};
use crate::error::SqlError;
use crate::hold::Hold;
use crate::session::{self, Session};
use crate::statements::Db;
use crate::table_lock::TableLock;
use crate::wake::{self, Wakers};

/// The default watchdog lease: a crashed holder's row outlives it by at most this.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// The default safety poll of a PostgreSQL waiter: how long it waits without hearing a
/// release before it looks again (a notification is lost only while the listening
/// connection reconnects, and then every waiter looks again anyway).
pub const DEFAULT_SAFETY_POLL: Duration = Duration::from_secs(5);
/// How often a client pings the session its session locks live on, by default.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);
/// The most connections a client opens by default (the listener's included).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of a PostgreSQL or MySQL/MariaDB database; clones share its pool, its holds
/// and its listener.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::{DistributedLock, Fenced, Guard};
///
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// client.create_schema().await?; // once, or run the DDL of the crate docs yourself
/// let guard = client.lock("voucher:42")?.lock().await?;
/// println!("token {}", guard.fencing_token());
/// guard.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

/// What the clones of one client share.
pub(crate) struct Shared {
    pub(crate) db: Db,
    pub(crate) tables: Tables,
    pub(crate) watchdog_lease: Duration,
    pub(crate) safety_poll: Duration,
    pub(crate) classes: Classes,
    /// The hold this client has on each lock name (at most one owner per name).
    pub(crate) holds: Mutex<HashMap<Arc<str>, Arc<Hold>>>,
    pub(crate) wakers: Arc<Wakers>,
    /// The session the session locks live on.
    pub(crate) session: Arc<Session>,
    /// Which lock the URL asked for.
    default_lock: LockKind,
    /// The URL without its password.
    target: String,
    listener: Option<AbortHandle>,
    heartbeat: AbortHandle,
}

/// Which lock a URL asks for, with its `lock=` parameter.
///
/// ```
/// assert_eq!(ferrisson_sql::LockKind::default(), ferrisson_sql::LockKind::Table);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockKind {
    /// `lock=table` (the default): the lock table, [`TableLock`].
    #[default]
    Table,
    /// `lock=advisory`: the database's session lock, [`SessionLock`](crate::SessionLock).
    Session,
}

impl Shared {
    pub(crate) fn holds(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Hold>>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn dialect(&self) -> Dialect {
        self.db.dialect()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
        self.heartbeat.abort();
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.shared.target)
            .field("table", &self.shared.tables.lock)
            .field("watchdog_lease", &self.shared.watchdog_lease)
            .finish_non_exhaustive()
    }
}

/// Options for [`Client::builder`].
///
/// ```
/// use std::time::Duration;
///
/// let builder = ferrisson_sql::Client::builder("mysql://root@127.0.0.1/test")
///     .table("app_locks")
///     .watchdog_lease(Duration::from_secs(10))
///     .max_connections(4);
/// # let _ = builder;
/// ```
#[must_use = "a builder does nothing until connect"]
pub struct ClientBuilder {
    url: String,
    table: Option<String>,
    watchdog_lease: Duration,
    safety_poll: Duration,
    heartbeat: Duration,
    max_connections: u32,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("target", &redacted(&self.url))
            .field("table", &self.table)
            .field("watchdog_lease", &self.watchdog_lease)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The lock table's name (default `ferrisson_lock`; a `table=` query parameter in the
    /// URL sets it too): lowercase ASCII letters, digits and underscores.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// How long a [`Lease::Watchdog`](ferrisson_core::Lease::Watchdog) hold lasts between
    /// renewals (renewed every third of it): 30 s by default.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long a PostgreSQL waiter waits without hearing a release before it looks
    /// again (5 s by default).
    pub fn safety_poll(mut self, poll: Duration) -> Self {
        self.safety_poll = poll;
        self
    }

    /// How often the session that session locks live on is pinged (5 s by default): a
    /// session that died is noticed, and its guards' `lost()` fires, within about this.
    /// It also sets how soon the server gives up on a client that vanished without
    /// closing the connection, freeing its locks: TCP keepalive probes after one
    /// heartbeat of silence, 3 of them a heartbeat apart (PostgreSQL), or a
    /// `wait_timeout` of 4 heartbeats (MySQL/MariaDB), in whole seconds.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// The most connections the client opens (10 by default; PostgreSQL's listening
    /// connection is one of them, the session that session locks live on is not).
    /// The lock table's statements take a connection one at a time, so a process that
    /// runs one lock at a time needs few: PostgreSQL at least 2 (the listener and one
    /// for statements), MySQL/MariaDB at least 1. Many processes against one database
    /// (PostgreSQL allows 100 connections by default) can each keep to the least. A
    /// [`TransactionLock`](crate::TransactionLock) the client runs keeps a connection
    /// for its whole wait and hold: count one more per such lock held at once.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// Connects, and on PostgreSQL starts listening for releases.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a URL that is not a database's, a bad table name or
    /// a zero setting; [`Error::Connect`] when the database cannot be reached.
    pub async fn connect(self) -> Result<Client> {
        let dialect = Dialect::of_url(&self.url)?;
        let (url, table, default_lock) = split_url(&self.url)?;
        let tables = Tables::new(
            self.table
                .as_deref()
                .or(table.as_deref())
                .unwrap_or(DEFAULT_TABLE),
        )?;
        ferrisson_core::validate_lease(self.watchdog_lease)?;
        if self.safety_poll.is_zero() || self.heartbeat.is_zero() {
            return Err(Error::invalid(
                "the safety poll and the heartbeat must be positive",
            ));
        }
        // The listener keeps one pooled connection; the session's is taken out of the
        // pool (detached), which may then open another.
        let least = match dialect {
            Dialect::Postgres => 2,
            Dialect::MySql => 1,
        };
        if self.max_connections < least {
            return Err(Error::invalid(format!(
                "a {} client needs at least {least} connections, got {}",
                dialect.store(),
                self.max_connections
            )));
        }
        let target = redacted(&self.url);
        let connect_error = |cause| Error::Connect {
            target: target.clone(),
            cause: Box::new(SqlError::Database {
                store: dialect.store(),
                cause,
            }),
        };
        let wakers = Arc::new(Wakers::default());
        let (db, listener) = match dialect {
            Dialect::Postgres => {
                let pool = PgPoolOptions::new()
                    .max_connections(self.max_connections)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect(&url)
                    .await
                    .map_err(connect_error)?;
                let listener = wake::listen(&pool, tables.channel())
                    .await
                    .map_err(connect_error)?;
                let task = tokio::spawn(wake::run_listener(
                    listener,
                    tables.channel().to_owned(),
                    Arc::downgrade(&wakers),
                ));
                (Db::Postgres(pool), Some(task.abort_handle()))
            }
            Dialect::MySql => {
                let pool = MySqlPoolOptions::new()
                    .max_connections(self.max_connections)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect(&url)
                    .await
                    .map_err(connect_error)?;
                (Db::MySql(pool), None)
            }
        };
        ferrisson_core::observe::metrics::describe();
        let session = Arc::new(Session::new(
            db.clone(),
            tables.lock.clone(),
            self.heartbeat,
        ));
        let heartbeat = tokio::spawn(session::run_heartbeat(
            Arc::downgrade(&session),
            self.heartbeat,
        ))
        .abort_handle();
        Ok(Client {
            shared: Arc::new(Shared {
                db,
                tables,
                watchdog_lease: self.watchdog_lease,
                safety_poll: self.safety_poll,
                classes: Classes::new(dialect.store(), None),
                holds: Mutex::default(),
                wakers,
                session,
                default_lock,
                target,
                listener,
                heartbeat,
            }),
        })
    }
}

/// The URL with its password replaced by `***`, for messages and `Debug`.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "(an unparsable url)".to_owned(),
    }
}

/// The query parameters ferrisson reads itself; the driver never sees them.
const OWN_PARAMETERS: [&str; 2] = ["table", "lock"];

/// The URL for the driver (without ferrisson's own parameters), the `table=` parameter
/// if given, and the lock `lock=` asks for (`table`, the default, or `advisory`).
fn split_url(url: &str) -> Result<(String, Option<String>, LockKind)> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| Error::invalid(format!("not a database url: {e}")))?;
    let mut table = None;
    let mut lock = None;
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter_map(|(key, value)| {
            match key.as_ref() {
                "table" => table = Some(value.clone().into_owned()),
                "lock" => lock = Some(value.clone().into_owned()),
                _ => {}
            }
            (!OWN_PARAMETERS.contains(&key.as_ref()))
                .then(|| (key.into_owned(), value.into_owned()))
        })
        .collect();
    let kind = match lock.as_deref() {
        None | Some("table") => LockKind::Table,
        Some("advisory" | "session") => LockKind::Session,
        Some(other) => {
            return Err(Error::invalid(format!(
                "lock={:?} is not a lock a database has: use lock=table (the default) or lock=advisory",
                other.escape_debug().to_string()
            )));
        }
    };
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    Ok((parsed.to_string(), table, kind))
}

impl Client {
    /// Connects with the default options; see [`Client::builder`].
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Options for connecting to the database `url` names (`postgres://`,
    /// `postgresql://`, `mysql://`, `mariadb://`).
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            table: None,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            safety_poll: DEFAULT_SAFETY_POLL,
            heartbeat: DEFAULT_HEARTBEAT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Which database this client talks to.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// assert_eq!(client.dialect(), ferrisson_sql::Dialect::MySql);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn dialect(&self) -> Dialect {
        self.shared.dialect()
    }

    /// The lock table's name.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.table(), "ferrisson_lock");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn table(&self) -> &str {
        &self.shared.tables.lock
    }

    /// How long a watchdog hold lasts between renewals.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.watchdog_lease(), ferrisson_sql::DEFAULT_WATCHDOG_LEASE);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn watchdog_lease(&self) -> Duration {
        self.shared.watchdog_lease
    }

    /// Creates the lock table and its fence sequence (PostgreSQL) or counter (MySQL) if
    /// they are missing; nothing else ever creates them. The statements are in the crate
    /// docs, for teams whose migrations live elsewhere.
    ///
    /// # Errors
    ///
    /// The database's refusal (no right to create tables, ...).
    ///
    /// # Cancel safety
    ///
    /// Each statement is idempotent: run it again.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// client.create_schema().await?;
    /// client.create_schema().await?; // idempotent
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub async fn create_schema(&self) -> Result<()> {
        self.shared.db.create_schema(&self.shared.tables).await
    }

    /// The lock-table lock called `name` (1 to 255 bytes, no NUL).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name out of those bounds.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert!(client.lock("").is_err());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn lock(&self, name: &str) -> Result<TableLock> {
        TableLock::new(self.clone(), name)
    }

    /// The semaphore called `name` with `permits` permits, in the lock table (names of 1
    /// to 239 bytes; every client of one semaphore must give the same count).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name out of those bounds, or 0 or more than
    /// [`MAX_PERMITS`](crate::MAX_PERMITS) permits.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert!(client.semaphore("exports", 0).is_err());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<crate::TableSemaphore> {
        crate::TableSemaphore::new(self, name, permits)
    }

    /// The leader election called `name`, in the lock table (1 to 246 bytes).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name out of those bounds.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert!(client.election("nightly").is_ok());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn election(&self, name: &str) -> Result<crate::TableElection> {
        crate::TableElection::new(self.clone(), name)
    }

    /// The database's session lock called `name` (an advisory lock, `GET_LOCK`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name or one over 255 bytes.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// assert!(client.session_lock("").is_err());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn session_lock(&self, name: &str) -> Result<crate::SessionLock> {
        crate::SessionLock::new(self.clone(), name)
    }

    /// PostgreSQL's session advisory lock on a raw bigint `key`, for interop with other
    /// programs that lock the same key (`pg_advisory_lock(key)` in any language). The
    /// lock is known here as `advisory key <key>`. A lock taken by name uses the key
    /// [`advisory_key`](crate::advisory_key) derives from it.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on MySQL/MariaDB, whose `GET_LOCK` takes names.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use ferrisson_core::DistributedLock;
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// // The key another service locks with SELECT pg_advisory_lock(42):
    /// let guard = client.session_lock_by_key(42)?.try_lock().await?;
    /// # drop(guard); Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn session_lock_by_key(&self, key: i64) -> Result<crate::SessionLock> {
        crate::SessionLock::by_key(self.clone(), key)
    }

    /// PostgreSQL's advisory lock as a read-write lock called `name`: readers take
    /// `pg_advisory_lock_shared`, the writer `pg_advisory_lock`, on the same key as
    /// [`session_lock`](Self::session_lock) of that name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name or one over 255 bytes;
    /// [`Error::Unsupported`] on MySQL/MariaDB (`GET_LOCK` has no shared mode).
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// assert!(client.session_rwlock("prices").is_err());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn session_rwlock(&self, name: &str) -> Result<crate::SessionRwLock> {
        crate::SessionRwLock::new(self.clone(), name)
    }

    /// [`session_rwlock`](Self::session_rwlock) on a raw bigint `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on MySQL/MariaDB.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.session_rwlock_by_key(42)?.name(), "advisory key 42");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn session_rwlock_by_key(&self, key: i64) -> Result<crate::SessionRwLock> {
        crate::SessionRwLock::by_key(self.clone(), key)
    }

    /// PostgreSQL's transaction-scoped advisory lock called `name`
    /// (`pg_advisory_xact_lock`), held by a transaction the guard hands you: the form
    /// that works behind PgBouncer in transaction mode.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name or one over 255 bytes;
    /// [`Error::Unsupported`] on MySQL/MariaDB, which have no lock freed by commit or
    /// rollback.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// assert!(client.transaction_lock("orders").is_err());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn transaction_lock(&self, name: &str) -> Result<crate::TransactionLock> {
        crate::TransactionLock::new(self, name)
    }

    /// [`transaction_lock`](Self::transaction_lock) on a raw bigint `key`
    /// (`pg_advisory_xact_lock(key)`).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on MySQL/MariaDB.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.transaction_lock_by_key(42)?.key(), 42);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn transaction_lock_by_key(&self, key: i64) -> Result<crate::TransactionLock> {
        crate::TransactionLock::by_key(self, key)
    }

    /// Which lock the URL asked for (`?lock=advisory`: the session lock; else the lock
    /// table).
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test?lock=advisory").await?;
    /// assert_eq!(client.default_lock(), ferrisson_sql::LockKind::Session);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn default_lock(&self) -> LockKind {
        self.shared.default_lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        let shown = redacted("postgres://app:s3cret@db:5432/x");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
        let builder = Client::builder("mysql://root:hunter2@db/x");
        assert!(!format!("{builder:?}").contains("hunter2"));
    }

    #[test]
    fn ferrissons_parameters_are_taken_out_of_the_url() -> Result<()> {
        let (url, table, kind) = split_url("postgres://db/x?table=t1&sslmode=disable&lock=table")?;
        assert_eq!(table.as_deref(), Some("t1"));
        assert_eq!(url, "postgres://db/x?sslmode=disable");
        assert_eq!(kind, LockKind::Table);
        let (url, table, kind) = split_url("mysql://db/x?table=t2&lock=advisory")?;
        assert_eq!(
            (url.as_str(), table.as_deref()),
            ("mysql://db/x", Some("t2"))
        );
        assert_eq!(kind, LockKind::Session);
        assert!(split_url("postgres://db/x?lock=nope").is_err());
        Ok(())
    }
}
