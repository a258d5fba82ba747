//! The fair lock: a reentrant lock granted strictly in request order (Redisson's
//! `RFairLock`), with waiter entries that die with their waiter.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::api::error::{Error, Result, is_unacknowledged};
use crate::api::fencing::FencingToken;
use crate::api::lease::{Lease, validate_lease};
use crate::backend::client::Client;
use crate::backend::holds::Renewal;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::keys::Keys;
use crate::backend::scripts::Released;
use crate::backend::scripts::fair::{
    FairAcquire, FairAcquired, FairCancel, FairForceRelease, FairInspect, FairKeys, FairMode,
    FairRelease,
};
use crate::locks::lock::parse_lock_hash;
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::guard::{HoldGuard, SendRelease, hold_guard_methods};
use crate::primitive::reentrant::{self, Answer, HoldSpec, Sent};
use crate::primitive::undo::{UndoOnDrop, send_or_undo};
use crate::primitive::wait::{Attempt, Channel, acquire_with_wait, try_once};
use ferrisson_core::DistributedLock;

/// Default keep-alive of a fair lock's waiter entry: a waiter that dies blocks the queue
/// at most this long.
///
/// ```
/// assert_eq!(ferrisson_redis::DEFAULT_WAITER_KEEPALIVE, std::time::Duration::from_secs(10));
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
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let lock = client.fair_lock("payouts")?;
    /// assert_eq!(lock.name(), "payouts");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        Ok(FairLock {
            client: self.clone(),
            probe: self.probe(Kind::FairLock, &name),
            name,
            queue: Arc::new(QueueKeys {
                queue: keys.with_suffix("queue"),
                deadlines: keys.with_suffix("deadlines"),
                channel_prefix: keys.with_suffix("w:"),
            }),
            keys,
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
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
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
    probe: Probe,
    keys: Keys,
    queue: Arc<QueueKeys>,
    lease: Lease,
    keepalive: Duration,
}

/// The fair lock's keys besides the lock hash.
#[derive(Debug)]
struct QueueKeys {
    queue: String,
    deadlines: String,
    /// `{name}:w:`: the owner id completes a waiter's own wake-up channel.
    channel_prefix: String,
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

/// A snapshot of a fair lock's state, from [`FairLock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
/// let info = lock.inspect().await?;
/// println!("held by {:?}, {} waiting", info.holder, info.queue_len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairLockInfo {
    /// The lock's name.
    pub name: String,
    /// The owner holding the lock, if any.
    pub holder: Option<OwnerId>,
    /// How many holds the holder has (re-entries count); 0 when free.
    pub hold_count: u32,
    /// The holder's fencing token.
    pub fencing_token: Option<FencingToken>,
    /// The lock's remaining time to live in Redis; `None` when free.
    pub ttl: Option<Duration>,
    /// The live waiters, head first: the order in which they will be granted.
    pub waiters: Vec<FairWaiter>,
}

impl FairLockInfo {
    /// Number of live waiters in the queue.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
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
/// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
/// for waiter in lock.inspect().await?.waiters {
///     println!("{} (entry dies in {:?} unless refreshed)", waiter.owner, waiter.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairWaiter {
    /// The owner id the waiter will hold the lock under.
    pub owner: OwnerId,
    /// Time left before the entry is evicted unless its waiter refreshes it.
    pub ttl: Duration,
}

