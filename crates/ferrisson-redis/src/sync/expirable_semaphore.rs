//! The permit-expirable semaphore: every permit has an id and a lease in server time, and
//! a permit whose holder vanished comes back when its lease runs out.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::error::{Error, Result};
use crate::api::fencing::FencingToken;
use crate::api::lease::{Lease, validate_lease};
use crate::backend::client::Client;
use crate::backend::holds::{Hold, Renewal};
use crate::backend::ids::PermitId;
use crate::backend::keys::Keys;
use crate::backend::scripts::semaphore::{
    SemaphoreAdd, SemaphoreDelete, SemaphoreDrain, SemaphoreSet,
};
use crate::backend::scripts::xsem::{
    PermitReturned, PermitTaken, XsemAcquire, XsemInspect, XsemKeys, XsemRelease, XsemSnapshot,
    XsemUpdateLease,
};
use crate::observe::acquire::Grant;
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::cleanup::spawn_cleanup;
use crate::primitive::release::resend_until_answered;
use crate::primitive::undo::send_or_undo;
use crate::primitive::wait::{Attempt, acquire_with_wait, holder_wait, try_once};
use crate::sync::semaphore::{DEFAULT_SEMAPHORE_RECHECK, validate_permits, validate_recheck};

/// At most this many held permits are listed by [`ExpirableSemaphore::inspect`].
const INSPECT_LIMIT: usize = 1000;

/// Most permits one call of [`ExpirableSemaphore::acquire_many`] (and its relatives) takes:
/// each has an id of its own, all sent in one script call.
///
/// ```
/// assert_eq!(ferrisson_redis::MAX_EXPIRABLE_PERMITS_PER_CALL, 1024);
/// ```
pub const MAX_EXPIRABLE_PERMITS_PER_CALL: u32 = 1024;

impl Client {
    /// A handle to the permit-expirable semaphore called `name` (no Redis traffic until
    /// used). Its permits are leased by the client's watchdog until
    /// [`ExpirableSemaphore::with_lease`] says otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let handle = client.expirable_semaphore("gpu-slots")?;
    /// assert!(client.expirable_semaphore("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn expirable_semaphore(&self, name: &str) -> Result<ExpirableSemaphore> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        Ok(ExpirableSemaphore {
            shared: Arc::new(Shared {
                client: self.clone(),
                probe: self.probe(Kind::ExpirableSemaphore, &name),
                name,
                held: keys.companion("permits"),
                keys,
            }),
            lease: Lease::Watchdog,
            recheck: DEFAULT_SEMAPHORE_RECHECK,
        })
    }
}

/// A distributed semaphore whose permits expire (Redisson's
/// `RPermitExpirableSemaphore`).
///
/// Every acquired permit gets a [`PermitId`] and a lease. The lease runs on the Redis
/// server's clock (`TIME` inside the scripts), so a skewed client clock cannot cut it
/// short. A permit whose lease ran out is given back by the next acquire: a holder that
/// crashed, or was killed, holds its permit at most one lease. The lease is set on the
/// handle with [`ExpirableSemaphore::with_lease`]: [`Lease::Watchdog`] (the default)
/// renews every held permit through the client's watchdog while its guard lives, and the
/// permit's [`lost`](ExpirablePermit::lost) fires when a renewal finds it gone;
/// [`Lease::Fixed`] leases it once, and [`ExpirablePermit::update_lease`] extends it.
///
/// Keys: `{name}` holds the free permits, `{name}:permits` the held permits and their
/// expiry (a sorted set). Like [`Semaphore`](crate::Semaphore), it must be initialised
/// with [`ExpirableSemaphore::try_set_permits`] (or `set_permits`, `add_permits`), and
/// acquiring from one that does not exist fails at once with [`Error::NotInitialized`].
///
/// A waiter wakes on a release message, when the earliest held permit's lease runs out,
/// or after the recheck interval (1 s by default), whichever is first.
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
/// use ferrisson_redis::Lease;
///
/// let semaphore = client
///     .expirable_semaphore("gpu-slots")?
///     .with_lease(Lease::Fixed(Duration::from_secs(30)))?;
/// semaphore.try_set_permits(2).await?;
///
/// let permit = semaphore.acquire().await?;
/// println!("holding permit {}", permit.id());
/// permit.update_lease(Duration::from_secs(60)).await?; // need more time
/// permit.release().await?; // Err(LeaseExpired) would mean the lease had run out
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ExpirableSemaphore {
    shared: Arc<Shared>,
    lease: Lease,
    recheck: Duration,
}

