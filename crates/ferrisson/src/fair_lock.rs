//! The fair lock: a reentrant lock granted strictly in request order (Redisson's
//! `RFairLock`), with waiter entries that die with their waiter.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::acquire::{Attempt, acquire_with_wait};
use crate::cleanup::spawn_cleanup;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::holds::Hold;
use crate::keys::Keys;
use crate::lease::{Lease, millis, validate_lease};
use crate::lock::parse_lock_hash;
use crate::owner::{OwnerId, TaskKey};
use crate::release::{Released, release_id_arg, release_with_retry};
use crate::scripts::SCRIPTS;

/// Default keep-alive of a fair lock's waiter entry: a waiter that dies blocks the queue
/// at most this long.
///
/// ```
/// assert_eq!(ferrisson::DEFAULT_WAITER_KEEPALIVE, std::time::Duration::from_secs(10));
/// ```
pub const DEFAULT_WAITER_KEEPALIVE: Duration = Duration::from_secs(10);

/// Shortest accepted waiter keep-alive: a waiter refreshes its entry every third of it.
const MIN_WAITER_KEEPALIVE: Duration = Duration::from_millis(30);

impl Client {
    /// A handle to the fair lock called `name` (no Redis traffic until used).
    ///
    /// A fair lock uses the same key as the [`Lock`](crate::Lock) of the same name; do
    /// not use both kinds under one name.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.fair_lock("payouts")?;
    /// assert_eq!(lock.name(), "payouts");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty or longer than 1 KiB.
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        Ok(FairLock {
            client: self.clone(),
            name: Arc::from(name),
            keys: self.keys(name)?,
            lease: Lease::Watchdog,
            keepalive: DEFAULT_WAITER_KEEPALIVE,
        })
    }
}

/// A reentrant distributed lock granted in strict FIFO order among its waiters.
///
/// The holder is stored as for [`Lock`](crate::Lock) (a hash `{owner: hold count}` plus
/// the fencing token, renewed by the watchdog). Waiters queue in a sorted set by arrival;
/// only the head may take the lock when it is free, and [`FairLock::try_lock`] succeeds
/// only when nobody is queued. Re-entry by the holding task skips the queue.
///
/// **Dead waiters.** Every queue entry carries a deadline in Redis server time (so client
/// clock skew cannot matter). The waiting client refreshes it every third of the
/// keep-alive ([`FairLock::with_waiter_keepalive`], 10 s by default) while it waits, and
/// any script that touches the queue evicts entries whose deadline passed: a waiter that
/// crashed holds the queue up for at most one keep-alive (plus one refresh interval of
/// the waiter behind it). A waiter that stops waiting (dropped future, timeout) removes
/// its entry at once. Redisson keeps a dead waiter's slot for 5 minutes by default.
///
/// **Waking only the head.** A release publishes on the head's own channel,
/// `{name}:w:<owner>`, so exactly one waiter in one client is woken per release. The
/// alternative, one channel for the lock with the head's id as the payload, would deliver
/// every release to every client with a waiter and make each of them check; per-waiter
/// channels cost one `SUBSCRIBE`/`UNSUBSCRIBE` per wait instead, paid only by waiters that
/// actually wait, and keep the client's shared subscription unchanged.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let lock = client.fair_lock("payouts")?;
/// let guard = lock.lock().await?; // queues behind earlier waiters, if any
/// let again = lock.lock().await?; // same task: re-entry, no queueing
/// assert_eq!(again.fencing_token(), guard.fencing_token());
/// again.unlock().await?;
/// guard.unlock().await?; // wakes the head of the queue only
/// assert!(lock.inspect().await?.holder.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    client: Client,
    name: Arc<str>,
    keys: Keys,
    lease: Lease,
    keepalive: Duration,
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("waiter_keepalive", &self.keepalive)
            .finish_non_exhaustive()
    }
}

/// How an acquire attempt treats the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Queue when the lock cannot be granted now.
    Queue,
    /// Never queue (`try_lock`).
    Try,
    /// Only add a hold to one this owner already has.
    Reenter,
}

impl Mode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Queue => "acquire",
            Self::Try => "try",
            Self::Reenter => "reenter",
        }
    }
}

