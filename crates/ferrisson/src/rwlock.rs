//! The read-write lock: many readers or one writer, both reentrant, each holder with its
//! own lease, a writer that may read, and a refused (not deadlocked) upgrade.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::acquire::{Attempt, acquire_with_wait};
use crate::cleanup::spawn_cleanup;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::holds::{Hold, Renewal};
use crate::keys::Keys;
use crate::lease::{Lease, millis};
use crate::owner::{OwnerId, TaskKey};
use crate::release::{Released, release_id_arg, release_with_retry};
use crate::scripts::SCRIPTS;

/// How long Redis remembers an applied release id: longer than any retry takes.
const RELEASE_MEMORY: Duration = Duration::from_secs(60);
/// How long a waiting writer's intent holds new readers back without a refresh: a writer
/// that dies while waiting delays readers at most this long. Refreshed every third.
const WRITE_INTENT: Duration = Duration::from_secs(3);

impl Client {
    /// A handle to the read-write lock called `name` (no Redis traffic until used).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.rwlock("catalog")?;
    /// assert_eq!(lock.name(), "catalog");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty or longer than 1 KiB.
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        Ok(RwLock {
            client: self.clone(),
            name: Arc::from(name),
            keys: self.keys(name)?,
            lease: Lease::Watchdog,
        })
    }
}

/// A distributed read-write lock (Redisson's `RReadWriteLock`): many readers or one
/// writer.
///
/// - **Reentrant** on both sides inside one tokio task, like [`Lock`](crate::Lock).
/// - **A writer may read**: the task holding the write lock gets read guards at once;
///   releasing the write guard while read guards live *downgrades* the lock to read
///   mode, and other readers may join.
/// - **No upgrade**: a task holding only the read lock that asks for the write lock gets
///   [`Error::UpgradeRefused`] at once. Two readers both waiting to upgrade would wait
///   for each other forever (Redisson issue #4796); release the read lock first.
/// - **Leases per holder**: every holder (reader or writer) has its own deadline in Redis
///   server time, renewed by the watchdog (or fixed, see [`RwLock::with_lease`]). A
///   reader that dies stops blocking writers when its own lease runs out, even while
///   other readers keep renewing theirs.
/// - **Wake-ups**: a write release wakes every local waiting reader (and one writer per
///   client); the last read release wakes one waiting writer per client.
/// - **Writers are not starved**: a waiting writer records an intent in Redis (renewed
///   every second while it waits, gone 3 s after its waiter dies, withdrawn when it stops
///   waiting) and new readers queue behind it. Owners that already read may still
///   re-enter, so a writer waits only for the readers that were there first.
///
/// Stored as one hash under the key `{name}` (plus the client's namespace), so a
/// read-write lock must not share its name with a [`Lock`](crate::Lock).
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let lock = client.rwlock("catalog")?;
/// let write = lock.write().await?;
/// let read = lock.read().await?; // the writer may read
/// write.unlock().await?; // downgrade: still reading, others may read too
/// assert!(matches!(lock.write().await, Err(ferrisson::Error::UpgradeRefused { .. })));
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    name: Arc<str>,
    keys: Keys,
    lease: Lease,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// The two sides of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

impl Side {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// How an acquire attempt is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A waiting acquire: a blocked writer records its intent.
    Acquire,
    /// `try_read` / `try_write`: a blocked writer leaves no trace.
    Try,
    /// Only add a hold to one this owner already has.
    Reenter,
}

impl Mode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Try => "try",
            Self::Reenter => "reenter",
        }
    }
}

/// A waiting writer's intent: withdrawn from Redis when the wait ends without the lock,
/// also when the waiting future is dropped (on a spawned task, like a guard's release).
struct WriteIntent {
    lock: RwLock,
    owner: OwnerId,
    armed: bool,
}

impl WriteIntent {
    fn disarm(mut self) {
        self.armed = false;
    }

    /// Withdraws the intent now; if this future is dropped first, `Drop` does it instead.
    async fn withdraw(mut self) -> Result<()> {
        if self.armed {
            send_withdraw(&self.lock, self.owner).await?;
            self.armed = false;
        }
        Ok(())
    }
}

