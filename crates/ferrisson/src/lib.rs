//! # ferrisson
//!
//! Distributed locks and synchronizers for async Rust (tokio), on the store you run: one
//! vocabulary (guard, lease, fencing token, `lost()`, typed errors) on Redis (one server,
//! Sentinel, Cluster) and an in-process store, with more stores behind the same contract.
//!
//! [`connect`] picks the store from the URL and returns a [`Client`] whose locks and
//! elections implement the contract ([`DistributedLock`], [`Guard`],
//! [`DistributedElection`]); each store's own crate stays reachable for its own options
//! and primitives ([`redis`]: fair locks, read-write locks, semaphores, Redlock, ids, the
//! inspector, ...).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ferrisson::{DistributedLock, Guard};
//!
//! // "redis://127.0.0.1:6379", "redis+sentinel://s1,s2,s3/shop", "memory://tests", ...
//! let client = ferrisson::connect("memory://readme").await?;
//! let lock = client.lock("voucher:42")?;
//! let guard = lock.lock().await?;
//! if let Some(token) = guard.fencing_token() {
//!     println!("write with token {token}"); // older tokens are refused by the resource
//! }
//! guard.unlock().await?;
//! # Ok::<(), ferrisson::Error>(()) }).unwrap();
//! ```
//!
//! What each store gives (re-entry, fairness, lease or session, token and its source,
//! when `lost()` fires, how waiters wake, what cancelling costs) is declared in code:
//! [`capabilities()`] lists it for every store of this build, and the README's table is
//! rendered from it.
//!
//! ## Features
//!
//! - `redis` (default): the Redis store, [`redis`].
//! - `postgres`, `mysql`: the lock table on PostgreSQL, on MySQL/MariaDB (`sql`, the
//!   `ferrisson-sql` crate; either feature compiles both drivers).
//! - `etcd`: the etcd store (`etcd://HOST:PORT[,HOST:PORT...]`), `ferrisson::etcd`;
//!   its locks queue with `etcdctl lock` on the same name.
//! - `zookeeper`: the ZooKeeper store, [`zookeeper`]
//!   (`zk://HOST:PORT[,HOST:PORT...][/CHROOT]`).
//!
//! The in-process store ([`memory`]) is always there.

#![warn(clippy::missing_errors_doc)]

#[macro_use]
mod dispatch;

mod builder;
mod client;
mod election;
mod lock;
mod rwlock;
mod semaphore;
mod stores;

pub use crate::builder::ClientBuilder;
pub use crate::client::{Client, connect};
pub use crate::election::{AnyElection, AnyLeadership};
pub use crate::lock::{AnyGuard, AnyLock};
pub use crate::rwlock::{AnyReadGuard, AnyRwLock, AnyWriteGuard};
#[cfg(feature = "redis")]
pub use crate::semaphore::RedisSemaphore;
pub use crate::semaphore::{AnyPermit, AnySemaphore};
pub use crate::stores::StoreKind;
pub use ferrisson_core::capabilities::{self, Capabilities};
pub use ferrisson_core::{
    DistributedElection, DistributedLatch, DistributedLock, DistributedRwLock,
    DistributedSemaphore, Error, Fenced, FencedWrite, FencingToken, Guard, Lease,
    MULTI_LOCK_BUDGET_PER_LOCK, MultiLock, MultiLockGuard, Permit, Result, StoreError, memory,
};

/// The Redis store: its client and builder, every Redis primitive, ids and the
/// inspector (the `ferrisson-redis` crate).
#[cfg(feature = "redis")]
pub use ferrisson_redis as redis;

/// The etcd store: its client and builder, lock, election and fenced put (the
/// `ferrisson-etcd` crate).
#[cfg(feature = "etcd")]
pub use ferrisson_etcd as etcd;
/// The PostgreSQL and MySQL/MariaDB stores: the client, its builder and the lock table
/// (the `ferrisson-sql` crate).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use ferrisson_sql as sql;
/// The ZooKeeper store: its client, Curator-compatible lock and election (the
/// `ferrisson-zookeeper` crate).
#[cfg(feature = "zookeeper")]
pub use ferrisson_zookeeper as zookeeper;

/// Metric names, labels and spans, the same for every store.
pub mod metrics {
    pub use ferrisson_core::observe::metrics::*;
}

/// Every primitive's declaration of what it gives, for every store of this build, in the
/// order of the README's capability table.
///
/// ```
/// let all = ferrisson::capabilities();
/// assert!(all.iter().any(|c| c.store == "memory"));
/// # #[cfg(feature = "redis")]
/// assert!(all.iter().any(|c| c.store == "redis" && c.primitive == "Lock"));
/// ```
pub fn capabilities() -> Vec<Capabilities> {
    let mut all = Vec::new();
    #[cfg(feature = "redis")]
    all.extend_from_slice(ferrisson_redis::capabilities::CAPABILITIES);
    #[cfg(feature = "postgres")]
    all.extend_from_slice(ferrisson_sql::capabilities::POSTGRES);
    #[cfg(feature = "mysql")]
    all.extend_from_slice(ferrisson_sql::capabilities::MYSQL);
    #[cfg(feature = "etcd")]
    all.extend_from_slice(ferrisson_etcd::CAPABILITIES);
    #[cfg(feature = "zookeeper")]
    all.extend_from_slice(ferrisson_zookeeper::CAPABILITIES);
    all.extend_from_slice(ferrisson_core::memory::CAPABILITIES);
    all
}
