//! The database's own session lock (PostgreSQL advisory lock, MySQL/MariaDB `GET_LOCK`)
//! behind the contract: held by the client's one session, watched by its heartbeat.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Grant, Kind, observe_acquire};
use ferrisson_core::{Capabilities, DistributedLock, Error, Guard, Lease, Result};

use crate::capabilities;
use crate::client::Client;
use crate::session::{Key, Mode};
use crate::session_claim::{Claim, Held};
use crate::table_lock::MAX_NAME_LEN;

/// A session lock: PostgreSQL's exclusive advisory lock on a bigint key (derived from
/// the name by [`advisory_key`](crate::advisory_key), or given raw) or MySQL/MariaDB's
/// `GET_LOCK(name, ...)` (the name mapped by [`mysql_lock_name`](crate::mysql_lock_name)),
/// taken on the client's one session connection, which all its session locks share.
///
/// The database frees the lock when the session ends, so a holder that dies frees it at
/// once (or, over a half-open connection, after about 4 heartbeats: the session asks the
/// server for TCP keepalive probes, or a `wait_timeout`, in heartbeats).
/// The client pings the session every heartbeat (5 s by default): when it does not
/// answer, the session is closed and every guard on it fires `lost()`; `remaining()` is
/// the time until the next heartbeat is overdue, what the client knows, never a made-up
/// forever. There is no fencing token.
///
/// A waiter's first try never waits; each later one waits on PostgreSQL in the server's
/// own queue for at most 20 ms (`lock_timeout`, re-checked in `pg_locks` after a
/// `55P03`, see the crate docs), between back-off pauses of 5 to 200 ms, jittered: a
/// longer blocking wait would hold the shared session that every other lock of the
/// client uses. On MySQL/MariaDB the same waits are `GET_LOCK(name, 0.02)` (MariaDB
/// waits the fraction, MySQL rounds it down to a try). A wait that would close a cycle
/// of waiters fails with [`SqlError::Deadlock`](crate::SqlError::Deadlock).
///
/// Behind PgBouncer in transaction mode a session lock is not safe (the next statement
/// may reach another server session): use
/// [`TransactionLock`](crate::TransactionLock) or [`TableLock`](crate::TableLock) there.
///
/// The key is derived from the name ([`advisory_key`](crate::advisory_key)); a raw key
/// shared with other programs is taken with
/// [`Client::session_lock_by_key`](crate::Client::session_lock_by_key).
///
/// ```no_run
/// use ferrisson_core::{DistributedLock, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// let guard = client.session_lock("nightly-report")?.lock().await?;
/// guard.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct SessionLock {
    claim: Claim,
}

impl fmt::Debug for SessionLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLock")
            .field("name", &self.claim.probe.name)
            .field("key", &self.claim.key)
            .finish_non_exhaustive()
    }
}

/// Checks a session lock's name: 1 to 255 bytes.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "name must be at most {MAX_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

/// The name a raw advisory key is known by in this client (its guards, spans, metrics).
pub(crate) fn raw_key_name(key: i64) -> String {
    format!("advisory key {key}")
}

impl SessionLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        check_name(name)?;
        let key = Key::of(client.dialect(), name);
        Ok(Self::with_key(client, name, key))
    }

    pub(crate) fn by_key(client: Client, key: i64) -> Result<Self> {
        if client.dialect() != crate::Dialect::Postgres {
            return Err(Error::Unsupported {
                store: client.dialect().store(),
                what: "take a lock by a raw advisory key (GET_LOCK takes names)".into(),
            });
        }
        Ok(Self::with_key(
            client,
            &raw_key_name(key),
            Key::Postgres(key),
        ))
    }

    fn with_key(client: Client, name: &str, key: Key) -> Self {
        let probe = client.shared().classes.probe(Kind::Lock, &Arc::from(name));
        Self {
            claim: Claim {
                client,
                probe,
                key,
                mode: Mode::Exclusive,
                lease: Lease::Watchdog,
                fenced: false,
            },
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// assert_eq!(client.session_lock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn name(&self) -> &str {
        &self.claim.probe.name
    }

    /// The same lock with another lease: [`Lease::Watchdog`] (the default) lasts while
    /// the session does; [`Lease::Fixed`] is released by the client after its duration.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// let lock = client.session_lock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = lock; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.claim.lease = lease.validate()?;
        Ok(self)
    }

    /// Ends the hold, whoever has it, as an administrator would: the holder's session is
    /// terminated (`pg_terminate_backend`, `KILL`), which frees every lock it held; its
    /// guards' `lost()` fires at their next heartbeat. Returns whether anyone held it.
    ///
    /// # Errors
    ///
    /// When the database cannot be reached or refuses (the right to end other sessions
    /// is needed).
    ///
    /// # Cancel safety
    ///
    /// The termination may or may not have run when the future is dropped.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// let ended = client.session_lock("stuck")?.force_unlock().await?;
    /// # let _ = ended; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let shared = self.claim.shared();
        shared
            .db
            .end_session_holding(&shared.tables, &self.claim.key)
            .await
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<SessionLockGuard>> {
        Ok(self
            .claim
            .acquire(wait)
            .await?
            .map(|hold| SessionLockGuard {
                held: Held::new(self.claim.clone(), hold),
            }))
    }
}

impl DistributedLock for SessionLock {
    type Guard = SessionLockGuard;

    fn name(&self) -> &str {
        SessionLock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        capabilities::session_lock(self.claim.client.dialect())
    }

    async fn lock(&self) -> Result<SessionLockGuard> {
        observe_acquire(&self.claim.probe, None, self.acquire(None))
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_lock(&self) -> Result<Option<SessionLockGuard>> {
        let wait = Some(Duration::ZERO);
        observe_acquire(&self.claim.probe, wait, self.acquire(wait)).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<SessionLockGuard>> {
        observe_acquire(&self.claim.probe, Some(wait), self.acquire(Some(wait))).await
    }
}

/// Proof of holding a [`SessionLock`]; no fencing token. Dropping it releases on a
/// spawned task.
#[must_use = "dropping the guard releases the lock"]
pub struct SessionLockGuard {
    held: Held,
}

impl fmt::Debug for SessionLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLockGuard")
            .field("name", &self.held.name())
            .field("held", &self.held.is_held())
            .finish_non_exhaustive()
    }
}

/// No fencing token: the default `Grant`.
impl Grant for SessionLockGuard {}

impl Guard for SessionLockGuard {
    fn name(&self) -> &str {
        self.held.name()
    }

    fn is_held(&self) -> bool {
        self.held.is_held()
    }

    fn remaining(&self) -> Duration {
        self.held.remaining()
    }

    async fn lost(&self) {
        self.held.lost().await;
    }

    async fn unlock(self) -> Result<()> {
        self.held.unlock().await
    }
}