/// What the acquire script answered.
enum AcquireReply {
    Acquired {
        token: u64,
        count: i64,
    },
    Waiting {
        pttl: i64,
        position: i64,
        created: bool,
    },
    NotReentered,
}

/// Lock hash, its PTTL, the queue, the waiter deadlines and the server time.
type InspectReply = (
    Vec<(String, String)>,
    i64,
    Vec<String>,
    Vec<(String, f64)>,
    (u64, u64),
);

/// A snapshot of a fair lock's state, from [`FairLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
/// let info = lock.inspect().await?;
/// println!("held by {:?}, {} waiting", info.holder, info.queue_len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairLockInfo {
    /// The owner holding the lock, if any.
    pub holder: Option<OwnerId>,
    /// How many holds the holder has (re-entries count); 0 when free.
    pub hold_count: u32,
    /// The holder's fencing token.
    pub fencing_token: Option<FencingToken>,
    /// The lock's remaining time to live; `None` when free.
    pub ttl: Option<Duration>,
    /// The live waiters, head first: the order in which they will be granted.
    pub waiters: Vec<FairWaiter>,
}

impl FairLockInfo {
    /// Number of live waiters in the queue.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// if lock.inspect().await?.queue_len() > 100 {
    ///     eprintln!("{} is congested", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn queue_len(&self) -> usize {
        self.waiters.len()
    }
}

/// One waiter of a fair lock, from [`FairLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
/// for waiter in lock.inspect().await?.waiters {
///     println!("{} (entry dies in {:?} unless refreshed)", waiter.owner, waiter.expires_in);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairWaiter {
    /// The owner id the waiter will hold the lock under.
    pub owner: OwnerId,
    /// Time left before the entry is evicted unless its waiter refreshes it.
    pub expires_in: Duration,
}

