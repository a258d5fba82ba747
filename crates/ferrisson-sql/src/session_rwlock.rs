//! PostgreSQL's advisory lock as a read-write lock: readers take
//! `pg_advisory_lock_shared`, the writer `pg_advisory_lock`, on the client's one session.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Grant, Kind, observe_acquire};
use ferrisson_core::{
    Capabilities, DistributedRwLock, Error, Fenced, FencingToken, Guard, Lease, Result,
};

use crate::capabilities;
use crate::client::Client;
use crate::session::{Key, Mode};
use crate::session_claim::{Claim, Held};
use crate::session_lock::{check_name, raw_key_name};

/// A read-write lock on PostgreSQL's advisory locks: many readers
/// (`pg_advisory_lock_shared(key)`) or one writer (`pg_advisory_lock(key)`), held by the
/// client's one session like [`SessionLock`](crate::SessionLock), watched by the same
/// heartbeat. Its writer and a `SessionLock` of the same name are the same lock.
///
/// - **Re-entry** per task, on each side. A task holding the read side that asks for the
///   write side is refused at once ([`Error::UpgradeRefused`]): waiting would wait for
///   itself. A writer may take the read side too.
/// - **Fairness**: none promised. PostgreSQL queues waiters, but a waiter here waits in
///   that queue only in 20 ms slices between back-off pauses, so a steady stream of
///   readers can keep a writer out.
/// - **Fencing token** (write side only): advisory locks have none of their own, so the
///   writer draws `txid_current()`, the server's 64-bit transaction counter, right after
///   its grant, while it holds the lock: every writer's token is greater than every
///   earlier writer's, on this server. One more round trip per write acquisition, and
///   one transaction id used.
/// - **PostgreSQL only**: MySQL/MariaDB's `GET_LOCK` has no shared mode
///   ([`Client::session_rwlock`](crate::Client::session_rwlock) refuses there).
///
/// ```no_run
/// use ferrisson_core::{DistributedRwLock, Fenced, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// let prices = client.session_rwlock("prices")?;
/// let a = prices.read().await?;
/// let b = prices.read().await?;
/// a.unlock().await?;
/// b.unlock().await?;
/// let writer = prices.write().await?;
/// println!("token {}", writer.fencing_token());
/// writer.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct SessionRwLock {
    read: Claim,
    write: Claim,
}

impl fmt::Debug for SessionRwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionRwLock")
            .field("name", &self.read.probe.name)
            .field("key", &self.read.key)
            .finish_non_exhaustive()
    }
}

impl SessionRwLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        check_name(name)?;
        let key = Key::of(client.dialect(), name);
        Self::with_key(client, name, key)
    }

    pub(crate) fn by_key(client: Client, key: i64) -> Result<Self> {
        Self::with_key(client, &raw_key_name(key), Key::Postgres(key))
    }

    fn with_key(client: Client, name: &str, key: Key) -> Result<Self> {
        if client.dialect() != crate::Dialect::Postgres {
            return Err(Error::Unsupported {
                store: client.dialect().store(),
                what: "hold a read-write session lock (GET_LOCK has no shared mode)".into(),
            });
        }
        let name: Arc<str> = Arc::from(name);
        let classes = &client.shared().classes;
        let read = Claim {
            probe: classes.probe(Kind::RwLockRead, &name),
            client: client.clone(),
            key: key.clone(),
            mode: Mode::Shared,
            lease: Lease::Watchdog,
            fenced: false,
        };
        let write = Claim {
            probe: classes.probe(Kind::RwLockWrite, &name),
            client,
            key,
            mode: Mode::Exclusive,
            lease: Lease::Watchdog,
            fenced: true,
        };
        Ok(Self { read, write })
    }

    /// The lock's name (`advisory key N` for a raw key).
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.session_rwlock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn name(&self) -> &str {
        &self.read.probe.name
    }

    /// The same lock with another lease on both sides: [`Lease::Watchdog`] (the default)
    /// lasts while the session does; [`Lease::Fixed`] is released by the client after
    /// its duration.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let lock = client.session_rwlock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = lock; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        let lease = lease.validate()?;
        self.read.lease = lease;
        self.write.lease = lease;
        Ok(self)
    }

    async fn read_within(&self, wait: Option<Duration>) -> Result<Option<SessionReadGuard>> {
        let acquired = async {
            Ok(self.read.acquire(wait).await?.map(|hold| SessionReadGuard {
                held: Held::new(self.read.clone(), hold),
            }))
        };
        observe_acquire(&self.read.probe, wait, acquired).await
    }

    async fn write_within(&self, wait: Option<Duration>) -> Result<Option<SessionWriteGuard>> {
        let acquired = async {
            let Some(granted) = self.write.acquire(wait).await? else {
                return Ok(None);
            };
            let held = Held::new(self.write.clone(), granted);
            let token = held
                .hold()
                .token
                .get()
                .copied()
                .ok_or_else(|| Error::Protocol("a write hold without its token".into()))?;
            Ok(Some(SessionWriteGuard { held, token }))
        };
        observe_acquire(&self.write.probe, wait, acquired).await
    }
}

impl DistributedRwLock for SessionRwLock {
    type ReadGuard = SessionReadGuard;
    type WriteGuard = SessionWriteGuard;

    fn name(&self) -> &str {
        SessionRwLock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        capabilities::POSTGRES_SESSION_RWLOCK
    }

    async fn read(&self) -> Result<SessionReadGuard> {
        self.read_within(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_read(&self) -> Result<Option<SessionReadGuard>> {
        self.read_within(Some(Duration::ZERO)).await
    }

    async fn read_timeout(&self, wait: Duration) -> Result<Option<SessionReadGuard>> {
        self.read_within(Some(wait)).await
    }

    async fn write(&self) -> Result<SessionWriteGuard> {
        self.write_within(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_write(&self) -> Result<Option<SessionWriteGuard>> {
        self.write_within(Some(Duration::ZERO)).await
    }

    async fn write_timeout(&self, wait: Duration) -> Result<Option<SessionWriteGuard>> {
        self.write_within(Some(wait)).await
    }
}

/// The read side of a [`SessionRwLock`] held; no fencing token. Dropping it releases on
/// a spawned task.
#[must_use = "dropping the guard releases the lock"]
pub struct SessionReadGuard {
    held: Held,
}

/// The write side of a [`SessionRwLock`] held, with its fencing token. Dropping it
/// releases on a spawned task.
#[must_use = "dropping the guard releases the lock"]
pub struct SessionWriteGuard {
    held: Held,
    token: FencingToken,
}

impl fmt::Debug for SessionReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionReadGuard")
            .field("name", &self.held.name())
            .field("held", &self.held.is_held())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for SessionWriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionWriteGuard")
            .field("name", &self.held.name())
            .field("held", &self.held.is_held())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// No fencing token on the read side: the default `Grant`.
impl Grant for SessionReadGuard {}

impl Grant for SessionWriteGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.token)
    }
}

impl Fenced for SessionWriteGuard {
    fn fencing_token(&self) -> FencingToken {
        self.token
    }
}

macro_rules! session_guard {
    ($guard:ty) => {
        impl Guard for $guard {
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
    };
}

session_guard!(SessionReadGuard);
session_guard!(SessionWriteGuard);
