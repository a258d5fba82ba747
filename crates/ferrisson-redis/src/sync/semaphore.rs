//! The counting semaphore: a permit counter in Redis; a release wakes as many waiters as
//! permits came back.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::error::{Error, Result, failed_command};
use crate::backend::client::Client;
use crate::backend::keys::Keys;
use crate::backend::scripts::semaphore::{
    PermitsTaken, SemaphoreAcquire, SemaphoreAdd, SemaphoreDelete, SemaphoreDrain,
    SemaphoreRelease, SemaphoreSet,
};
use crate::observe::acquire::Grant;
use crate::observe::hold::HoldMeter;
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::cleanup::spawn_cleanup;
use crate::primitive::release::resend_until_answered;
use crate::primitive::undo::send_or_undo;
use crate::primitive::wait::{Attempt, acquire_with_wait, try_once};

/// How long a waiter sleeps at most before asking Redis again when no release message
/// came: the bound on what a lost message costs (see [`Semaphore::with_recheck_interval`]).
///
/// ```
/// assert_eq!(ferrisson_redis::DEFAULT_SEMAPHORE_RECHECK, std::time::Duration::from_secs(1));
/// ```
pub const DEFAULT_SEMAPHORE_RECHECK: Duration = Duration::from_secs(1);

impl Client {
    /// A handle to the counting semaphore called `name` (no Redis traffic until used).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let handle = client.semaphore("renderers")?;
    /// assert!(client.semaphore("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        Ok(Semaphore {
            client: self.clone(),
            probe: self.probe(Kind::Semaphore, &name),
            name,
            keys,
            recheck: DEFAULT_SEMAPHORE_RECHECK,
        })
    }
}

/// A distributed counting semaphore (Redisson's `RSemaphore`).
///
/// The number of available permits is one Redis counter under the key `{name}` (plus the
/// client's namespace). It must be initialised with [`Semaphore::try_set_permits`] (or
/// [`Semaphore::set_permits`], [`Semaphore::add_permits`]) before use: acquiring from a
/// semaphore that does not exist fails at once with [`Error::NotInitialized`] instead of
/// waiting out its timeout.
///
/// Acquiring returns a [`SemaphorePermit`] guard that gives the permits back when
/// released or dropped, or keeps them taken with [`SemaphorePermit::forget`]. Permits are
/// not tied to an owner and have no expiry: permits held by a process that dies stay
/// taken. Use [`ExpirableSemaphore`](crate::ExpirableSemaphore) when holders may vanish.
///
/// Waiting is event-driven: a release publishes how many permits came back and each
/// client wakes that many of its local waiters through its one shared subscription. A
/// waiter that got no message asks Redis again after the recheck interval (1 s by
/// default), so a lost message costs at most that. Waiters are not queued: a waiter for
/// several permits can be overtaken by waiters for fewer, and a wake-up that goes to a
/// waiter wanting more permits than came back is spent, so with mixed sizes a waiter that
/// could have gone may wait for the next release or its recheck.
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let semaphore = client.semaphore("pdf-renderers")?;
/// semaphore.try_set_permits(3).await?; // false if it was already set up
///
/// let permit = semaphore.acquire().await?;
/// assert!(semaphore.available_permits().await? <= 2);
/// // ... use the scarce resource ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    name: Arc<str>,
    probe: Probe,
    keys: Keys,
    recheck: Duration,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("recheck", &self.recheck)
            .finish_non_exhaustive()
    }
}

/// What Redis holds for a [`Semaphore`], from [`Semaphore::inspect`].
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let info = client.semaphore("pdf-renderers")?.inspect().await?;
/// match info.available_permits {
///     Some(n) => println!("{}: {n} permits available", info.name),
///     None => println!("{}: not initialised", info.name),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name.
    pub name: String,
    /// Permits available now (negative after removing more than were free); `None` when
    /// the semaphore does not exist.
    pub available_permits: Option<i64>,
}

