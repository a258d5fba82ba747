//! A semaphore of whichever store the client talks to, and its permit.

use std::time::Duration;

use ferrisson_core::memory::{MemoryPermit, MemorySemaphore};
use ferrisson_core::{Capabilities, DistributedSemaphore, Permit, Result};

/// A semaphore of the client's store, `permits` permits each held by one owner at a time
/// ([`Client::semaphore`](crate::Client::semaphore)). Every store's permit ends when its
/// holder does: on Redis it is an [`ExpirableSemaphore`](ferrisson_redis::ExpirableSemaphore)
/// permit (renewed while held, taken back one lease after its holder died), on a
/// database a lock-table row with an expiry, on ZooKeeper an ephemeral node, on etcd a
/// key on the client's lease.
///
/// The number of permits is the semaphore's, not the handle's: on Redis it is set by the
/// first acquire of a semaphore that does not exist yet (later handles with another count
/// use the one set); ZooKeeper and etcd take the first `permits` contenders in queue
/// order, so every handle of one semaphore must give the same count.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson::{DistributedSemaphore, Permit};
///
/// let client = ferrisson::connect("memory://any-semaphore").await?;
/// let exports = client.semaphore("exports", 2)?;
/// let first = exports.acquire().await?;
/// let second = exports.acquire().await?;
/// assert!(exports.try_acquire().await?.is_none()); // both permits are out
/// first.release().await?;
/// second.release().await?;
/// # Ok::<(), ferrisson::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnySemaphore {
    /// A Redis [`ExpirableSemaphore`](ferrisson_redis::ExpirableSemaphore) and the count
    /// its first acquire sets when it does not exist yet.
    #[cfg(feature = "redis")]
    Redis(RedisSemaphore),
    /// A PostgreSQL or MySQL/MariaDB lock-table semaphore.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::TableSemaphore),
    /// An etcd [`Semaphore`](ferrisson_etcd::Semaphore).
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::Semaphore),
    /// A ZooKeeper [`Semaphore`](ferrisson_zookeeper::Semaphore).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::Semaphore),
    /// A memory store semaphore.
    Memory(MemorySemaphore),
}

/// A Redis [`ExpirableSemaphore`](ferrisson_redis::ExpirableSemaphore) that sets its
/// count on first use: Redis keeps the count in the semaphore's key, which the
/// synchronous [`Client::semaphore`](crate::Client::semaphore) cannot write.
#[cfg(feature = "redis")]
#[derive(Debug, Clone)]
pub struct RedisSemaphore {
    semaphore: ferrisson_redis::ExpirableSemaphore,
    permits: u32,
    // Shared by clones: once one of them saw the count set, none asks again.
    count_set: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(feature = "redis")]
impl RedisSemaphore {
    pub(crate) fn new(semaphore: ferrisson_redis::ExpirableSemaphore, permits: u32) -> Self {
        Self {
            semaphore,
            permits,
            count_set: std::sync::Arc::default(),
        }
    }

    /// The Redis semaphore, for what only Redis offers (`set_permits`, `inspect`, ...).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// if let ferrisson::AnySemaphore::Redis(semaphore) = client.semaphore("exports", 4)? {
    ///     semaphore.inner().set_permits(8).await?; // scaled up
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inner(&self) -> &ferrisson_redis::ExpirableSemaphore {
        &self.semaphore
    }

    /// Creates the semaphore with its count unless it exists (`SET NX`: a race between
    /// two first acquires sets it once).
    async fn ready(&self) -> Result<&ferrisson_redis::ExpirableSemaphore> {
        use std::sync::atomic::Ordering;
        if !self.count_set.load(Ordering::Acquire) {
            self.semaphore.try_set_permits(self.permits).await?;
            self.count_set.store(true, Ordering::Release);
        }
        Ok(&self.semaphore)
    }
}