impl Drop for WriteIntent {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let lock = self.lock.clone();
        let owner = self.owner;
        spawn_cleanup(
            &self.lock.name,
            "withdrawing a cancelled writer's intent",
            "the intent lapses on its own",
            async move { send_withdraw(&lock, owner).await },
        );
    }
}

async fn send_withdraw(lock: &RwLock, owner: OwnerId) -> Result<bool> {
    let mut conn = lock.client.conn();
    let withdrawn: i64 = SCRIPTS
        .rwlock_withdraw
        .key(lock.keys.main())
        .key(lock.channel(Side::Read))
        .arg(owner.to_string())
        .invoke_async(&mut conn)
        .await?;
    Ok(withdrawn == 1)
}

/// What the acquire script answered.
enum AcquireReply {
    Acquired { token: u64 },
    Blocked(i64),
    NotReentered,
    UpgradeRefused,
}

/// Which side of a [`RwLock`] is held, from [`RwLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
/// use ferrisson::RwLockMode;
/// let busy = matches!(lock.inspect().await?.mode, Some(RwLockMode::Write));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwLockMode {
    /// One or more readers hold it.
    Read,
    /// One writer holds it (and may read too).
    Write,
}

/// A snapshot of a read-write lock's state, from [`RwLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
/// let info = lock.inspect().await?;
/// println!("{:?}: writer {:?}, {} readers", info.mode, info.writer, info.readers.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockInfo {
    /// The mode, or `None` when nobody holds the lock.
    pub mode: Option<RwLockMode>,
    /// The writer and its write holds.
    pub writer: Option<RwHolder>,
    /// Every owner with read holds (a writer that reads is listed here too).
    pub readers: Vec<RwHolder>,
    /// The fencing token of the current or last writer while the lock is held.
    pub fencing_token: Option<FencingToken>,
    /// The lock's remaining time to live: at least the longest holder's lease.
    pub ttl: Option<Duration>,
    /// Writers waiting for the lock; new readers wait behind them.
    pub waiting_writers: Vec<OwnerId>,
}

/// One holder of a [`RwLock`], from [`RwLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
/// for reader in lock.inspect().await?.readers {
///     println!("{} holds {} read(s), lease left {:?}", reader.owner, reader.holds, reader.expires_in);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwHolder {
    /// The holder's owner id.
    pub owner: OwnerId,
    /// Its holds on this side (re-entries count).
    pub holds: u32,
    /// Time left on its lease unless renewed.
    pub expires_in: Duration,
}

/// The lock hash, its PTTL and the server time.
type InspectReply = (Vec<(String, String)>, i64, (u64, u64));

