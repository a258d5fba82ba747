//! The non-reentrant lock of the seeds: one string key, `SET NX PX` with a random token,
//! released by an atomic compare-and-delete.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::acquire::{Attempt, acquire_with_wait};
use crate::cleanup::spawn_cleanup;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::lease::{millis, validate_lease};
use crate::scripts::SCRIPTS;

/// Default lease of a [`SimpleLock`].
pub const DEFAULT_SIMPLE_LEASE: Duration = Duration::from_secs(30);

impl Client {
    /// A handle to the non-reentrant lock called `name`, with a 30 s lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty or longer than 1 KiB.
    pub fn simple_lock(&self, name: &str) -> Result<SimpleLock> {
        Ok(SimpleLock {
            client: self.clone(),
            name: Arc::from(name),
            keys: self.keys(name)?,
            lease: DEFAULT_SIMPLE_LEASE,
        })
    }
}

/// A non-reentrant lock with a fixed lease (the seeds' `SimpleRedisLock`, done safely).
///
/// The key holds a 128-bit random token of the current holder; release deletes the key
/// only if the token still matches, in one script, so a holder whose lease ran out can
/// never delete the next holder's lock. There is no renewal: keep the work shorter than
/// the lease, or use [`Lock`](crate::Lock). A second acquire from the same task waits
/// like any other.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let lock = client.simple_lock("stock")?.with_lease(Duration::from_secs(10))?;
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
    keys: Keys,
    lease: Duration,
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
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with another lease for future acquisitions.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or over a year.
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        validate_lease(lease)?;
        self.lease = lease;
        Ok(self)
    }

    /// Acquires the lock if it is free; `Ok(None)` otherwise. One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an acquire whose caller went away is undone when its reply arrives.
    pub async fn try_lock(&self) -> Result<Option<SimpleLockGuard>> {
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
    /// Cancel safe, as [`SimpleLock::try_lock`]; no subscription is left behind.
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<SimpleLockGuard>> {
        acquire_with_wait(&self.client, &self.keys.channel(), Some(wait), || {
            self.attempt()
        })
        .await
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`SimpleLock::lock_timeout`].
    pub async fn lock(&self) -> Result<SimpleLockGuard> {
        acquire_with_wait(&self.client, &self.keys.channel(), None, || self.attempt())
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without the lock".into()))
    }

    async fn attempt(&self) -> Result<Attempt<SimpleLockGuard>> {
        let token = format!("{:032x}", rand::random::<u128>());
        let (tx, rx) = oneshot::channel();
        let client = self.client.clone();
        let key = self.keys.main().to_owned();
        let channel = self.keys.channel();
        let lease = self.lease;
        let sent_at = Instant::now();
        let sent_token = token.clone();
        // Spawned so that a reply arriving after the caller left is undone, not leaked.
        tokio::spawn(async move {
            let mut conn = client.conn();
            let reply: redis::RedisResult<Vec<i64>> = SCRIPTS
                .simple_acquire
                .key(&key)
                .arg(&sent_token)
                .arg(millis(lease))
                .invoke_async(&mut conn)
                .await;
            if let Err(Ok(reply)) = tx.send(reply)
                && reply.first() == Some(&1)
            {
                let _ = release(&client, &key, &channel, &sent_token).await;
            }
        });
        let reply = rx
            .await
            .map_err(|_| Error::Protocol("acquire task was cancelled".into()))??;
        match reply.as_slice() {
            [1] => Ok(Attempt::Acquired(SimpleLockGuard {
                client: self.client.clone(),
                name: Arc::clone(&self.name),
                key: self.keys.main().to_owned(),
                channel: self.keys.channel(),
                token,
                deadline: sent_at + lease,
                released: false,
            })),
            [0, pttl] => Ok(Attempt::held(*pttl)),
            other => Err(Error::Protocol(format!(
                "simple acquire returned {other:?}"
            ))),
        }
    }
}

async fn release(client: &Client, key: &str, channel: &str, token: &str) -> Result<i64> {
    let mut conn = client.conn();
    Ok(SCRIPTS
        .simple_release
        .key(key)
        .key(channel)
        .arg(token)
        .invoke_async(&mut conn)
        .await?)
}

/// Proof of holding a [`SimpleLock`]; released by `unlock()` or, best-effort, on drop.
#[must_use = "dropping the guard releases the lock at once"]
pub struct SimpleLockGuard {
    client: Client,
    name: Arc<str>,
    key: String,
    channel: String,
    token: String,
    deadline: Instant,
    released: bool,
}

impl fmt::Debug for SimpleLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimpleLockGuard")
            .field("name", &self.name)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

impl SimpleLockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The random token stored in the lock key while this guard holds it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// True until the lease runs out (measured locally from before the acquire).
    pub fn is_held(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Releases the lock if this guard still holds it.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the lease had run out, [`Error::NotOwner`] when the
    /// lock has a new holder since (it is left alone), [`Error::Redis`] when Redis could
    /// not be reached.
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        match release(&self.client, &self.key, &self.channel, &self.token).await? {
            1 => Ok(()),
            0 => Err(Error::LeaseExpired {
                name: self.name.to_string(),
            }),
            -1 => Err(Error::NotOwner {
                name: self.name.to_string(),
            }),
            other => Err(Error::Protocol(format!("simple release returned {other}"))),
        }
    }
}

impl Drop for SimpleLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let client = self.client.clone();
        let key = std::mem::take(&mut self.key);
        let channel = std::mem::take(&mut self.channel);
        let token = std::mem::take(&mut self.token);
        spawn_cleanup(
            &self.name,
            "releasing a dropped simple lock guard",
            "the lock expires after its lease",
            async move { release(&client, &key, &channel, &token).await },
        );
    }
}
