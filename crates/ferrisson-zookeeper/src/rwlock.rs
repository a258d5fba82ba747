//! The read-write lock: Curator's `InterProcessReadWriteLock`.

use std::fmt;
use std::time::Duration;

use ferrisson_core::{Capabilities, DistributedLock, DistributedRwLock, Lease, Result};

use crate::client::Client;
use crate::lock::{Flavor, Lock, LockGuard};

/// A read-write lock with Curator's `InterProcessReadWriteLock` node layout: readers'
/// nodes `_c_<guid>-__READ__<sequence>` and writers' `_c_<guid>-__WRIT__<sequence>`
/// under one path, in one queue. A writer holds when its node is first; a reader holds
/// when no writer's node is ahead of its own (so a waiting writer holds back later
/// readers: no writer starves), and watches the first writer's node ahead of it.
///
/// Both sides re-enter per task. A task holding the write side may take the read side
/// (granted at once; releasing the write side then downgrades). A task holding only the
/// read side asking for the write side is refused with
/// [`Error::UpgradeRefused`](ferrisson_core::Error::UpgradeRefused): it would wait for
/// itself. Both guards are [`LockGuard`]s; the write side's token (its node's `czxid`)
/// grows with every writer.
///
/// Names that start with `/` are paths (shared with Java services on that path); others
/// live under `/ferrisson/rwlocks/`.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::{DistributedRwLock, Fenced, Guard};
///
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
/// let prices = client.rwlock("prices")?;
/// let write = prices.write().await?;
/// let read = prices.read().await?; // the writer may read
/// write.unlock().await?; // downgraded: still reading
/// read.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.read.name())
            .field("path", &self.read.path())
            .finish_non_exhaustive()
    }
}

impl RwLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Ok(Self {
            read: Lock::of_flavor(client.clone(), name, Flavor::Read)?,
            write: Lock::of_flavor(client, name, Flavor::Write)?,
        })
    }

    /// The lock's ZooKeeper path: both sides' nodes are its children.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.rwlock("a")?.path(), "/ferrisson/rwlocks/a");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn path(&self) -> &str {
        self.read.path()
    }

    /// The same lock with another lease for both sides (see [`Lock::with_lease`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](ferrisson_core::Error::InvalidArgument) for a fixed
    /// lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let lock = client.rwlock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(Self {
            read: self.read.with_lease(lease)?,
            write: self.write.with_lease(lease)?,
        })
    }
}

impl DistributedRwLock for RwLock {
    type ReadGuard = LockGuard;
    type WriteGuard = LockGuard;

    fn name(&self) -> &str {
        self.read.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.write.capabilities()
    }

    /// # Cancel safety
    ///
    /// Dropping the future deletes the reader's node in the background.
    async fn read(&self) -> Result<LockGuard> {
        self.read.lock().await
    }

    async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.read.try_lock().await
    }

    async fn read_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.read.lock_timeout(wait).await
    }

    /// # Cancel safety
    ///
    /// Dropping the future deletes the writer's node in the background.
    async fn write(&self) -> Result<LockGuard> {
        self.write.lock().await
    }

    async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.write.try_lock().await
    }

    async fn write_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.write.lock_timeout(wait).await
    }
}
