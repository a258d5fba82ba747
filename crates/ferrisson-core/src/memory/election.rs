//! The memory store's leader election: one leader at a time, a token per term.

use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::contract::families::DistributedElection;
use crate::contract::lock::{DistributedLock, Fenced, Guard};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::lease::Lease;
use crate::memory::MemoryStore;
use crate::memory::lock::{Flavor, MemoryLock, MemoryLockGuard};

/// A leader election of a [`MemoryStore`]: a campaign is a lock that does not re-enter
/// (a second campaign by the leader's own task waits like anyone else).
///
/// ```
/// use ferrisson_core::{DistributedElection, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let election = store.election("nightly-report")?;
/// let term = election.campaign().await?;
/// assert!(term.is_held());
/// term.resign().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MemoryElection {
    lock: MemoryLock,
}

impl MemoryElection {
    pub(crate) fn new(store: MemoryStore, name: &str) -> Result<Self> {
        Ok(Self {
            lock: MemoryLock::of_flavor(store, name, Flavor::Election)?,
        })
    }

    /// The same election with another lease for its terms (see
    /// [`MemoryLock::with_lease`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a fixed lease under
    /// 1 ms or over a year.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// let election = store.election("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(1)))?;
    /// # let _ = election; Ok::<(), ferrisson_core::Error>(())
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(Self {
            lock: self.lock.with_lease(lease)?,
        })
    }

    /// Ends the current term, whoever leads, as an administrator would.
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(!store.election("a")?.force_resign());
    /// # Ok::<(), ferrisson_core::Error>(())
    /// ```
    pub fn force_resign(&self) -> bool {
        self.lock.force_unlock()
    }
}

impl DistributedElection for MemoryElection {
    type Leadership = MemoryLeadership;

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock.capabilities()
    }

    async fn campaign(&self) -> Result<MemoryLeadership> {
        Ok(MemoryLeadership {
            guard: self.lock.lock().await?,
        })
    }

    async fn try_campaign(&self) -> Result<Option<MemoryLeadership>> {
        Ok(self
            .lock
            .try_lock()
            .await?
            .map(|guard| MemoryLeadership { guard }))
    }

    async fn campaign_timeout(&self, wait: Duration) -> Result<Option<MemoryLeadership>> {
        Ok(self
            .lock
            .lock_timeout(wait)
            .await?
            .map(|guard| MemoryLeadership { guard }))
    }
}

/// One term of leadership of a [`MemoryElection`]; dropping it resigns.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns at once"]
pub struct MemoryLeadership {
    guard: MemoryLockGuard,
}

impl MemoryLeadership {
    /// Resigns: the next candidate is elected at once.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`](crate::Error::LeaseExpired) when the term had already
    /// ended.
    ///
    /// ```
    /// use ferrisson_core::DistributedElection;
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// store.election("a")?.campaign().await?.resign().await?;
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.guard.unlock().await
    }
}

impl Guard for MemoryLeadership {
    fn name(&self) -> &str {
        self.guard.name()
    }

    fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    async fn lost(&self) {
        self.guard.lost().await;
    }

    async fn unlock(self) -> Result<()> {
        self.resign().await
    }
}

impl Fenced for MemoryLeadership {
    fn fencing_token(&self) -> FencingToken {
        self.guard.fencing_token()
    }
}