impl RwLock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// assert_eq!(client.rwlock("catalog")?.name(), "catalog");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions of either side.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.rwlock("catalog")?.with_lease(ferrisson::Lease::Fixed(Duration::from_secs(5)))?;
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

    /// Acquires the read lock, waiting while another owner writes or waits to write (an
    /// owner that already reads, or writes, gets it at once).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// let read = lock.read().await?;
    /// // ... read the shared state; other readers may be here too ...
    /// read.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no hold behind (an acquire
    /// already sent is undone when its reply arrives), no subscription and no task.
    pub async fn read(&self) -> Result<RwLockReadGuard> {
        let held = self
            .acquire(Side::Read, None)
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without the lock".into()))?;
        Ok(RwLockReadGuard { held })
    }

    /// Acquires the read lock if no other owner writes or waits to write; `Ok(None)`
    /// otherwise. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// if let Some(read) = lock.try_read().await? {
    ///     read.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn try_read(&self) -> Result<Option<RwLockReadGuard>> {
        Ok(
            match self
                .attempt(Side::Read, OwnerId::random(), Mode::Try)
                .await?
            {
                Attempt::Acquired(held) => Some(RwLockReadGuard { held }),
                Attempt::Held(_) => None,
            },
        )
    }

    /// Acquires the read lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// match lock.read_timeout(Duration::from_millis(500)).await? {
    ///     Some(read) => read.unlock().await?,
    ///     None => eprintln!("a writer held it for the whole wait"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn read_timeout(&self, wait: Duration) -> Result<Option<RwLockReadGuard>> {
        let held = self.acquire(Side::Read, Some(wait)).await?;
        Ok(held.map(|held| RwLockReadGuard { held }))
    }

    /// Acquires the write lock, waiting until no other owner reads or writes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// let write = lock.write().await?;
    /// // ... nobody else reads or writes now ...
    /// write.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`] at once when this task holds the read lock but not the
    /// write lock; [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn write(&self) -> Result<RwLockWriteGuard> {
        let held = self
            .acquire(Side::Write, None)
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without the lock".into()))?;
        Ok(RwLockWriteGuard { held })
    }

    /// Acquires the write lock if nobody else holds the lock; `Ok(None)` otherwise, and
    /// then it leaves no intent behind (readers are not held back). One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// if let Some(write) = lock.try_write().await? {
    ///     write.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn try_write(&self) -> Result<Option<RwLockWriteGuard>> {
        Ok(
            match self
                .attempt(Side::Write, OwnerId::random(), Mode::Try)
                .await?
            {
                Attempt::Acquired(held) => Some(RwLockWriteGuard { held }),
                Attempt::Held(_) => None,
            },
        )
    }

    /// Acquires the write lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(write) = lock.write_timeout(Duration::from_secs(1)).await? {
    ///     write.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn write_timeout(&self, wait: Duration) -> Result<Option<RwLockWriteGuard>> {
        let held = self.acquire(Side::Write, Some(wait)).await?;
        Ok(held.map(|held| RwLockWriteGuard { held }))
    }

    /// Deletes the lock whoever holds it, every reader and the writer, and wakes its
    /// waiters (an operator's tool). The holders' guards see the loss at their next
    /// renewal. Returns whether a lock was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// if lock.force_unlock().await? {
    ///     eprintln!("{} was held and is free now", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn force_unlock(&self) -> Result<bool> {
        let mut conn = self.client.conn();
        let deleted: i64 = SCRIPTS
            .rwlock_force_release
            .key(self.keys.main())
            .key(self.channel(Side::Read))
            .key(self.channel(Side::Write))
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }

    /// Reads the lock's holders, leases and TTL in one atomic step, without changing
    /// them. Holders whose lease ran out but who were not evicted yet are left out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
    /// let info = lock.inspect().await?;
    /// for reader in &info.readers {
    ///     println!("reader {} ({} holds)", reader.owner, reader.holds);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached, [`Error::Protocol`] when the key
    /// holds something a read-write lock never writes.
    pub async fn inspect(&self) -> Result<RwLockInfo> {
        let mut conn = self.client.conn();
        let (fields, pttl, time): InspectReply = SCRIPTS
            .rwlock_inspect
            .key(self.keys.main())
            .invoke_async(&mut conn)
            .await?;
        let now_ms = time.0 * 1000 + time.1 / 1000;
        let mut info = RwLockInfo {
            mode: None,
            writer: None,
            readers: Vec::new(),
            fencing_token: None,
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            waiting_writers: Vec::new(),
        };
        // owner -> (read holds, write holds, lease deadline in server ms)
        let mut holders: HashMap<OwnerId, (u32, u32, u64)> = HashMap::new();
        let number = |value: &str| {
            value
                .parse::<u64>()
                .map_err(|_| Error::Protocol(format!("read-write lock field value {value:?}")))
        };
        for (field, value) in &fields {
            match field.split_once(':') {
                Some((side @ ("r" | "w" | "d"), owner)) => {
                    let owner: OwnerId = owner
                        .parse()
                        .map_err(|_| Error::Protocol(format!("read-write lock field {field:?}")))?;
                    let entry = holders.entry(owner).or_default();
                    let n = number(value)?;
                    match side {
                        "r" => entry.0 = u32::try_from(n).unwrap_or(u32::MAX),
                        "w" => entry.1 = u32::try_from(n).unwrap_or(u32::MAX),
                        _ => entry.2 = n,
                    }
                }
                // A waiting writer's intent; a lapsed one is as good as gone.
                Some(("i", owner)) if number(value)? > now_ms => {
                    info.waiting_writers.push(owner.parse().map_err(|_| {
                        Error::Protocol(format!("read-write lock field {field:?}"))
                    })?);
                }
                None if field == "mode" => {
                    info.mode = match value.as_str() {
                        "read" => Some(RwLockMode::Read),
                        "write" => Some(RwLockMode::Write),
                        other => {
                            return Err(Error::Protocol(format!("read-write lock mode {other:?}")));
                        }
                    };
                }
                None if field == "fence" => {
                    info.fencing_token = Some(FencingToken::new(number(value)?));
                }
                // Release markers (`x:<id>`) and the writer's id (also in `w:<owner>`).
                _ => {}
            }
        }
        for (owner, (reads, writes, deadline)) in holders {
            if deadline <= now_ms {
                continue;
            }
            let expires_in = Duration::from_millis(deadline - now_ms);
            if writes > 0 {
                info.writer = Some(RwHolder {
                    owner,
                    holds: writes,
                    expires_in,
                });
            }
            if reads > 0 {
                info.readers.push(RwHolder {
                    owner,
                    holds: reads,
                    expires_in,
                });
            }
        }
        info.readers.sort_by_key(|r| r.owner.to_string());
        if info.writer.is_none() && info.readers.is_empty() {
            info.mode = None;
        } else if info.writer.is_none() {
            info.mode = Some(RwLockMode::Read);
        }
        Ok(info)
    }

    /// The channel waiters of `side` listen on.
    fn channel(&self, side: Side) -> String {
        match side {
            Side::Read => self.keys.with_suffix("released:read"),
            Side::Write => self.keys.with_suffix("released:write"),
        }
    }

    async fn acquire(&self, side: Side, wait: Option<Duration>) -> Result<Option<HeldSide>> {
        // One owner id for the whole wait: a blocked writer's intent is recorded under it.
        let waiter = OwnerId::random();
        let intent = WriteIntent {
            lock: self.clone(),
            owner: waiter,
            armed: side == Side::Write,
        };
        let acquired = acquire_with_wait(&self.client, &self.channel(side), wait, || {
            self.attempt(side, waiter, Mode::Acquire)
        })
        .await?;
        match acquired {
            Some(held) => {
                intent.disarm();
                Ok(Some(held))
            }
            None => {
                intent.withdraw().await?;
                Ok(None)
            }
        }
    }

    async fn attempt(&self, side: Side, waiter: OwnerId, mode: Mode) -> Result<Attempt<HeldSide>> {
        let task = TaskKey::current();
        let holds = &self.client.inner.holds;
        let lease = self.lease.duration(self.client.watchdog_lease());
        loop {
            // One owner per task for both sides: that is how the script knows a writer
            // asks to read, or a reader to write.
            let existing = holds
                .find(self.keys.main(), None, task)
                .filter(|h| h.is_held());
            let (owner, sent_mode) = match &existing {
                Some(hold) => (hold.owner, Mode::Reenter),
                None => (waiter, mode),
            };
            let sent_at = Instant::now();
            match self.send_acquire(owner, lease, side, sent_mode).await? {
                // A waiting writer comes back before its intent lapses, to renew it.
                AcquireReply::Blocked(wait)
                    if side == Side::Write && sent_mode == Mode::Acquire =>
                {
                    return Ok(Attempt::Held(Some(match u64::try_from(wait) {
                        Ok(ms) => Duration::from_millis(ms).min(WRITE_INTENT / 3),
                        Err(_) => WRITE_INTENT / 3,
                    })));
                }
                AcquireReply::Blocked(wait) => return Ok(Attempt::held(wait)),
                AcquireReply::UpgradeRefused => {
                    return Err(Error::UpgradeRefused {
                        name: self.name.to_string(),
                    });
                }
                AcquireReply::NotReentered => {
                    // The hold this task believed it had is gone; start a fresh one.
                    if let Some(hold) = existing {
                        hold.mark_lost();
                    }
                }
                AcquireReply::Acquired { token } => {
                    let deadline = sent_at + lease;
                    let hold = match existing {
                        Some(hold) if holds.reattach(&hold) => {
                            hold.extend(deadline);
                            hold
                        }
                        _ => holds.attach(
                            Hold::new(
                                &self.name,
                                self.keys.main(),
                                &self.channel(Side::Write),
                                owner,
                                FencingToken::new(token),
                                Some(task),
                                deadline,
                            )
                            .renewed_as(Renewal::ReadWrite),
                        ),
                    };
                    if self.lease == Lease::Watchdog {
                        self.client.inner.watchdog.watch(&hold);
                    }
                    return Ok(Attempt::Acquired(HeldSide {
                        lock: self.clone(),
                        hold,
                        side,
                        released: false,
                    }));
                }
            }
        }
    }

    /// Runs the acquire script on a spawned task, so that an acquire whose caller went
    /// away is undone when its reply arrives instead of leaving a hold behind.
    async fn send_acquire(
        &self,
        owner: OwnerId,
        lease: Duration,
        side: Side,
        mode: Mode,
    ) -> Result<AcquireReply> {
        let (tx, rx) = oneshot::channel();
        let lock = self.clone();
        tokio::spawn(async move {
            let mut conn = lock.client.conn();
            let reply: redis::RedisResult<Vec<i64>> = SCRIPTS
                .rwlock_acquire
                .key(lock.keys.main())
                .key(lock.keys.fence())
                .arg(owner.to_string())
                .arg(millis(lease))
                .arg(side.as_arg())
                .arg(mode.as_arg())
                .arg(millis(WRITE_INTENT))
                .invoke_async(&mut conn)
                .await;
            if let Err(Ok(reply)) = tx.send(reply) {
                let undone = match reply.first() {
                    Some(1) => send_release(&lock, owner, side, rand::random())
                        .await
                        .map(drop),
                    Some(0) if side == Side::Write && mode == Mode::Acquire => {
                        send_withdraw(&lock, owner).await.map(drop)
                    }
                    _ => Ok(()),
                };
                if let Err(e) = undone {
                    tracing::debug!(lock = %lock.name, error = %e, "undoing an abandoned acquire failed");
                }
            }
        });
        let reply = rx
            .await
            .map_err(|_| Error::Protocol("acquire task was cancelled".into()))??;
        match reply.as_slice() {
            [1, token, _count] => Ok(AcquireReply::Acquired {
                token: u64::try_from(*token)
                    .map_err(|_| Error::Protocol(format!("fencing token {token}")))?,
            }),
            [0, wait] => Ok(AcquireReply::Blocked(*wait)),
            [2] => Ok(AcquireReply::NotReentered),
            [3] => Ok(AcquireReply::UpgradeRefused),
            other => Err(Error::Protocol(format!(
                "read-write lock acquire returned {other:?}"
            ))),
        }
    }
}

