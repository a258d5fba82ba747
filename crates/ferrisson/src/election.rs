//! A leader election of whichever store the client talks to, and its leadership.

use std::time::Duration;

use ferrisson_core::memory::{MemoryElection, MemoryLeadership};
use ferrisson_core::{Capabilities, DistributedElection, Lease, Result};

/// Runs `$body` with `$inner` bound to the variant's value, for every store that has an
/// election (the lock's `each_store!` also covers the SQL session lock, which has none).
macro_rules! each_store {
    ($value:expr, $enum:ident, $inner:ident => $body:expr) => {
        match $value {
            #[cfg(feature = "redis")]
            $enum::Redis($inner) => $body,
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            $enum::Sql($inner) => $body,
            #[cfg(feature = "etcd")]
            $enum::Etcd($inner) => $body,
            #[cfg(feature = "zookeeper")]
            $enum::ZooKeeper($inner) => $body,
            $enum::Memory($inner) => $body,
        }
    };
}

/// The leader election of the client's store ([`Client::election`](crate::Client::election)).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson::{DistributedElection, Fenced, Guard};
///
/// let client = ferrisson::connect("memory://any-election").await?;
/// let election = client.election("billing")?;
/// let term = election.campaign().await?;
/// println!("leading with token {}", term.fencing_token());
/// term.unlock().await?; // resign
/// # Ok::<(), ferrisson::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyElection {
    /// A Redis [`Election`](ferrisson_redis::Election).
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::Election),
    /// A PostgreSQL or MySQL/MariaDB lock-table election.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::TableElection),
    /// An etcd [`Election`](ferrisson_etcd::Election).
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::Election),
    /// A ZooKeeper [`Election`](ferrisson_zookeeper::Election).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::Election),
    /// A memory store election.
    Memory(MemoryElection),
}

/// One term of leadership of an [`AnyElection`]; unlocking (or dropping) it resigns.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "dropping the leadership resigns"]
pub enum AnyLeadership {
    /// A Redis leadership.
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::Leadership),
    /// A lock-table election's term.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::TableLockGuard),
    /// An etcd leadership.
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::Leadership),
    /// A ZooKeeper leadership.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::Leadership),
    /// A memory store leadership.
    Memory(MemoryLeadership),
}

impl AnyElection {
    /// The same election with another lease for its terms.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease the store
    /// cannot keep.
    ///
    /// ```
    /// use std::time::Duration;
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// let election = client.election("a")?.with_lease(ferrisson::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = election; Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(election) => Self::Redis(election.with_lease(lease)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(election) => Self::Sql(election.with_lease(lease)?),
            #[cfg(feature = "etcd")]
            Self::Etcd(election) => Self::Etcd(election.with_lease(lease)?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(election) => Self::ZooKeeper(election.with_lease(lease)?),
            Self::Memory(election) => Self::Memory(election.with_lease(lease)?),
        })
    }
}

impl AnyElection {
    /// The same election with `id` as this candidate's id, reported to observers of the
    /// leader where the store keeps one (Redis); a store that keeps none (ZooKeeper, the
    /// in-process store) leaves it to the caller.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an id the store
    /// refuses (empty, too long).
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// let election = client.election("a")?.with_candidate_id("host-1:4242")?;
    /// # let _ = election; Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn with_candidate_id(self, id: impl Into<String>) -> Result<Self> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(election) => Self::Redis(election.with_candidate_id(id)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(election) => {
                let _ = id.into();
                Self::Sql(election)
            }
            // etcd keeps a candidate's id as the value of its key (what `leader()` shows).
            #[cfg(feature = "etcd")]
            Self::Etcd(election) => Self::Etcd(election.with_value(id.into())),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(election) => {
                let _ = id.into();
                Self::ZooKeeper(election)
            }
            Self::Memory(election) => {
                let _ = id.into();
                Self::Memory(election)
            }
        })
    }
}

impl DistributedElection for AnyElection {
    type Leadership = AnyLeadership;

    fn name(&self) -> &str {
        each_store!(self, Self, election => DistributedElection::name(election))
    }

    fn capabilities(&self) -> Capabilities {
        each_store!(self, Self, election => DistributedElection::capabilities(election))
    }

    async fn campaign(&self) -> Result<AnyLeadership> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(election) => AnyLeadership::Redis(election.campaign().await?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(election) => AnyLeadership::Sql(election.campaign().await?),
            #[cfg(feature = "etcd")]
            Self::Etcd(election) => AnyLeadership::Etcd(election.campaign().await?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(election) => AnyLeadership::ZooKeeper(election.campaign().await?),
            Self::Memory(election) => AnyLeadership::Memory(election.campaign().await?),
        })
    }

    async fn try_campaign(&self) -> Result<Option<AnyLeadership>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(election) => election.try_campaign().await?.map(AnyLeadership::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(election) => election.try_campaign().await?.map(AnyLeadership::Sql),
            #[cfg(feature = "etcd")]
            Self::Etcd(election) => election.try_campaign().await?.map(AnyLeadership::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(election) => {
                election.try_campaign().await?.map(AnyLeadership::ZooKeeper)
            }
            Self::Memory(election) => election.try_campaign().await?.map(AnyLeadership::Memory),
        })
    }

    async fn campaign_timeout(&self, wait: Duration) -> Result<Option<AnyLeadership>> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(election) => election
                .campaign_timeout(wait)
                .await?
                .map(AnyLeadership::Redis),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(election) => election
                .campaign_timeout(wait)
                .await?
                .map(AnyLeadership::Sql),
            #[cfg(feature = "etcd")]
            Self::Etcd(election) => election
                .campaign_timeout(wait)
                .await?
                .map(AnyLeadership::Etcd),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(election) => election
                .campaign_timeout(wait)
                .await?
                .map(AnyLeadership::ZooKeeper),
            Self::Memory(election) => election
                .campaign_timeout(wait)
                .await?
                .map(AnyLeadership::Memory),
        })
    }
}

delegate_guard!(AnyLeadership, each_store);
delegate_fenced!(AnyLeadership, each_store);