impl Semaphore {
    /// The semaphore's name.
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.semaphore("renderers")?.name(), "renderers");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same semaphore whose waiters ask Redis again after at most `interval` when no
    /// release message arrives (default [`DEFAULT_SEMAPHORE_RECHECK`]). Shorter bounds
    /// what a lost message costs; longer sends less while waiting.
    ///
    /// ```
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let semaphore = client.semaphore("jobs")?.with_recheck_interval(Duration::from_secs(5))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `interval` is under 1 ms.
    pub fn with_recheck_interval(mut self, interval: Duration) -> Result<Self> {
        self.recheck = validate_recheck(interval)?;
        Ok(self)
    }

    /// Creates the semaphore with `permits` available permits, unless it exists already.
    /// Returns whether it was created. Zero permits is allowed: a closed gate that
    /// [`Semaphore::add_permits`] opens later.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// if semaphore.try_set_permits(10).await? {
    ///     println!("created with 10 permits");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        // SET NX: a repeat finds the counter set and answers false, so it is not resent.
        let set: Option<String> = self
            .client
            .connection()
            .query(
                redis::cmd("SET")
                    .arg(self.keys.main())
                    .arg(permits)
                    .arg("NX"),
            )
            .await?;
        Ok(set.is_some())
    }

    /// Sets the available permits to `permits`, whatever they were (creating the
    /// semaphore if it does not exist). Permits out at that moment still come back when
    /// released, on top of `permits`. When the count grew, as many waiters are woken.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.set_permits(5).await?; // whatever it was before
    /// assert_eq!(semaphore.available_permits().await?, 5);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached (it may or may not have been set:
    /// setting it again is harmless).
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        self.client
            .connection()
            .run(&SemaphoreSet {
                key: self.keys.main(),
                channel: self.keys.channel(),
                held: None,
                permits,
            })
            .await?;
        Ok(())
    }

    /// Adds `delta` permits (removes them when negative; available permits may go below
    /// zero, and acquirers then wait until enough come back). Creates the semaphore with
    /// `delta` permits if it does not exist. Added permits wake as many waiters.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.add_permits(2).await?; // two more renderers came online
    /// semaphore.add_permits(-1).await?; // one went away
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
        self.client
            .connection()
            .run(&SemaphoreAdd {
                key: self.keys.main(),
                channel: self.keys.channel(),
                delta,
            })
            .await?;
        Ok(())
    }

    /// The number of permits available now (negative after removing more than were free).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let free = semaphore.available_permits().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist, [`Error::Store`] when
    /// Redis cannot be reached.
    pub async fn available_permits(&self) -> Result<i64> {
        self.inspect()
            .await?
            .available_permits
            .ok_or_else(|| self.not_initialized())
    }

    /// Takes every available permit at once and returns how many it took (0 when none
    /// were available). They are not given back by themselves: return them with
    /// [`Semaphore::add_permits`].
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let taken = semaphore.drain().await?; // close the gate
    /// // ... maintenance ...
    /// if let Ok(n) = i64::try_from(taken) && n > 0 {
    ///     semaphore.add_permits(n).await?; // reopen
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist, [`Error::Store`] when
    /// Redis cannot be reached.
    pub async fn drain(&self) -> Result<u64> {
        self.client
            .connection()
            .run(&SemaphoreDrain {
                key: self.keys.main(),
                held: None,
            })
            .await?
            .0
            .ok_or_else(|| self.not_initialized())
    }

    /// Acquires one permit, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// // ... at most N tasks anywhere run this ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist (also when it is
    /// deleted while waiting), [`Error::Store`] when Redis cannot be reached. Permits of
    /// a plain semaphore carry no owner: an attempt that fails after the server ran it
    /// (its reply timed out, or the connection broke in between) leaves its permits
    /// taken, and nothing can tell them from held ones. Where that matters, use an
    /// [`ExpirableSemaphore`](crate::ExpirableSemaphore), whose permits have ids and
    /// leases, or count permits back with [`Semaphore::add_permits`] after such an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit taken (an acquire
    /// already sent is given back when its reply arrives) and no subscription.
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        self.acquire_many(1).await
    }

    /// Acquires `permits` permits at once, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let permits = semaphore.acquire_many(3).await?;
    /// assert_eq!(permits.permits(), 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `permits` is zero, otherwise as
    /// [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn acquire_many(&self, permits: u32) -> Result<SemaphorePermit> {
        self.wait_for(permits, None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    /// Acquires one permit if one is available now; `Ok(None)` if not. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// match semaphore.try_acquire().await? {
    ///     Some(permit) => permit.release().await?,
    ///     None => println!("busy, try later"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<SemaphorePermit>> {
        self.try_acquire_many(1).await
    }

    /// Acquires `permits` permits if that many are available now; `Ok(None)` if not.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// if let Some(permits) = semaphore.try_acquire_many(2).await? {
    ///     permits.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn try_acquire_many(&self, permits: u32) -> Result<Option<SemaphorePermit>> {
        validate_permits(permits)?;
        try_once(&self.probe, self.attempt(permits)).await
    }

    /// Acquires one permit, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let Some(permit) = semaphore.acquire_timeout(Duration::from_millis(500)).await? else {
    ///     return Ok(()); // shed load
    /// };
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`]; a semaphore that does not exist fails at once rather
    /// than after `wait`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<Option<SemaphorePermit>> {
        self.wait_for(1, Some(wait)).await
    }

    /// Acquires `permits` permits at once, waiting at most `wait`; `Ok(None)` when the
    /// wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(permits) = semaphore.acquire_many_timeout(2, Duration::from_secs(1)).await? {
    ///     permits.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn acquire_many_timeout(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphorePermit>> {
        self.wait_for(permits, Some(wait)).await
    }

    /// What Redis holds for this semaphore now; read-only.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let info = semaphore.inspect().await?;
    /// println!("{info:?}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn inspect(&self) -> Result<SemaphoreInfo> {
        let available: Option<i64> = self
            .client
            .connection()
            .query_resendable(redis::cmd("GET").arg(self.keys.main()))
            .await?;
        Ok(SemaphoreInfo {
            name: self.name.to_string(),
            available_permits: available,
        })
    }

    /// Deletes the semaphore: later acquires fail with [`Error::NotInitialized`], and
    /// waiters are woken to fail the same way. Permits out at that moment are not
    /// returned when released. Returns whether it existed.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// semaphore.delete().await?;
    /// assert!(semaphore.try_acquire().await.is_err());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn delete(&self) -> Result<bool> {
        let deleted = self
            .client
            .connection()
            .run(&SemaphoreDelete {
                keys: &[self.keys.main()],
                channel: self.keys.channel(),
            })
            .await?;
        Ok(deleted > 0)
    }

    fn not_initialized(&self) -> Error {
        Error::NotInitialized {
            name: self.name.to_string(),
        }
    }

    async fn wait_for(
        &self,
        permits: u32,
        wait: Option<Duration>,
    ) -> Result<Option<SemaphorePermit>> {
        validate_permits(permits)?;
        acquire_with_wait(&self.client, &self.probe, self.keys.channel(), wait, || {
            self.attempt(permits)
        })
        .await
    }

    async fn attempt(&self, permits: u32) -> Result<Attempt<SemaphorePermit>> {
        match self.send_acquire(permits).await? {
            PermitsTaken::Taken => Ok(Attempt::Acquired(SemaphorePermit {
                client: self.client.clone(),
                name: Arc::clone(&self.name),
                keys: self.keys.clone(),
                permits,
                released: false,
                meter: HoldMeter::started(self.probe.clone()),
            })),
            PermitsTaken::NotEnough => Ok(Attempt::Held(Some(self.recheck))),
            PermitsTaken::Missing => Err(self.not_initialized()),
        }
    }

    /// Sends the acquire so that permits taken for a caller that went away are given back
    /// when the reply arrives (on a spawned task, only then: see `send_or_undo`).
    async fn send_acquire(&self, permits: u32) -> Result<PermitsTaken> {
        let client = self.client.clone();
        let keys = self.keys.clone();
        let name = Arc::clone(&self.name);
        send_or_undo(
            &self.name,
            async move {
                let taken = client
                    .connection()
                    .run(&SemaphoreAcquire {
                        key: keys.main(),
                        permits,
                    })
                    .await?;
                Ok((client, keys, taken))
            },
            move |(client, keys, taken)| async move {
                if taken == PermitsTaken::Taken {
                    release_permits(&client, &name, &keys, permits).await?;
                }
                Ok(())
            },
        )
        .await
        .map(|(_, _, taken)| taken)
    }
}

/// Gives `permits` back. A plain semaphore keeps no record of who holds what, so a
/// release whose reply was lost cannot be told apart from one never applied; it is only
/// sent again when the connection refused it (certainly not applied), never twice.
async fn release_permits(client: &Client, name: &str, keys: &Keys, permits: u32) -> Result<()> {
    let refused =
        |e: &Error| failed_command(e).is_some_and(redis::RedisError::is_connection_refusal);
    // Resent only when refused (certainly not applied): a second release of the same
    // permits would give them back twice.
    let answered = resend_until_answered(name, refused, move || async move {
        client
            .connection()
            .run(&SemaphoreRelease {
                key: keys.main(),
                channel: keys.channel(),
                permits,
            })
            .await
    })
    .await?;
    if answered.reply {
        Ok(())
    } else {
        Err(Error::NotInitialized {
            name: name.to_owned(),
        })
    }
}

/// Permits taken from a [`Semaphore`]; gives them back when released or dropped.
///
/// `release().await` is the checked way to give them back. Dropping the guard gives them
/// back on a spawned task (it never blocks); [`SemaphorePermit::forget`] keeps them taken.
///
/// ```no_run
/// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
/// let permit = semaphore.acquire_many(2).await?;
/// assert_eq!(permit.permits(), 2);
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the permit gives it back at once"]
pub struct SemaphorePermit {
    client: Client,
    name: Arc<str>,
    keys: Keys,
    permits: u32,
    released: bool,
    meter: HoldMeter,
}

