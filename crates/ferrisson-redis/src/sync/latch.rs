//! The countdown latch: a count in Redis; the count-down that reaches zero wakes every
//! waiter.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::error::{Error, Result};
use crate::backend::client::Client;
use crate::backend::keys::Keys;
use crate::backend::scripts::latch::{LatchCountDown, LatchDelete};
use crate::observe::acquire::{observe_acquire, observe_wait};
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::sync::semaphore::validate_recheck;

/// How long a waiter sleeps at most before reading the count again when no message came:
/// the bound on what a lost message costs (see [`CountDownLatch::with_recheck_interval`]).
///
/// ```
/// assert_eq!(ferrisson_redis::DEFAULT_LATCH_RECHECK, std::time::Duration::from_secs(2));
/// ```
pub const DEFAULT_LATCH_RECHECK: Duration = Duration::from_secs(2);

impl Client {
    /// A handle to the countdown latch called `name` (no Redis traffic until used).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let handle = client.count_down_latch("batch:7")?;
    /// assert!(client.count_down_latch("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        Ok(CountDownLatch {
            client: self.clone(),
            probe: self.probe(Kind::Latch, &name),
            name,
            keys,
            recheck: DEFAULT_LATCH_RECHECK,
        })
    }
}

/// A distributed countdown latch (Redisson's `RCountDownLatch`, Java's `CountDownLatch`
/// across processes).
///
/// The count is one Redis key, `{name}` (plus the client's namespace). A latch that does
/// not exist has count zero and is open: [`CountDownLatch::try_set_count`] closes it
/// with a count, each [`CountDownLatch::count_down`] takes one off, and the count-down
/// that reaches zero deletes the key and publishes one message that wakes every waiter
/// of every client (through each client's one shared subscription; no polling). A waiter
/// also reads the count again after the recheck interval (2 s by default) without a
/// message, so a lost message costs at most that.
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let latch = client.count_down_latch("batch:7")?;
/// assert!(latch.try_set_count(3).await?);
/// for _ in 0..3 {
///     let latch = latch.clone();
///     tokio::spawn(async move {
///         // ... one worker's job ...
///         latch.count_down().await
///     });
/// }
/// latch.wait().await?; // returns once all three counted down
/// assert_eq!(latch.count().await?, 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Client,
    name: Arc<str>,
    probe: Probe,
    keys: Keys,
    recheck: Duration,
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name)
            .field("recheck", &self.recheck)
            .finish_non_exhaustive()
    }
}

/// What Redis holds for a [`CountDownLatch`], from [`CountDownLatch::inspect`].
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let info = client.count_down_latch("batch:7")?.inspect().await?;
/// println!("{} waits for {} more count-downs", info.name, info.count);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountDownLatchInfo {
    /// The latch's name.
    pub name: String,
    /// Count-downs still missing; 0 when the latch is open (its key does not exist).
    pub count: u64,
}

