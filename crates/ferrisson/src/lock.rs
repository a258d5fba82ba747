//! The reentrant lock: owner-aware hash with a hold count, watchdog or fixed lease,
//! fencing tokens, event-driven waiting.

use std::fmt;
use std::sync::Arc;
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
use crate::lease::{Lease, millis};
use crate::owner::{OwnerId, TaskKey};
use crate::release::{Released, release_id_arg, release_with_retry};
use crate::scripts::SCRIPTS;

impl Client {
    /// A handle to the reentrant lock called `name` (no Redis traffic until used).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty or longer than 1 KiB.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock {
            client: self.clone(),
            name: Arc::from(name),
            keys: self.keys(name)?,
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
/// send nothing to Redis meanwhile.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
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
    keys: Keys,
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
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The owner holding the lock, if any.
    pub holder: Option<OwnerId>,
    /// How many holds the holder has (re-entries count); 0 when free.
    pub hold_count: u32,
    /// The holder's fencing token.
    pub fencing_token: Option<FencingToken>,
    /// The lock's remaining time to live; `None` when free.
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

/// What the acquire script answered.
enum AcquireReply {
    Acquired { token: u64, count: i64 },
    Held(i64),
    NotReentered,
}

impl Lock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions.
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
    #[must_use]
    pub fn with_owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no hold behind (an acquire
    /// already sent is undone when its reply arrives), no subscription and no task.
    pub async fn lock(&self) -> Result<LockGuard> {
        acquire_with_wait(&self.client, &self.keys.channel(), None, || self.attempt())
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without the lock".into()))
    }

    /// Acquires the lock if it is free or already held by this task; `Ok(None)` if
    /// another owner holds it. One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Lock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        match self.attempt().await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held(_) => Ok(None),
        }
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Lock::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        acquire_with_wait(&self.client, &self.keys.channel(), Some(wait), || {
            self.attempt()
        })
        .await
    }

    /// Whether anyone holds the lock now.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn is_locked(&self) -> Result<bool> {
        let mut conn = self.client.conn();
        Ok(conn.exists(self.keys.main()).await?)
    }

    /// How many holds this task (or the explicit owner) has on the lock; 0 if none.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn hold_count(&self) -> Result<u32> {
        let Some(owner) = self.current_owner() else {
            return Ok(0);
        };
        let mut conn = self.client.conn();
        let count: Option<u32> = conn.hget(self.keys.main(), owner.to_string()).await?;
        Ok(count.unwrap_or(0))
    }

    /// The lock's remaining time to live in Redis; `None` when it is not held (or has no
    /// expiry, which ferrisson never sets).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        let mut conn = self.client.conn();
        let pttl: i64 = conn.pttl(self.keys.main()).await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Who holds the lock now, how often, with which token, for how long (read-only; one
    /// round trip).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let info = lock.inspect().await?;
    /// if let Some(holder) = info.holder {
    ///     println!("held by {holder} ({} holds), ttl {:?}", info.hold_count, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached, [`Error::Protocol`] when the key
    /// holds something other than a ferrisson lock.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let mut conn = self.client.conn();
        let (fields, pttl): (Vec<(String, String)>, i64) = SCRIPTS
            .lock_inspect
            .key(self.keys.main())
            .invoke_async(&mut conn)
            .await?;
        let (holder, hold_count, fencing_token) = parse_lock_hash(fields)?;
        Ok(LockInfo {
            holder,
            hold_count,
            fencing_token,
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        })
    }

    /// Deletes the lock whoever holds it and wakes its waiters. The holder's guards see
    /// the loss at their next renewal. Returns whether a lock was deleted.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn force_unlock(&self) -> Result<bool> {
        let mut conn = self.client.conn();
        let deleted: i64 = SCRIPTS
            .force_release
            .key(self.keys.main())
            .key(self.keys.channel())
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
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

    async fn attempt(&self) -> Result<Attempt<LockGuard>> {
        let task = TaskKey::current();
        let holds = &self.client.inner.holds;
        let lease = self.lease.duration(self.client.watchdog_lease());
        loop {
            let existing = holds
                .find(self.keys.main(), self.owner, task)
                .filter(|h| h.is_held());
            let owner = existing
                .as_ref()
                .map(|h| h.owner)
                .or(self.owner)
                .unwrap_or_else(OwnerId::random);
            // An explicit owner may hold the lock in another process: always 'acquire'.
            let reenter = existing.is_some() && self.owner.is_none();
            let sent_at = Instant::now();
            match self.send_acquire(owner, lease, reenter).await? {
                AcquireReply::Held(pttl) => return Ok(Attempt::held(pttl)),
                AcquireReply::NotReentered => {
                    // The hold this task believed it had is gone; start a fresh one.
                    if let Some(hold) = existing {
                        hold.mark_lost();
                    }
                }
                AcquireReply::Acquired { token, count } => {
                    let deadline = sent_at + lease;
                    if count == 1
                        && let Some(stale) = &existing
                    {
                        // Redis started a new hold under an explicit owner whose old one
                        // was lost (expired or force-unlocked): a new hold, a new token.
                        stale.mark_lost();
                    }
                    let hold = match existing {
                        Some(hold) if count > 1 && holds.reattach(&hold) => {
                            hold.extend(deadline);
                            hold
                        }
                        _ => holds.attach(Hold::new(
                            &self.name,
                            self.keys.main(),
                            &self.keys.channel(),
                            owner,
                            FencingToken::new(token),
                            self.owner.is_none().then_some(task),
                            deadline,
                        )),
                    };
                    if self.lease == Lease::Watchdog {
                        self.client.inner.watchdog.watch(&hold);
                    }
                    return Ok(Attempt::Acquired(LockGuard {
                        client: self.client.clone(),
                        hold,
                        lease,
                        released: false,
                    }));
                }
            }
        }
    }

    /// Sends the acquire script so that an acquire whose caller went away never leaves a
    /// hold behind.
    ///
    /// A fresh owner id is this attempt's alone, so a dropped call is undone by removing
    /// that owner outright (a drop guard, no extra task on the common path). A re-entry
    /// or an explicit owner may share the hold with live guards: that call runs on a
    /// spawned task which, if the caller is gone when the reply arrives, releases exactly
    /// the one hold it took.
    async fn send_acquire(
        &self,
        owner: OwnerId,
        lease: Duration,
        reenter: bool,
    ) -> Result<AcquireReply> {
        let mode = if reenter { "reenter" } else { "acquire" };
        let reply = if reenter || self.owner.is_some() {
            let (tx, rx) = oneshot::channel();
            let client = self.client.clone();
            let keys = self.keys.clone();
            tokio::spawn(async move {
                let reply = invoke_acquire(&client, &keys, owner, lease, mode).await;
                if let Err(Ok(reply)) = tx.send(reply)
                    && reply.first() == Some(&1)
                {
                    let _ = release_once(&client, keys.main(), &keys.channel(), owner, lease).await;
                }
            });
            rx.await
                .map_err(|_| Error::Protocol("acquire task was cancelled".into()))??
        } else {
            let undo = AbandonOnDrop {
                client: &self.client,
                keys: &self.keys,
                owner,
                armed: true,
            };
            match invoke_acquire(&self.client, &self.keys, owner, lease, mode).await {
                Ok(reply) => {
                    undo.disarm();
                    reply
                }
                // The script may have run before the connection failed: `undo` removes
                // this attempt's owner if it did.
                Err(e) => return Err(e.into()),
            }
        };
        match reply.as_slice() {
            [1, token, count] => Ok(AcquireReply::Acquired {
                token: u64::try_from(*token)
                    .map_err(|_| Error::Protocol(format!("fencing token {token}")))?,
                count: *count,
            }),
            [0, pttl] => Ok(AcquireReply::Held(*pttl)),
            [2] => Ok(AcquireReply::NotReentered),
            other => Err(Error::Protocol(format!("lock acquire returned {other:?}"))),
        }
    }
}