impl FairLock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// assert_eq!(client.fair_lock("jobs")?.name(), "jobs");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("jobs")?.with_lease(ferrisson::Lease::Fixed(Duration::from_secs(5)))?;
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

    /// The same lock with another waiter keep-alive (default
    /// [`DEFAULT_WAITER_KEEPALIVE`]): how long a waiter's queue entry survives without a
    /// refresh. Waiters refresh every third of it, so a shorter keep-alive evicts dead
    /// waiters sooner and costs more refreshes while waiting.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("jobs")?.with_waiter_keepalive(Duration::from_secs(3))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a keep-alive under 30 ms or over a year.
    pub fn with_waiter_keepalive(mut self, keepalive: Duration) -> Result<Self> {
        validate_lease(keepalive)?;
        if keepalive < MIN_WAITER_KEEPALIVE {
            return Err(Error::invalid(format!(
                "waiter keep-alive must be at least {MIN_WAITER_KEEPALIVE:?}, got {keepalive:?}"
            )));
        }
        self.keepalive = keepalive;
        Ok(self)
    }

    /// Acquires the lock after every earlier waiter, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// // ... critical section, entered in request order ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no hold and no queue entry
    /// behind (an acquire already sent is undone when its reply arrives), no subscription
    /// and no task.
    pub async fn lock(&self) -> Result<FairLockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without the lock".into()))
    }

    /// Acquires the lock if it is free and nobody is queued, or if this task holds it
    /// already; `Ok(None)` otherwise. Never queues. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// match lock.try_lock().await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => eprintln!("held, or others are queued first"),
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
    /// Cancel safe, as [`FairLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<FairLockGuard>> {
        match self.attempt(OwnerId::random(), Mode::Try, None).await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held(_) => Ok(None),
        }
    }

    /// Acquires the lock after every earlier waiter, waiting at most `wait`; `Ok(None)`
    /// when the wait ran out, and then this waiter's queue entry is already gone.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.lock_timeout(Duration::from_secs(2)).await? {
    ///     guard.unlock().await?;
    /// } else {
    ///     eprintln!("gave up; this waiter's queue entry is already removed");
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
    /// Cancel safe, as [`FairLock::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<FairLockGuard>> {
        if wait.is_zero() {
            return self.try_lock().await;
        }
        self.acquire(Some(wait)).await
    }

    /// Whether anyone holds the lock now.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn is_locked(&self) -> Result<bool> {
        let mut conn = self.client.conn();
        Ok(conn.exists(self.keys.main()).await?)
    }

    /// Deletes the lock whoever holds it and wakes the head of the queue (an operator's
    /// tool). The holder's guards see the loss at their next renewal. Returns whether a
    /// lock was deleted; the queue is left as it is.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
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
            .fair_force_release
            .key(self.keys.main())
            .key(self.queue_key())
            .key(self.deadlines_key())
            .key(self.channel_prefix())
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }

    /// Reads the lock's holder, TTL and queue in one atomic step, without changing them.
    /// Waiters whose entry expired but was not evicted yet are left out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let info = lock.inspect().await?;
    /// if let Some(head) = info.waiters.first() {
    ///     println!("next: {} (holder {:?}, ttl {:?})", head.owner, info.holder, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached, [`Error::Protocol`] when the keys
    /// hold something a fair lock never writes.
    pub async fn inspect(&self) -> Result<FairLockInfo> {
        let mut conn = self.client.conn();
        let (fields, pttl, queue, deadlines, time): InspectReply = SCRIPTS
            .fair_inspect
            .key(self.keys.main())
            .key(self.queue_key())
            .key(self.deadlines_key())
            .invoke_async(&mut conn)
            .await?;
        let now_ms = time.0 * 1000 + time.1 / 1000;
        let deadlines: HashMap<String, f64> = deadlines.into_iter().collect();
        let (holder, hold_count, fencing_token) = parse_lock_hash(fields)?;
        let mut info = FairLockInfo {
            holder,
            hold_count,
            fencing_token,
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            waiters: Vec::with_capacity(queue.len()),
        };
        for member in queue {
            let Some(&deadline) = deadlines.get(&member) else {
                continue;
            };
            let deadline = deadline as u64;
            if deadline <= now_ms {
                continue;
            }
            let owner = member
                .parse()
                .map_err(|_| Error::Protocol(format!("fair lock queue entry {member:?}")))?;
            info.waiters.push(FairWaiter {
                owner,
                expires_in: Duration::from_millis(deadline - now_ms),
            });
        }
        Ok(info)
    }

    fn queue_key(&self) -> String {
        self.keys.with_suffix("queue")
    }

    fn deadlines_key(&self) -> String {
        self.keys.with_suffix("deadlines")
    }

    /// Prefix of the per-waiter wake-up channels: `{name}:w:`.
    fn channel_prefix(&self) -> String {
        self.keys.with_suffix("w:")
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<FairLockGuard>> {
        // One owner id for the whole wait: it is the queue entry, and the hold once granted.
        let waiter = OwnerId::random();
        let entry = QueueEntry {
            lock: self.clone(),
            owner: waiter,
            queued: AtomicBool::new(false),
            armed: true,
        };
        let channel = format!("{}{waiter}", self.channel_prefix());
        let acquired = acquire_with_wait(&self.client, &channel, wait, || {
            self.attempt(waiter, Mode::Queue, Some(&entry))
        })
        .await?;
        match acquired {
            Some(guard) => {
                entry.disarm();
                Ok(Some(guard))
            }
            None => {
                entry.remove().await?;
                Ok(None)
            }
        }
    }

    /// When the waiter should try again: the head watches the holder's TTL (a holder that
    /// died releases nothing); everyone refreshes the entry every third of the keep-alive.
    fn nap(&self, pttl: i64, position: i64) -> Duration {
        let refresh = self.keepalive / 3;
        match u64::try_from(pttl) {
            Ok(ttl) if position == 0 => refresh.min(Duration::from_millis(ttl)),
            _ => refresh,
        }
    }

    async fn attempt(
        &self,
        waiter: OwnerId,
        mode: Mode,
        entry: Option<&QueueEntry>,
    ) -> Result<Attempt<FairLockGuard>> {
        let task = TaskKey::current();
        let holds = &self.client.inner.holds;
        let lease = self.lease.duration(self.client.watchdog_lease());
        loop {
            let existing = holds
                .find(self.keys.main(), None, task)
                .filter(|h| h.is_held());
            let (owner, sent_mode) = match &existing {
                Some(hold) => (hold.owner, Mode::Reenter),
                None => (waiter, mode),
            };
            let sent_at = Instant::now();
            match self.send_acquire(owner, lease, sent_mode).await? {
                AcquireReply::Waiting {
                    pttl,
                    position,
                    created,
                } => {
                    if let Some(entry) = entry
                        && entry.queued.swap(true, Ordering::SeqCst)
                        && created
                    {
                        tracing::warn!(
                            lock = %self.name,
                            "fair lock waiter entry expired while waiting (client stalled?); queued again at the tail"
                        );
                    }
                    return Ok(Attempt::Held(Some(self.nap(pttl, position))));
                }
                AcquireReply::NotReentered => {
                    // The hold this task believed it had is gone; queue for a fresh one.
                    if let Some(hold) = existing {
                        hold.mark_lost();
                    }
                }
                AcquireReply::Acquired { token, count } => {
                    let deadline = sent_at + lease;
                    let hold = match existing {
                        Some(hold) if count > 1 && holds.reattach(&hold) => {
                            hold.extend(deadline);
                            hold
                        }
                        _ => holds.attach(Hold::new(
                            &self.name,
                            self.keys.main(),
                            &self.channel_prefix(),
                            owner,
                            FencingToken::new(token),
                            Some(task),
                            deadline,
                        )),
                    };
                    if self.lease == Lease::Watchdog {
                        self.client.inner.watchdog.watch(&hold);
                    }
                    return Ok(Attempt::Acquired(FairLockGuard {
                        lock: self.clone(),
                        hold,
                        lease,
                        released: false,
                    }));
                }
            }
        }
    }

    /// Runs the acquire script on a spawned task, so that an acquire or a queue entry
    /// whose caller went away is undone when its reply arrives instead of staying behind.
    async fn send_acquire(
        &self,
        owner: OwnerId,
        lease: Duration,
        mode: Mode,
    ) -> Result<AcquireReply> {
        let (tx, rx) = oneshot::channel();
        let lock = self.clone();
        tokio::spawn(async move {
            let mut conn = lock.client.conn();
            let reply: redis::RedisResult<Vec<i64>> = SCRIPTS
                .fair_acquire
                .key(lock.keys.main())
                .key(lock.keys.fence())
                .key(lock.queue_key())
                .key(lock.deadlines_key())
                .key(lock.channel_prefix())
                .arg(owner.to_string())
                .arg(millis(lease))
                .arg(mode.as_arg())
                .arg(millis(lock.keepalive))
                .invoke_async(&mut conn)
                .await;
            if let Err(Ok(reply)) = tx.send(reply) {
                let undone = match reply.first() {
                    Some(1) => send_release(&lock, owner, lease, rand::random())
                        .await
                        .map(drop),
                    Some(0) if mode == Mode::Queue => send_cancel(&lock, owner).await.map(drop),
                    _ => Ok(()),
                };
                if let Err(e) = undone {
                    tracing::debug!(lock = %lock.name, error = %e, "undoing an abandoned fair acquire failed");
                }
            }
        });
        let reply = rx
            .await
            .map_err(|_| Error::Protocol("acquire task was cancelled".into()))??;
        match reply.as_slice() {
            [1, token, count] => Ok(AcquireReply::Acquired {
                token: u64::try_from(*token)
                    .map_err(|_| Error::Protocol(format!("fencing token {token}")))?,
                count: *count,
            }),
            [0, pttl, position, created] => Ok(AcquireReply::Waiting {
                pttl: *pttl,
                position: *position,
                created: *created == 1,
            }),
            [2] => Ok(AcquireReply::NotReentered),
            other => Err(Error::Protocol(format!(
                "fair lock acquire returned {other:?}"
            ))),
        }
    }
}

