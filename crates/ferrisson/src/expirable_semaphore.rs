//! The permit-expirable semaphore: every permit has an id and a lease in server time, and
//! a permit whose holder vanished comes back when its lease runs out.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::acquire::{Attempt, acquire_with_wait};
use crate::cleanup::spawn_cleanup;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::lease::{millis, validate_lease};
use crate::scripts::SCRIPTS;
use crate::semaphore::{DEFAULT_SEMAPHORE_RECHECK, validate_recheck};

/// How often a release is sent again after a connection error (safe: releasing an id
/// twice returns it once).
const RELEASE_ATTEMPTS: u32 = 3;
/// At most this many held permits are listed by [`ExpirableSemaphore::inspect`].
const INSPECT_LIMIT: usize = 1000;

impl Client {
    /// A handle to the permit-expirable semaphore called `name` (no Redis traffic until
    /// used).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty or longer than 1 KiB.
    ///
    /// ```
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let handle = client.expirable_semaphore("gpu-slots")?;
    /// assert!(client.expirable_semaphore("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn expirable_semaphore(&self, name: &str) -> Result<ExpirableSemaphore> {
        let keys = self.keys(name)?;
        Ok(ExpirableSemaphore {
            shared: Arc::new(Shared {
                client: self.clone(),
                name: name.to_owned(),
                held: keys.with_suffix("permits"),
                keys,
            }),
            recheck: DEFAULT_SEMAPHORE_RECHECK,
        })
    }
}

/// The id of one permit of an [`ExpirableSemaphore`]: 32 lowercase hex digits.
///
/// Hand it to another task or process to let it release the permit or extend its lease.
///
/// ```
/// use ferrisson::PermitId;
///
/// let id: PermitId = "0123456789abcdef0123456789abcdef".parse()?;
/// assert_eq!(id.to_string(), "0123456789abcdef0123456789abcdef");
/// assert!("xyz".parse::<PermitId>().is_err());
/// # Ok::<(), ferrisson::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PermitId(u128);

impl PermitId {
    fn random() -> Self {
        Self(rand::random())
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid(format!(
                "permit id must be 32 hex digits, got {} characters",
                s.len()
            )));
        }
        u128::from_str_radix(s, 16)
            .map(Self)
            .map_err(|e| Error::invalid(format!("permit id: {e}")))
    }
}

/// A distributed semaphore whose permits expire (Redisson's
/// `RPermitExpirableSemaphore`).
///
/// Every acquired permit gets a [`PermitId`] and a lease. The lease runs on the Redis
/// server's clock (`TIME` inside the scripts), so a skewed client clock cannot cut it
/// short. A permit whose lease ran out is given back by the next acquire: a holder that
/// crashed, or was killed, holds its permit at most one lease. Holders that need longer
/// extend it with [`ExpirablePermit::update_lease`].
///
/// Keys: `{name}` holds the free permits, `{name}:permits` the held permits and their
/// expiry (a sorted set). Like [`Semaphore`](crate::Semaphore), it must be initialised
/// with [`ExpirableSemaphore::try_set_permits`] (or `add_permits`), and acquiring from one
/// that does not exist fails at once with [`Error::NotInitialized`].
///
/// A waiter wakes on a release message, when the earliest held permit's lease runs out,
/// or after the recheck interval (1 s by default), whichever is first.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let semaphore = client.expirable_semaphore("gpu-slots")?;
/// semaphore.try_set_permits(2).await?;
///
/// let mut permit = semaphore.acquire(Duration::from_secs(30)).await?;
/// println!("holding permit {}", permit.id());
/// permit.update_lease(Duration::from_secs(60)).await?; // need more time
/// assert!(permit.release().await?); // false would mean the lease had run out
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ExpirableSemaphore {
    shared: Arc<Shared>,
    recheck: Duration,
}

