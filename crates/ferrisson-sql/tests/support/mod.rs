//! The lock table under the conformance suite: a client per test on a table of its own
//! (so that tests running at once never share rows), dropped at the end.

#![allow(dead_code)] // each test binary uses its own part

use std::time::Duration;

use ferrisson_conformance::Store;
use ferrisson_sql::{
    Client, Fenced, FencingToken, Lease, Result, SessionLock, SessionLockGuard, TableLock,
    TableLockGuard,
};
use sqlx::Executor as _;

/// The watchdog lease of the clients under test: short, so that a hold ended behind the
/// holder's back is noticed at the next renewal (a third of it).
pub const WATCHDOG_LEASE: Duration = Duration::from_millis(1500);

/// The machine's PostgreSQL, or the one `FERRISSON_TEST_POSTGRES_URL` names.
pub fn postgres_url() -> String {
    std::env::var("FERRISSON_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The machine's MariaDB, or the one `FERRISSON_TEST_MYSQL_URL` names.
pub fn mysql_url() -> String {
    std::env::var("FERRISSON_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// A fresh table name for one test.
pub fn fresh_table() -> String {
    format!("ferrisson_test_{:016x}", rand::random::<u64>())
}

/// `base` with `table=` added.
pub fn with_table(base: &str, table: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}table={table}")
}

/// A lock-table client under test, with the URL another client or process connects to.
#[derive(Clone, Debug)]
pub struct SqlUnderTest {
    pub url: String,
    pub client: Client,
}

impl SqlUnderTest {
    pub async fn connect(url: String) -> Result<Self> {
        let client = Client::builder(&url)
            .watchdog_lease(WATCHDOG_LEASE)
            .max_connections(4)
            .connect()
            .await?;
        Ok(Self { url, client })
    }

    /// A client on a new table of `base`'s database, its schema created.
    pub async fn on_fresh_table(base: &str) -> Result<Self> {
        let store = Self::connect(with_table(base, &fresh_table())).await?;
        store.client.create_schema().await?;
        Ok(store)
    }

    /// Drops the test's table and its fence object.
    pub async fn drop_schema(&self, base: &str) -> anyhow::Result<()> {
        let table = self.client.table();
        let statements = [
            format!("DROP TABLE IF EXISTS {table}"),
            if base.starts_with("postgres") {
                format!("DROP SEQUENCE IF EXISTS {table}_fence")
            } else {
                format!("DROP TABLE IF EXISTS {table}_fence")
            },
        ];
        if base.starts_with("postgres") {
            let pool = sqlx::PgPool::connect(base).await?;
            for s in statements {
                pool.execute(s.as_str()).await?;
            }
        } else {
            let pool = sqlx::MySqlPool::connect(base).await?;
            for s in statements {
                pool.execute(s.as_str()).await?;
            }
        }
        Ok(())
    }
}

impl Store for SqlUnderTest {
    type Lock = TableLock;

    fn lock(&self, name: &str, lease: Lease) -> Result<TableLock> {
        self.client.lock(name)?.with_lease(lease)
    }

    async fn another_client(&self) -> Result<Self> {
        Self::connect(self.url.clone()).await
    }

    async fn end_hold_behind_the_back(&self, name: &str) -> Result<()> {
        self.client.lock(name)?.force_unlock().await.map(drop)
    }

    fn token_of(guard: &TableLockGuard) -> Option<FencingToken> {
        Some(guard.fencing_token())
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// The watchdog's next renewal finds the row gone.
    fn lost_within(&self) -> Duration {
        WATCHDOG_LEASE * 2
    }
}

/// How often the session lock's clients under test ping their session.
pub const HEARTBEAT: Duration = Duration::from_millis(300);

/// A session-lock client under test (advisory locks, `GET_LOCK`).
#[derive(Clone, Debug)]
pub struct SessionUnderTest {
    pub url: String,
    pub client: Client,
}

impl SessionUnderTest {
    pub async fn connect(url: String) -> Result<Self> {
        let client = Client::builder(&url)
            .heartbeat(HEARTBEAT)
            .max_connections(4)
            .connect()
            .await?;
        Ok(Self { url, client })
    }

    /// A client of `base`'s database whose URL asks for session locks.
    pub async fn of(base: &str) -> Result<Self> {
        let sep = if base.contains('?') { '&' } else { '?' };
        Self::connect(format!("{base}{sep}lock=advisory")).await
    }
}

impl Store for SessionUnderTest {
    type Lock = SessionLock;

    fn lock(&self, name: &str, lease: Lease) -> Result<SessionLock> {
        self.client.session_lock(name)?.with_lease(lease)
    }

    async fn another_client(&self) -> Result<Self> {
        Self::connect(self.url.clone()).await
    }

    /// Terminates the holder's session.
    async fn end_hold_behind_the_back(&self, name: &str) -> Result<()> {
        self.client
            .session_lock(name)?
            .force_unlock()
            .await
            .map(drop)
    }

    fn token_of(_guard: &SessionLockGuard) -> Option<FencingToken> {
        None
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// The next heartbeat finds the session gone.
    fn lost_within(&self) -> Duration {
        HEARTBEAT * 6
    }
}
