//! The non-reentrant lock: one string key, `SET NX PX` with the holder's owner id and a
//! fencing token, released by an atomic compare-and-delete.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::error::{Error, Result};
use crate::api::lease::Lease;
use crate::backend::client::Client;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::keys::Keys;
use crate::backend::scripts::Released;
use crate::backend::scripts::simple::{KeyAcquired, SimpleAcquire, SimpleInspect, SimpleRelease};
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::guard::{HoldGuard, SendRelease, hold_guard_methods};
use crate::primitive::single::{self, SingleAnswer, SingleSpec};
use crate::primitive::wait::{Attempt, Registration, try_once};
use crate::primitive::wake::{Waiting, WakeOne};
use ferrisson_core::DistributedLock;

/// Default lease of a [`SimpleLock`]: fixed, no renewal.
pub const DEFAULT_SIMPLE_LEASE: Duration = Duration::from_secs(30);

impl Client {
    /// A handle to the non-reentrant lock called `name`, with a fixed 30 s lease.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let lock = client.simple_lock("stock")?;
    /// assert_eq!(lock.name(), "stock");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    pub fn simple_lock(&self, name: &str) -> Result<SimpleLock> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        let wake = WakeOne::new(self, &keys);
        Ok(SimpleLock {
            client: self.clone(),
            probe: self.probe(Kind::SimpleLock, &name),
            name,
            keys,
            wake,
            lease: Lease::Fixed(DEFAULT_SIMPLE_LEASE),
        })
    }
}

/// A non-reentrant lock: the classic `SET NX PX` lock, done safely.
///
/// The key holds the holder's owner id; release deletes the key only if it still holds
/// that id, in one script, so a holder whose lease ran out can never delete the next
/// holder's lock. Each acquisition gets a [`FencingToken`](crate::FencingToken), as every
/// lock of this crate does. The lease is fixed (30 s) unless set otherwise; with
/// [`Lease::Watchdog`] the client's watchdog renews it while the guard lives. A second
/// acquire from the same task waits like any other: use [`Lock`](crate::Lock) for
/// re-entry.
///
/// Waiting is event-driven, as for a [`Lock`](crate::Lock): a release wakes one waiting
/// client, not every client with a waiter. A client registers as waiting when its
/// attempt is refused (in the same script), the release wakes the client that registered
/// first and is still connected, which wakes one of its waiters, and a client whose last
/// waiter gives up withdraws and, if the lock is free, wakes the next. Waiters also try
/// again when the holder's remaining lease, as they saw it, has passed.
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
/// use ferrisson_redis::Lease;
///
/// let lock = client.simple_lock("stock")?.with_lease(Lease::Fixed(Duration::from_secs(10)))?;
/// if let Some(guard) = lock.try_lock().await? {
///     assert!(lock.try_lock().await?.is_none()); // not reentrant
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SimpleLock {
    client: Client,
    name: Arc<str>,
    probe: Probe,
    keys: Keys,
    wake: WakeOne,
    lease: Lease,
}