async fn send_release(
    lock: &RwLock,
    owner: OwnerId,
    side: Side,
    release_id: u64,
) -> Result<Released> {
    let mut conn = lock.client.conn();
    let code: i64 = SCRIPTS
        .rwlock_release
        .key(lock.keys.main())
        .key(lock.channel(Side::Read))
        .key(lock.channel(Side::Write))
        .arg(owner.to_string())
        .arg(side.as_arg())
        .arg(release_id_arg(release_id))
        .arg(millis(RELEASE_MEMORY))
        .invoke_async(&mut conn)
        .await?;
    Released::from_code(code, "read-write lock release")
}

/// One read or write hold of a guard; both guard types wrap it.
struct HeldSide {
    lock: RwLock,
    hold: Arc<Hold>,
    side: Side,
    released: bool,
}

impl HeldSide {
    fn remaining(&self) -> Duration {
        self.hold.remaining()
    }

    async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.lock.client.inner.holds.detach(&self.hold);
        release(&self.lock, &self.hold, self.side).await
    }

    fn fmt_fields(&self, f: &mut fmt::DebugStruct<'_, '_>) {
        f.field("name", &self.hold.name)
            .field("owner", &self.hold.owner)
            .field("held", &self.hold.is_held());
    }
}

/// Releases one hold, retrying when the reply was lost, never twice.
async fn release(lock: &RwLock, hold: &Hold, side: Side) -> Result<()> {
    release_with_retry(&hold.name, |release_id| {
        send_release(lock, hold.owner, side, release_id)
    })
    .await
}