/// A waiter's queue entry: removed from Redis when the wait ends without the lock, also
/// when the waiting future is dropped (on a spawned task, like a guard's release).
struct QueueEntry {
    lock: FairLock,
    owner: OwnerId,
    /// Set once the entry exists, to notice an entry that expired while its waiter lived.
    queued: AtomicBool,
    armed: bool,
}

impl QueueEntry {
    fn disarm(mut self) {
        self.armed = false;
    }

    /// Removes the entry now; if this future is dropped first, `Drop` does it instead.
    async fn remove(mut self) -> Result<()> {
        send_cancel(&self.lock, self.owner).await?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let lock = self.lock.clone();
        let owner = self.owner;
        spawn_cleanup(
            &self.lock.name,
            "removing a cancelled fair waiter",
            "its queue entry expires after the keep-alive",
            async move { send_cancel(&lock, owner).await },
        );
    }
}

async fn send_cancel(lock: &FairLock, owner: OwnerId) -> Result<bool> {
    let mut conn = lock.client.conn();
    let removed: i64 = SCRIPTS
        .fair_cancel
        .key(lock.keys.main())
        .key(lock.queue_key())
        .key(lock.deadlines_key())
        .key(lock.channel_prefix())
        .arg(owner.to_string())
        .invoke_async(&mut conn)
        .await?;
    Ok(removed == 1)
}

