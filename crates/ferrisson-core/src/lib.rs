//! # ferrisson-core
//!
//! The contract every ferrisson store implements, and what the stores share. Depend on
//! the `ferrisson` crate to use the locks; depend on this one to write code that takes
//! any store's locks, or to write a store.
//!
//! - **The contract** ([`DistributedLock`], [`Guard`], [`Fenced`]; and the families
//!   [`DistributedRwLock`], [`DistributedSemaphore`], [`DistributedElection`],
//!   [`DistributedLatch`]): `x` waits, `try_x` never waits, `x_timeout` waits at most a
//!   given time, contention is `Ok(None)`; every guard says how long it is known to be
//!   valid (`is_held`, `remaining`, `lost`) and releases with `unlock` (or on drop); a
//!   guard with a fencing token implements [`Fenced`].
//! - **What each store gives**, declared in code: [`Capabilities`] (re-entry, fairness,
//!   lease or session, token and its source, when `lost()` fires, event-driven or polled
//!   waiting, what cancelling costs), rendered as the README's table by
//!   [`capabilities::markdown_table`].
//! - **What stores share**: [`Lease`], [`FencingToken`], the store-neutral [`Error`] (a
//!   store's own error comes boxed as [`Error::Store`], through [`StoreError`]), a
//!   hold's validity and lost signal ([`hold::HoldState`]), the metrics and spans with a
//!   `store` label ([`observe`]), re-entry per task ([`TaskKey`]), [`MultiLock`] over
//!   any lock.
//! - **A reference store** in memory ([`memory::MemoryStore`]): the contract without a
//!   server, for tests of code that takes locks and as the worked example of a store.
//!
//! ```
//! use ferrisson_core::{DistributedLock, Fenced, Guard};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = ferrisson_core::memory::MemoryStore::new();
//! let lock = store.lock("voucher:42")?;
//! let guard = lock.lock().await?;
//! println!("holding {} with token {}", guard.name(), guard.fencing_token());
//! guard.unlock().await?;
//! # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
//! ```

#![warn(clippy::missing_errors_doc)]

pub mod capabilities;
pub mod cleanup;
mod contract;
mod error;
mod fencing;
pub mod hold;
mod lease;
pub mod memory;
mod multi;
pub mod observe;
mod task;

pub use crate::capabilities::Capabilities;
pub use crate::contract::families::{
    DistributedElection, DistributedLatch, DistributedRwLock, DistributedSemaphore, Permit,
};
pub use crate::contract::lock::{DistributedLock, Fenced, Guard};
pub use crate::error::{Error, Result, StoreError};
pub use crate::fencing::{FencedWrite, FencingToken};
pub use crate::lease::{Lease, validate_lease};
pub use crate::multi::{MULTI_LOCK_BUDGET_PER_LOCK, MultiLock, MultiLockGuard};
pub use crate::task::TaskKey;