impl Drop for HeldSide {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.lock.client.inner.holds.detach(&self.hold);
        let lock = self.lock.clone();
        let hold = Arc::clone(&self.hold);
        let side = self.side;
        spawn_cleanup(
            &self.hold.name,
            "releasing a dropped read-write lock guard",
            "the hold expires after its lease",
            async move { release(&lock, &hold, side).await },
        );
    }
}

/// Proof of holding the read side of a [`RwLock`]; releases one read hold when unlocked
/// or dropped.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
/// let read = lock.read().await?;
/// assert!(read.is_held());
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the read lock at once"]
pub struct RwLockReadGuard {
    held: HeldSide,
}

impl fmt::Debug for RwLockReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RwLockReadGuard");
        self.held.fmt_fields(&mut s);
        s.finish_non_exhaustive()
    }
}

impl RwLockReadGuard {
    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockReadGuard) -> ferrisson::Result<()> {
    /// println!("holding {}", guard.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.held.hold.name
    }

    /// The owner id this hold is registered under in Redis.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockReadGuard) -> ferrisson::Result<()> {
    /// println!("held as {}", guard.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> OwnerId {
        self.held.hold.owner
    }

    /// True until this owner's holds are found gone, or its lease runs out unrenewed.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockReadGuard) -> ferrisson::Result<()> {
    /// if !guard.is_held() {
    ///     return Ok(()); // stop: the hold lapsed
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.held.hold.is_held()
    }

    /// How long the hold stays valid without another renewal (zero once lost).
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockReadGuard) -> ferrisson::Result<()> {
    /// if guard.remaining() < std::time::Duration::from_secs(1) {
    ///     eprintln!("renewal is late");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.held.remaining()
    }

    /// Resolves when the hold is lost: the watchdog found it gone, or its lease ran out.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockReadGuard) -> ferrisson::Result<()> {
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lost the lock"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        self.held.hold.lost().await;
    }

    /// Releases this read hold; the last read release of the lock wakes a waiting writer.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockReadGuard) -> ferrisson::Result<()> {
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the lock had expired, [`Error::NotOwner`] when this
    /// owner's read hold was evicted, [`Error::Redis`] when Redis could not be reached
    /// (the hold then expires after its lease).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may or may not have reached Redis;
    /// the watchdog has stopped either way, so the hold is gone after its lease at worst.
    pub async fn unlock(self) -> Result<()> {
        self.held.unlock().await
    }
}