impl Grant for SemaphorePermit {}

impl fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("semaphore", &self.name)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl SemaphorePermit {
    /// The semaphore's name.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// assert_eq!(permit.name(), semaphore.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits this guard holds.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// assert_eq!(semaphore.acquire_many(4).await?.permits(), 4);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives the permits back and wakes that many waiters.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore was deleted meanwhile (nothing is
    /// given back), [`Error::Store`] when Redis could not be reached: the permits may or
    /// may not be back, and since they have no expiry, permits lost this way stay taken
    /// until [`Semaphore::add_permits`] returns them.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may or may not have reached Redis.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let release = release_permits(&self.client, &self.name, &self.keys, self.permits);
        self.meter.release(None, true, release, |()| false).await
    }

    /// Keeps the permits taken for good and returns how many there were. Only
    /// [`Semaphore::add_permits`] brings them back.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson_redis::Semaphore) -> ferrisson_redis::Result<()> {
    /// let kept = semaphore.acquire().await?.forget();
    /// assert_eq!(kept, 1);
    /// # Ok(()) }
    /// ```
    pub fn forget(mut self) -> u32 {
        self.released = true;
        self.permits
    }
}

impl Drop for SemaphorePermit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let client = self.client.clone();
        let name = Arc::clone(&self.name);
        let keys = self.keys.clone();
        let permits = self.permits;
        let meter = self.meter.take();
        spawn_cleanup(
            &self.name,
            "releasing a dropped semaphore permit",
            "its permits stay taken",
            async move {
                let release = release_permits(&client, &name, &keys, permits);
                meter.release(None, true, release, |()| false).await
            },
        );
    }
}

/// Acquiring zero permits is always a caller's mistake.
pub(crate) fn validate_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid("permits must be at least 1"));
    }
    Ok(())
}

/// A recheck interval must be at least 1 ms.
pub(crate) fn validate_recheck(interval: Duration) -> Result<Duration> {
    if interval < Duration::from_millis(1) {
        return Err(Error::invalid(format!(
            "recheck interval must be at least 1 ms, got {interval:?}"
        )));
    }
    Ok(interval)
}

impl ferrisson_core::DistributedSemaphore for Semaphore {
    type Permit = SemaphorePermit;

    fn name(&self) -> &str {
        Semaphore::name(self)
    }

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::SEMAPHORE
    }

    async fn acquire(&self) -> Result<SemaphorePermit> {
        Semaphore::acquire(self).await
    }

    async fn try_acquire(&self) -> Result<Option<SemaphorePermit>> {
        Semaphore::try_acquire(self).await
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<SemaphorePermit>> {
        Semaphore::acquire_timeout(self, wait).await
    }
}

impl ferrisson_core::Permit for SemaphorePermit {
    fn name(&self) -> &str {
        SemaphorePermit::name(self)
    }

    async fn release(self) -> Result<()> {
        SemaphorePermit::release(self).await
    }
}
