//! The reentrant lock: owner-aware hash with a hold count, watchdog or fixed lease,
//! fencing tokens, event-driven waiting.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::error::{Error, Result, is_unacknowledged};
use crate::api::fencing::FencingToken;
use crate::api::lease::Lease;
use crate::backend::client::Client;
use crate::backend::holds::Renewal;
use crate::backend::ids::ReleaseId;
use crate::backend::ids::{OwnerId, TaskKey};
use crate::backend::keys::Keys;
use crate::backend::scripts::Released;
use crate::backend::scripts::lock::{
    AcquireMode, LockAbandon, LockAcquire, LockAcquired, LockInspect, LockRelease,
};
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::guard::{HoldGuard, SendRelease, hold_guard_methods};
use crate::primitive::reentrant::{self, Answer, HoldSpec, Sent};
use crate::primitive::undo::{UndoOnDrop, send_or_undo};
use crate::primitive::wait::{Attempt, Registration, holder_wait, try_once};
use crate::primitive::wake::{Waiting, WakeOne};
use ferrisson_core::DistributedLock;

impl Client {
    /// A handle to the reentrant lock called `name` (no Redis traffic until used).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    pub fn lock(&self, name: &str) -> Result<Lock> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        let wake = WakeOne::new(self, &keys);
        Ok(Lock {
            client: self.clone(),
            probe: self.probe(Kind::Lock, &name),
            name,
            keys,
            wake,
            lease: Lease::Watchdog,
            owner: None,
        })
    }
}

/// A reentrant distributed lock (Redisson's `RLock`, done right for async Rust).
///
/// Stored as a hash `{owner: hold count}` with the current fencing token, under the key
/// `{name}` (plus the client's namespace). Re-entry is transparent inside one tokio task:
/// a task that holds the lock and asks again gets a second guard at once, and the lock is
/// released when every guard is gone. Any other task waits, even one that reuses a
/// finished task's id, because a hold is found by its live guards, not by the id alone.
/// A guard can be released from any task. To share one hold between tasks or processes
/// on purpose, give them the same [`OwnerId`] with [`Lock::with_owner`].
///
/// Waiting is event-driven: waiters wake on the holder's release (through the client's
/// one shared subscription) or after the holder's remaining TTL, whichever is first, and
/// send nothing to Redis meanwhile. A release wakes one waiting client, not every client
/// with a waiter: a client registers as waiting when its attempt is refused (in the same
/// script, so no release can slip in between), and the release wakes the client that
/// registered first and is still connected, which wakes one of its waiters. A client
/// whose connection is gone is skipped; a client whose last waiter gives up (its wait
/// runs out, its future is dropped) withdraws and, if the lock is free, wakes the next,
/// as does a client woken when none of its tasks waits any more.
/// A client that is connected but no longer reads (a paused process) can take one
/// wake-up with it: the other clients' waiters then try again when the holder's
/// remaining lease, as they saw it at their last attempt, has passed.
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let lock = client.lock("stock:200")?;
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // same task: re-entry, no wait
/// assert_eq!(inner.fencing_token(), outer.fencing_token());
/// assert_eq!(lock.hold_count().await?, 2);
/// inner.unlock().await?;
/// outer.unlock().await?;
/// assert!(!lock.is_locked().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: Arc<str>,
    probe: Probe,
    keys: Keys,
    wake: WakeOne,
    lease: Lease,
    owner: Option<OwnerId>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// A snapshot of a [`Lock`], from [`Lock::inspect`].
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
/// let info = lock.inspect().await?;
/// assert_eq!(info.name, lock.name());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
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
}

/// Reads a lock hash `{<owner>: hold count, fence: token, r:<id>: 1}` (the layout of
/// `Lock` and `FairLock`): holder, hold count and fencing token.
pub(crate) fn parse_lock_hash(
    fields: Vec<(String, String)>,
) -> Result<(Option<OwnerId>, u32, Option<FencingToken>)> {
    let (mut holder, mut count, mut token) = (None, 0, None);
    for (field, value) in fields {
        if field == "fence" {
            token = value.parse().ok().map(FencingToken::new);
        } else if let Ok(owner) = field.parse::<OwnerId>() {
            holder = Some(owner);
            count = value
                .parse()
                .map_err(|_| Error::Protocol(format!("lock hold count {value:?}")))?;
        }
    }
    Ok((holder, count, token))
}

