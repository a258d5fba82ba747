//! The read-write lock: many readers or one writer, both reentrant, each holder with its
//! own lease, a writer that may read, and a refused (not deadlocked) upgrade.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::error::{Error, Result, is_unacknowledged};
use crate::api::fencing::FencingToken;
use crate::api::lease::Lease;
use crate::backend::client::Client;
use crate::backend::holds::Renewal;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::keys::Keys;
use crate::backend::scripts::Released;
use crate::backend::scripts::rwlock::{
    RwAcquire, RwAcquired, RwForceRelease, RwInspect, RwKeys, RwMode, RwRelease, RwWithdraw, Side,
};
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::guard::{HoldGuard, SendRelease, hold_guard_methods};
use crate::primitive::reentrant::{self, Answer, HoldSpec, Sent};
use crate::primitive::undo::{UndoOnDrop, send_or_undo};
use crate::primitive::wait::{Attempt, acquire_with_wait, holder_wait, try_once};

/// How long Redis remembers an applied release id: longer than any retry takes.
const RELEASE_MEMORY: Duration = Duration::from_secs(60);
/// How long a waiting writer's intent holds new readers back without a refresh: a writer
/// that dies while waiting delays readers at most this long. Refreshed every third.
const WRITE_INTENT: Duration = Duration::from_secs(3);

impl Client {
    /// A handle to the read-write lock called `name` (no Redis traffic until used).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let lock = client.rwlock("catalog")?;
    /// assert_eq!(lock.name(), "catalog");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        Ok(RwLock {
            client: self.clone(),
            read_probe: self.probe(Kind::RwLockRead, &name),
            write_probe: self.probe(Kind::RwLockWrite, &name),
            name,
            channels: Arc::new(SideChannels {
                read: keys.with_suffix("released:read"),
                write: keys.with_suffix("released:write"),
            }),
            keys,
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
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let lock = client.rwlock("catalog")?;
/// let write = lock.write().await?;
/// let read = lock.read().await?; // the writer may read
/// write.unlock().await?; // downgrade: still reading, others may read too
/// assert!(matches!(lock.write().await, Err(ferrisson_redis::Error::UpgradeRefused { .. })));
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    name: Arc<str>,
    read_probe: Probe,
    write_probe: Probe,
    keys: Keys,
    channels: Arc<SideChannels>,
    lease: Lease,
}

/// The channels each side's waiters listen on.
#[derive(Debug)]
struct SideChannels {
    read: String,
    write: String,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// Which side of a [`RwLock`] is held, from [`RwLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
/// use ferrisson_redis::RwLockMode;
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
/// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
/// let info = lock.inspect().await?;
/// println!("{:?}: writer {:?}, {} readers", info.mode, info.writer, info.readers.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockInfo {
    /// The lock's name.
    pub name: String,
    /// The mode, or `None` when nobody holds the lock.
    pub mode: Option<RwLockMode>,
    /// The writer and its write holds.
    pub writer: Option<RwHolder>,
    /// Every owner with read holds (a writer that reads is listed here too).
    pub readers: Vec<RwHolder>,
    /// The fencing token of the current or last writer while the lock is held.
    pub fencing_token: Option<FencingToken>,
    /// The lock's remaining time to live in Redis: at least the longest holder's lease.
    pub ttl: Option<Duration>,
    /// Writers waiting for the lock; new readers wait behind them.
    pub waiting_writers: Vec<OwnerId>,
}

/// One holder of a [`RwLock`], from [`RwLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
/// for reader in lock.inspect().await?.readers {
///     println!("{} holds {} read(s), lease left {:?}", reader.owner, reader.holds, reader.ttl);
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
    pub ttl: Duration,
}

