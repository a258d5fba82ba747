//! A lock of whichever store the client talks to, and its guard.

use std::time::Duration;

use ferrisson_core::memory::{MemoryLock, MemoryLockGuard};
use ferrisson_core::{Capabilities, DistributedLock, Fenced, FencingToken, Lease, Result};

/// The reentrant lock of the client's store ([`Client::lock`](crate::Client::lock)).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson::{DistributedLock, Guard};
///
/// let client = ferrisson::connect("memory://any-lock").await?;
/// let lock = client.lock("voucher:7")?;
/// assert!(lock.capabilities().fencing != ferrisson::capabilities::Fencing::None);
/// let guard = lock.lock().await?;
/// assert!(guard.fencing_token().is_some());
/// guard.unlock().await?;
/// # Ok::<(), ferrisson::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyLock {
    /// A Redis [`Lock`](ferrisson_redis::Lock).
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::Lock),
    /// A PostgreSQL or MySQL/MariaDB lock-table [`TableLock`](ferrisson_sql::TableLock).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::TableLock),
    /// A PostgreSQL advisory lock or a MySQL/MariaDB `GET_LOCK`
    /// ([`SessionLock`](ferrisson_sql::SessionLock); URLs with `?lock=advisory`).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    SqlSession(ferrisson_sql::SessionLock),
    /// An etcd [`Lock`](ferrisson_etcd::Lock).
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::Lock),
    /// A ZooKeeper [`Lock`](ferrisson_zookeeper::Lock).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::Lock),
    /// A memory store lock.
    Memory(MemoryLock),
}

/// Proof of holding an [`AnyLock`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "dropping the guard releases the lock"]
pub enum AnyGuard {
    /// A Redis lock's guard.
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::LockGuard),
    /// A lock-table lock's guard.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::TableLockGuard),
    /// A session lock's guard (no fencing token).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    SqlSession(ferrisson_sql::SessionLockGuard),
    /// An etcd lock's guard.
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::LockGuard),
    /// A ZooKeeper lock's guard.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::LockGuard),
    /// A memory store lock's guard.
    Memory(MemoryLockGuard),
}

/// Runs `$body` with `$inner` bound to the variant's value, for every variant.
macro_rules! each_store {
    ($value:expr, $enum:ident, $inner:ident => $body:expr) => {
        match $value {
            #[cfg(feature = "redis")]
            $enum::Redis($inner) => $body,
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            $enum::Sql($inner) => $body,
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            $enum::SqlSession($inner) => $body,
            #[cfg(feature = "etcd")]
            $enum::Etcd($inner) => $body,
            #[cfg(feature = "zookeeper")]
            $enum::ZooKeeper($inner) => $body,
            $enum::Memory($inner) => $body,
        }
    };
}

impl AnyLock {
    /// The same lock with another lease ([`Lease::Watchdog`] renews while held,
    /// [`Lease::Fixed`] lapses).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease the store
    /// cannot keep.
    ///
    /// ```
    /// use std::time::Duration;
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// let lock = client.lock("a")?.with_lease(ferrisson::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = lock; Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => Self::Redis(lock.with_lease(lease)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(lock) => Self::Sql(lock.with_lease(lease)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => Self::SqlSession(lock.with_lease(lease)?),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => Self::Etcd(lock.with_lease(lease)?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => Self::ZooKeeper(lock.with_lease(lease)?),
            Self::Memory(lock) => Self::Memory(lock.with_lease(lease)?),
        })
    }
}

impl DistributedLock for AnyLock {
    type Guard = AnyGuard;

    fn name(&self) -> &str {
        each_store!(self, Self, lock => DistributedLock::name(lock))
    }

    fn capabilities(&self) -> Capabilities {
        each_store!(self, Self, lock => lock.capabilities())
    }

    async fn lock(&self) -> Result<AnyGuard> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => AnyGuard::Redis(DistributedLock::lock(lock).await?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(lock) => AnyGuard::Sql(lock.lock().await?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => AnyGuard::SqlSession(lock.lock().await?),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => AnyGuard::Etcd(lock.lock().await?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => AnyGuard::ZooKeeper(lock.lock().await?),
            Self::Memory(lock) => AnyGuard::Memory(lock.lock().await?),
        })
    }

    async fn try_lock(&self) -> Result<Option<AnyGuard>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => DistributedLock::try_lock(lock).await?.map(AnyGuard::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(lock) => lock.try_lock().await?.map(AnyGuard::Sql),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => lock.try_lock().await?.map(AnyGuard::SqlSession),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => lock.try_lock().await?.map(AnyGuard::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => lock.try_lock().await?.map(AnyGuard::ZooKeeper),
            Self::Memory(lock) => lock.try_lock().await?.map(AnyGuard::Memory),
        })
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<AnyGuard>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => DistributedLock::lock_timeout(lock, wait)
                .await?
                .map(AnyGuard::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(lock) => lock.lock_timeout(wait).await?.map(AnyGuard::Sql),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => lock.lock_timeout(wait).await?.map(AnyGuard::SqlSession),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => lock.lock_timeout(wait).await?.map(AnyGuard::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => lock.lock_timeout(wait).await?.map(AnyGuard::ZooKeeper),
            Self::Memory(lock) => lock.lock_timeout(wait).await?.map(AnyGuard::Memory),
        })
    }
}

impl AnyGuard {
    /// The hold's fencing token, when the store gives one (see the capability table).
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use ferrisson::DistributedLock;
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// let guard = client.lock("a")?.lock().await?;
    /// assert!(guard.fencing_token().is_some());
    /// # Ok::<(), ferrisson::Error>(()) }).unwrap();
    /// ```
    pub fn fencing_token(&self) -> Option<FencingToken> {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(guard) => Some(Fenced::fencing_token(guard)),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(guard) => Some(Fenced::fencing_token(guard)),
            // A database session lock has no token (see the capability table).
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(_) => None,
            #[cfg(feature = "etcd")]
            Self::Etcd(guard) => Some(Fenced::fencing_token(guard)),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(guard) => Some(Fenced::fencing_token(guard)),
            Self::Memory(guard) => Some(Fenced::fencing_token(guard)),
        }
    }
}

delegate_guard!(AnyGuard, each_store);