async fn send_release(
    lock: &FairLock,
    owner: OwnerId,
    lease: Duration,
    release_id: u64,
) -> Result<Released> {
    let mut conn = lock.client.conn();
    let code: i64 = SCRIPTS
        .fair_release
        .key(lock.keys.main())
        .key(lock.queue_key())
        .key(lock.deadlines_key())
        .key(lock.channel_prefix())
        .arg(owner.to_string())
        .arg(millis(lease))
        .arg(release_id_arg(release_id))
        .invoke_async(&mut conn)
        .await?;
    Released::from_code(code, "fair lock release")
}

/// Releases one hold, retrying when the reply was lost, never twice.
async fn release_hold(lock: &FairLock, hold: &Hold, lease: Duration) -> Result<()> {
    release_with_retry(&hold.name, |release_id| {
        send_release(lock, hold.owner, lease, release_id)
    })
    .await
}

/// Proof of holding a [`FairLock`]; releases one hold when unlocked or dropped, and the
/// last release wakes the head of the queue.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
/// let guard = lock.lock().await?;
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost, stop writing"),
///     () = do_work(guard.fencing_token()) => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// # async fn do_work(_: ferrisson::FencingToken) {}
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct FairLockGuard {
    lock: FairLock,
    hold: Arc<Hold>,
    lease: Duration,
    released: bool,
}

impl fmt::Debug for FairLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLockGuard")
            .field("name", &self.hold.name)
            .field("owner", &self.hold.owner)
            .field("fencing_token", &self.hold.token)
            .field("held", &self.hold.is_held())
            .finish_non_exhaustive()
    }
}

impl FairLockGuard {
    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
    /// println!("holding {}", guard.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The fencing token of this hold: greater than every earlier holder's, the same for
    /// every re-entry.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client, guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
    /// let token = guard.fencing_token();
    /// client.fenced_set("ledger", b"100", token).await?;
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.token
    }

    /// The owner id this hold is registered under in Redis.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
    /// println!("held as {}", guard.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> OwnerId {
        self.hold.owner
    }

    /// True until the lock is found gone or taken, or its lease runs out unrenewed.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
    /// if !guard.is_held() {
    ///     return Ok(()); // stop: another owner may hold it now
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// How long the hold stays valid without another renewal (zero once lost).
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
    /// if guard.remaining() < std::time::Duration::from_secs(1) {
    ///     eprintln!("renewal is late");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.hold.remaining()
    }

    /// Resolves when the lock is no longer held: the watchdog found it gone or taken, or
    /// its lease ran out.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
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
        self.hold.lost().await;
    }

    /// Releases this hold; when it was the owner's last, the head of the queue is woken.
    ///
    /// ```no_run
    /// # async fn demo(guard: ferrisson::FairLockGuard) -> ferrisson::Result<()> {
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the lock had expired, [`Error::NotOwner`] when
    /// another owner holds it now, [`Error::Redis`] when Redis could not be reached (the
    /// lock then expires after its lease).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may or may not have reached Redis;
    /// the watchdog has stopped either way, so the lock is gone after its lease at worst.
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.lock.client.inner.holds.detach(&self.hold);
        release_hold(&self.lock, &self.hold, self.lease).await
    }
}

impl Drop for FairLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.lock.client.inner.holds.detach(&self.hold);
        let lock = self.lock.clone();
        let hold = Arc::clone(&self.hold);
        let lease = self.lease;
        spawn_cleanup(
            &self.hold.name,
            "releasing a dropped fair lock guard",
            "the lock expires after its lease",
            async move { release_hold(&lock, &hold, lease).await },
        );
    }
}