async fn invoke_acquire(
    client: &Client,
    keys: &Keys,
    owner: OwnerId,
    lease: Duration,
    mode: &str,
) -> redis::RedisResult<Vec<i64>> {
    let mut conn = client.conn();
    SCRIPTS
        .lock_acquire
        .key(keys.main())
        .key(keys.fence())
        .arg(owner.to_string())
        .arg(millis(lease))
        .arg(mode)
        .invoke_async(&mut conn)
        .await
}

/// Armed while a fresh owner's acquire is in flight: if the caller's future is dropped
/// there, the acquire may still land, so remove that owner's hold (if any) afterwards.
struct AbandonOnDrop<'a> {
    client: &'a Client,
    keys: &'a Keys,
    owner: OwnerId,
    armed: bool,
}

impl AbandonOnDrop<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let keys = self.keys.clone();
        let owner = self.owner;
        spawn_cleanup(
            self.keys.main(),
            "undoing a cancelled acquire",
            "it expires with its lease",
            async move {
                let mut conn = client.conn();
                let undone: i64 = SCRIPTS
                    .lock_abandon
                    .key(keys.main())
                    .key(keys.channel())
                    .arg(owner.to_string())
                    .invoke_async(&mut conn)
                    .await?;
                Ok(undone)
            },
        );
    }
}

