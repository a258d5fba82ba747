//! A counting semaphore on the lock table: N permits, each a row with an expiry and an
//! owner, renewed by the watchdog like a lock's.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Kind, Probe, observe_wait};
use ferrisson_core::{
    Capabilities, DistributedSemaphore, Error, Fenced, FencingToken, Guard, Lease, Permit, Result,
};
use tokio::time::Instant;

use crate::capabilities;
use crate::client::Client;
use crate::table_lock::{SEMAPHORE_PREFIX, Step, TableLock, TableLockGuard};

/// The most permits a semaphore has.
pub const MAX_PERMITS: u32 = 65_535;

/// A semaphore of `permits` permits in the client's lock table: permit `i` is the row
/// `semaphore:NAME#i`, taken and renewed like a lock's row (no re-entry); an acquire
/// tries the permits from a random one on, and waits as a lock's waiter does (woken by
/// a release on PostgreSQL, polling on MySQL). Every client of one semaphore must give
/// the same number of permits.
///
/// ```no_run
/// use ferrisson_core::{DistributedSemaphore, Permit};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// let exports = client.semaphore("exports", 3)?;
/// let permit = exports.acquire().await?;
/// permit.release().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct TableSemaphore {
    slots: Arc<[TableLock]>,
    probe: Probe,
    /// `semaphore:NAME`: the key its waiters are woken under.
    key: Arc<str>,
}

impl fmt::Debug for TableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableSemaphore")
            .field("name", &self.probe.name)
            .field("permits", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl TableSemaphore {
    pub(crate) fn new(client: &Client, name: &str, permits: u32) -> Result<Self> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, got {permits}"
            )));
        }
        let slots: Arc<[TableLock]> = (0..permits)
            .map(|slot| TableLock::permit_slot(client.clone(), name, slot))
            .collect::<Result<_>>()?;
        let probe = client
            .shared()
            .classes
            .probe(Kind::Semaphore, &Arc::from(name));
        Ok(Self {
            slots,
            probe,
            key: Arc::from(format!("{SEMAPHORE_PREFIX}{name}")),
        })
    }

    /// The same semaphore with another lease for its permits.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let s = client.semaphore("a", 2)?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = s; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn with_lease(self, lease: Lease) -> Result<Self> {
        let slots: Arc<[TableLock]> = self
            .slots
            .iter()
            .map(|slot| slot.clone().with_lease(lease))
            .collect::<Result<_>>()?;
        Ok(Self { slots, ..self })
    }

    /// How many permits it has.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.semaphore("a", 2)?.permits(), 2);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn permits(&self) -> u32 {
        self.slots.len() as u32
    }

    /// One look at every permit, from a random one on (contenders spread out).
    async fn attempt(&self) -> Result<Option<TablePermit>> {
        let start = rand::random_range(0..self.slots.len());
        for i in 0..self.slots.len() {
            let slot = &self.slots[(start + i) % self.slots.len()];
            if let Step::Granted(guard) = slot.attempt().await? {
                return Ok(Some(TablePermit {
                    name: Arc::clone(&self.probe.name),
                    guard,
                }));
            }
        }
        Ok(None)
    }

    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<TablePermit>> {
        let first = &self.slots[0];
        let registration = first.shared().wakers.register(&self.key);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let notified = registration.notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(permit) = self.attempt().await? {
            return Ok(Some(permit));
        }
        if wait == Some(Duration::ZERO) {
            return Ok(None);
        }
        observe_wait(&self.probe, async {
            let mut polls = 0;
            loop {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(None);
                }
                let mut until = now + first.pause(&mut polls, None);
                if let Some(deadline) = deadline {
                    until = until.min(deadline);
                }
                tokio::select! {
                    () = notified.as_mut() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
                notified.set(registration.notify().notified());
                notified.as_mut().enable();
                if let Some(permit) = self.attempt().await? {
                    return Ok(Some(permit));
                }
            }
        })
        .await
    }
}

impl DistributedSemaphore for TableSemaphore {
    type Permit = TablePermit;

    fn name(&self) -> &str {
        &self.probe.name
    }

    fn capabilities(&self) -> Capabilities {
        capabilities::table_semaphore(self.slots[0].shared().dialect())
    }

    async fn acquire(&self) -> Result<TablePermit> {
        self.acquire_within(None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.probe.name))
    }

    async fn try_acquire(&self) -> Result<Option<TablePermit>> {
        self.acquire_within(Some(Duration::ZERO)).await
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<TablePermit>> {
        self.acquire_within(Some(wait)).await
    }
}

/// One permit of a [`TableSemaphore`]; dropping it releases on a spawned task.
#[must_use = "dropping the permit releases it"]
#[derive(Debug)]
pub struct TablePermit {
    name: Arc<str>,
    guard: TableLockGuard,
}

impl TablePermit {
    /// True while the permit's row is known to be ours.
    ///
    /// ```no_run
    /// use ferrisson_core::DistributedSemaphore;
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let permit = client.semaphore("a", 1)?.acquire().await?;
    /// assert!(permit.is_held());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the permit is lost (its row taken or gone, renewals failing).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// The permit's token: greater than every earlier holder's of the same permit.
    ///
    /// ```no_run
    /// use ferrisson_core::DistributedSemaphore;
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let permit = client.semaphore("a", 1)?.acquire().await?;
    /// assert!(permit.fencing_token().get() > 0);
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.guard.fencing_token()
    }
}

impl Permit for TablePermit {
    fn name(&self) -> &str {
        &self.name
    }

    async fn release(self) -> Result<()> {
        self.guard.unlock().await
    }
}