impl RwLock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.rwlock("catalog")?.name(), "catalog");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions of either side.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.rwlock("catalog")?.with_lease(ferrisson_redis::Lease::Fixed(Duration::from_secs(5)))?;
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
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
    /// let read = lock.read().await?;
    /// // ... read the shared state; other readers may be here too ...
    /// read.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no hold behind (an acquire
    /// already sent is undone when its reply arrives), no subscription and no task.
    pub async fn read(&self) -> Result<RwLockReadGuard> {
        let inner = self
            .acquire(Side::Read, None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))?;
        Ok(RwLockReadGuard { inner })
    }

    /// Acquires the read lock if no other owner writes or waits to write; `Ok(None)`
    /// otherwise. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
    /// if let Some(read) = lock.try_read().await? {
    ///     read.unlock().await?;
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
    /// Cancel safe, as [`RwLock::read`].
    pub async fn try_read(&self) -> Result<Option<RwLockReadGuard>> {
        let attempt = self.attempt(Side::Read, OwnerId::random(), RwMode::Try);
        let acquired = try_once(self.probe(Side::Read), attempt).await?;
        Ok(acquired.map(|inner| RwLockReadGuard { inner }))
    }

    /// Acquires the read lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
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
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn read_timeout(&self, wait: Duration) -> Result<Option<RwLockReadGuard>> {
        let held = self.acquire(Side::Read, Some(wait)).await?;
        Ok(held.map(|inner| RwLockReadGuard { inner }))
    }

    /// Acquires the write lock, waiting until no other owner reads or writes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
    /// let write = lock.write().await?;
    /// // ... nobody else reads or writes now ...
    /// write.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`] at once when this task holds the read lock but not the
    /// write lock; [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn write(&self) -> Result<RwLockWriteGuard> {
        let inner = self
            .acquire(Side::Write, None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))?;
        Ok(RwLockWriteGuard { inner })
    }

    /// Acquires the write lock if nobody else holds the lock; `Ok(None)` otherwise, and
    /// then it leaves no intent behind (readers are not held back). One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
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
        let attempt = self.attempt(Side::Write, OwnerId::random(), RwMode::Try);
        let acquired = try_once(self.probe(Side::Write), attempt).await?;
        Ok(acquired.map(|inner| RwLockWriteGuard { inner }))
    }

    /// Acquires the write lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
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
        Ok(held.map(|inner| RwLockWriteGuard { inner }))
    }

    /// Deletes the lock whoever holds it, every reader and the writer, and wakes its
    /// waiters (an operator's tool). The holders' guards see the loss at their next
    /// renewal. Returns whether a lock was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
    /// if lock.force_unlock().await? {
    ///     eprintln!("{} was held and is free now", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.client
            .connection()
            .run(&RwForceRelease {
                keys: self.rw_keys(),
            })
            .await
    }

    /// Reads the lock's holders, leases and TTL in one atomic step, without changing
    /// them. Holders whose lease ran out but who were not evicted yet are left out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
    /// let info = lock.inspect().await?;
    /// for reader in &info.readers {
    ///     println!("reader {} ({} holds)", reader.owner, reader.holds);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the key
    /// holds something a read-write lock never writes.
    pub async fn inspect(&self) -> Result<RwLockInfo> {
        let (fields, pttl, time) = self
            .client
            .connection()
            .run(&RwInspect {
                key: self.keys.main(),
            })
            .await?;
        let now_ms = time.0 * 1000 + time.1 / 1000;
        let mut info = RwLockInfo {
            name: self.name.to_string(),
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
            let ttl = Duration::from_millis(deadline - now_ms);
            if writes > 0 {
                info.writer = Some(RwHolder {
                    owner,
                    holds: writes,
                    ttl,
                });
            }
            if reads > 0 {
                info.readers.push(RwHolder {
                    owner,
                    holds: reads,
                    ttl,
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

    /// What acquires of `side` record their metrics and spans under.
    fn probe(&self, side: Side) -> &Probe {
        match side {
            Side::Read => &self.read_probe,
            Side::Write => &self.write_probe,
        }
    }

    /// The channel waiters of `side` listen on.
    fn channel(&self, side: Side) -> &str {
        match side {
            Side::Read => &self.channels.read,
            Side::Write => &self.channels.write,
        }
    }

    fn rw_keys(&self) -> RwKeys<'_> {
        RwKeys {
            lock: self.keys.main(),
            read_channel: &self.channels.read,
            write_channel: &self.channels.write,
        }
    }

    async fn acquire(&self, side: Side, wait: Option<Duration>) -> Result<Option<SideGuard>> {
        // One owner id for the whole wait: a blocked writer's intent is recorded under it.
        let waiter = OwnerId::random();
        let intent = (side == Side::Write).then(|| {
            UndoOnDrop::arm(
                &self.name,
                "withdrawing a cancelled writer's intent",
                "the intent lapses on its own",
                move || {
                    let lock = self.clone();
                    async move { lock.send_withdraw(waiter).await }
                },
            )
        });
        let acquired = acquire_with_wait(
            &self.client,
            self.probe(side),
            self.channel(side),
            wait,
            || self.attempt(side, waiter, RwMode::Acquire),
        )
        .await?;
        match (acquired, intent) {
            (Some(held), intent) => {
                if let Some(intent) = intent {
                    intent.disarm();
                }
                Ok(Some(held))
            }
            (None, Some(intent)) => {
                intent.run_now().await?;
                Ok(None)
            }
            (None, None) => Ok(None),
        }
    }

    async fn attempt(
        &self,
        side: Side,
        waiter: OwnerId,
        mode: RwMode,
    ) -> Result<Attempt<SideGuard>> {
        // One owner per task for both sides: that is how the script knows a writer asks
        // to read, or a reader to write.
        let spec = HoldSpec {
            probe: self.probe(side),
            keys: &self.keys,
            lease: self.lease,
            renewal: Renewal::ReadWrite,
            explicit_owner: None,
        };
        let lease = self.lease.duration(self.client.watchdog_lease());
        let attempt = reentrant::attempt(&self.client, &spec, waiter, |sent| async move {
            let sent_mode = match sent {
                Sent::Reentry(_) => RwMode::Reenter,
                Sent::First(_) => mode,
            };
            Ok(
                match self
                    .send_acquire(sent.owner(), lease, side, sent_mode)
                    .await?
                {
                    RwAcquired::Granted { token, count } => Answer::Granted { token, count },
                    RwAcquired::NotReentered => Answer::NotReentered,
                    RwAcquired::UpgradeRefused => {
                        return Err(Error::UpgradeRefused {
                            name: self.name.to_string(),
                        });
                    }
                    // A waiting writer comes back before its intent lapses, to renew it.
                    RwAcquired::Blocked { wait }
                        if side == Side::Write && sent_mode == RwMode::Acquire =>
                    {
                        Answer::Blocked(Some(
                            holder_wait(wait)
                                .unwrap_or(WRITE_INTENT)
                                .min(WRITE_INTENT / 3),
                        ))
                    }
                    RwAcquired::Blocked { wait } => Answer::Blocked(holder_wait(wait)),
                },
            )
        })
        .await?;
        Ok(attempt.map(|hold| {
            HoldGuard::new(
                self.client.clone(),
                hold,
                ReleaseSide {
                    lock: self.clone(),
                    side,
                },
            )
        }))
    }

    /// Sends the acquire script so that an acquire (or a writer's intent) whose caller
    /// went away is undone when its reply arrives (on a spawned task, only then: see
    /// `send_or_undo`).
    async fn send_acquire(
        &self,
        owner: OwnerId,
        lease: Duration,
        side: Side,
        mode: RwMode,
    ) -> Result<RwAcquired> {
        let lock = self.clone();
        send_or_undo(
            &self.name,
            async move {
                let reply = lock
                    .client
                    .connection()
                    .run(&RwAcquire {
                        key: lock.keys.main(),
                        fence: lock.keys.fence(),
                        owner,
                        lease,
                        side,
                        mode,
                        intent: WRITE_INTENT,
                    })
                    .await;
                if let Err(e) = &reply
                    && is_unacknowledged(e)
                {
                    // Granted, but not acknowledged as required: give it back.
                    let release = ReleaseSide {
                        lock: lock.clone(),
                        side,
                    };
                    let _ = release.send_once(owner, ReleaseId::random()).await;
                }
                Ok((lock, reply?))
            },
            move |(lock, reply)| async move {
                match reply {
                    RwAcquired::Granted { .. } => {
                        ReleaseSide { lock, side }
                            .send_once(owner, ReleaseId::random())
                            .await?;
                    }
                    RwAcquired::Blocked { .. }
                        if side == Side::Write && mode == RwMode::Acquire =>
                    {
                        lock.send_withdraw(owner).await?;
                    }
                    _ => {}
                }
                Ok(())
            },
        )
        .await
        .map(|(_, reply)| reply)
    }

    async fn send_withdraw(&self, owner: OwnerId) -> Result<bool> {
        self.client
            .connection()
            .run(&RwWithdraw {
                key: self.keys.main(),
                read_channel: &self.channels.read,
                owner,
            })
            .await
    }
}

/// How a read or write guard releases: `rwlock_release.lua` for its side.
struct ReleaseSide {
    lock: RwLock,
    side: Side,
}

impl ReleaseSide {
    async fn send_once(&self, owner: OwnerId, release_id: ReleaseId) -> Result<Released> {
        self.lock
            .client
            .connection()
            .run(&RwRelease {
                keys: self.lock.rw_keys(),
                owner,
                side: self.side,
                release_id,
                remember: RELEASE_MEMORY,
            })
            .await
    }
}

impl SendRelease for ReleaseSide {
    const DROPPED: &'static str = "releasing a dropped read-write lock guard";

    async fn send(
        &self,
        _client: &Client,
        owner: OwnerId,
        release_id: ReleaseId,
    ) -> Result<Released> {
        self.send_once(owner, release_id).await
    }
}

/// One read or write hold; both guard types wrap it.
type SideGuard = HoldGuard<ReleaseSide>;

/// Proof of holding the read side of a [`RwLock`]; releases one read hold when unlocked
/// or dropped.
///
/// A reader carries no fencing token: fencing protects writes, and readers do not write.
/// To write, take the write side ([`RwLock::write`]), whose guard has one.
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
/// let read = lock.read().await?;
/// assert!(read.is_held());
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the read lock at once"]
pub struct RwLockReadGuard {
    inner: SideGuard,
}

hold_guard_methods!(
    RwLockReadGuard,
    "the owner's last read release lets a waiting writer in"
);

impl fmt::Debug for RwLockReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hold = self.inner.hold();
        f.debug_struct("RwLockReadGuard")
            .field("name", &hold.name)
            .field("owner", &hold.owner)
            .field("held", &hold.is_held())
            .finish_non_exhaustive()
    }
}

/// Proof of holding the write side of a [`RwLock`]; releases one write hold when unlocked
/// or dropped. The owner's last write release wakes every local waiting reader.
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::RwLock) -> ferrisson_redis::Result<()> {
/// let write = lock.write().await?;
/// let token = write.fencing_token(); // pass it to the storage you write
/// write.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the write lock at once"]
pub struct RwLockWriteGuard {
    inner: SideGuard,
}

hold_guard_methods!(
    RwLockWriteGuard,
    "the owner's last write release wakes the waiting readers and writers",
    token
);

impl fmt::Debug for RwLockWriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner
            .hold()
            .fmt_fields(&mut f.debug_struct("RwLockWriteGuard"))
    }
}

impl ferrisson_core::DistributedRwLock for RwLock {
    type ReadGuard = RwLockReadGuard;
    type WriteGuard = RwLockWriteGuard;

    fn name(&self) -> &str {
        RwLock::name(self)
    }

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::RW_LOCK
    }

    async fn read(&self) -> Result<RwLockReadGuard> {
        RwLock::read(self).await
    }

    async fn try_read(&self) -> Result<Option<RwLockReadGuard>> {
        RwLock::try_read(self).await
    }

    async fn read_timeout(&self, wait: Duration) -> Result<Option<RwLockReadGuard>> {
        RwLock::read_timeout(self, wait).await
    }

    async fn write(&self) -> Result<RwLockWriteGuard> {
        RwLock::write(self).await
    }

    async fn try_write(&self) -> Result<Option<RwLockWriteGuard>> {
        RwLock::try_write(self).await
    }

    async fn write_timeout(&self, wait: Duration) -> Result<Option<RwLockWriteGuard>> {
        RwLock::write_timeout(self, wait).await
    }
}
