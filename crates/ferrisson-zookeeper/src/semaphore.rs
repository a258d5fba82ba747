//! The semaphore: Curator's `InterProcessSemaphoreV2`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire};
use ferrisson_core::{Capabilities, DistributedSemaphore, Error, Guard as _, Result};
use tokio::time::Instant;

use crate::capabilities::SEMAPHORE;
use crate::client::{Client, Inner};
use crate::error::zk;
use crate::lock::{Flavor, Lock, session_expired};
use crate::path::{SEMAPHORES_ROOT, path_of};
use crate::queue::{Contender, Turn};

/// Curator's lock name for lease nodes.
const LEASE_NAME: &str = "lease-";

/// A counting semaphore with Curator's `InterProcessSemaphoreV2` node layout: a lock at
/// `PATH/locks` and one protected ephemeral sequential node `_c_<guid>-lease-<sequence>`
/// per permit under `PATH/leases`. A client takes the lock, adds its lease, and holds a
/// permit once there are at most `permits` leases; then it lets the lock go. Waiters
/// queue on the lock, each watching only the one ahead; only the lock's holder watches
/// the leases, so a released permit wakes one client, not all of them.
///
/// As in Curator, the number of permits is each client's setting, not the store's:
/// every client of one semaphore must use the same number. A permit lasts until it is
/// released or its session ends.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::{DistributedSemaphore, Permit};
///
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
/// let pool = client.semaphore("db-connections", 4)?;
/// let permit = pool.acquire().await?;
/// permit.release().await?;
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct Semaphore {
    mutex: Lock,
    leases: Arc<str>,
    permits: u32,
    probe: Probe,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.probe.name)
            .field("leases", &self.leases)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    pub(crate) fn new(client: &Client, name: &str, permits: u32) -> Result<Self> {
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        let path = path_of(SEMAPHORES_ROOT, name)?;
        let probe = client
            .inner
            .classes
            .probe(Kind::Semaphore, &Arc::from(name));
        Ok(Self {
            mutex: Lock::of_flavor(
                client.clone(),
                &format!("{path}/locks"),
                Flavor::SemaphoreMutex,
            )?,
            leases: Arc::from(format!("{path}/leases")),
            permits,
            probe,
        })
    }

    /// The number of permits this handle counts with.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.semaphore("pool", 4)?.permits(), 4);
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn inner(&self) -> &Arc<Inner> {
        self.mutex.inner()
    }

    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<ZkPermit>> {
        let deadline = wait.map(|w| Instant::now() + w);
        let Some(turn) = self.mutex.contend(wait).await? else {
            return Ok(None);
        };
        let leased = self.lease(wait, deadline).await;
        // The lock is only for taking a lease: let the next client in either way.
        let _ = turn.unlock().await;
        leased
    }

    /// Adds a lease and waits until it is within the permits (holding the lock).
    async fn lease(
        &self,
        wait: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<ZkPermit>> {
        let mut retried = false;
        let contender = loop {
            let session = self.inner().live_zk().await;
            let mut contender = Contender::new(
                Arc::clone(self.inner()),
                session,
                &self.leases,
                LEASE_NAME,
                &[LEASE_NAME],
                Turn::First,
            );
            match contender.enter(b"ferrisson").await {
                Ok(()) => break contender,
                Err(e) if !retried && session_expired(&e) => retried = true,
                Err(e) => return Err(e),
            }
        };
        let zk = contender.session();
        loop {
            let (children, _, watcher) = zk
                .get_and_watch_children(&self.leases)
                .await
                .map_err(|e| zk_err("watch", &self.leases, e))?;
            let leases = children.iter().filter(|c| c.contains(LEASE_NAME)).count();
            if leases <= self.permits as usize {
                let (node, _, session) = contender.into_node()?;
                return Ok(Some(ZkPermit {
                    name: Arc::clone(&self.probe.name),
                    inner: Arc::clone(self.inner()),
                    session,
                    node,
                    released: false,
                }));
            }
            let woken = match (wait, deadline) {
                (Some(Duration::ZERO), _) => false,
                (_, None) => {
                    watcher.changed().await;
                    true
                }
                (_, Some(deadline)) => tokio::time::timeout_at(deadline, watcher.changed())
                    .await
                    .is_ok(),
            };
            if !woken {
                contender.leave().await?;
                return Ok(None);
            }
        }
    }
}

fn zk_err(op: &'static str, path: &str, e: zookeeper_client::Error) -> Error {
    zk(op, path, e)
}

impl DistributedSemaphore for Semaphore {
    type Permit = ZkPermit;

    fn name(&self) -> &str {
        &self.probe.name
    }

    fn capabilities(&self) -> Capabilities {
        SEMAPHORE
    }

    /// # Cancel safety
    ///
    /// Dropping the future deletes its lease node (and its place in the lock's queue) in
    /// the background.
    async fn acquire(&self) -> Result<ZkPermit> {
        observe_acquire(&self.probe, None, self.acquire_within(None))
            .await?
            .ok_or_else(|| Error::wait_ended(&self.probe.name))
    }

    async fn try_acquire(&self) -> Result<Option<ZkPermit>> {
        observe_acquire(
            &self.probe,
            Some(Duration::ZERO),
            self.acquire_within(Some(Duration::ZERO)),
        )
        .await
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<ZkPermit>> {
        observe_acquire(&self.probe, Some(wait), self.acquire_within(Some(wait))).await
    }
}

/// One permit of a [`Semaphore`]: its lease node. Releasing (or dropping) it deletes
/// the node.
#[must_use = "dropping the permit releases it"]
pub struct ZkPermit {
    name: Arc<str>,
    inner: Arc<Inner>,
    session: zookeeper_client::Client,
    node: String,
    released: bool,
}

impl fmt::Debug for ZkPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkPermit")
            .field("name", &self.name)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Grant for ZkPermit {}

impl ferrisson_core::Permit for ZkPermit {
    fn name(&self) -> &str {
        &self.name
    }

    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the lease node was gone (its session ended), or a
    /// store error.
    async fn release(mut self) -> Result<()> {
        self.released = true;
        let deleted =
            Inner::delete_node(&self.inner.zk(), &self.node, self.inner.session_timeout).await?;
        if deleted {
            Ok(())
        } else {
            Err(Error::LeaseExpired {
                name: self.name.to_string(),
            })
        }
    }
}

impl Drop for ZkPermit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from: the lease ends with the session.
            return;
        };
        let (zk, node, timeout) = (
            self.session.clone(),
            std::mem::take(&mut self.node),
            self.inner.session_timeout,
        );
        runtime.spawn(async move {
            let _ = Inner::delete_node(&zk, &node, timeout).await;
        });
    }
}
