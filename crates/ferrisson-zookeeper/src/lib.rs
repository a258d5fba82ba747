//! # ferrisson-zookeeper
//!
//! ferrisson's ZooKeeper store: Apache Curator's recipes on the `zookeeper-client`
//! crate, behind ferrisson's store-neutral contract.
//!
//! - [`Lock`]: Curator's `InterProcessMutex` with the same node layout
//!   (`_c_<guid>-lock-<sequence>`, ephemeral sequential, under container parents), so a
//!   Java service using Curator and a Rust one using ferrisson on the same path exclude
//!   each other; reentrant per task, fair, a fencing token (the node's `czxid`), a
//!   lost signal tied to the session.
//! - [`RwLock`]: Curator's `InterProcessReadWriteLock` (`__READ__` and `__WRIT__` nodes
//!   in one queue): writers first in line, downgrade yes, upgrade refused.
//! - [`Semaphore`]: Curator's `InterProcessSemaphoreV2` (a lock, then `lease-` nodes):
//!   waiters queue on the lock, only its holder watches the leases (no herd).
//! - [`Latch`]: a count-down latch (a persistent node holding the count, counted down
//!   by compare-and-set, waited for by a watch).
//! - [`DoubleBarrier`]: Curator's `DistributedDoubleBarrier` (a UUID-named ephemeral
//!   node per member and a `ready` node): `enter` waits until the members are all in,
//!   `leave` until they are all out.
//! - [`Election`]: Curator's `LeaderLatch` (`_c_<guid>-latch-<sequence>`): one leader at
//!   a time, a token per term, `lost()` when the term ends.
//!
//! A hold lasts as long as its node, and its node as long as the client's session: the
//! ensemble deletes it when the session expires, which it does one session timeout
//! after it last heard from the client. The guard's `lost()` fires at once when the
//! node is deleted, the session expires or the connection drops, and at the latest one
//! session timeout after the last request the server answered (counted from when that
//! request was sent, so before the server can expire the session and let another
//! client in). See [`Client`].
//!
//! ```no_run
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ferrisson_core::{DistributedLock, Fenced, Guard};
//!
//! let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181/shop").await?;
//! let lock = client.lock("voucher:42")?;
//! let guard = lock.lock().await?;
//! println!("holding with token {}", guard.fencing_token());
//! guard.unlock().await?;
//! # Ok::<(), ferrisson_core::Error>(()) });
//! ```

mod barrier;
pub mod capabilities;
mod client;
mod election;
mod endpoint;
mod error;
mod latch;
mod lock;
mod path;
mod queue;
mod rwlock;
mod semaphore;

pub use crate::barrier::{BarrierMember, DoubleBarrier};
pub use crate::capabilities::CAPABILITIES;
pub use crate::client::{Client, ClientBuilder, DEFAULT_SESSION_TIMEOUT};
pub use crate::election::{Election, Leadership};
pub use crate::endpoint::Endpoint;
pub use crate::error::ZkError;
pub use crate::latch::Latch;
pub use crate::lock::{Lock, LockGuard};
pub use crate::path::MAX_NAME_LEN;
pub use crate::rwlock::RwLock;
pub use crate::semaphore::{Semaphore, ZkPermit};
pub use ferrisson_core::{
    DistributedElection, DistributedLatch, DistributedLock, DistributedRwLock,
    DistributedSemaphore, Error, Fenced, FencingToken, Guard, Lease, Permit, Result,
};
pub use zookeeper_client;

/// The store's name in URLs' error messages, metrics and the capability table.
pub const STORE: &str = "zookeeper";