/// What a semaphore handle and its permits share.
struct Shared {
    client: Client,
    probe: Probe,
    name: Arc<str>,
    keys: Keys,
    /// The sorted set of held permits, as the main key of the permits' holds.
    held: Keys,
}

impl fmt::Debug for ExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirableSemaphore")
            .field("name", &self.shared.name)
            .field("lease", &self.lease)
            .field("recheck", &self.recheck)
            .finish_non_exhaustive()
    }
}

/// What Redis holds for an [`ExpirableSemaphore`], from [`ExpirableSemaphore::inspect`].
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let info = client.expirable_semaphore("gpu-slots")?.inspect().await?;
/// for permit in &info.held {
///     println!("{} expires in {:?}", permit.id, permit.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpirableSemaphoreInfo {
    /// The semaphore's name.
    pub name: String,
    /// Free permits, counting those whose lease ran out (the next acquire reclaims them);
    /// `None` when the semaphore does not exist.
    pub available_permits: Option<i64>,
    /// How many permits are held with a lease still running.
    pub held_count: u64,
    /// Held permits, earliest expiry first (at most 1,000 of them).
    pub held: Vec<HeldPermit>,
}

/// One held permit of an [`ExpirableSemaphore`], from [`ExpirableSemaphore::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    /// The permit's id.
    pub id: PermitId,
    /// Time left on its lease, by the server's clock.
    pub ttl: Duration,
}

