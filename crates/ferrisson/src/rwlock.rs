//! A read-write lock of whichever store the client talks to, and its two guards.

use std::time::Duration;

use ferrisson_core::memory::{MemoryReadGuard, MemoryRwLock, MemoryWriteGuard};
use ferrisson_core::{Capabilities, DistributedRwLock, Lease, Result};

/// Runs `$body` with `$inner` bound to the variant's value, for every store that has a
/// read-write lock.
macro_rules! each_store {
    ($value:expr, $enum:ident, $inner:ident => $body:expr) => {
        match $value {
            #[cfg(feature = "redis")]
            $enum::Redis($inner) => $body,
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

/// The read-write lock of the client's store ([`Client::rwlock`](crate::Client::rwlock)):
/// many readers or one writer, a fencing token on every write.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson::{DistributedRwLock, Fenced, Guard};
///
/// let client = ferrisson::connect("memory://any-rwlock").await?;
/// let prices = client.rwlock("prices")?;
/// let reader = prices.read().await?;
/// let writer = tokio::spawn({
///     let prices = prices.clone();
///     async move { prices.try_write().await } // another task: no writer beside a reader
/// });
/// assert!(writer.await.expect("joined")?.is_none());
/// reader.unlock().await?;
/// let writer = prices.write().await?;
/// println!("writing with token {}", writer.fencing_token());
/// writer.unlock().await?;
/// # Ok::<(), ferrisson::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyRwLock {
    /// A Redis [`RwLock`](ferrisson_redis::RwLock).
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::RwLock),
    /// A PostgreSQL advisory read-write lock
    /// ([`SessionRwLock`](ferrisson_sql::SessionRwLock); URLs with `?lock=advisory`).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    SqlSession(ferrisson_sql::SessionRwLock),
    /// An etcd [`RwLock`](ferrisson_etcd::RwLock).
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::RwLock),
    /// A ZooKeeper [`RwLock`](ferrisson_zookeeper::RwLock) (Curator's layout).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::RwLock),
    /// A memory store read-write lock.
    Memory(MemoryRwLock),
}

/// A read hold of an [`AnyRwLock`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "dropping the guard releases the read lock"]
pub enum AnyReadGuard {
    /// A Redis read guard.
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::RwLockReadGuard),
    /// A PostgreSQL advisory read guard.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    SqlSession(ferrisson_sql::SessionReadGuard),
    /// An etcd read guard.
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::ReadGuard),
    /// A ZooKeeper read guard.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::LockGuard),
    /// A memory store read guard.
    Memory(MemoryReadGuard),
}

/// The write hold of an [`AnyRwLock`], with its fencing token.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "dropping the guard releases the write lock"]
pub enum AnyWriteGuard {
    /// A Redis write guard.
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::RwLockWriteGuard),
    /// A PostgreSQL advisory write guard.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    SqlSession(ferrisson_sql::SessionWriteGuard),
    /// An etcd write guard.
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::WriteGuard),
    /// A ZooKeeper write guard.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::LockGuard),
    /// A memory store write guard.
    Memory(MemoryWriteGuard),
}

impl AnyRwLock {
    /// The same lock with another lease for its holds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease the store
    /// cannot keep.
    ///
    /// ```
    /// use std::time::Duration;
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// let lock = client.rwlock("a")?.with_lease(ferrisson::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = lock; Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => Self::Redis(lock.with_lease(lease)?),
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

impl DistributedRwLock for AnyRwLock {
    type ReadGuard = AnyReadGuard;
    type WriteGuard = AnyWriteGuard;

    fn name(&self) -> &str {
        each_store!(self, Self, lock => DistributedRwLock::name(lock))
    }

    fn capabilities(&self) -> Capabilities {
        each_store!(self, Self, lock => DistributedRwLock::capabilities(lock))
    }