/// A permit of an [`AnySemaphore`]; given back on [`release`](Permit::release) or drop.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "dropping the permit gives it back"]
pub enum AnyPermit {
    /// A Redis permit.
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::ExpirablePermit),
    /// A lock-table permit.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::TablePermit),
    /// An etcd permit.
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::SemaphorePermit),
    /// A ZooKeeper permit.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::ZkPermit),
    /// A memory store permit.
    Memory(MemoryPermit),
}

impl DistributedSemaphore for AnySemaphore {
    type Permit = AnyPermit;

    fn name(&self) -> &str {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(semaphore) => semaphore.semaphore.name(),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(semaphore) => DistributedSemaphore::name(semaphore),
            #[cfg(feature = "etcd")]
            Self::Etcd(semaphore) => DistributedSemaphore::name(semaphore),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(semaphore) => DistributedSemaphore::name(semaphore),
            Self::Memory(semaphore) => DistributedSemaphore::name(semaphore),
        }
    }

    fn capabilities(&self) -> Capabilities {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(semaphore) => DistributedSemaphore::capabilities(&semaphore.semaphore),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(semaphore) => semaphore.capabilities(),
            #[cfg(feature = "etcd")]
            Self::Etcd(semaphore) => semaphore.capabilities(),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(semaphore) => semaphore.capabilities(),
            Self::Memory(semaphore) => semaphore.capabilities(),
        }
    }

    async fn acquire(&self) -> Result<AnyPermit> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(semaphore) => AnyPermit::Redis(semaphore.ready().await?.acquire().await?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(semaphore) => AnyPermit::Sql(semaphore.acquire().await?),
            #[cfg(feature = "etcd")]
            Self::Etcd(semaphore) => AnyPermit::Etcd(semaphore.acquire().await?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(semaphore) => AnyPermit::ZooKeeper(semaphore.acquire().await?),
            Self::Memory(semaphore) => AnyPermit::Memory(semaphore.acquire().await?),
        })
    }

    async fn try_acquire(&self) -> Result<Option<AnyPermit>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(semaphore) => semaphore
                .ready()
                .await?
                .try_acquire()
                .await?
                .map(AnyPermit::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(semaphore) => semaphore.try_acquire().await?.map(AnyPermit::Sql),
            #[cfg(feature = "etcd")]
            Self::Etcd(semaphore) => semaphore.try_acquire().await?.map(AnyPermit::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(semaphore) => semaphore.try_acquire().await?.map(AnyPermit::ZooKeeper),
            Self::Memory(semaphore) => semaphore.try_acquire().await?.map(AnyPermit::Memory),
        })
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<AnyPermit>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(semaphore) => semaphore
                .ready()
                .await?
                .acquire_timeout(wait)
                .await?
                .map(AnyPermit::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(semaphore) => semaphore.acquire_timeout(wait).await?.map(AnyPermit::Sql),
            #[cfg(feature = "etcd")]
            Self::Etcd(semaphore) => semaphore.acquire_timeout(wait).await?.map(AnyPermit::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(semaphore) => semaphore
                .acquire_timeout(wait)
                .await?
                .map(AnyPermit::ZooKeeper),
            Self::Memory(semaphore) => semaphore
                .acquire_timeout(wait)
                .await?
                .map(AnyPermit::Memory),
        })
    }
}

impl Permit for AnyPermit {
    fn name(&self) -> &str {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(permit) => Permit::name(permit),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(permit) => Permit::name(permit),
            #[cfg(feature = "etcd")]
            Self::Etcd(permit) => Permit::name(permit),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(permit) => Permit::name(permit),
            Self::Memory(permit) => Permit::name(permit),
        }
    }

    async fn release(self) -> Result<()> {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(permit) => Permit::release(permit).await,
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(permit) => Permit::release(permit).await,
            #[cfg(feature = "etcd")]
            Self::Etcd(permit) => Permit::release(permit).await,
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(permit) => Permit::release(permit).await,
            Self::Memory(permit) => Permit::release(permit).await,
        }
    }
}