impl fmt::Debug for SimpleLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimpleLock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl SimpleLock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.simple_lock("stock")?.name(), "stock");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson_redis::Lease;
    /// let renewed = client.simple_lock("stock")?.with_lease(Lease::Watchdog)?;
    /// let short = client.simple_lock("stock")?.with_lease(Lease::Fixed(Duration::from_secs(2)))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// Acquires the lock if it is free; `Ok(None)` otherwise. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
    /// if let Some(guard) = lock.try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an acquire whose caller went away is undone (its owner id's key is
    /// deleted if it landed).
    pub async fn try_lock(&self) -> Result<Option<SimpleLockGuard>> {
        try_once(&self.probe, self.attempt(Registration::Unsubscribed)).await
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.lock_timeout(Duration::from_secs(1)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`SimpleLock::try_lock`]; no subscription is left behind, and a
    /// client left with no waiter withdraws from the waiting clients.
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<SimpleLockGuard>> {
        self.wait(Some(wait)).await
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`SimpleLock::lock_timeout`].
    pub async fn lock(&self) -> Result<SimpleLockGuard> {
        self.wait(None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    /// Who holds the lock now and for how long (read-only; one round trip). A simple
    /// lock stores no token: the holder's is only on its guard.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
    /// let info = lock.inspect().await?;
    /// if let Some(holder) = info.holder {
    ///     println!("{} held by {holder}, ttl {:?}", info.name, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the key
    /// holds something other than a ferrisson lock.
    pub async fn inspect(&self) -> Result<SimpleLockInfo> {
        let (holder, pttl) = self
            .client
            .connection()
            .run(&SimpleInspect {
                key: self.keys.main(),
            })
            .await?;
        let holder = holder
            .map(|value| {
                value
                    .parse()
                    .map_err(|_| Error::Protocol(format!("simple lock holder {value:?}")))
            })
            .transpose()?;
        Ok(SimpleLockInfo {
            name: self.name.to_string(),
            holder,
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        })
    }

    /// Deletes the lock whoever holds it and wakes a waiter. The holder's guard sees
    /// the loss at its next renewal (a fixed lease, at its end). Returns whether a lock
    /// was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
    /// if lock.force_unlock().await? {
    ///     eprintln!("removed a stuck lock");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.wake
            .force_release(&self.client, self.keys.main())
            .await
    }

    /// Acquires, waiting at most `wait` (`None`: as long as it takes), listening on this
    /// client's own wake-up channel.
    async fn wait(&self, wait: Option<Duration>) -> Result<Option<SimpleLockGuard>> {
        self.wake
            .acquire(
                &self.client,
                &self.probe,
                &self.keys,
                wait,
                |registration| self.attempt(registration),
            )
            .await
    }

    async fn attempt(&self, registration: Registration) -> Result<Attempt<SimpleLockGuard>> {
        let spec = SingleSpec {
            client: &self.client,
            probe: &self.probe,
            keys: &self.keys,
            lease: self.lease,
            release: ReleaseSimple {
                keys: self.keys.clone(),
                wake: self.wake.clone(),
            },
        };
        let waiting = Waiting::of(registration);
        let attempt = single::attempt(spec, |owner, lease| async move {
            let reply = self
                .client
                .connection()
                .run(&SimpleAcquire {
                    key: self.keys.main(),
                    fence: self.keys.fence(),
                    waiters: self.wake.waiters(),
                    owner,
                    lease,
                    register: waiting.register(&self.client),
                })
                .await?;
            Ok(match reply {
                KeyAcquired::Granted { token } => SingleAnswer::Granted(token, ()),
                KeyAcquired::Held { pttl } => SingleAnswer::Held { pttl },
            })
        })
        .await?;
        Ok(attempt.map(|(inner, ())| SimpleLockGuard { inner }))
    }
}

/// A snapshot of a [`SimpleLock`], from [`SimpleLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
/// let info = lock.inspect().await?;
/// assert_eq!(info.name, lock.name());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimpleLockInfo {
    /// The lock's name.
    pub name: String,
    /// The owner holding the lock, if any.
    pub holder: Option<crate::OwnerId>,
    /// The lock's remaining time to live in Redis; `None` when free.
    pub ttl: Option<Duration>,
}

impl DistributedLock for SimpleLock {
    type Guard = SimpleLockGuard;

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::SIMPLE_LOCK
    }

    fn name(&self) -> &str {
        SimpleLock::name(self)
    }

    async fn lock(&self) -> Result<SimpleLockGuard> {
        SimpleLock::lock(self).await
    }

    async fn try_lock(&self) -> Result<Option<SimpleLockGuard>> {
        SimpleLock::try_lock(self).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<SimpleLockGuard>> {
        SimpleLock::lock_timeout(self, wait).await
    }
}

/// How a [`SimpleLockGuard`] releases (and a cancelled acquire is undone):
/// compare-and-delete on the owner id, waking one waiting client.
#[derive(Clone)]
struct ReleaseSimple {
    keys: Keys,
    wake: WakeOne,
}

impl SendRelease for ReleaseSimple {
    const DROPPED: &'static str = "releasing a dropped simple lock guard";

    async fn send(
        &self,
        client: &Client,
        owner: OwnerId,
        _release_id: ReleaseId,
    ) -> Result<Released> {
        // A simple lock has one hold per owner: deleting the key twice finds it gone, which
        // the release retry already reads as the first try having worked.
        let compared = client
            .connection()
            .run(&SimpleRelease {
                key: self.keys.main(),
                wake: self.wake.keys(),
                owner,
            })
            .await?;
        Ok(compared.into())
    }
}

/// Proof of holding a [`SimpleLock`]; released by `unlock()` or, best effort, on drop.
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::SimpleLock) -> ferrisson_redis::Result<()> {
/// let guard = lock.lock().await?;
/// println!("token {}", guard.fencing_token());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct SimpleLockGuard {
    inner: HoldGuard<ReleaseSimple>,
}

hold_guard_methods!(SimpleLockGuard, "the lock is free at once", token);

impl fmt::Debug for SimpleLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner
            .hold()
            .fmt_fields(&mut f.debug_struct("SimpleLockGuard"))
    }
}
