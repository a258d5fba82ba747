//! The etcd lock: etcd's `concurrency.Mutex`, written client-side, reentrant per task.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire};
use ferrisson_core::{
    Capabilities, DistributedLock, Error, Fenced, FencingToken, Guard, Lease, Result, TaskKey,
};

use tokio::time::Instant;

use crate::client::Client;
use crate::contender::{Contender, ride_out};
use crate::held::Held;
use crate::queue::Admission;

/// A lock on etcd, compatible with etcd's `concurrency.Mutex` (and so with
/// `etcdctl lock NAME` and Go services using that package on the same name): the same
/// keys (`NAME/<lease id in hex>`), the same queue (by create revision), the same wait
/// (a watch on the deletion of the key just before the own).
///
/// Reentrant inside the tokio task that holds it; the fencing token is the key's create
/// revision; the lease kept alive is the watchdog; `lost()` fires when the key is deleted
/// behind the holder's back, when the lease is revoked, or when the keep-alive has failed
/// for a whole TTL.
///
/// ```no_run
/// use ferrisson_core::{DistributedLock, Fenced, Guard};
///
/// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
/// let lock = client.lock("invoices")?;
/// let guard = lock.lock().await?;
/// println!("token {}", guard.fencing_token());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Client,
    probe: Probe,
    prefix: Arc<str>,
    lease: Lease,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.probe.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        let prefix = client.prefix_of(name)?;
        let probe = client.classes().probe(Kind::Lock, &Arc::from(name));
        Ok(Self {
            client,
            probe,
            prefix,
            lease: Lease::Watchdog,
        })
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.lock("a")?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The prefix of the lock's keys in etcd: `NAME/` (after the client's namespace).
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.lock("a")?.key_prefix(), "a/");
    /// # Ok(()) }
    /// ```
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The same lock with another lease: [`Lease::Watchdog`] (the default) holds on the
    /// client's session lease, kept alive; [`Lease::Fixed`] holds on a lease of its own
    /// that is not renewed (etcd keeps the key for the duration rounded up to whole
    /// seconds; `lost()` fires at the duration itself).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # Ok(()) }
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// A guard sharing this task's hold, if this task holds the lock on this client.
    fn reenter(&self) -> Option<LockGuard> {
        let held = self.client.held(&self.prefix)?;
        (held.task == TaskKey::current() && held.enter()).then(|| self.guard(held))
    }

    fn guard(&self, held: Arc<Held>) -> LockGuard {
        LockGuard {
            lock: self.clone(),
            held,
            released: false,
        }
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        observe_acquire(&self.probe, wait, self.acquire_unobserved(wait)).await
    }

    /// Re-entry, or a contender's turn, transient failures ridden out with a new
    /// contender (see [`ride_out`]).
    async fn acquire_unobserved(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        if let Some(guard) = self.reenter() {
            return Ok(Some(guard));
        }
        let started = Instant::now();
        ride_out(&self.client, wait, started, move || {
            self.contend(wait, started)
        })
        .await
    }

    /// One contender: enqueued, then waiting for its turn until `started + wait`.
    async fn contend(&self, wait: Option<Duration>, started: Instant) -> Result<Option<LockGuard>> {
        // Boxed: the gRPC calls' futures are large, and an acquire future is held across
        // awaits by every caller (a network round trip dwarfs the allocation).
        let admission = Admission::NoneOlder(Arc::clone(&self.prefix));
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
        let held = Held::start(contender, self.probe.clone());
        self.client.add_hold(&held);
        Ok(Some(self.guard(held)))
    }
}

impl DistributedLock for Lock {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        Lock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        crate::CAPABILITIES[0]
    }

    async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Duration::ZERO)).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait)).await
    }
}

/// Proof of holding a [`Lock`]. Dropping it releases in a background task; `unlock`
/// releases and says how it went.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    lock: Lock,
    held: Arc<Held>,
    released: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lock.name())
            .field("key", &self.held.key)
            .field("fencing_token", &self.held.revision)
            .field("held", &self.held.state.is_held())
            .finish_non_exhaustive()
    }
}

impl Grant for LockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.held.token())
    }
}

impl LockGuard {
    /// The hold's key in etcd (`NAME/<lease id in hex>`).
    ///
    /// ```no_run
    /// # async fn run(guard: ferrisson_etcd::LockGuard) {
    /// println!("holding {}", guard.key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.held.key
    }

    /// The prefix of the lock's keys (`NAME/`).
    ///
    /// ```no_run
    /// # async fn run(guard: ferrisson_etcd::LockGuard) {
    /// assert!(guard.key().starts_with(guard.key_prefix()));
    /// # }
    /// ```
    pub fn key_prefix(&self) -> &str {
        self.lock.key_prefix()
    }

    /// The condition that this hold is still the lock's: its key exists with its create
    /// revision. Put it in the `when` of an etcd transaction to make a write that etcd
    /// refuses once the hold has ended (a fenced write; see
    /// [`Client::fenced_put`](crate::Client::fenced_put)).
    ///
    /// ```no_run
    /// # async fn run(client: ferrisson_etcd::Client, guard: ferrisson_etcd::LockGuard) -> Result<(), etcd_client::Error> {
    /// use etcd_client::{Txn, TxnOp};
    /// let txn = Txn::new().when([guard.fence()]).and_then([TxnOp::put("balance", "10", None)]);
    /// let done = client.etcd().kv_client().txn(txn).await?.succeeded();
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> etcd_client::Compare {
        etcd_client::Compare::create_revision(
            self.held.key.as_str(),
            etcd_client::CompareOp::Equal,
            self.held.revision,
        )
    }

    async fn release(&mut self) -> Result<()> {
        self.released = true;
        let last = self.held.leave();
        let held = Arc::clone(&self.held);
        let name = self.lock.name().to_owned();
        let release = async move {
            if last {
                held.finish(&name).await
            } else if held.state.is_held() {
                Ok(())
            } else {
                Err(Error::LeaseExpired { name })
            }
        };
        self.held
            .state
            .meter()
            .release(Some(self.held.token()), last, release, |()| false)
            .await
    }
}

impl Guard for LockGuard {
    fn name(&self) -> &str {
        self.lock.name()
    }

    fn is_held(&self) -> bool {
        self.held.state.is_held()
    }

    fn remaining(&self) -> Duration {
        self.held.state.remaining()
    }

    async fn lost(&self) {
        self.held.state.lost().await;
    }

    async fn unlock(mut self) -> Result<()> {
        self.release().await
    }
}

impl Fenced for LockGuard {
    fn fencing_token(&self) -> FencingToken {
        self.held.token()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.held.leave() {
            let held = Arc::clone(&self.held);
            let name = self.lock.name().to_owned();
            self.lock.client.runtime().spawn(async move {
                let _ = held.finish(&name).await;
                held.state.meter().end(false);
            });
        }
    }
}
