//! # ferrisson
//!
//! Distributed locks and synchronizers on Redis for async Rust (tokio).
//!
//! | primitive | what it is |
//! |---|---|
//! | [`Lock`] | reentrant lock; a watchdog renews it while you hold it; a [`FencingToken`] per holder; a lost-lock signal ([`LockGuard::lost`]); waiters woken by the release, never polling |
//! | [`SimpleLock`] | the classic `SET NX PX` + atomic compare-and-delete lock, not reentrant |
//! | [`FairLock`] | reentrant and strictly FIFO; dead waiters evicted by server time |
//! | [`RwLock`] | many readers or one writer, both reentrant; downgrade allowed, upgrade refused |
//! | [`Semaphore`], [`ExpirableSemaphore`] | counting semaphores; the second with per-permit leases |
//! | [`CountDownLatch`] | waiters woken by the final count-down |
//! | [`MultiLock`], [`Redlock`] | all-or-nothing over several locks; majority locking over independent servers |
//! | [`IdGenerator`] | 64-bit ids in the seeds' layout, one round trip per block |
//! | [`Client::fenced_set`] | the storage-side check that makes fencing tokens useful |
//!
//! All of them share one [`Client`]: one multiplexed, self-reconnecting connection, one
//! subscription that wakes every local waiter, one watchdog task.
//!
//! ```no_run
//! use std::time::Duration;
//! use ferrisson::{Client, Lease};
//!
//! # async fn demo() -> ferrisson::Result<()> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("voucher:42")?;
//!
//! // Waits (without polling) until the lock is free; renewed while the guard lives.
//! let guard = lock.lock().await?;
//! let token = guard.fencing_token();
//! client.fenced_set("voucher:42:stock", b"199", token).await?;
//! guard.unlock().await?;
//!
//! // A fixed lease and a bounded wait.
//! let lock = lock.with_lease(Lease::Fixed(Duration::from_secs(10)))?;
//! if let Some(guard) = lock.lock_timeout(Duration::from_millis(500)).await? {
//!     guard.unlock().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! Every key of a primitive shares one hash tag (`{name}`), so the layout also works on
//! Redis Cluster. See the repository's `docs/` for the guarantees and their limits.
//!
//! Needs Redis 7.0 or later ([`Client::connect`] fails with
//! [`Error::UnsupportedServer`] otherwise): the scripts declare Redis 7 script flags, so
//! that what is held stays renewable and releasable while the server's memory is full
//! (under `maxmemory-policy noeviction`, the recommended policy), and every acquire is
//! refused until memory is freed.

#![warn(clippy::missing_errors_doc)]

mod acquire;
mod cleanup;
mod client;
mod error;
mod expirable_semaphore;
mod fair_lock;
mod fence;
mod holds;
mod id;
mod keys;
mod latch;
mod lease;
mod lock;
mod multi_lock;
mod owner;
mod pubsub;
mod redlock;
mod release;
mod rwlock;
mod scripts;
mod semaphore;
mod simple_lock;
mod watchdog;

pub use client::{Client, ClientBuilder, DEFAULT_WATCHDOG_LEASE};
pub use error::{Error, Result};
pub use expirable_semaphore::{
    ExpirablePermit, ExpirableSemaphore, ExpirableSemaphoreInfo, HeldPermit, PermitId,
};
pub use fair_lock::{DEFAULT_WAITER_KEEPALIVE, FairLock, FairLockGuard, FairLockInfo, FairWaiter};
pub use fence::{FencedWrite, FencingToken};
pub use id::{
    DEFAULT_MAX_BLOCK, DEFAULT_MIN_BLOCK, DecodedId, ID_EPOCH_UNIX_SECONDS, IdGenerator,
    IdGeneratorBuilder, MAX_BLOCK, MAX_ID_PREFIX_LEN, MAX_ID_SECONDS, MAX_IDS_PER_CALL,
};
pub use keys::MAX_NAME_LEN;
pub use latch::{CountDownLatch, DEFAULT_LATCH_RECHECK, LatchInfo};
pub use lease::Lease;
pub use lock::{Lock, LockGuard, LockInfo};
pub use multi_lock::{MULTI_LOCK_BUDGET_PER_LOCK, MultiLock, MultiLockGuard, MultiLockMemberState};
pub use owner::OwnerId;
pub use redlock::{
    DEFAULT_REDLOCK_RETRY_DELAY, DEFAULT_REDLOCK_RETRY_JITTER, DEFAULT_REDLOCK_TTL, Redlock,
    RedlockGuard, RedlockNodeState, RedlockState,
};
pub use rwlock::{RwHolder, RwLock, RwLockInfo, RwLockMode, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{DEFAULT_SEMAPHORE_RECHECK, Semaphore, SemaphoreInfo, SemaphorePermit};
pub use simple_lock::{DEFAULT_SIMPLE_LEASE, SimpleLock, SimpleLockGuard};

impl Client {
    /// Counts of the client's internal state: channels with local waiters, live holds
    /// and holds being renewed. Meant for tests and monitoring.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            waiting_channels: self.inner.subscriptions.channel_count(),
            holds: self.inner.holds.len(),
            renewing: self.inner.watchdog.len(),
        }
    }
}

/// A snapshot of a client's internal state, from [`Client::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Channels this client is subscribed to for local waiters.
    pub waiting_channels: usize,
    /// Locks this client holds (one per owner and lock).
    pub holds: usize,
    /// Holds the watchdog is renewing.
    pub renewing: usize,
}