impl FairLock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.fair_lock("jobs")?.name(), "jobs");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("jobs")?.with_lease(ferrisson_redis::Lease::Fixed(Duration::from_secs(5)))?;
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
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
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
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// // ... critical section, entered in request order ...
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
    /// Cancel safe: dropping the future at any point leaves no hold and no queue entry
    /// behind (an acquire already sent is undone when its reply arrives), no subscription
    /// and no task.
    pub async fn lock(&self) -> Result<FairLockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    /// Acquires the lock if it is free and nobody is queued, or if this task holds it
    /// already; `Ok(None)` otherwise. Never queues. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
    /// match lock.try_lock().await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => eprintln!("held, or others are queued first"),
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
    /// Cancel safe, as [`FairLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<FairLockGuard>> {
        try_once(
            &self.probe,
            self.attempt(OwnerId::random(), FairMode::Try, None),
        )
        .await
    }

    /// Acquires the lock after every earlier waiter, waiting at most `wait`; `Ok(None)`
    /// when the wait ran out, and then this waiter's queue entry is already gone.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
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
    /// [`Error::Store`] when Redis cannot be reached.
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
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn is_locked(&self) -> Result<bool> {
        self.client
            .connection()
            .query_resendable(redis::cmd("EXISTS").arg(self.keys.main()))
            .await
    }

    /// Deletes the lock whoever holds it and wakes the head of the queue (an operator's
    /// tool). The holder's guards see the loss at their next renewal. Returns whether a
    /// lock was deleted; the queue is left as it is.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
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
            .run(&FairForceRelease {
                keys: self.fair_keys(),
            })
            .await
    }

    /// Reads the lock's holder, TTL and queue in one atomic step, without changing them.
    /// Waiters whose entry expired but was not evicted yet are left out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
    /// let info = lock.inspect().await?;
    /// if let Some(head) = info.waiters.first() {
    ///     println!("next: {} (holder {:?}, ttl {:?})", head.owner, info.holder, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the keys
    /// hold something a fair lock never writes.
    pub async fn inspect(&self) -> Result<FairLockInfo> {
        let (fields, pttl, queue, deadlines, time) = self
            .client
            .connection()
            .run(&FairInspect {
                keys: self.fair_keys(),
            })
            .await?;
        let now_ms = time.0 * 1000 + time.1 / 1000;
        let deadlines: HashMap<String, f64> = deadlines.into_iter().collect();
        let (holder, hold_count, fencing_token) = parse_lock_hash(fields)?;
        let mut info = FairLockInfo {
            name: self.name.to_string(),
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
                ttl: Duration::from_millis(deadline - now_ms),
            });
        }
        Ok(info)
    }

    fn fair_keys(&self) -> FairKeys<'_> {
        FairKeys {
            lock: self.keys.main(),
            queue: &self.queue.queue,
            deadlines: &self.queue.deadlines,
            channel_prefix: &self.queue.channel_prefix,
        }
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<FairLockGuard>> {
        // One owner id for the whole wait: it is the queue entry, and the hold once granted.
        let waiter = OwnerId::random();
        let queued = AtomicBool::new(false);
        let entry = UndoOnDrop::arm(
            &self.name,
            "removing a cancelled fair waiter",
            "its queue entry expires after the keep-alive",
            || {
                let lock = self.clone();
                async move { lock.send_cancel(waiter).await }
            },
        );
        let channel = Channel::Own {
            prefix: &self.queue.channel_prefix,
            owner: waiter,
        };
        let acquired = acquire_with_wait(&self.client, &self.probe, channel, wait, || {
            self.attempt(waiter, FairMode::Queue, Some(&queued))
        })
        .await?;
        match acquired {
            Some(guard) => {
                entry.disarm();
                Ok(Some(guard))
            }
            None => {
                entry.run_now().await?;
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

    /// One attempt; `queued` notes that this wait's entry exists, to notice an entry that
    /// expired while its waiter lived.
    async fn attempt(
        &self,
        waiter: OwnerId,
        mode: FairMode,
        queued: Option<&AtomicBool>,
    ) -> Result<Attempt<FairLockGuard>> {
        let spec = HoldSpec {
            probe: &self.probe,
            keys: &self.keys,
            lease: self.lease,
            renewal: Renewal::Lock,
            explicit_owner: None,
        };
        let lease = self.lease.duration(self.client.watchdog_lease());
        let attempt = reentrant::attempt(&self.client, &spec, waiter, |sent| async move {
            let mode = match sent {
                Sent::Reentry(_) => FairMode::Reenter,
                Sent::First(_) => mode,
            };
            Ok(match self.send_acquire(sent.owner(), lease, mode).await? {
                FairAcquired::Granted { token, count } => Answer::Granted { token, count },
                FairAcquired::NotReentered => Answer::NotReentered,
                FairAcquired::Waiting {
                    pttl,
                    position,
                    created,
                } => {
                    if let Some(queued) = queued
                        && queued.swap(true, Ordering::SeqCst)
                        && created
                    {
                        tracing::warn!(
                            lock = %self.name,
                            "fair lock waiter entry expired while waiting (client stalled?); queued again at the tail"
                        );
                    }
                    Answer::Blocked(Some(self.nap(pttl, position)))
                }
            })
        })
        .await?;
        Ok(attempt.map(|hold| FairLockGuard {
            inner: HoldGuard::new(
                self.client.clone(),
                hold,
                ReleaseFair {
                    lock: self.clone(),
                    lease,
                },
            ),
        }))
    }

    /// Sends the acquire script so that an acquire or a queue entry whose caller went away
    /// is undone when its reply arrives instead of staying behind (on a spawned task,
    /// only then: see `send_or_undo`).
    async fn send_acquire(
        &self,
        owner: OwnerId,
        lease: Duration,
        mode: FairMode,
    ) -> Result<FairAcquired> {
        let lock = self.clone();
        send_or_undo(
            &self.name,
            async move {
                let reply = lock
                    .client
                    .connection()
                    .run(&FairAcquire {
                        keys: lock.fair_keys(),
                        fence: lock.keys.fence(),
                        owner,
                        lease,
                        mode,
                        keepalive: lock.keepalive,
                    })
                    .await;
                if let Err(e) = &reply
                    && is_unacknowledged(e)
                {
                    // Granted, but not acknowledged as required: give it back.
                    let release = ReleaseFair {
                        lock: lock.clone(),
                        lease,
                    };
                    let _ = release.send_once(owner, ReleaseId::random()).await;
                }
                Ok((lock, reply?))
            },
            move |(lock, reply)| async move {
                match reply {
                    FairAcquired::Granted { .. } => {
                        ReleaseFair { lock, lease }
                            .send_once(owner, ReleaseId::random())
                            .await?;
                    }
                    FairAcquired::Waiting { .. } if mode == FairMode::Queue => {
                        lock.send_cancel(owner).await?;
                    }
                    _ => {}
                }
                Ok(())
            },
        )
        .await
        .map(|(_, reply)| reply)
    }

    async fn send_cancel(&self, owner: OwnerId) -> Result<bool> {
        self.client
            .connection()
            .run(&FairCancel {
                keys: self.fair_keys(),
                owner,
            })
            .await
    }
}

impl DistributedLock for FairLock {
    type Guard = FairLockGuard;

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::FAIR_LOCK
    }

    fn name(&self) -> &str {
        FairLock::name(self)
    }

    async fn lock(&self) -> Result<FairLockGuard> {
        FairLock::lock(self).await
    }

    async fn try_lock(&self) -> Result<Option<FairLockGuard>> {
        FairLock::try_lock(self).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<FairLockGuard>> {
        FairLock::lock_timeout(self, wait).await
    }
}

/// How a [`FairLockGuard`] releases: `fair_release.lua`, which wakes the head of the queue
/// when the last hold goes.
struct ReleaseFair {
    lock: FairLock,
    lease: Duration,
}

impl ReleaseFair {
    async fn send_once(&self, owner: OwnerId, release_id: ReleaseId) -> Result<Released> {
        self.lock
            .client
            .connection()
            .run(&FairRelease {
                keys: self.lock.fair_keys(),
                owner,
                lease: self.lease,
                release_id,
            })
            .await
    }
}

impl SendRelease for ReleaseFair {
    const DROPPED: &'static str = "releasing a dropped fair lock guard";

    async fn send(
        &self,
        _client: &Client,
        owner: OwnerId,
        release_id: ReleaseId,
    ) -> Result<Released> {
        self.send_once(owner, release_id).await
    }
}

/// Proof of holding a [`FairLock`]; releases one hold when unlocked or dropped, and the
/// last release wakes the head of the queue.
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::FairLock) -> ferrisson_redis::Result<()> {
/// let guard = lock.lock().await?;
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost, stop writing"),
///     () = do_work(guard.fencing_token()) => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// # async fn do_work(_: ferrisson_redis::FencingToken) {}
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct FairLockGuard {
    inner: HoldGuard<ReleaseFair>,
}

hold_guard_methods!(
    FairLockGuard,
    "when it was the owner's last, the head of the queue is woken",
    token
);

impl fmt::Debug for FairLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner
            .hold()
            .fmt_fields(&mut f.debug_struct("FairLockGuard"))
    }
}
