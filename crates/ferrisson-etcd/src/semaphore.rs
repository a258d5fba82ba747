//! A counting semaphore on etcd: the lock's queue, with the first N keys by create
//! revision holding a permit each.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire};
use ferrisson_core::{Capabilities, DistributedSemaphore, Error, Lease, Permit, Result};
use tokio::time::Instant;

use crate::client::Client;
use crate::contender::{Contender, ride_out};
use crate::held::Held;
use crate::queue::Admission;

/// A semaphore on etcd with `permits` permits: each acquirer puts a key in the queue
/// under `NAME/` (as the lock does, with the same one-key-per-acquisition rule) and holds
/// a permit while fewer than `permits` keys are older than its own. Waiters are served in
/// the order they asked; a permit is released by deleting its key, or by its lease
/// ending (a dead holder's permit comes back at most one lease later).
///
/// The count is each acquirer's own: give every handle of a name the same.
///
/// ```no_run
/// use ferrisson_core::{DistributedSemaphore, Permit};
///
/// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
/// let pool = client.semaphore("exports", 3)?;
/// let permit = pool.acquire().await?; // at most 3 at once
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    probe: Probe,
    prefix: Arc<str>,
    permits: u32,
    lease: Lease,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.probe.name)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    pub(crate) fn new(client: Client, name: &str, permits: u32) -> Result<Self> {
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        let prefix = client.prefix_of(name)?;
        let probe = client.classes().probe(Kind::Semaphore, &Arc::from(name));
        Ok(Self {
            client,
            probe,
            prefix,
            permits,
            lease: Lease::Watchdog,
        })
    }

    /// The semaphore's name.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.semaphore("a", 2)?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// How many permits this handle counts.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.semaphore("a", 2)?.permits(), 2);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The same semaphore with another lease (see [`Lock::with_lease`](crate::Lock::with_lease)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// use std::time::Duration;
    /// let pool = client.semaphore("a", 2)?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(30)))?;
    /// # Ok(()) }
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<SemaphorePermit>> {
        let started = Instant::now();
        observe_acquire(
            &self.probe,
            wait,
            ride_out(&self.client, wait, started, move || {
                self.contend(wait, started)
            }),
        )
        .await
    }

    /// One acquirer: enqueued, then waiting for a permit until `started + wait`.
    async fn contend(
        &self,
        wait: Option<Duration>,
        started: Instant,
    ) -> Result<Option<SemaphorePermit>> {
        let admission = Admission::FewerOlder(Arc::clone(&self.prefix), self.permits);
        // Boxed: see `Lock::contend`.
        let contender = Box::pin(Contender::enqueue(
            &self.client,
            &self.prefix,
            &admission,
            self.lease,
            b"",
        ))
        .await?;
        let Some(contender) =
            Box::pin(contender.take_turn(&self.probe, wait, started, &admission)).await?
        else {
            return Ok(None);
        };
        Ok(Some(SemaphorePermit {
            name: Arc::clone(&self.probe.name),
            held: Held::start(contender, self.probe.clone()),
            released: false,
        }))
    }
}

impl DistributedSemaphore for Semaphore {
    type Permit = SemaphorePermit;

    fn name(&self) -> &str {
        Semaphore::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        crate::CAPABILITIES[2]
    }

    async fn acquire(&self) -> Result<SemaphorePermit> {
        self.acquire_within(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_acquire(&self) -> Result<Option<SemaphorePermit>> {
        self.acquire_within(Some(Duration::ZERO)).await
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<SemaphorePermit>> {
        self.acquire_within(Some(wait)).await
    }
}

/// One permit of a [`Semaphore`]. Dropping it releases in a background task.
#[must_use = "dropping the permit releases it"]
pub struct SemaphorePermit {
    name: Arc<str>,
    held: Arc<Held>,
    released: bool,
}

impl fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("name", &self.name)
            .field("key", &self.held.key)
            .field("held", &self.held.state.is_held())
            .finish_non_exhaustive()
    }
}

impl Grant for SemaphorePermit {}

impl SemaphorePermit {
    /// True while the permit is known to be held (its lease alive, its key there).
    ///
    /// ```no_run
    /// # fn run(permit: ferrisson_etcd::SemaphorePermit) {
    /// assert!(permit.is_held());
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.held.state.is_held()
    }

    /// Resolves when the permit is no longer known to be held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    ///
    /// ```no_run
    /// # async fn run(permit: ferrisson_etcd::SemaphorePermit) {
    /// permit.lost().await;
    /// # }
    /// ```
    pub async fn lost(&self) {
        self.held.state.lost().await;
    }

    /// The permit's key in etcd.
    ///
    /// ```no_run
    /// # fn run(permit: ferrisson_etcd::SemaphorePermit) {
    /// println!("{}", permit.key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.held.key
    }
}

impl Permit for SemaphorePermit {
    fn name(&self) -> &str {
        &self.name
    }

    async fn release(mut self) -> Result<()> {
        self.released = true;
        self.held.leave();
        let name = self.name.to_string();
        self.held
            .state
            .meter()
            .release(None, true, self.held.finish(&name), |()| false)
            .await
    }
}

impl Drop for SemaphorePermit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.held.leave();
        let held = Arc::clone(&self.held);
        let name = self.name.to_string();
        self.held.client.runtime().spawn(async move {
            let _ = held.finish(&name).await;
            held.state.meter().end(false);
        });
    }
}
