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
//! | [`Election`] | leader election: one leader at a time, a fencing token per term, observers of every change |
//! | [`RateLimiter`] | a token bucket shared by every client, on the server's clock |
//! | [`MultiLock`], [`Redlock`] | all-or-nothing over several locks; majority locking over independent servers |
//! | [`IdGenerator`] | 64-bit ids: seconds since 2022 and a per-day counter, one round trip per block |
//! | [`Client::fenced_set`] | the storage-side check that makes fencing tokens useful |
//!
//! ## One grid for every primitive
//!
//! The same idea has the same name everywhere. Every `try_*` returns `Ok(None)` when the
//! primitive is taken, every `*_timeout` returns `Ok(None)` when the wait ran out
//! (contention and time-outs are not errors); every lease is a [`Lease`] given to
//! `with_lease`; every guard that has a token says so with `fencing_token()`; every guard
//! or permit that can lapse tells how long it is valid with `is_held()`, `remaining()` and
//! `lost()`; every snapshot is `<Kind>Info`, carries the `name`, and calls a remaining
//! time in Redis `ttl`. The lock guards with a token implement [`Guard`] and their locks
//! [`DistributedLock`].
//!
//! | primitive | constructor | acquire | lease setter (default) | token | validity | release | admin | snapshot |
//! |---|---|---|---|---|---|---|---|---|
//! | [`Lock`] | `client.lock(name)` | `lock`, `try_lock`, `lock_timeout` | `with_lease` (watchdog) | `fencing_token()` | `is_held`, `remaining`, `lost` | `unlock()` | `inspect`, `force_unlock`, `is_locked`, `hold_count`, `ttl` | [`LockInfo`] |
//! | [`FairLock`] | `client.fair_lock(name)` | `lock`, `try_lock`, `lock_timeout` | `with_lease` (watchdog) | `fencing_token()` | `is_held`, `remaining`, `lost` | `unlock()` | `inspect`, `force_unlock`, `is_locked` | [`FairLockInfo`] |
//! | [`RwLock`] | `client.rwlock(name)` | `read`, `try_read`, `read_timeout`; `write`, `try_write`, `write_timeout` | `with_lease` (watchdog) | write guard: `fencing_token()`; read guard: none | `is_held`, `remaining`, `lost` | `unlock()` | `inspect`, `force_unlock` | [`RwLockInfo`] |
//! | [`SimpleLock`] | `client.simple_lock(name)` | `lock`, `try_lock`, `lock_timeout` | `with_lease` (fixed 30 s) | `fencing_token()` | `is_held`, `remaining`, `lost` | `unlock()` | `inspect`, `force_unlock` | [`SimpleLockInfo`] |
//! | [`Redlock`] | `Redlock::new(&clients, name)` | `lock`, `try_lock`, `lock_timeout` | `with_lease` (fixed 10 s) | `fencing_token()` | `is_held`, `remaining`, `lost`; `extend` | `unlock()` | `inspect`, `force_unlock` | [`RedlockInfo`] |
//! | [`MultiLock`] | `MultiLock::new(locks)` | `lock`, `try_lock`, `lock_timeout` | each member's own | `fencing_tokens()`, one per member | `is_held`, `remaining`, `lost` (over all members) | `unlock()` | `inspect` | [`MultiLockInfo`] |
//! | [`Semaphore`] | `client.semaphore(name)` | `acquire`, `try_acquire`, `acquire_timeout`; `acquire_many`, `try_acquire_many`, `acquire_many_timeout` | none: permits do not expire | none | none | `release()` | `try_set_permits`, `set_permits`, `add_permits`, `drain`, `available_permits`, `delete` | [`SemaphoreInfo`] |
//! | [`ExpirableSemaphore`] | `client.expirable_semaphore(name)` | as [`Semaphore`] (`*_many` give one permit per id) | `with_lease` (watchdog) | none | per permit: `is_held`, `remaining`, `lost` | `release()` | as [`Semaphore`], and `release(id)`, `update_lease(id, lease)` | [`ExpirableSemaphoreInfo`] |
//! | [`CountDownLatch`] | `client.count_down_latch(name)` | `wait`, `wait_timeout` | none | none | none | `count_down()` | `try_set_count`, `count`, `delete` | [`CountDownLatchInfo`] |
//! | [`Election`] | `client.election(name)` | `campaign`, `try_campaign`, `campaign_timeout` (and `lock`, ... as a [`DistributedLock`]) | `with_lease` (watchdog) | `fencing_token()`, one per term | `is_held`, `remaining`, `lost` | `resign()` | `leader`, `observe` | [`LeaderInfo`] |
//! | [`RateLimiter`] | `client.rate_limiter(name, rate)` | `acquire(n)`, `try_acquire(n)`, `acquire_timeout(n, wait)` | none | none | none | none: permits are spent | none | none |
//!
//! The rate limiter is the one exception to `Ok(None)`: `try_acquire` and
//! `acquire_timeout` answer a [`RateDecision`], since a denied caller needs to know when
//! to come back.
//!
//! Why [`MultiLockGuard`] has no single token and does not implement [`Guard`]: its
//! members guard different resources. Why a read guard has no token: see the safety
//! notes in the repository's `docs/SAFETY.md`.
//!
//! All of them share one [`Client`]: one multiplexed, self-reconnecting connection, one
//! subscription that wakes every local waiter, one watchdog task.
//!
//! ```no_run
//! use std::time::Duration;
//! use ferrisson_redis::{Client, Lease};
//!
//! # async fn demo() -> ferrisson_redis::Result<()> {
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
//! ## Names and namespaces
//!
//! A primitive's name is 1 to [`MAX_NAME_LEN`] bytes of any text without `{` or `}`; a
//! client's namespace is at most [`MAX_NAMESPACE_LEN`] bytes, also without braces. Braces
//! are refused, not escaped: Redis Cluster hashes the text between a key's first `{` and
//! the next `}`, so a brace in a name or namespace would send a primitive's keys to
//! different slots. Every refusal is [`Error::InvalidArgument`] naming the rule.
//!
//! ## Sentinel and Cluster
//!
//! The URL says the topology; every primitive works the same on each:
//!
//! - `redis://host:6379`: one server.
//! - `redis+sentinel://s1,s2,s3/shop`: the master the sentinels name for `shop`. When the
//!   connection to it drops or it answers `READONLY` (it was demoted), the client asks the
//!   sentinels again and moves its commands and its wake-up subscriptions to the new
//!   master.
//! - `redis+cluster://n1,n2,n3`: a Redis Cluster. A primitive's keys share one hash slot,
//!   so each of its scripts runs on that slot's master; `MOVED` and `ASK` are followed,
//!   wake-ups travel on shard channels (`SPUBLISH`) subscribed on the slot's master and
//!   follow the slot when it moves.
//!
//! While a master fails over, a waiting acquire rides out the errors (connection lost,
//! `READONLY`, `CLUSTERDOWN`, `TRYAGAIN`, ...) for up to the client's watchdog lease and
//! then reports the last one; a `try_*` reports it at once. Redis replicates
//! asynchronously, so a grant the old master did not pass on before it failed is
//! forgotten by the new one, which may grant the lock again: two holders, the older one
//! refused by its fencing token where the storage checks it.
//! [`ClientBuilder::replica_acks`] closes most of that window by counting a grant or a
//! renewal only once enough replicas have it (`docs/SAFETY.md` has the measured cases);
//! [`ClientBuilder::aof_acks`] counts it only once the append-only files of the master
//! and/or replicas have it on disk (`WAITAOF`, Redis 7.2 or newer), so that it also
//! survives their restarts.
//!
//! ```no_run
//! # async fn demo() -> ferrisson_redis::Result<()> {
//! use std::time::Duration;
//!
//! let client = ferrisson_redis::Client::builder("redis+sentinel://10.0.0.1,10.0.0.2,10.0.0.3/shop")
//!     .replica_acks(1, Duration::from_millis(100))
//!     .connect()
//!     .await?;
//! let orders = client.lock("orders")?;
//! # let _ = orders; Ok(()) }
//! ```
//!
//! ## TLS
//!
//! A `rediss://` URL connects over TLS (rustls with the `ring` provider). By default the
//! server is verified against the system's root certificates; [`TlsConfig`] sets the CA
//! to verify it with, a client certificate for servers with `tls-auth-clients yes`, or
//! the insecure mode for tests:
//!
//! ```no_run
//! # async fn demo(ca_pem: Vec<u8>, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> ferrisson_redis::Result<()> {
//! use ferrisson_redis::{Client, TlsConfig};
//!
//! let tls = TlsConfig::new()
//!     .ca_certificates(ca_pem)
//!     .client_certificate(cert_pem, key_pem);
//! let client = Client::builder("rediss://redis.internal:6380").tls(tls).connect().await?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! Needs Redis 7.0 or later ([`Client::connect`] fails with
//! [`RedisStoreError::UnsupportedServer`] otherwise): the scripts declare Redis 7 script flags, so
//! that what is held stays renewable and releasable while the server's memory is full
//! (under `maxmemory-policy noeviction`, the recommended policy), and every acquire is
//! refused until memory is freed.

