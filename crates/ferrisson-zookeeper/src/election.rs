//! Leader election: Curator's `LeaderLatch` on ferrisson's queue.

use std::fmt;
use std::time::Duration;

use ferrisson_core::{
    Capabilities, DistributedElection, DistributedLock, Fenced, FencingToken, Guard, Lease, Result,
};

use crate::client::Client;
use crate::lock::{Flavor, Lock, LockGuard};

/// A leader election with Curator's `LeaderLatch` node layout: each candidate creates a
/// protected ephemeral sequential node `_c_<guid>-latch-<sequence>` under the
/// election's path, the lowest sequence leads, the others watch only the node just
/// ahead. A term ends when the leader resigns, its node is deleted or its session ends
/// (the leadership's `lost()` fires then, by the rule of [`Client`]); the next candidate
/// leads at once. Each term's fencing token is its node's `czxid`, growing with every
/// term. A campaign does not re-enter: the leader's own second campaign queues like any
/// other candidate.
///
/// Names that start with `/` are paths (shared with Java `LeaderLatch`es on that path);
/// others live under `/ferrisson/elections/`.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::{DistributedElection, Fenced, Guard};
///
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
/// let term = client.election("nightly-report")?.campaign().await?;
/// tokio::select! {
///     () = term.lost() => eprintln!("no longer the leader"),
///     () = async { /* lead, writing with term.fencing_token() */ } => {}
/// }
/// term.resign().await?;
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct Election {
    lock: Lock,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.lock.name())
            .field("path", &self.lock.path())
            .finish_non_exhaustive()
    }
}

impl Election {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Ok(Self {
            lock: Lock::of_flavor(client, name, Flavor::Election)?,
        })
    }

    /// The election's ZooKeeper path: its candidates' nodes are its children.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.election("a")?.path(), "/ferrisson/elections/a");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn path(&self) -> &str {
        self.lock.path()
    }

    /// The same election with another lease for its terms (see [`Lock::with_lease`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](ferrisson_core::Error::InvalidArgument) for a fixed
    /// lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let election = client.election("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(60)))?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(Self {
            lock: self.lock.with_lease(lease)?,
        })
    }
}

impl DistributedElection for Election {
    type Leadership = Leadership;

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn capabilities(&self) -> Capabilities {
        debug_assert_eq!(self.lock.flavor(), Flavor::Election);
        self.lock.capabilities()
    }

    /// # Cancel safety
    ///
    /// Dropping the future deletes the candidate's node in the background.
    async fn campaign(&self) -> Result<Leadership> {
        self.lock.lock().await.map(Leadership)
    }

    async fn try_campaign(&self) -> Result<Option<Leadership>> {
        Ok(self.lock.try_lock().await?.map(Leadership))
    }

    async fn campaign_timeout(&self, wait: Duration) -> Result<Option<Leadership>> {
        Ok(self.lock.lock_timeout(wait).await?.map(Leadership))
    }
}

/// One term of leadership of an [`Election`]; resigning (or dropping it) ends the term
/// and lets the next candidate lead.
#[must_use = "dropping the leadership resigns"]
#[derive(Debug)]
pub struct Leadership(LockGuard);

impl Leadership {
    /// Ends the term (deletes the leader's node).
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`]: [`Error::LeaseExpired`](ferrisson_core::Error::LeaseExpired)
    /// when the term had already ended.
    ///
    /// # Cancel safety
    ///
    /// As [`Guard::unlock`].
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use ferrisson_core::DistributedElection;
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// client.election("a")?.campaign().await?.resign().await?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.0.unlock().await
    }
}

impl Guard for Leadership {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn is_held(&self) -> bool {
        self.0.is_held()
    }

    fn remaining(&self) -> Duration {
        self.0.remaining()
    }

    async fn lost(&self) {
        self.0.lost().await;
    }

    async fn unlock(self) -> Result<()> {
        self.0.unlock().await
    }
}

impl Fenced for Leadership {
    fn fencing_token(&self) -> FencingToken {
        self.0.fencing_token()
    }
}