/// Releases one hold with a fresh release id (used to undo an orphaned acquire).
async fn release_once(
    client: &Client,
    key: &str,
    channel: &str,
    owner: OwnerId,
    lease: Duration,
) -> Result<Released> {
    send_release(client, key, channel, owner, lease, rand::random()).await
}

async fn send_release(
    client: &Client,
    key: &str,
    channel: &str,
    owner: OwnerId,
    lease: Duration,
    release_id: u64,
) -> Result<Released> {
    let mut conn = client.conn();
    let code: i64 = SCRIPTS
        .lock_release
        .key(key)
        .key(channel)
        .arg(owner.to_string())
        .arg(millis(lease))
        .arg(release_id_arg(release_id))
        .invoke_async(&mut conn)
        .await?;
    Released::from_code(code, "lock release")
}

/// Releases one hold, retrying when the reply was lost, never twice.
async fn release_hold(client: &Client, hold: &Hold, lease: Duration) -> Result<()> {
    release_with_retry(&hold.name, |release_id| {
        send_release(
            client,
            &hold.key,
            &hold.channel,
            hold.owner,
            lease,
            release_id,
        )
    })
    .await
}

/// Proof of holding a [`Lock`]; releases one hold when unlocked or dropped.
///
/// `unlock().await` is the checked way to release. Dropping the guard releases on a
/// spawned task (it never blocks) and stops the watchdog for this hold at once.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
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
pub struct LockGuard {
    client: Client,
    hold: Arc<Hold>,
    lease: Duration,
    released: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.hold.name)
            .field("owner", &self.hold.owner)
            .field("fencing_token", &self.hold.token)
            .field("held", &self.hold.is_held())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The fencing token of this hold: greater than every earlier holder's, the same for
    /// every re-entry.
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.token
    }

    /// The owner id this hold is registered under in Redis.
    pub fn owner(&self) -> OwnerId {
        self.hold.owner
    }

    /// True until the lock is found gone or taken, or its lease runs out unrenewed.
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// How long the hold stays valid without another renewal (zero once lost).
    pub fn remaining(&self) -> Duration {
        self.hold.remaining()
    }

    /// Resolves when the lock is no longer held: the watchdog found it gone or taken, or
    /// its lease ran out (renewals failing, or a fixed lease ending).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        self.hold.lost().await;
    }

    /// Releases this hold; the lock is free once every hold of its owner is released.
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
        self.client.inner.holds.detach(&self.hold);
        release_hold(&self.client, &self.hold, self.lease).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.client.inner.holds.detach(&self.hold);
        let client = self.client.clone();
        let hold = Arc::clone(&self.hold);
        let lease = self.lease;
        spawn_cleanup(
            &self.hold.name,
            "releasing a dropped lock guard",
            "the lock expires after its lease",
            async move { release_hold(&client, &hold, lease).await },
        );
    }
}
