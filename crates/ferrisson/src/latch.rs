//! The countdown latch: a count in Redis; the count-down that reaches zero wakes every
//! waiter.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::scripts::SCRIPTS;
use crate::semaphore::validate_recheck;

/// How long a waiter sleeps at most before reading the count again when no message came:
/// the bound on what a lost message costs (see [`CountDownLatch::with_recheck_interval`]).
///
/// ```
/// assert_eq!(ferrisson::DEFAULT_LATCH_RECHECK, std::time::Duration::from_secs(2));
/// ```
pub const DEFAULT_LATCH_RECHECK: Duration = Duration::from_secs(2);

impl Client {
    /// A handle to the countdown latch called `name` (no Redis traffic until used).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty or longer than 1 KiB.
    ///
    /// ```
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let handle = client.count_down_latch("batch:7")?;
    /// assert!(client.count_down_latch("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        Ok(CountDownLatch {
            client: self.clone(),
            name: Arc::from(name),
            keys: self.keys(name)?,
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
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
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
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let info = client.count_down_latch("batch:7")?.inspect().await?;
/// println!("{} waits for {} more count-downs", info.name, info.count);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchInfo {
    /// The latch's name.
    pub name: String,
    /// Count-downs still missing; 0 when the latch is open (its key does not exist).
    pub count: u64,
}

impl CountDownLatch {
    /// The latch's name.
    ///
    /// ```
    /// # fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
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
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
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
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// assert!(latch.try_set_count(300).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `count` is zero (that is the open latch),
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn try_set_count(&self, count: u32) -> Result<bool> {
        if count == 0 {
            return Err(Error::invalid("latch count must be at least 1"));
        }
        let mut conn = self.client.conn();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.keys.main())
            .arg(count)
            .arg("NX")
            .query_async(&mut conn)
            .await?;
        Ok(set.is_some())
    }

    /// Takes one off the count and returns what is left; the count-down that reaches
    /// zero opens the latch and wakes every waiter. On an open latch it does nothing and
    /// returns 0.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// let left = latch.count_down().await?;
    /// println!("{left} to go");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached; the count-down may or may not have
    /// been applied, so it is not retried.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may or may not have counted down.
    pub async fn count_down(&self) -> Result<u64> {
        let mut conn = self.client.conn();
        let left: i64 = SCRIPTS
            .latch_count_down
            .key(self.keys.main())
            .key(self.keys.channel())
            .invoke_async(&mut conn)
            .await?;
        Ok(left.max(0).unsigned_abs())
    }

    /// Count-downs still missing; 0 when the latch is open.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// let left = latch.count().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn count(&self) -> Result<u64> {
        let mut conn = self.client.conn();
        let count: Option<i64> = conn.get(self.keys.main()).await?;
        Ok(count.unwrap_or(0).max(0).unsigned_abs())
    }

    /// What Redis holds for this latch now; read-only.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// println!("{:?}", latch.inspect().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn inspect(&self) -> Result<LatchInfo> {
        Ok(LatchInfo {
            name: self.name.to_string(),
            count: self.count().await?,
        })
    }

    /// Waits until the count reaches zero (at once if the latch is open).
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.wait().await?;
    /// assert_eq!(latch.count().await?, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads, and the subscription is left when the future is
    /// dropped.
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(None).await.map(|_| ())
    }

    /// Waits at most `timeout` for the count to reach zero. Returns true when it did,
    /// false when the time ran out first.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if !latch.wait_timeout(Duration::from_secs(5)).await? {
    ///     println!("still waiting for {} workers", latch.count().await?);
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
    /// Cancel safe, as [`CountDownLatch::wait`].
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        self.wait_until(Some(Instant::now() + timeout)).await
    }

    /// Deletes the latch whatever its count: it opens, and every waiter goes. Returns
    /// whether a count was running.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.delete().await?; // give up on the stragglers: every waiter goes
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn delete(&self) -> Result<bool> {
        let mut conn = self.client.conn();
        let deleted: i64 = SCRIPTS
            .latch_delete
            .key(self.keys.main())
            .key(self.keys.channel())
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }

    /// The first read runs without a subscription (an open latch costs one round trip);
    /// then the waiter joins the channel and reads again, so a final count-down between
    /// the first read and the wait cannot be missed.
    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        if self.count().await? == 0 {
            return Ok(true);
        }
        let channel = self.keys.channel();
        let subscribe = self.client.inner.subscriptions.join(&channel);
        let subscription = match deadline {
            Some(d) => match tokio::time::timeout_at(d, subscribe).await {
                Ok(subscription) => subscription?,
                Err(_) => return Ok(false),
            },
            None => subscribe.await?,
        };
        loop {
            if self.count().await? == 0 {
                return Ok(true);
            }
            let mut nap = self.recheck;
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Ok(false);
                }
                nap = nap.min(d - now);
            }
            subscription.wait(nap).await;
        }
    }
}
