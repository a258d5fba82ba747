//! The other families more than one store offers: read-write lock, semaphore, leader
//! election, count-down latch. Each has the lock's shape: `x` waits, `try_x` never
//! waits, `x_timeout` waits at most a given time, contention is `Ok(None)`.

use std::future::Future;
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::contract::lock::{Fenced, Guard};
use crate::error::Result;

/// Many readers or one writer.
///
/// ```
/// use ferrisson_core::{DistributedRwLock, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let prices = store.rwlock("prices")?;
/// let a = prices.read().await?;
/// let b = prices.read().await?;
/// let writer = prices.clone();
/// let refused = tokio::spawn(async move { writer.try_write().await.map(|w| w.is_none()) });
/// assert!(refused.await.unwrap()?); // readers keep a writer out
/// a.unlock().await?;
/// b.unlock().await?;
/// assert!(prices.try_write().await?.is_some());
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait DistributedRwLock: Send + Sync {
    /// What holding the read side gives.
    type ReadGuard: Guard;
    /// What holding the write side gives.
    type WriteGuard: Guard + Fenced;

    /// The lock's name.
    fn name(&self) -> &str;

    /// What this lock gives (the write side's re-entry, token, ...).
    fn capabilities(&self) -> Capabilities;

    /// Takes the read side, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached or answers something unexpected.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held (see [`Capabilities::cancel`]).
    fn read(&self) -> impl Future<Output = Result<Self::ReadGuard>> + Send;

    /// Takes the read side if no writer holds it now.
    ///
    /// # Errors
    ///
    /// As [`DistributedRwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedRwLock::read`].
    fn try_read(&self) -> impl Future<Output = Result<Option<Self::ReadGuard>>> + Send;

    /// Takes the read side, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`DistributedRwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedRwLock::read`].
    fn read_timeout(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::ReadGuard>>> + Send;

    /// Takes the write side, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) when the caller holds the
    /// read side; else as [`DistributedRwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedRwLock::read`].
    fn write(&self) -> impl Future<Output = Result<Self::WriteGuard>> + Send;

    /// Takes the write side if nobody holds the lock now.
    ///
    /// # Errors
    ///
    /// As [`DistributedRwLock::write`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedRwLock::read`].
    fn try_write(&self) -> impl Future<Output = Result<Option<Self::WriteGuard>>> + Send;

    /// Takes the write side, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`DistributedRwLock::write`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedRwLock::read`].
    fn write_timeout(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::WriteGuard>>> + Send;
}

/// A counting semaphore: at most its number of permits are out at once.
///
/// How a semaphore gets its permits differs per store (set once by an administrator,
/// fixed when the handle is made); acquiring is the same everywhere.
///
/// ```
/// use ferrisson_core::{DistributedSemaphore, Permit};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let pool = store.semaphore("connections", 2)?;
/// let a = pool.acquire().await?;
/// let _b = pool.acquire().await?;
/// assert!(pool.try_acquire().await?.is_none());
/// a.release().await?;
/// assert!(pool.try_acquire().await?.is_some());
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait DistributedSemaphore: Send + Sync {
    /// One permit held.
    type Permit: Permit;

    /// The semaphore's name.
    fn name(&self) -> &str;

    /// What this semaphore gives (permit expiry, waiting, cancel safety).
    fn capabilities(&self) -> Capabilities;

    /// Takes one permit, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`](crate::Error::NotInitialized) when the semaphore has no
    /// permits set; when the store cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no permit taken (see [`Capabilities::cancel`]).
    fn acquire(&self) -> impl Future<Output = Result<Self::Permit>> + Send;

    /// Takes one permit if one is free now.
    ///
    /// # Errors
    ///
    /// As [`DistributedSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedSemaphore::acquire`].
    fn try_acquire(&self) -> impl Future<Output = Result<Option<Self::Permit>>> + Send;

    /// Takes one permit, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`DistributedSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedSemaphore::acquire`].
    fn acquire_timeout(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Permit>>> + Send;
}

/// A permit of a [`DistributedSemaphore`]; given back on drop, best effort.
pub trait Permit: Send + Sync + Sized {
    /// The semaphore's name.
    fn name(&self) -> &str;

    /// Gives the permit back.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached, or the permit had already expired.
    ///
    /// # Cancel safety
    ///
    /// The release may or may not have reached the store when the future is dropped.
    fn release(self) -> impl Future<Output = Result<()>> + Send;
}

/// Leader election: one leader at a time, a fencing token per term.
///
/// ```
/// use ferrisson_core::{DistributedElection, Fenced, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let election = store.election("billing-job")?;
/// let term = election.campaign().await?;
/// assert!(election.try_campaign().await?.is_none());
/// let first = term.fencing_token();
/// term.unlock().await?; // resign
/// let next = election.campaign().await?;
/// assert!(next.fencing_token() > first);
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait DistributedElection: Send + Sync {
    /// One term of leadership; unlocking it resigns.
    type Leadership: Guard + Fenced;

    /// The election's name.
    fn name(&self) -> &str;

    /// What this election gives.
    fn capabilities(&self) -> Capabilities;

    /// Becomes the leader, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached or answers something unexpected.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no leadership behind (see [`Capabilities::cancel`]).
    fn campaign(&self) -> impl Future<Output = Result<Self::Leadership>> + Send;

    /// Becomes the leader if nobody leads now.
    ///
    /// # Errors
    ///
    /// As [`DistributedElection::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedElection::campaign`].
    fn try_campaign(&self) -> impl Future<Output = Result<Option<Self::Leadership>>> + Send;

    /// Becomes the leader, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`DistributedElection::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedElection::campaign`].
    fn campaign_timeout(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Leadership>>> + Send;
}

/// A count-down latch: waiters are let through once the count reaches zero.
///
/// ```
/// use ferrisson_core::DistributedLatch;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let ready = store.count_down_latch("workers-ready", 2)?;
/// ready.count_down().await?;
/// assert_eq!(ready.count().await?, 1);
/// ready.count_down().await?;
/// ready.wait().await?; // open
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait DistributedLatch: Send + Sync {
    /// The latch's name.
    fn name(&self) -> &str;

    /// Counts down by one; returns the count left.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// The count-down may or may not have reached the store when the future is dropped.
    fn count_down(&self) -> impl Future<Output = Result<u64>> + Send;

    /// The count now (zero: open).
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn count(&self) -> impl Future<Output = Result<u64>> + Send;

    /// Waits until the count reaches zero.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    fn wait(&self) -> impl Future<Output = Result<()>> + Send;

    /// Waits at most `wait` until the count reaches zero; `Ok(None)` when it did not.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    fn wait_timeout(&self, wait: Duration) -> impl Future<Output = Result<Option<()>>> + Send;
}
