//! The contract every lock offers, whatever stores it: how to acquire it, what its guard
//! tells you, and the [`Lease`], [`FencingToken`] and [`Error`] they share.
//!
//! The Redis locks of this crate implement it, and a lock on another store (ZooKeeper's
//! ephemeral sequential nodes, an etcd lease, a SQL advisory lock) implements the same
//! two traits, so code written against them moves between stores unchanged:
//!
//! - **acquire** ([`DistributedLock`]): `lock` waits as long as it takes, `try_lock` never
//!   waits, `lock_timeout` waits at most a given time; contention is `Ok(None)`, not an
//!   error;
//! - **hold** ([`Guard`]): the lock's `name`; a [`FencingToken`] that grows with every new
//!   holder (the Redis server's clock with a per-slot high-water mark, ZooKeeper's
//!   sequence number or zxid, etcd's create revision, a SQL sequence); `is_held`,
//!   `remaining` and `lost`, which say how long the hold is known to be valid (a lease
//!   renewed by a watchdog, a session kept alive, or, for a lock tied to a database
//!   connection, as long as the connection lives: `remaining` is then [`Duration::MAX`]);
//!   `unlock` to release, and a best-effort release on drop.
//!
//! [`Lease`]: crate::Lease
//! [`FencingToken`]: crate::FencingToken
//! [`Error`]: crate::Error

use std::future::Future;
use std::time::Duration;

use crate::api::error::Result;
use crate::api::fencing::FencingToken;

pub(crate) mod error;
pub(crate) mod fencing;
pub(crate) mod lease;

/// A lock that can be acquired: the acquire half of the contract.
///
/// Implemented by [`Lock`](crate::Lock), [`FairLock`](crate::FairLock),
/// [`SimpleLock`](crate::SimpleLock), [`Redlock`](crate::Redlock) and
/// [`Election`](crate::Election); write code against it
/// to stay independent of the kind of lock and of the store behind it.
///
/// ```no_run
/// use ferrisson_redis::{DistributedLock, Guard};
///
/// /// Runs `work` under any lock, passing it the hold's fencing token.
/// async fn exclusively<L: DistributedLock>(lock: &L, work: impl AsyncFnOnce(u64)) -> ferrisson_redis::Result<()> {
///     let guard = lock.lock().await?;
///     work(guard.fencing_token().get()).await;
///     guard.unlock().await
/// }
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// exclusively(&client.lock("report")?, async |token| println!("token {token}")).await?;
/// exclusively(&client.fair_lock("report-fair")?, async |_| {}).await?;
/// # Ok(()) }
/// ```
pub trait DistributedLock: Send + Sync {
    /// What holding the lock gives.
    type Guard: Guard;

    /// The lock's name.
    fn name(&self) -> &str;

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached or answers something unexpected.
    ///
    /// # Cancel safety
    ///
    /// Every implementation is cancel safe: dropping the future leaves nothing held.
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

/// Proof of holding a lock: the hold half of the contract.
///
/// Every guard also releases on drop, best effort and without blocking; `unlock` is the
/// checked release.
///
/// ```no_run
/// use ferrisson_redis::Guard;
///
/// /// Writes while the hold lasts; gives up the moment it is lost.
/// async fn write_while_held(guard: impl Guard) -> ferrisson_redis::Result<()> {
///     tokio::select! {
///         () = guard.lost() => eprintln!("{} lost: stop writing", guard.name()),
///         () = tokio::time::sleep(guard.remaining() / 2) => {}
///     }
///     guard.unlock().await
/// }
/// ```
pub trait Guard: Send + Sync + Sized {
    /// The name of the lock held.
    fn name(&self) -> &str;

    /// The token of this hold: greater than every earlier holder's. Pass it with every
    /// write to the protected resource and let the resource refuse older tokens.
    fn fencing_token(&self) -> FencingToken;

    /// True while the hold is known to be valid.
    fn is_held(&self) -> bool;

    /// How long the hold stays valid without another renewal; zero once lost;
    /// [`Duration::MAX`] for a hold with no expiry of its own.
    fn remaining(&self) -> Duration;

    /// Resolves when the hold is no longer valid.
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
    /// hold then ends with its lease at worst.
    fn unlock(self) -> impl Future<Output = Result<()>> + Send;
}
