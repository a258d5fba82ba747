//! Leader election on the lock table: one leader at a time, a term per row take-over,
//! the term's token from the fence sequence.

use std::time::Duration;

use ferrisson_core::observe::Kind;
use ferrisson_core::{Capabilities, DistributedElection, DistributedLock, Lease, Result};

use crate::client::Client;
use crate::table_lock::{TableLock, TableLockGuard};

/// A leader election in the client's lock table (its row is `election:NAME`, apart from
/// the lock `NAME`): a campaign waits for the row like a lock's acquire, without
/// re-entry; each term's fencing token is greater than every earlier term's; the
/// watchdog keeps the term while the leadership lives, and its `lost()` fires when a
/// renewal finds the term taken or gone.
///
/// ```no_run
/// use ferrisson_core::{DistributedElection, Fenced, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// let term = client.election("billing")?.campaign().await?;
/// println!("leading, term token {}", term.fencing_token());
/// term.unlock().await?; // resign
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct TableElection {
    lock: TableLock,
}

impl TableElection {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Ok(Self {
            lock: TableLock::of_kind(client, name, Kind::Election)?,
        })
    }

    /// The same election with another lease for its terms ([`Lease::Watchdog`], the
    /// default, is renewed while the leadership lives).
    ///
    /// # Errors
    ///
    /// [`ferrisson_core::Error::InvalidArgument`] for a fixed lease under 1 ms or over a
    /// year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let election = client.election("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = election; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        Ok(Self {
            lock: self.lock.with_lease(lease)?,
        })
    }

    /// Ends the current term, whoever leads, as an administrator would; see
    /// [`TableLock::force_unlock`].
    ///
    /// # Errors
    ///
    /// When the database cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// The delete may or may not have run when the future is dropped.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let ended = client.election("billing")?.force_resign().await?;
    /// # let _ = ended; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub async fn force_resign(&self) -> Result<bool> {
        self.lock.force_unlock().await
    }
}

impl DistributedElection for TableElection {
    type Leadership = TableLockGuard;

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock.capabilities()
    }

    async fn campaign(&self) -> Result<TableLockGuard> {
        self.lock.lock().await
    }

    async fn try_campaign(&self) -> Result<Option<TableLockGuard>> {
        self.lock.try_lock().await
    }

    async fn campaign_timeout(&self, wait: Duration) -> Result<Option<TableLockGuard>> {
        self.lock.lock_timeout(wait).await
    }
}