/// What a semaphore handle and its permits share.
struct Shared {
    client: Client,
    name: String,
    keys: Keys,
    /// The sorted set of held permits.
    held: String,
}

impl fmt::Debug for ExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirableSemaphore")
            .field("name", &self.shared.name)
            .field("recheck", &self.recheck)
            .finish_non_exhaustive()
    }
}

/// What Redis holds for an [`ExpirableSemaphore`], from [`ExpirableSemaphore::inspect`].
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let info = client.expirable_semaphore("gpu-slots")?.inspect().await?;
/// for permit in &info.held {
///     println!("{} expires in {:?}", permit.id, permit.remaining);
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
    pub remaining: Duration,
}

/// What the acquire script answered.
enum AcquireReply {
    Acquired,
    /// None free; time until the earliest held permit expires, if any is held.
    NoneFree(Option<Duration>),
    Missing,
}

impl ExpirableSemaphore {
    /// The semaphore's name.
    ///
    /// ```
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// assert_eq!(client.expirable_semaphore("gpu")?.name(), "gpu");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The same semaphore whose waiters ask Redis again after at most `interval` when
    /// neither a release message nor a permit expiry comes first (default 1 s).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `interval` is under 1 ms.
    ///
    /// ```
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
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
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// semaphore.try_set_permits(4).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        let mut conn = self.shared.client.conn();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.shared.keys.main())
            .arg(permits)
            .arg("NX")
            .query_async(&mut conn)
            .await?;
        Ok(set.is_some())
    }

    /// Adds `delta` free permits (removes them when negative; the count may go below
    /// zero). Creates the semaphore if it does not exist. Added permits wake as many
    /// waiters.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// semaphore.add_permits(1).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `delta` is zero, [`Error::Redis`] when Redis
    /// cannot be reached.
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        if delta == 0 {
            return Err(Error::invalid("permit delta must not be zero"));
        }
        let mut conn = self.shared.client.conn();
        let _: i64 = SCRIPTS
            .semaphore_add
            .key(self.shared.keys.main())
            .key(self.shared.keys.channel())
            .arg(delta)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Free permits now, counting those whose lease ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let free = semaphore.available_permits().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] when the semaphore does not exist, [`Error::Redis`] when
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
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let info = semaphore.inspect().await?;
    /// println!("{} free, {} held", info.available_permits.unwrap_or(0), info.held_count);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn inspect(&self) -> Result<ExpirableSemaphoreInfo> {
        self.read(INSPECT_LIMIT).await
    }

    /// Acquires one permit leased for `lease`, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let permit = semaphore.acquire(Duration::from_secs(30)).await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or over a year,
    /// [`Error::NotInitialized`] when the semaphore does not exist (also when it is
    /// deleted while waiting), [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit taken (an acquire
    /// already sent is released when its reply arrives) and no subscription.
    pub async fn acquire(&self, lease: Duration) -> Result<ExpirablePermit> {
        self.wait_for(lease, None)
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without a permit".into()))
    }

    /// Acquires one permit leased for `lease` if one is free now (or expired); `Ok(None)`
    /// if not. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(permit) = semaphore.try_acquire(Duration::from_secs(30)).await? {
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
    pub async fn try_acquire(&self, lease: Duration) -> Result<Option<ExpirablePermit>> {
        validate_lease(lease)?;
        match self.attempt(lease).await? {
            Attempt::Acquired(permit) => Ok(Some(permit)),
            Attempt::Held(_) => Ok(None),
        }
    }

    /// Acquires one permit leased for `lease`, waiting at most `wait`; `Ok(None)` when
    /// the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lease = Duration::from_secs(30);
    /// if let Some(permit) = semaphore.acquire_timeout(lease, Duration::from_secs(2)).await? {
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
    pub async fn acquire_timeout(
        &self,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<ExpirablePermit>> {
        self.wait_for(lease, Some(wait)).await
    }

    /// Releases the permit `id`, whoever acquired it. Returns true when it was held and
    /// its lease running; false when it was unknown (already released or reclaimed) or
    /// its lease had run out (it is free now either way). After a lost reply a retry
    /// cannot tell its own first try from a reclaim, and answers false.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore, id: ferrisson::PermitId) -> ferrisson::Result<()> {
    /// // e.g. an id another process reported before it went quiet
    /// semaphore.release(id).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached (after retries; a release is safe to
    /// repeat).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release may or may not have been applied, and calling it
    /// again is harmless.
    pub async fn release(&self, id: PermitId) -> Result<bool> {
        self.shared.release(id, None).await
    }

    /// Sets the lease of permit `id` to `lease` from now. Returns false when the permit is
    /// no longer held or its lease has already run out (it is not revived).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let id = semaphore.acquire(Duration::from_secs(10)).await?.forget();
    /// // ... later, possibly in another process that was handed the id ...
    /// if !semaphore.update_lease(id, Duration::from_secs(10)).await? {
    ///     println!("too late: the permit expired");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or over a year, [`Error::Redis`]
    /// when Redis cannot be reached.
    pub async fn update_lease(&self, id: PermitId, lease: Duration) -> Result<bool> {
        self.shared.update_lease(id, lease).await
    }

    /// Deletes the semaphore and its held permits; waiters are woken and fail with
    /// [`Error::NotInitialized`]. Returns whether it existed.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// semaphore.delete().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn delete(&self) -> Result<bool> {
        let mut conn = self.shared.client.conn();
        let deleted: i64 = SCRIPTS
            .semaphore_delete
            .key(self.shared.keys.main())
            .key(&self.shared.held)
            .key(self.shared.keys.channel())
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted > 0)
    }

    async fn read(&self, limit: usize) -> Result<ExpirableSemaphoreInfo> {
        let mut conn = self.shared.client.conn();
        let reply: Vec<Value> = SCRIPTS
            .xsem_inspect
            .key(self.shared.keys.main())
            .key(&self.shared.held)
            .arg(limit)
            .invoke_async(&mut conn)
            .await?;
        parse_inspect(&self.shared.name, &reply)
    }

    async fn wait_for(
        &self,
        lease: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<ExpirablePermit>> {
        validate_lease(lease)?;
        acquire_with_wait(
            &self.shared.client,
            &self.shared.keys.channel(),
            wait,
            || self.attempt(lease),
        )
        .await
    }

    async fn attempt(&self, lease: Duration) -> Result<Attempt<ExpirablePermit>> {
        let id = PermitId::random();
        let sent_at = Instant::now();
        match self.send_acquire(id, lease).await? {
            AcquireReply::Acquired => Ok(Attempt::Acquired(ExpirablePermit {
                shared: Arc::clone(&self.shared),
                id,
                deadline: sent_at + lease,
                released: false,
            })),
            AcquireReply::NoneFree(expiry) => Ok(Attempt::Held(Some(
                expiry.map_or(self.recheck, |e| e.min(self.recheck)),
            ))),
            AcquireReply::Missing => Err(self.shared.not_initialized()),
        }
    }

    /// Runs the acquire script on a spawned task, so that a permit taken for a caller
    /// that went away is released when the reply arrives.
    async fn send_acquire(&self, id: PermitId, lease: Duration) -> Result<AcquireReply> {
        let (tx, rx) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let mut conn = shared.client.conn();
            let reply: redis::RedisResult<Vec<i64>> = SCRIPTS
                .xsem_acquire
                .key(shared.keys.main())
                .key(&shared.held)
                .key(shared.keys.channel())
                .arg(id.to_string())
                .arg(millis(lease))
                .invoke_async(&mut conn)
                .await;
            if let Err(Ok(reply)) = tx.send(reply)
                && reply.first() == Some(&1)
                && let Err(e) = shared.release(id, None).await
            {
                tracing::debug!(semaphore = %shared.name, error = %e, "undoing a cancelled acquire failed");
            }
        });
        let reply = rx
            .await
            .map_err(|_| Error::Protocol("acquire task was cancelled".into()))??;
        match reply.as_slice() {
            [1] => Ok(AcquireReply::Acquired),
            [0, -1] => Ok(AcquireReply::NoneFree(None)),
            [0, ms] => Ok(AcquireReply::NoneFree(Some(Duration::from_millis(
                ms.unsigned_abs(),
            )))),
            [-1] => Ok(AcquireReply::Missing),
            other => Err(Error::Protocol(format!(
                "expirable semaphore acquire returned {other:?}"
            ))),
        }
    }
}

