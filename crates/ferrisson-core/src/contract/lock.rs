//! The lock contract: how to acquire a lock, and what its guard tells you.

use std::future::Future;
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::fencing::FencingToken;

/// A lock that can be acquired: the acquire half of the contract.
///
/// `lock` waits as long as it takes, `try_lock` never waits, `lock_timeout` waits at most
/// a given time; contention is `Ok(None)`, not an error. What else an implementation
/// gives (re-entry, fairness, how it expires, its fencing token, how soon `lost()` fires,
/// what cancelling an acquire costs) it declares in [`DistributedLock::capabilities`].
///
/// ```
/// use ferrisson_core::{DistributedLock, Guard};
///
/// /// Runs `work` under any lock, on any store.
/// async fn exclusively<L: DistributedLock>(lock: &L, work: impl AsyncFnOnce()) -> ferrisson_core::Result<()> {
///     let guard = lock.lock().await?;
///     work().await;
///     guard.unlock().await
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// exclusively(&store.lock("report")?, async || println!("alone")).await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait DistributedLock: Send + Sync {
    /// What holding the lock gives.
    type Guard: Guard;

    /// The lock's name.
    fn name(&self) -> &str;

    /// What this lock gives: re-entry, fairness, expiry, token, lost signal, waiting,
    /// cancel safety.
    fn capabilities(&self) -> Capabilities;

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached or answers something unexpected.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held; what that costs (an undo sent to the
    /// store, a connection closed) each implementation states in its
    /// [`Capabilities::cancel`].
    fn lock(&self) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Acquires the lock if it is free now; `Ok(None)` when another owner holds it.
    ///
    /// # Errors
    ///
    /// As [`DistributedLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::lock`].
    fn try_lock(&self) -> impl Future<Output = Result<Option<Self::Guard>>> + Send;

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// # Errors
    ///
    /// As [`DistributedLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::lock`].
    fn lock_timeout(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send;
}

/// Proof of holding a lock, a permit or a leadership: the hold half of the contract.
///
/// `is_held`, `remaining` and `lost` say how long the hold is known to be valid: a lease
/// renewed by a watchdog, a session kept alive, a connection checked by a heartbeat.
/// Every guard also releases on drop, best effort and without blocking; `unlock` is the
/// checked release. A guard whose store hands out fencing tokens also implements
/// [`Fenced`].
///
/// ```
/// use ferrisson_core::{DistributedLock, Guard};
///
/// /// Works while the hold lasts; gives up the moment it is lost.
/// async fn work_while_held(guard: impl Guard) -> ferrisson_core::Result<()> {
///     tokio::select! {
///         () = guard.lost() => eprintln!("{} lost: stop writing", guard.name()),
///         () = tokio::time::sleep(guard.remaining() / 2) => {}
///     }
///     guard.unlock().await
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::time::Duration;
/// use ferrisson_core::Lease;
///
/// let store = ferrisson_core::memory::MemoryStore::new();
/// // A fixed lease: the memory store's default hold lasts until released.
/// let lock = store.lock("report")?.with_lease(Lease::Fixed(Duration::from_millis(50)))?;
/// work_while_held(lock.lock().await?).await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait Guard: Send + Sync + Sized {
    /// The name of the lock held.
    fn name(&self) -> &str;

    /// True while the hold is known to be valid.
    fn is_held(&self) -> bool;

    /// How long the hold is known to stay valid without another renewal (or, for a
    /// session or connection, without another successful heartbeat); zero once lost.
    fn remaining(&self) -> Duration;

    /// Resolves when the hold is no longer known to be valid.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    fn lost(&self) -> impl Future<Output = ()> + Send;

    /// Releases the hold.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`](crate::Error::LeaseExpired) when the hold had already
    /// ended, [`Error::NotOwner`](crate::Error::NotOwner) when another owner holds the
    /// lock now, or a store error.
    ///
    /// # Cancel safety
    ///
    /// The release may or may not have reached the store when the future is dropped; the
    /// hold then ends with its lease or session at worst.
    fn unlock(self) -> impl Future<Output = Result<()>> + Send;
}

/// A guard with a fencing token: greater than every earlier holder's, the same for every
/// re-entry. Pass it with every write to the protected resource and let the resource
/// refuse older tokens.
///
/// ```
/// use ferrisson_core::{DistributedLock, Fenced, Guard};
///
/// async fn write_fenced(guard: impl Guard + Fenced) -> ferrisson_core::Result<u64> {
///     let token = guard.fencing_token().get();
///     guard.unlock().await?;
///     Ok(token)
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let lock = store.lock("ledger")?;
/// let first = write_fenced(lock.lock().await?).await?;
/// let second = write_fenced(lock.lock().await?).await?;
/// assert!(second > first);
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
pub trait Fenced {
    /// The token of this hold.
    fn fencing_token(&self) -> FencingToken;
}