/// Proof of holding the write side of a [`RwLock`]; releases one write hold when unlocked
/// or dropped. The owner's last write release wakes every local waiting reader.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::RwLock) -> ferrisson::Result<()> {
/// let write = lock.write().await?;
/// let token = write.fencing_token(); // pass it to the storage you write
/// write.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the write lock at once"]
pub struct RwLockWriteGuard {
    held: HeldSide,
}

impl fmt::Debug for RwLockWriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RwLockWriteGuard");
        self.held.fmt_fields(&mut s);
        s.field("fencing_token", &self.held.hold.token);
        s.finish_non_exhaustive()
    }
}

impl RwLockWriteGuard {
    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// println!("holding {}", guard.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.held.hold.name
    }

    /// The fencing token of this write hold: greater than every earlier writer's, the
    /// same for every re-entry.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client, guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// client.fenced_set("catalog:rev", b"42", guard.fencing_token()).await?;
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.held.hold.token
    }

    /// The owner id this hold is registered under in Redis.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// println!("held as {}", guard.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> OwnerId {
        self.held.hold.owner
    }

    /// True until this owner's holds are found gone, or its lease runs out unrenewed.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// if !guard.is_held() {
    ///     return Ok(()); // stop: the hold lapsed
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.held.hold.is_held()
    }

    /// How long the hold stays valid without another renewal (zero once lost).
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// if guard.remaining() < std::time::Duration::from_secs(1) {
    ///     eprintln!("renewal is late");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.held.remaining()
    }

    /// Resolves when the hold is lost: the watchdog found it gone, or its lease ran out.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lost the lock"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        self.held.hold.lost().await;
    }

    /// Releases this write hold. When it was the owner's last: if the owner still holds
    /// read guards the lock is downgraded to read mode, else it is free; either way
    /// waiting readers are woken.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::RwLockWriteGuard) -> ferrisson::Result<()> {
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the lock had expired, [`Error::NotOwner`] when this
    /// owner's write hold was evicted, [`Error::Redis`] when Redis could not be reached
    /// (the hold then expires after its lease).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may or may not have reached Redis;
    /// the watchdog has stopped either way, so the hold is gone after its lease at worst.
    pub async fn unlock(self) -> Result<()> {
        self.held.unlock().await
    }
}