impl Shared {
    fn not_initialized(&self) -> Error {
        Error::NotInitialized {
            name: self.name.clone(),
        }
    }

    /// Releases `id`; `deadline` is the holder's own estimate of the lease's end, when
    /// known.
    async fn release(&self, id: PermitId, deadline: Option<Instant>) -> Result<bool> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.client.conn();
            let reply: redis::RedisResult<i64> = SCRIPTS
                .xsem_release
                .key(self.keys.main())
                .key(&self.held)
                .key(self.keys.channel())
                .arg(id.to_string())
                .invoke_async(&mut conn)
                .await;
            match reply {
                Ok(1) => return Ok(true),
                // After a lost reply, "unknown" means either that the first try released
                // it, or that the lease ran out and another acquire reclaimed it (and
                // may hold it now). Only a local deadline still ahead rules the second
                // out (the server's lease never ends before it); otherwise answer that
                // the permit cannot be shown to have been running.
                Ok(0) if attempt > 1 => {
                    return Ok(deadline.is_some_and(|d| Instant::now() < d));
                }
                Ok(0 | 2) => return Ok(false),
                Ok(other) => {
                    return Err(Error::Protocol(format!(
                        "expirable semaphore release returned {other}"
                    )));
                }
                Err(e) => {
                    let e = Error::from(e);
                    if !e.is_connection_error() || attempt >= RELEASE_ATTEMPTS {
                        return Err(e);
                    }
                    tracing::debug!(semaphore = %self.name, error = %e, "release failed; retrying");
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                }
            }
        }
    }

    async fn update_lease(&self, id: PermitId, lease: Duration) -> Result<bool> {
        validate_lease(lease)?;
        let mut conn = self.client.conn();
        let updated: i64 = SCRIPTS
            .xsem_update_lease
            .key(&self.held)
            .arg(id.to_string())
            .arg(millis(lease))
            .invoke_async(&mut conn)
            .await?;
        Ok(updated == 1)
    }
}