    async fn read(&self) -> Result<AnyReadGuard> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => AnyReadGuard::Redis(DistributedRwLock::read(lock).await?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => {
                AnyReadGuard::SqlSession(DistributedRwLock::read(lock).await?)
            }
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => AnyReadGuard::Etcd(DistributedRwLock::read(lock).await?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => AnyReadGuard::ZooKeeper(DistributedRwLock::read(lock).await?),
            Self::Memory(lock) => AnyReadGuard::Memory(DistributedRwLock::read(lock).await?),
        })
    }

    async fn try_read(&self) -> Result<Option<AnyReadGuard>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => DistributedRwLock::try_read(lock)
                .await?
                .map(AnyReadGuard::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => DistributedRwLock::try_read(lock)
                .await?
                .map(AnyReadGuard::SqlSession),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => DistributedRwLock::try_read(lock)
                .await?
                .map(AnyReadGuard::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => DistributedRwLock::try_read(lock)
                .await?
                .map(AnyReadGuard::ZooKeeper),
            Self::Memory(lock) => DistributedRwLock::try_read(lock)
                .await?
                .map(AnyReadGuard::Memory),
        })
    }

    async fn read_timeout(&self, wait: Duration) -> Result<Option<AnyReadGuard>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => DistributedRwLock::read_timeout(lock, wait)
                .await?
                .map(AnyReadGuard::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => DistributedRwLock::read_timeout(lock, wait)
                .await?
                .map(AnyReadGuard::SqlSession),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => DistributedRwLock::read_timeout(lock, wait)
                .await?
                .map(AnyReadGuard::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => DistributedRwLock::read_timeout(lock, wait)
                .await?
                .map(AnyReadGuard::ZooKeeper),
            Self::Memory(lock) => DistributedRwLock::read_timeout(lock, wait)
                .await?
                .map(AnyReadGuard::Memory),
        })
    }

    async fn write(&self) -> Result<AnyWriteGuard> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => AnyWriteGuard::Redis(DistributedRwLock::write(lock).await?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => {
                AnyWriteGuard::SqlSession(DistributedRwLock::write(lock).await?)
            }
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => AnyWriteGuard::Etcd(DistributedRwLock::write(lock).await?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => {
                AnyWriteGuard::ZooKeeper(DistributedRwLock::write(lock).await?)
            }
            Self::Memory(lock) => AnyWriteGuard::Memory(DistributedRwLock::write(lock).await?),
        })
    }

    async fn try_write(&self) -> Result<Option<AnyWriteGuard>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => DistributedRwLock::try_write(lock)
                .await?
                .map(AnyWriteGuard::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => DistributedRwLock::try_write(lock)
                .await?
                .map(AnyWriteGuard::SqlSession),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => DistributedRwLock::try_write(lock)
                .await?
                .map(AnyWriteGuard::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => DistributedRwLock::try_write(lock)
                .await?
                .map(AnyWriteGuard::ZooKeeper),
            Self::Memory(lock) => DistributedRwLock::try_write(lock)
                .await?
                .map(AnyWriteGuard::Memory),
        })
    }

    async fn write_timeout(&self, wait: Duration) -> Result<Option<AnyWriteGuard>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(lock) => DistributedRwLock::write_timeout(lock, wait)
                .await?
                .map(AnyWriteGuard::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::SqlSession(lock) => DistributedRwLock::write_timeout(lock, wait)
                .await?
                .map(AnyWriteGuard::SqlSession),
            #[cfg(feature = "etcd")]
            Self::Etcd(lock) => DistributedRwLock::write_timeout(lock, wait)
                .await?
                .map(AnyWriteGuard::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(lock) => DistributedRwLock::write_timeout(lock, wait)
                .await?
                .map(AnyWriteGuard::ZooKeeper),
            Self::Memory(lock) => DistributedRwLock::write_timeout(lock, wait)
                .await?
                .map(AnyWriteGuard::Memory),
        })
    }
}

delegate_guard!(AnyReadGuard, each_store);
delegate_guard!(AnyWriteGuard, each_store);
delegate_fenced!(AnyWriteGuard, each_store);