impl CountDownLatch {
    /// The latch's name.
    ///
    /// ```
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.count_down_latch("batch:7")?.name(), "batch:7");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same latch whose waiters read the count again after at most `interval` when
    /// no message arrives (default [`DEFAULT_LATCH_RECHECK`]).
    ///
    /// ```
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let latch = client.count_down_latch("batch:7")?.with_recheck_interval(Duration::from_secs(10))?;
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

    /// Sets the count to `count` if the latch is open (count zero). Returns whether it
    /// was set; false means a count is already running.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// assert!(latch.try_set_count(300).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `count` is zero (that is the open latch),
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn try_set_count(&self, count: u32) -> Result<bool> {
        if count == 0 {
            return Err(Error::invalid("latch count must be at least 1"));
        }
        // SET NX: a repeat finds the count set and answers false, so it is not resent.
        let set: Option<String> = self
            .client
            .connection()
            .query(redis::cmd("SET").arg(self.keys.main()).arg(count).arg("NX"))
            .await?;
        Ok(set.is_some())
    }

    /// Takes one off the count and returns what is left; the count-down that reaches
    /// zero opens the latch and wakes every waiter. On an open latch it does nothing and
    /// returns 0.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// let left = latch.count_down().await?;
    /// println!("{left} to go");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached; the count-down may or may not have
    /// been applied, so it is not retried.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may or may not have counted down.
    pub async fn count_down(&self) -> Result<u64> {
        self.client
            .connection()
            .run(&LatchCountDown {
                key: self.keys.main(),
                channel: self.keys.channel(),
            })
            .await
    }

    /// Count-downs still missing; 0 when the latch is open.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// let left = latch.count().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn count(&self) -> Result<u64> {
        let count: Option<i64> = self
            .client
            .connection()
            .query_resendable(redis::cmd("GET").arg(self.keys.main()))
            .await?;
        Ok(count.unwrap_or(0).max(0).unsigned_abs())
    }

    /// What Redis holds for this latch now; read-only.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// println!("{:?}", latch.inspect().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn inspect(&self) -> Result<CountDownLatchInfo> {
        Ok(CountDownLatchInfo {
            name: self.name.to_string(),
            count: self.count().await?,
        })
    }

    /// Waits until the count reaches zero (at once if the latch is open).
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// latch.wait().await?;
    /// assert_eq!(latch.count().await?, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads, and the subscription is left when the future is
    /// dropped.
    pub async fn wait(&self) -> Result<()> {
        self.observed_wait(None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    /// Waits at most `timeout` for the count to reach zero: `Ok(Some(()))` when it did,
    /// `Ok(None)` when the time ran out first (as every `*_timeout` of this crate says
    /// "timed out").
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if latch.wait_timeout(Duration::from_secs(5)).await?.is_none() {
    ///     println!("still waiting for {} workers", latch.count().await?);
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
    /// Cancel safe, as [`CountDownLatch::wait`].
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<Option<()>> {
        self.observed_wait(Some(timeout)).await
    }

    /// Deletes the latch whatever its count: it opens, and every waiter goes. Returns
    /// whether a count was running.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson_redis::CountDownLatch) -> ferrisson_redis::Result<()> {
    /// latch.delete().await?; // give up on the stragglers: every waiter goes
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    pub async fn delete(&self) -> Result<bool> {
        self.client
            .connection()
            .run(&LatchDelete {
                key: self.keys.main(),
                channel: self.keys.channel(),
            })
            .await
    }

    /// Waits at most `timeout` (`None`: as long as it takes), observed as one acquire of
    /// the latch (see `observe::acquire`). `Some(())` when the latch opened.
    async fn observed_wait(&self, timeout: Option<Duration>) -> Result<Option<()>> {
        // A timeout too long to add to the clock (`Duration::MAX`) waits without one.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        observe_acquire(&self.probe, timeout, self.wait_until(deadline)).await
    }

    /// The first read runs without a subscription (an open latch costs one round trip);
    /// then the waiter joins the channel and reads again, so a final count-down between
    /// the first read and the wait cannot be missed.
    async fn wait_until(&self, deadline: Option<Instant>) -> Result<Option<()>> {
        if self.count().await? == 0 {
            return Ok(Some(()));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        observe_wait(&self.probe, self.wait_for_zero(deadline)).await
    }

    /// The waiting part of [`CountDownLatch::wait_until`], after a first nonzero count.
    /// `Some(())` once open, `None` when `deadline` passed first.
    async fn wait_for_zero(&self, deadline: Option<Instant>) -> Result<Option<()>> {
        let channel = self.keys.channel();
        let subscribe = self.client.inner.subscriptions.join(channel);
        let subscription = match deadline {
            Some(d) => match tokio::time::timeout_at(d, subscribe).await {
                Ok(subscription) => subscription?,
                Err(_) => return Ok(None),
            },
            None => subscribe.await?,
        };
        loop {
            if self.count().await? == 0 {
                return Ok(Some(()));
            }
            let mut nap = self.recheck;
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Ok(None);
                }
                nap = nap.min(d - now);
            }
            subscription.wait(nap).await;
        }
    }
}

impl ferrisson_core::DistributedLatch for CountDownLatch {
    fn name(&self) -> &str {
        CountDownLatch::name(self)
    }

    async fn count_down(&self) -> Result<u64> {
        CountDownLatch::count_down(self).await
    }

    async fn count(&self) -> Result<u64> {
        CountDownLatch::count(self).await
    }

    async fn wait(&self) -> Result<()> {
        CountDownLatch::wait(self).await
    }

    async fn wait_timeout(&self, wait: Duration) -> Result<Option<()>> {
        CountDownLatch::wait_timeout(self, wait).await
    }
}