fn parse_inspect(name: &str, reply: &[Value]) -> Result<ExpirableSemaphoreInfo> {
    let bad = || Error::Protocol(format!("expirable semaphore inspect returned {reply:?}"));
    let int = |v: &Value| match v {
        Value::Int(n) => Ok(*n),
        _ => Err(bad()),
    };
    let mut info = ExpirableSemaphoreInfo {
        name: name.to_owned(),
        available_permits: None,
        held_count: 0,
        held: Vec::new(),
    };
    match reply {
        [Value::Int(0)] => Ok(info),
        [Value::Int(1), free, live, held @ ..] if held.len() % 2 == 0 => {
            info.available_permits = Some(int(free)?);
            info.held_count = int(live)?.unsigned_abs();
            for pair in held.chunks_exact(2) {
                let id = match &pair[0] {
                    Value::BulkString(bytes) => std::str::from_utf8(bytes)
                        .map_err(|_| bad())?
                        .parse()
                        .map_err(|_| bad())?,
                    _ => return Err(bad()),
                };
                let remaining = Duration::from_millis(int(&pair[1])?.unsigned_abs());
                info.held.push(HeldPermit { id, remaining });
            }
            Ok(info)
        }
        _ => Err(bad()),
    }
}

/// One permit of an [`ExpirableSemaphore`]; released when released or dropped, or by
/// its lease running out.
///
/// `release().await` is the checked way to give it back. Dropping the guard releases on
/// a spawned task (it never blocks). [`ExpirablePermit::forget`] keeps it until its
/// lease runs out (or someone releases its id).
///
/// ```no_run
/// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
/// use std::time::Duration;
/// let permit = semaphore.acquire(Duration::from_secs(10)).await?;
/// assert!(permit.remaining() <= Duration::from_secs(10));
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the permit releases it at once"]
pub struct ExpirablePermit {
    shared: Arc<Shared>,
    id: PermitId,
    /// Local estimate of the lease's end, counted from before the acquire was sent.
    deadline: Instant,
    released: bool,
}