impl Lock {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.lock("orders")?.name(), "orders");
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
    /// let lock = client.lock("report")?.with_lease(Lease::Fixed(Duration::from_secs(10)))?;
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

    /// The same lock, acquired under an explicit owner id: every task or process that
    /// presents `owner` is the same owner, re-enters and may release.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let owner = ferrisson_redis::OwnerId::random();
    /// let lock = client.lock("job:7")?.with_owner(owner);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
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
    /// Cancel safe: dropping the future at any point leaves no hold behind (an acquire
    /// already sent is undone when its reply arrives), no subscription and no task.
    pub async fn lock(&self) -> Result<LockGuard> {
        self.wait(None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    /// Acquires the lock if it is free or already held by this task; `Ok(None)` if
    /// another owner holds it. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
    /// match lock.try_lock().await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => eprintln!("busy"),
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
    /// Cancel safe, as [`Lock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        try_once(&self.probe, self.attempt(Registration::Unsubscribed)).await
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.lock_timeout(Duration::from_millis(500)).await? {
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
    /// Cancel safe, as [`Lock::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.wait(Some(wait)).await
    }

    /// Whether anyone holds the lock now.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
    /// println!("locked: {}", lock.is_locked().await?);
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

    /// How many holds this task (or the explicit owner) has on the lock; 0 if none.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert_eq!(lock.hold_count().await?, 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn hold_count(&self) -> Result<u32> {
        let Some(owner) = self.current_owner() else {
            return Ok(0);
        };
        let count: Option<u32> = self
            .client
            .connection()
            .query_resendable(redis::cmd("HGET").arg(self.keys.main()).arg(owner))
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// The lock's remaining time to live in Redis; `None` when it is not held (or has no
    /// expiry, which ferrisson never sets).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
    /// if let Some(ttl) = lock.ttl().await? {
    ///     println!("held for {ttl:?} more unless renewed");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn ttl(&self) -> Result<Option<Duration>> {
        let pttl: i64 = self
            .client
            .connection()
            .query_resendable(redis::cmd("PTTL").arg(self.keys.main()))
            .await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Who holds the lock now, how often, with which token, for how long (read-only; one
    /// round trip).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
    /// let info = lock.inspect().await?;
    /// if let Some(holder) = info.holder {
    ///     println!("held by {holder} ({} holds), ttl {:?}", info.hold_count, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the key
    /// holds something other than a ferrisson lock.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let (fields, pttl) = self
            .client
            .connection()
            .run(&LockInspect {
                key: self.keys.main(),
            })
            .await?;
        let (holder, hold_count, fencing_token) = parse_lock_hash(fields)?;
        Ok(LockInfo {
            name: self.name.to_string(),
            holder,
            hold_count,
            fencing_token,
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        })
    }

    /// Deletes the lock whoever holds it and wakes its waiters. The holder's guards see
    /// the loss at their next renewal. Returns whether a lock was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
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

    /// The owner this task would acquire as: the explicit one, or the owner of a live
    /// hold this task may re-enter.
    fn current_owner(&self) -> Option<OwnerId> {
        self.owner.or_else(|| {
            self.client
                .inner
                .holds
                .find(self.keys.main(), None, TaskKey::current())
                .filter(|h| h.is_held())
                .map(|h| h.owner)
        })
    }

    /// Acquires, waiting at most `wait` (`None`: as long as it takes), listening on this
    /// client's own wake-up channel.
    async fn wait(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
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

    async fn attempt(&self, registration: Registration) -> Result<Attempt<LockGuard>> {
        let spec = HoldSpec {
            probe: &self.probe,
            keys: &self.keys,
            lease: self.lease,
            renewal: Renewal::Lock,
            explicit_owner: self.owner,
        };
        let lease = self.lease.duration(self.client.watchdog_lease());
        let waiting = Waiting::of(registration);
        let attempt = reentrant::attempt(&self.client, &spec, OwnerId::random(), |sent| {
            self.send_acquire(sent, lease, waiting)
        })
        .await?;
        Ok(attempt.map(|hold| LockGuard {
            inner: HoldGuard::new(
                self.client.clone(),
                hold,
                ReleaseLock {
                    keys: self.keys.clone(),
                    wake: self.wake.clone(),
                    lease,
                },
            ),
        }))
    }

    /// Sends the acquire script so that an acquire whose caller went away never leaves a
    /// hold behind.
    ///
    /// A fresh owner id is this attempt's alone, so a dropped call is undone by removing
    /// that owner outright (a drop guard: no task on the common path). A re-entry or an
    /// explicit owner may share the hold with live guards: if the caller goes away with
    /// that call in flight, the call moves onto a spawned task which, when the reply
    /// arrives, releases exactly the one hold it took.
    ///
    /// `waiting` is what the attempt tells the script about its client's wait.
    async fn send_acquire(&self, sent: Sent, lease: Duration, waiting: Waiting) -> Result<Answer> {
        let reply = match (sent, self.owner) {
            (Sent::First(owner), None) => {
                let undo = UndoOnDrop::arm(
                    &self.name,
                    "undoing a cancelled acquire",
                    "it expires with its lease",
                    || {
                        let client = self.client.clone();
                        let keys = self.keys.clone();
                        let wake = self.wake.clone();
                        async move {
                            client
                                .connection()
                                .run(&LockAbandon {
                                    key: keys.main(),
                                    wake: wake.keys(),
                                    owner,
                                })
                                .await
                        }
                    },
                );
                let call = LockAcquire {
                    key: self.keys.main(),
                    fence: self.keys.fence(),
                    waiters: self.wake.waiters(),
                    owner,
                    lease,
                    mode: AcquireMode::Fresh,
                    register: waiting.register(&self.client),
                };
                // On an error the script may have run before the connection failed:
                // `undo` removes this attempt's owner if it did.
                let reply = match self.client.connection().run(&call).await {
                    Ok(reply) => reply,
                    Err(e) if is_unacknowledged(&e) => {
                        // Granted, but not acknowledged as required: give it back before
                        // reporting it.
                        let _ = undo.run_now().await;
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                };
                undo.disarm();
                reply
            }
            (sent, _) => {
                let client = self.client.clone();
                let keys = self.keys.clone();
                let wake = self.wake.clone();
                let mode = match sent {
                    Sent::Reentry(_) => AcquireMode::Reenter,
                    Sent::First(_) => AcquireMode::Acquire,
                };
                let owner = sent.owner();
                send_or_undo(
                    &self.name,
                    async move {
                        let reply = client
                            .connection()
                            .run(&LockAcquire {
                                key: keys.main(),
                                fence: keys.fence(),
                                waiters: wake.waiters(),
                                owner,
                                lease,
                                mode,
                                register: waiting.register(&client),
                            })
                            .await;
                        if let Err(e) = &reply
                            && is_unacknowledged(e)
                        {
                            // Granted, but not acknowledged as required: give it back.
                            let release = ReleaseLock {
                                keys: keys.clone(),
                                wake: wake.clone(),
                                lease,
                            };
                            let _ = release.send(&client, owner, ReleaseId::random()).await;
                        }
                        Ok((client, keys, wake, reply?))
                    },
                    move |(client, keys, wake, reply)| async move {
                        if let LockAcquired::Granted { .. } = reply {
                            ReleaseLock { keys, wake, lease }
                                .send(&client, owner, ReleaseId::random())
                                .await?;
                        }
                        Ok(())
                    },
                )
                .await?
                .3
            }
        };
        Ok(match reply {
            LockAcquired::Granted { token, count } => Answer::Granted { token, count },
            LockAcquired::Held { pttl } => Answer::Blocked(holder_wait(pttl)),
            LockAcquired::NotReentered => Answer::NotReentered,
        })
    }
}

impl DistributedLock for Lock {
    type Guard = LockGuard;

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::LOCK
    }

    fn name(&self) -> &str {
        Lock::name(self)
    }

    async fn lock(&self) -> Result<LockGuard> {
        Lock::lock(self).await
    }

    async fn try_lock(&self) -> Result<Option<LockGuard>> {
        Lock::try_lock(self).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        Lock::lock_timeout(self, wait).await
    }
}

/// How a [`LockGuard`] releases: `lock_release.lua` with the lease to restore while other
/// holds of the same owner remain.
struct ReleaseLock {
    keys: Keys,
    wake: WakeOne,
    lease: Duration,
}

impl SendRelease for ReleaseLock {
    const DROPPED: &'static str = "releasing a dropped lock guard";

    async fn send(
        &self,
        client: &Client,
        owner: OwnerId,
        release_id: ReleaseId,
    ) -> Result<Released> {
        client
            .connection()
            .run(&LockRelease {
                key: self.keys.main(),
                wake: self.wake.keys(),
                owner,
                lease: self.lease,
                release_id,
            })
            .await
    }
}

/// Proof of holding a [`Lock`]; releases one hold when unlocked or dropped.
///
/// `unlock().await` is the checked way to release. Dropping the guard releases on a
/// spawned task (it never blocks) and stops the watchdog for this hold at once.
///
/// ```no_run
/// # async fn demo(lock: ferrisson_redis::Lock) -> ferrisson_redis::Result<()> {
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
pub struct LockGuard {
    inner: HoldGuard<ReleaseLock>,
}

hold_guard_methods!(
    LockGuard,
    "the lock is free once every hold of its owner is released",
    token
);

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner
            .hold()
            .fmt_fields(&mut f.debug_struct("LockGuard"))
    }
}