impl ExpirableSemaphore {
    /// The semaphore's name.
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.expirable_semaphore("gpu")?.name(), "gpu");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The same semaphore with another lease for the permits it acquires from now on:
    /// [`Lease::Watchdog`] (the default) renews each permit while its guard lives, every
    /// third of the client's watchdog lease; [`Lease::Fixed`] leases it once for that
    /// long.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson_redis::Lease;
    /// let semaphore = client
    ///     .expirable_semaphore("gpu")?
    ///     .with_lease(Lease::Fixed(Duration::from_secs(30)))?;
    /// assert_eq!(semaphore.lease(), Lease::Fixed(Duration::from_secs(30)));
    /// # Ok(()) }
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// The lease permits are acquired with.
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.expirable_semaphore("gpu")?.lease(), ferrisson_redis::Lease::Watchdog);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The same semaphore whose waiters ask Redis again after at most `interval` when
    /// neither a release message nor a permit expiry comes first (default 1 s).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `interval` is under 1 ms.
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let semaphore = client.expirable_semaphore("gpu")?.with_recheck_interval(Duration::from_secs(5))?;
    /// # Ok(()) }
    /// ```
    pub fn with_recheck_interval(mut self, interval: Duration) -> Result<Self> {
        self.recheck = validate_recheck(interval)?;
        Ok(self)
    }

    /// Creates the semaphore with `permits` free permits, unless it exists already.
    /// Returns whether it was created.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.try_set_permits(4).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        // SET NX: a repeat finds the counter set and answers false, so it is not resent.
        let set: Option<String> = self
            .shared
            .client
            .connection()
            .query(
                redis::cmd("SET")
                    .arg(self.shared.keys.main())
                    .arg(permits)
                    .arg("NX"),
            )
            .await?;
        Ok(set.is_some())
    }

    /// Sets the free permits to `permits`, whatever they were (expired permits are
    /// returned first, so `permits` is what is available afterwards); creates the
    /// semaphore if it does not exist. Permits held with a lease running stay held and
    /// come back when released. When the count grew, as many waiters are woken.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.set_permits(8).await?; // scaled up to eight GPUs
    /// assert_eq!(semaphore.available_permits().await?, 8);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached (it may or may not have been set:
    /// setting it again is harmless).
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        self.shared
            .client
            .connection()
            .run(&SemaphoreSet {
                key: self.shared.keys.main(),
                channel: self.shared.keys.channel(),
                held: Some(self.shared.held.main()),
                permits,
            })
            .await?;
        Ok(())
    }

    /// Adds `delta` free permits (removes them when negative; the count may go below
    /// zero). Creates the semaphore if it does not exist. Added permits wake as many
    /// waiters.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.add_permits(1).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `delta` is zero, [`Error::Store`] when Redis
    /// cannot be reached.
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        if delta == 0 {
            return Err(Error::invalid("permit delta must not be zero"));
        }
        self.shared
            .client
            .connection()
            .run(&SemaphoreAdd {
                key: self.shared.keys.main(),
                channel: self.shared.keys.channel(),
                delta,
            })
            .await?;
        Ok(())
    }

    /// Takes every available permit at once (expired ones included) and returns how many
    /// it took (0 when none were available). They are not given back by themselves:
    /// return them with [`ExpirableSemaphore::add_permits`] or
    /// [`ExpirableSemaphore::set_permits`].
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let taken = semaphore.drain().await?; // close the gate
    /// // ... maintenance ...
    /// semaphore.set_permits(u32::try_from(taken).unwrap_or(u32::MAX)).await?; // reopen
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist, [`Error::Store`] when
    /// Redis cannot be reached.
    pub async fn drain(&self) -> Result<u64> {
        self.shared
            .client
            .connection()
            .run(&SemaphoreDrain {
                key: self.shared.keys.main(),
                held: Some(self.shared.held.main()),
            })
            .await?
            .0
            .ok_or_else(|| self.shared.not_initialized())
    }

    /// Free permits now, counting those whose lease ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let free = semaphore.available_permits().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist, [`Error::Store`] when
    /// Redis cannot be reached.
    pub async fn available_permits(&self) -> Result<i64> {
        self.read(0)
            .await?
            .available_permits
            .ok_or_else(|| self.shared.not_initialized())
    }

    /// What Redis holds for this semaphore now: free permits and every held permit with
    /// its remaining lease (at most 1,000, earliest expiry first). Read-only.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let info = semaphore.inspect().await?;
    /// println!("{} free, {} held", info.available_permits.unwrap_or(0), info.held_count);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn inspect(&self) -> Result<ExpirableSemaphoreInfo> {
        self.read(INSPECT_LIMIT).await
    }

    /// Acquires one permit, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist (also when it is
    /// deleted while waiting), [`Error::Store`] when Redis cannot be reached. An attempt
    /// that fails after it was sent (its reply timed out, or the connection broke) may
    /// have taken permits on the server: they are given back before the error is
    /// returned, or, if Redis cannot be reached for that either, when their lease runs out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit taken (an acquire
    /// already sent is released when its reply arrives) and no subscription.
    pub async fn acquire(&self) -> Result<ExpirablePermit> {
        self.wait_for(1, None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.shared.name))?
            .into_one()
    }

    /// Acquires one permit if one is free now (or expired); `Ok(None)` if not. One round
    /// trip.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// if let Some(permit) = semaphore.try_acquire().await? {
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ExpirableSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ExpirableSemaphore::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<ExpirablePermit>> {
        try_once(&self.shared.probe, self.attempt(1))
            .await?
            .map(Granted::into_one)
            .transpose()
    }

    /// Acquires one permit, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(permit) = semaphore.acquire_timeout(Duration::from_secs(2)).await? {
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ExpirableSemaphore::acquire`]; a semaphore that does not exist fails at once
    /// rather than after `wait`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ExpirableSemaphore::acquire`].
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<Option<ExpirablePermit>> {
        self.wait_for(1, Some(wait))
            .await?
            .map(Granted::into_one)
            .transpose()
    }

    /// Acquires `permits` permits at once, all or none, waiting as long as it takes. Each
    /// permit has an id and a lease of its own, and is released on its own.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let permits = semaphore.acquire_many(3).await?;
    /// assert_eq!(permits.len(), 3);
    /// for permit in permits {
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `permits` is zero or above
    /// [`MAX_EXPIRABLE_PERMITS_PER_CALL`], otherwise as [`ExpirableSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ExpirableSemaphore::acquire`].
    pub async fn acquire_many(&self, permits: u32) -> Result<Vec<ExpirablePermit>> {
        self.wait_for(permits, None)
            .await?
            .map(Granted::into_vec)
            .ok_or_else(|| Error::wait_ended(&self.shared.name))
    }

    /// Acquires `permits` permits at once if that many are free now (or expired);
    /// `Ok(None)` if not. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// if let Some(permits) = semaphore.try_acquire_many(2).await? {
    ///     assert_eq!(permits.len(), 2);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ExpirableSemaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ExpirableSemaphore::acquire`].
    pub async fn try_acquire_many(&self, permits: u32) -> Result<Option<Vec<ExpirablePermit>>> {
        validate_expirable_permits(permits)?;
        Ok(try_once(&self.shared.probe, self.attempt(permits))
            .await?
            .map(Granted::into_vec))
    }

    /// Acquires `permits` permits at once, all or none, waiting at most `wait`;
    /// `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(permits) = semaphore.acquire_many_timeout(2, Duration::from_secs(1)).await? {
    ///     assert_eq!(permits.len(), 2);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ExpirableSemaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ExpirableSemaphore::acquire`].
    pub async fn acquire_many_timeout(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<Vec<ExpirablePermit>>> {
        Ok(self
            .wait_for(permits, Some(wait))
            .await?
            .map(Granted::into_vec))
    }

    /// Releases the permit `id`, whoever acquired it (for instance an id another process
    /// reported before it went quiet).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore, id: ferrisson_redis::PermitId) -> ferrisson_redis::Result<()> {
    /// semaphore.release(id).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the permit was unknown (already released, or
    /// reclaimed after its lease ran out) or its lease had run out: it is free now
    /// either way. After a lost reply a retry cannot tell its own first try from a
    /// reclaim, and reports the same. [`Error::Store`] when Redis cannot be reached
    /// (after retries; a release is safe to repeat).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release may or may not have been applied, and calling it
    /// again is harmless.
    pub async fn release(&self, id: PermitId) -> Result<()> {
        self.shared.release(id, None).await
    }

    /// Sets the lease of permit `id` to `lease` from now. Returns false when the permit is
    /// no longer held or its lease has already run out (it is not revived).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let id = semaphore.acquire().await?.forget();
    /// // ... later, possibly in another process that was handed the id ...
    /// if !semaphore.update_lease(id, Duration::from_secs(10)).await? {
    ///     println!("too late: the permit expired");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or over a year, [`Error::Store`]
    /// when Redis cannot be reached.
    pub async fn update_lease(&self, id: PermitId, lease: Duration) -> Result<bool> {
        self.shared.update_lease(id, lease).await
    }

    /// Deletes the semaphore and its held permits; waiters are woken and fail with
    /// [`Error::NotInitialized`]. Returns whether it existed.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.delete().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn delete(&self) -> Result<bool> {
        let deleted = self
            .shared
            .client
            .connection()
            .run(&SemaphoreDelete {
                keys: &[self.shared.keys.main(), self.shared.held.main()],
                channel: self.shared.keys.channel(),
            })
            .await?;
        Ok(deleted > 0)
    }

    async fn read(&self, limit: usize) -> Result<ExpirableSemaphoreInfo> {
        let snapshot = self
            .shared
            .client
            .connection()
            .run(&XsemInspect {
                keys: self.shared.xsem_keys(),
                limit,
            })
            .await?;
        let mut info = ExpirableSemaphoreInfo {
            name: self.shared.name.to_string(),
            available_permits: None,
            held_count: 0,
            held: Vec::new(),
        };
        if let XsemSnapshot::Present { free, live, held } = snapshot {
            info.available_permits = Some(free);
            info.held_count = live;
            info.held = held
                .into_iter()
                .map(|(id, ttl)| HeldPermit { id, ttl })
                .collect();
        }
        Ok(info)
    }

    async fn wait_for(&self, permits: u32, wait: Option<Duration>) -> Result<Option<Granted>> {
        validate_expirable_permits(permits)?;
        acquire_with_wait(
            &self.shared.client,
            &self.shared.probe,
            self.shared.keys.channel(),
            wait,
            || self.attempt(permits),
        )
        .await
    }

    async fn attempt(&self, permits: u32) -> Result<Attempt<Granted>> {
        let lease = self.lease.duration(self.shared.client.watchdog_lease());
        let sent_at = Instant::now();
        let (ids, taken) = self.send_acquire(PermitIds::random(permits), lease).await?;
        let permit = |id| ExpirablePermit::new(&self.shared, id, self.lease, sent_at + lease);
        match taken {
            PermitTaken::Taken => Ok(Attempt::Acquired(match ids {
                PermitIds::One(id) => Granted::One(permit(id)),
                PermitIds::Many(ids) => Granted::Many(ids.iter().copied().map(permit).collect()),
            })),
            PermitTaken::NoneFree { earliest_expiry } => Ok(Attempt::Held(Some(
                holder_wait(earliest_expiry).map_or(self.recheck, |e| e.min(self.recheck)),
            ))),
            PermitTaken::Missing => Err(self.shared.not_initialized()),
        }
    }

    /// Sends the acquire script so that permits taken for a caller that went away are
    /// released when the reply arrives (on a spawned task, only then: see `send_or_undo`).
    async fn send_acquire(
        &self,
        ids: PermitIds,
        lease: Duration,
    ) -> Result<(PermitIds, PermitTaken)> {
        let shared = Arc::clone(&self.shared);
        send_or_undo(
            &self.shared.name,
            async move {
                let taken = shared
                    .client
                    .connection()
                    .run(&XsemAcquire {
                        keys: shared.xsem_keys(),
                        ids: ids.as_slice(),
                        lease,
                    })
                    .await;
                match taken {
                    Ok(taken) => Ok((shared, ids, taken)),
                    Err(error) => {
                        shared.give_back_after_failed_acquire(ids.as_slice()).await;
                        Err(error)
                    }
                }
            },
            move |(shared, ids, taken)| async move {
                if taken == PermitTaken::Taken {
                    for &id in ids.as_slice() {
                        // Unknown or late: gone already, which is what the undo wants.
                        match shared.release(id, None).await {
                            Ok(()) | Err(Error::LeaseExpired { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(())
            },
        )
        .await
        .map(|(_, ids, taken)| (ids, taken))
    }
}

/// The ids of one acquire's permits: one kept inline (`acquire()`, no allocation), or
/// several.
enum PermitIds {
    One(PermitId),
    Many(Box<[PermitId]>),
}

impl PermitIds {
    fn random(permits: u32) -> Self {
        if permits == 1 {
            Self::One(PermitId::random())
        } else {
            Self::Many((0..permits).map(|_| PermitId::random()).collect())
        }
    }

    fn as_slice(&self) -> &[PermitId] {
        match self {
            Self::One(id) => std::slice::from_ref(id),
            Self::Many(ids) => ids,
        }
    }
}

/// The permits one acquire took: one (no `Vec` for `acquire()`), or several.
enum Granted {
    One(ExpirablePermit),
    Many(Vec<ExpirablePermit>),
}

/// Permits have no fencing token.
impl Grant for Granted {}

impl Granted {
    fn into_vec(self) -> Vec<ExpirablePermit> {
        match self {
            Self::One(permit) => vec![permit],
            Self::Many(permits) => permits,
        }
    }

    fn into_one(self) -> Result<ExpirablePermit> {
        match self {
            Self::One(permit) => Ok(permit),
            Self::Many(permits) => one(permits),
        }
    }
}

/// The one permit of a single-permit acquire.
fn one(permits: Vec<ExpirablePermit>) -> Result<ExpirablePermit> {
    permits
        .into_iter()
        .next()
        .ok_or_else(|| Error::Protocol("an acquire of one permit granted none".to_owned()))
}

/// Acquiring zero permits is a caller's mistake; more than fit one call are refused.
fn validate_expirable_permits(permits: u32) -> Result<()> {
    validate_permits(permits)?;
    if permits > MAX_EXPIRABLE_PERMITS_PER_CALL {
        return Err(Error::invalid(format!(
            "at most {MAX_EXPIRABLE_PERMITS_PER_CALL} expirable permits per call, got {permits}"
        )));
    }
    Ok(())
}

impl Shared {
    fn xsem_keys(&self) -> XsemKeys<'_> {
        XsemKeys {
            free: self.keys.main(),
            held: self.held.main(),
            channel: self.keys.channel(),
        }
    }

    fn not_initialized(&self) -> Error {
        Error::NotInitialized {
            name: self.name.to_string(),
        }
    }

    fn lease_expired(&self) -> Error {
        Error::LeaseExpired {
            name: self.name.to_string(),
        }
    }

    /// Releases `id`; `hold` is its holder's record, when known (its deadline is the
    /// holder's own estimate of the lease's end).
    /// An acquire that failed may have run with its reply lost (a response timeout, a
    /// connection cut after the server ran it): its ids are returned, which is a no-op
    /// for ids it never took. Best effort: a permit this cannot return comes back when
    /// its lease runs out.
    async fn give_back_after_failed_acquire(&self, ids: &[PermitId]) {
        for &id in ids {
            if let Err(error) = self.release(id, None).await
                && !matches!(error, Error::LeaseExpired { .. })
            {
                tracing::debug!(
                    semaphore = %self.name,
                    permit = %id,
                    %error,
                    "could not give back a permit of a failed acquire; it returns when its lease runs out"
                );
            }
        }
    }

    async fn release(&self, id: PermitId, hold: Option<&Hold>) -> Result<()> {
        // Resent after any connection error: releasing an id twice returns it once.
        let answered =
            resend_until_answered(&self.name, Error::is_connection_error, move || async move {
                self.client
                    .connection()
                    .run(&XsemRelease {
                        keys: self.xsem_keys(),
                        id,
                    })
                    .await
            })
            .await?;
        match answered.reply {
            PermitReturned::Returned => Ok(()),
            // After a lost reply, "unknown" means either that the first try released
            // it, or that the lease ran out and another acquire reclaimed it (and
            // may hold it now). Only a local deadline still ahead rules the second
            // out (the server's lease never ends before it); otherwise the permit
            // cannot be shown to have been running.
            PermitReturned::Unknown if answered.resent && hold.is_some_and(Hold::is_held) => Ok(()),
            PermitReturned::Unknown | PermitReturned::ReturnedLate => Err(self.lease_expired()),
        }
    }

    async fn update_lease(&self, id: PermitId, lease: Duration) -> Result<bool> {
        validate_lease(lease)?;
        self.client
            .connection()
            .run(&XsemUpdateLease {
                held: self.held.main(),
                id,
                lease,
            })
            .await
    }
}

/// One permit of an [`ExpirableSemaphore`]; released when released or dropped, or by
/// its lease running out.
///
/// `release().await` is the checked way to give it back. Dropping the guard releases on
/// a spawned task (it never blocks). [`ExpirablePermit::forget`] keeps it until its
/// lease runs out (or someone releases its id). Like a lock guard, it says how long it is
/// known to be valid: [`is_held`](ExpirablePermit::is_held),
/// [`remaining`](ExpirablePermit::remaining) and [`lost`](ExpirablePermit::lost). It has
/// no fencing token: permits are not exclusive.
///
/// ```no_run
/// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
/// let permit = semaphore.acquire().await?;
/// tokio::select! {
///     () = permit.lost() => eprintln!("permit lost: stop using the slot"),
///     () = tokio::time::sleep(Duration::from_secs(1)) => {}
/// }
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the permit releases it at once"]
pub struct ExpirablePermit {
    shared: Arc<Shared>,
    id: PermitId,
    /// The permit's validity (a local deadline from before the acquire was sent, moved by
    /// renewals and updates) and its renewal by the watchdog.
    hold: Arc<Hold>,
    released: bool,
}

impl fmt::Debug for ExpirablePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirablePermit")
            .field("semaphore", &self.shared.name)
            .field("id", &self.id)
            .field("held", &self.hold.is_held())
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

/// A permit has no fencing token.
impl Grant for ExpirablePermit {}

impl ExpirablePermit {
    fn new(shared: &Arc<Shared>, id: PermitId, lease: Lease, deadline: Instant) -> Self {
        let hold = Arc::new(
            Hold::new(
                &shared.probe,
                shared.held.clone(),
                id.as_owner(),
                // Permits have no token; the hold record's is never read.
                FencingToken::new(0),
                None,
                deadline,
            )
            .renewed_as(Renewal::Permit),
        );
        hold.meter().start();
        if lease == Lease::Watchdog {
            shared.client.inner.watchdog.watch(&hold);
        }
        Self {
            shared: Arc::clone(shared),
            id,
            hold,
            released: false,
        }
    }

    /// The semaphore's name.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// assert_eq!(permit.name(), semaphore.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The permit's id, as stored in Redis.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// let id = permit.id().to_string(); // e.g. to hand to another process
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> PermitId {
        self.id
    }

    /// True until the permit is found gone, or its lease runs out without a renewal
    /// (measured on this machine's monotonic clock from before the request that set it,
    /// so never later than the server's view).
    ///
    /// ```no_run
    /// # async fn demo(permit: ferrisson_redis::ExpirablePermit) {
    /// if !permit.is_held() {
    ///     return; // the slot may be someone else's now
    /// }
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// How long the lease has left without another renewal, by this client's clock;
    /// zero once lost.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// assert!(permit.remaining() <= std::time::Duration::from_secs(30)); // the default lease
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.hold.remaining()
    }

    /// Resolves when the permit is no longer held: a renewal found it gone, or its lease
    /// ran out (renewals failing, or a fixed lease ending).
    ///
    /// ```no_run
    /// # async fn demo(permit: ferrisson_redis::ExpirablePermit) {
    /// tokio::select! {
    ///     () = permit.lost() => eprintln!("permit lost"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        self.hold.lost().await;
    }

    /// Sets the lease to `lease` from now. Returns false when the permit's lease had
    /// already run out (the permit is lost and not revived). Under a
    /// [`Lease::Watchdog`] lease the watchdog's next renewal sets the watchdog lease
    /// again.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let permit = semaphore.acquire().await?;
    /// assert!(permit.update_lease(Duration::from_secs(20)).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or over a year, [`Error::Store`]
    /// when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is either updated or not, and [`ExpirablePermit::remaining`]
    /// keeps the older estimate until a reply confirms the update.
    pub async fn update_lease(&self, lease: Duration) -> Result<bool> {
        let sent_at = Instant::now();
        let updated = self.shared.update_lease(self.id, lease).await?;
        if updated {
            self.hold.extend(sent_at + lease);
        } else {
            self.hold.mark_lost();
        }
        Ok(updated)
    }

    /// Releases the permit and wakes one waiter.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// if let Err(ferrisson_redis::Error::LeaseExpired { .. }) = permit.release().await {
    ///     println!("held past its lease: someone else may have had it too");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when its lease had already run out (it was free again
    /// before this call, or reclaimed and maybe taken by another holder), or when
    /// [`is_held`](ExpirablePermit::is_held) was already false (the permit, if Redis
    /// still counted it taken, is returned all the same). Success is never
    /// a guess: when a reply was lost and the retry finds the permit gone after this
    /// permit's own [`remaining`](ExpirablePermit::remaining) reached zero, the answer is
    /// `LeaseExpired`. [`Error::Store`] when Redis cannot be reached after retries; the
    /// permit then comes back when its lease runs out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the permit is released now, or by its lease.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        self.hold.stop_renewing();
        let release = self.shared.release(self.id, Some(&self.hold));
        self.hold.release(None, true, release).await
    }

    /// Keeps the permit taken until its lease runs out (a watchdog lease is no longer
    /// renewed), and returns its id, which [`ExpirableSemaphore::release`] and
    /// [`ExpirableSemaphore::update_lease`] still accept.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::ExpirableSemaphore) -> ferrisson_redis::Result<()> {
    /// let id = semaphore.acquire().await?.forget();
    /// semaphore.release(id).await?;
    /// # Ok(()) }
    /// ```
    pub fn forget(mut self) -> PermitId {
        self.released = true;
        self.hold.stop_renewing();
        self.id
    }
}