impl fmt::Debug for ExpirablePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirablePermit")
            .field("semaphore", &self.shared.name)
            .field("id", &self.id)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl ExpirablePermit {
    /// The semaphore's name.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// # use std::time::Duration;
    /// let permit = semaphore.acquire(Duration::from_secs(5)).await?;
    /// assert_eq!(permit.name(), semaphore.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The permit's id, as stored in Redis.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// # use std::time::Duration;
    /// let permit = semaphore.acquire(Duration::from_secs(5)).await?;
    /// let id = permit.id().to_string(); // e.g. to hand to another process
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> PermitId {
        self.id
    }

    /// How long the lease has left by this client's clock (counted from before the
    /// acquire or last update was sent, so never longer than the server's view).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// # use std::time::Duration;
    /// let permit = semaphore.acquire(Duration::from_secs(5)).await?;
    /// assert!(permit.remaining() <= Duration::from_secs(5));
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Sets the lease to `lease` from now. Returns false when the permit's lease had
    /// already run out (the permit is lost and not revived).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let mut permit = semaphore.acquire(Duration::from_secs(10)).await?;
    /// assert!(permit.update_lease(Duration::from_secs(20)).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or over a year, [`Error::Redis`]
    /// when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is either updated or not, and [`ExpirablePermit::remaining`]
    /// keeps the older estimate until a reply confirms the update.
    pub async fn update_lease(&mut self, lease: Duration) -> Result<bool> {
        let sent_at = Instant::now();
        let updated = self.shared.update_lease(self.id, lease).await?;
        if updated {
            self.deadline = sent_at + lease;
        } else {
            self.deadline = sent_at;
        }
        Ok(updated)
    }

    /// Releases the permit and wakes one waiter. Returns false when its lease had
    /// already run out (it was free again before this call). True is never a guess: when
    /// a reply was lost and the retry finds the permit gone after this permit's own
    /// [`remaining`](ExpirablePermit::remaining) reached zero, it may have been
    /// reclaimed and taken by another client, so the answer is false.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let permit = semaphore.acquire(Duration::from_secs(10)).await?;
    /// if !permit.release().await? {
    ///     println!("held past its lease: someone else may have had it too");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached after retries; the permit then
    /// comes back when its lease runs out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the permit is released now, or by its lease.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        self.shared.release(self.id, Some(self.deadline)).await
    }

    /// Keeps the permit taken until its lease runs out, and returns its id (which
    /// [`ExpirableSemaphore::release`] still accepts).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::ExpirableSemaphore) -> ferrisson::Result<()> {
    /// # use std::time::Duration;
    /// let id = semaphore.acquire(Duration::from_secs(5)).await?.forget();
    /// assert!(semaphore.release(id).await?);
    /// # Ok(()) }
    /// ```
    pub fn forget(mut self) -> PermitId {
        self.released = true;
        self.id
    }
}

impl Drop for ExpirablePermit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let id = self.id;
        spawn_cleanup(
            &self.shared.name,
            "releasing a dropped expirable permit",
            "it is freed when its lease runs out",
            async move { shared.release(id, None).await },
        );
    }
}
