//! The reference store: the contract implemented in process memory, without a server.
//!
//! [`MemoryStore`] holds locks, read-write locks, semaphores, elections and latches for
//! the tasks of one process, with the same semantics as the network stores: re-entry per
//! task, fencing tokens that grow with every holder, fixed leases that lapse (and fire
//! `lost()`), a force-unlock that ends a hold behind its holder's back, waiters woken by
//! the release. Use it to test code written against the contract
//! ([`DistributedLock`](crate::DistributedLock), ...) without a Redis, and as the worked
//! example of a store (`docs/ARCHITECTURE.md`). It is not distributed: two processes,
//! or two `MemoryStore::new()`s, share nothing.
//!
//! ```
//! use ferrisson_core::{DistributedLock, Fenced, Guard};
//! use ferrisson_core::memory::MemoryStore;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let lock = store.lock("voucher:42")?;
//! let guard = lock.lock().await?;
//! assert!(lock.try_lock().await?.is_some()); // the same task re-enters
//! let other = tokio::spawn({
//!     let lock = lock.clone();
//!     async move { lock.try_lock().await.map(|g| g.is_some()) }
//! });
//! assert!(!other.await.unwrap()?); // another task does not
//! println!("token {}", guard.fencing_token());
//! guard.unlock().await?;
//! # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
//! ```

mod election;
mod latch;
mod lock;
mod rwlock;
mod semaphore;
mod slots;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use election::{MemoryElection, MemoryLeadership};
pub use latch::MemoryLatch;
pub use lock::{MemoryLock, MemoryLockGuard};
pub use rwlock::{MemoryReadGuard, MemoryRwLock, MemoryWriteGuard};
pub use semaphore::{MemoryPermit, MemorySemaphore};

use crate::capabilities::{CancelSafety, Capabilities, Fencing, Reentry, Validity, Wait};
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::observe::{ClassFn, Classes};

/// The store's name in URLs (`memory://`), metrics and the capability table.
pub const STORE: &str = "memory";

/// Longest name a memory primitive takes, in bytes (the same bound as Redis's).
pub const MAX_NAME_LEN: usize = 1024;

const VALIDITY: Validity = Validity::Lease(
    "a fixed lease lapses on this process's clock; a watchdog hold lasts until released",
);
const TOKEN: Fencing = Fencing::Token("a per-name counter in the store; never goes back");
const LOST: &str = "at once when force-unlocked; at the end of a fixed lease";
const WAIT: Wait = Wait::EventDriven("the release wakes the waiters of that name");

/// What each memory primitive gives, in the order of the capability table.
pub const CAPABILITIES: &[Capabilities] = &[
    Capabilities::new(
        STORE,
        "MemoryLock",
        Reentry::PerTask,
        false,
        VALIDITY,
        TOKEN,
        LOST,
        WAIT,
        CancelSafety::Safe,
    ),
    Capabilities::new(
        STORE,
        "MemoryRwLock",
        Reentry::PerTask,
        false,
        VALIDITY,
        Fencing::Token("write side: a per-name counter in the store; read side: none"),
        LOST,
        WAIT,
        CancelSafety::Safe,
    ),
    Capabilities::new(
        STORE,
        "MemorySemaphore",
        Reentry::None,
        false,
        Validity::UntilReleased,
        Fencing::None,
        "never: a permit lasts until released",
        WAIT,
        CancelSafety::Safe,
    ),
    Capabilities::new(
        STORE,
        "MemoryElection",
        Reentry::None,
        false,
        VALIDITY,
        Fencing::Token("a per-election counter: one token per term"),
        LOST,
        WAIT,
        CancelSafety::Safe,
    ),
];

/// An in-process store; clones share its state. See the module docs.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

/// Everything one store holds; each primitive keeps its own table.
pub(crate) struct Shared {
    pub(crate) classes: Classes,
    pub(crate) locks: Mutex<lock::LockTable>,
    pub(crate) elections: Mutex<lock::LockTable>,
    pub(crate) rwlocks: Mutex<rwlock::RwTable>,
    pub(crate) semaphores: Mutex<semaphore::SemaphoreTable>,
    pub(crate) latches: Mutex<latch::LatchTable>,
    /// The last fencing token handed out per name, kept after the holds end so that
    /// tokens never go back.
    fences: Mutex<HashMap<String, u64>>,
}

impl Shared {
    /// The next fencing token for `name` (per table: a lock and an election of the same
    /// name count apart).
    pub(crate) fn next_token(&self, table: &str, name: &str) -> FencingToken {
        let mut fences = lock_table(&self.fences);
        let key = format!("{table}\u{0}{name}");
        let last = fences.entry(key).or_insert(0);
        *last += 1;
        FencingToken::new(*last)
    }
}

/// Locks a table, recovering it if a panicking task poisoned it: every table is left
/// consistent between statements.
pub(crate) fn lock_table<T>(table: &Mutex<T>) -> MutexGuard<'_, T> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.lock("a").is_ok());
    /// ```
    pub fn new() -> Self {
        Self::with_classes(None)
    }

    /// An empty store whose metrics carry a `class` label computed by `class_of` from
    /// each primitive's name (see the metrics docs for the cost of classes).
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::with_metrics_class(|name| {
    ///     name.split(':').next().unwrap_or(name).to_owned()
    /// });
    /// assert!(store.lock("orders:1").is_ok());
    /// ```
    pub fn with_metrics_class(class_of: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        Self::with_classes(Some(Arc::new(class_of)))
    }

    fn with_classes(class_of: Option<ClassFn>) -> Self {
        Self {
            shared: Arc::new(Shared {
                classes: Classes::new(STORE, class_of),
                locks: Mutex::default(),
                elections: Mutex::default(),
                rwlocks: Mutex::default(),
                semaphores: Mutex::default(),
                latches: Mutex::default(),
                fences: Mutex::default(),
            }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A reentrant lock named `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name or one longer than
    /// [`MAX_NAME_LEN`] bytes.
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.lock("").is_err());
    /// ```
    pub fn lock(&self, name: &str) -> Result<MemoryLock> {
        MemoryLock::new(self.clone(), name)
    }

    /// A read-write lock named `name`.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::lock`].
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.rwlock("prices").is_ok());
    /// ```
    pub fn rwlock(&self, name: &str) -> Result<MemoryRwLock> {
        MemoryRwLock::new(self.clone(), name)
    }

    /// A semaphore named `name` with `permits` permits. The first handle of a name sets
    /// its permits; a later handle with another count changes them (permits out stay
    /// out).
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::lock`], and [`Error::InvalidArgument`] for zero permits.
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.semaphore("pool", 0).is_err());
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<MemorySemaphore> {
        MemorySemaphore::new(self.clone(), name, permits)
    }

    /// A leader election named `name`.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::lock`].
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.election("billing").is_ok());
    /// ```
    pub fn election(&self, name: &str) -> Result<MemoryElection> {
        MemoryElection::new(self.clone(), name)
    }

    /// A count-down latch named `name`, set to `count` if it does not exist yet.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::lock`].
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.count_down_latch("ready", 3).is_ok());
    /// ```
    pub fn count_down_latch(&self, name: &str, count: u32) -> Result<MemoryLatch> {
        MemoryLatch::new(self.clone(), name, count)
    }
}

/// Checks a primitive's name: 1 to [`MAX_NAME_LEN`] bytes.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "name must be at most {MAX_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}