#![warn(clippy::missing_errors_doc)]

/// The redis-rs crate this one is built on, for [`Client::commands`] and its replies:
/// depend on it through here to get the same version.
pub use redis;

mod api;
mod backend;
pub mod capabilities;
mod id;
pub mod inspect;
mod locks;
mod observe;
mod primitive;
mod sync;

pub use crate::api::error::{RedisStoreError, STORE};
pub use crate::backend::acks::AofAcks;
pub use crate::backend::client::{Client, ClientBuilder, DEFAULT_WATCHDOG_LEASE};
pub use crate::backend::commands::Commands;
pub use crate::backend::ids::{OwnerId, PermitId};
pub use crate::backend::keys::{MAX_NAME_LEN, MAX_NAMESPACE_LEN};
pub use crate::backend::tls::TlsConfig;
pub use crate::id::{
    DEFAULT_MAX_BLOCK, DEFAULT_MIN_BLOCK, DecodedId, ID_EPOCH_UNIX_SECONDS, IdGenerator,
    IdGeneratorBuilder, MAX_BLOCK, MAX_ID_PREFIX_LEN, MAX_ID_SECONDS, MAX_IDS_PER_CALL,
};
pub use crate::locks::fair::{
    DEFAULT_WAITER_KEEPALIVE, FairLock, FairLockGuard, FairLockInfo, FairWaiter,
};
pub use crate::locks::lock::{Lock, LockGuard, LockInfo};
pub use crate::locks::multi::{InspectMembers, MultiLockInfo};
pub use crate::locks::redlock::{
    DEFAULT_REDLOCK_LEASE, DEFAULT_REDLOCK_RETRY_DELAY, DEFAULT_REDLOCK_RETRY_JITTER, Redlock,
    RedlockGuard, RedlockInfo, RedlockNodeInfo,
};
pub use crate::locks::rwlock::{
    RwHolder, RwLock, RwLockInfo, RwLockMode, RwLockReadGuard, RwLockWriteGuard,
};
pub use crate::locks::simple::{DEFAULT_SIMPLE_LEASE, SimpleLock, SimpleLockGuard, SimpleLockInfo};
pub use crate::observe::metrics;
pub use crate::sync::election::{
    Election, ElectionInfo, LeaderChange, LeaderInfo, LeaderObserver, Leadership,
    MAX_CANDIDATE_ID_LEN,
};
pub use crate::sync::expirable_semaphore::{
    ExpirablePermit, ExpirableSemaphore, ExpirableSemaphoreInfo, HeldPermit,
    MAX_EXPIRABLE_PERMITS_PER_CALL,
};
pub use crate::sync::latch::{CountDownLatch, CountDownLatchInfo, DEFAULT_LATCH_RECHECK};
pub use crate::sync::rate_limiter::{MAX_RATE_PER_SECOND, Rate, RateDecision, RateLimiter};
pub use crate::sync::semaphore::{
    DEFAULT_SEMAPHORE_RECHECK, Semaphore, SemaphoreInfo, SemaphorePermit,
};
pub use ferrisson_core::{
    DistributedElection, DistributedLatch, DistributedLock, DistributedRwLock,
    DistributedSemaphore, Error, Fenced, FencedWrite, FencingToken, Guard, Lease,
    MULTI_LOCK_BUDGET_PER_LOCK, MultiLock, MultiLockGuard, Permit, Result, StoreError,
};

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