impl Drop for ExpirablePermit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.hold.stop_renewing();
        let shared = Arc::clone(&self.shared);
        let hold = Arc::clone(&self.hold);
        let id = self.id;
        spawn_cleanup(
            &self.shared.name,
            "releasing a dropped expirable permit",
            "it is freed when its lease runs out",
            async move {
                let release = shared.release(id, None);
                match hold.meter().release(None, true, release, |()| false).await {
                    // Expired or reclaimed: free already, nothing left to release.
                    Err(Error::LeaseExpired { .. }) => Ok(()),
                    other => other,
                }
            },
        );
    }
}

impl ferrisson_core::DistributedSemaphore for ExpirableSemaphore {
    type Permit = ExpirablePermit;

    fn name(&self) -> &str {
        ExpirableSemaphore::name(self)
    }

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::EXPIRABLE_SEMAPHORE
    }

    async fn acquire(&self) -> Result<ExpirablePermit> {
        ExpirableSemaphore::acquire(self).await
    }

    async fn try_acquire(&self) -> Result<Option<ExpirablePermit>> {
        ExpirableSemaphore::try_acquire(self).await
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<ExpirablePermit>> {
        ExpirableSemaphore::acquire_timeout(self, wait).await
    }
}

impl ferrisson_core::Permit for ExpirablePermit {
    fn name(&self) -> &str {
        ExpirablePermit::name(self)
    }

    async fn release(self) -> Result<()> {
        ExpirablePermit::release(self).await
    }
}

/// A permit with a lease is a hold like a lock's: valid while renewed, lost when its
/// lease runs out or it is reclaimed.
impl ferrisson_core::Guard for ExpirablePermit {
    fn name(&self) -> &str {
        ExpirablePermit::name(self)
    }

    fn is_held(&self) -> bool {
        ExpirablePermit::is_held(self)
    }

    fn remaining(&self) -> Duration {
        ExpirablePermit::remaining(self)
    }

    async fn lost(&self) {
        ExpirablePermit::lost(self).await;
    }

    async fn unlock(self) -> Result<()> {
        ExpirablePermit::release(self).await
    }
}
