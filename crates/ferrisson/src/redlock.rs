//! Redlock: one lock over N independent Redis servers, held while a majority agrees.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cleanup::spawn_cleanup;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::lease::{millis, validate_lease};
use crate::scripts::SCRIPTS;

/// Default time to live of a [`Redlock`]'s keys.
///
/// ```no_run
/// # fn demo(clients: &[ferrisson::Client]) -> ferrisson::Result<()> {
/// let redlock = ferrisson::Redlock::new(clients, "orders")?;
/// assert_eq!(redlock.ttl(), ferrisson::DEFAULT_REDLOCK_TTL);
/// # Ok(()) }
/// ```
pub const DEFAULT_REDLOCK_TTL: Duration = Duration::from_secs(10);
/// Default least pause between two acquire attempts of a waiting [`Redlock`].
///
/// ```
/// use ferrisson::{DEFAULT_REDLOCK_RETRY_DELAY, DEFAULT_REDLOCK_RETRY_JITTER};
/// // A waiter pauses 50 to 100 ms between attempts.
/// let longest = DEFAULT_REDLOCK_RETRY_DELAY + DEFAULT_REDLOCK_RETRY_JITTER;
/// assert_eq!(longest, std::time::Duration::from_millis(100));
/// ```
pub const DEFAULT_REDLOCK_RETRY_DELAY: Duration = Duration::from_millis(50);
/// Default random extra pause between two attempts (uniform in `0..=jitter`).
///
/// ```
/// assert!(!ferrisson::DEFAULT_REDLOCK_RETRY_JITTER.is_zero());
/// ```
pub const DEFAULT_REDLOCK_RETRY_JITTER: Duration = Duration::from_millis(50);

/// The default per-node timeout is a tenth of the TTL, but never more than this: a node
/// that does not answer within it is treated as down for this attempt.
const MAX_DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Shortest TTL accepted: below it the drift allowance leaves no validity.
const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest retry delay or jitter accepted (keeps deadline arithmetic far from overflow).
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(3600);

/// One node of a Redlock: an independent server and the lock's key on it.
struct Node {
    client: Client,
    key: String,
    channel: String,
}

/// A lock over N independent Redis servers (the Redlock algorithm of Redis' authors).
///
/// Each server holds a plain string key with the holder's random token and a TTL. An
/// acquire sends `SET key token NX PX ttl` to every server at once, each call bounded by
/// a per-node timeout far below the TTL, and succeeds when a majority (`N/2 + 1`) said
/// yes and time is left: the guard's validity is `TTL - elapsed - drift`, with `elapsed`
/// measured on a monotonic clock from before the requests to after the last reply and
/// `drift = TTL/100 + 2 ms`. A failed attempt deletes its key on every server (compare
/// and delete, so nobody else's key) and a waiting caller tries again after a random
/// pause, so that contenders who split the votes do not collide again.
///
/// A Redlock tolerates the loss of a minority of servers. It gives no fencing tokens
/// and relies on bounded clock drift and pauses; read `docs/REDLOCK.md` before choosing
/// it over [`Lock`](crate::Lock) with fencing.
///
/// ```no_run
/// # async fn demo() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::{Client, Redlock};
///
/// let mut clients = Vec::new();
/// for port in [7001, 7002, 7003, 7004, 7005] {
///     clients.push(Client::connect(&format!("redis://10.0.0.1:{port}")).await?);
/// }
/// let redlock = Redlock::new(&clients, "voucher:42")?.with_ttl(Duration::from_secs(5))?;
/// assert_eq!(redlock.quorum(), 3);
/// if let Some(guard) = redlock.lock_timeout(Duration::from_secs(1)).await? {
///     // Work only while the validity lasts; extend before it runs out.
///     assert!(guard.is_valid());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    name: Arc<str>,
    nodes: Arc<[Node]>,
    ttl: Duration,
    node_timeout: Option<Duration>,
    retry_delay: Duration,
    retry_jitter: Duration,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<&str> = self
            .nodes
            .iter()
            .map(|n| n.client.inner.redacted_url.as_str())
            .collect();
        f.debug_struct("Redlock")
            .field("name", &self.name)
            .field("nodes", &urls)
            .field("ttl", &self.ttl)
            .field("node_timeout", &self.node_timeout())
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .finish()
    }
}

/// What one acquire attempt found, counted over the nodes.
struct Tally {
    /// Local validity deadline, when a majority said yes in time.
    deadline: Option<Instant>,
    /// Nodes that answered at all (yes or no).
    answered: usize,
    /// The first failure of a node that did not answer.
    first_error: Option<Error>,
}

impl Redlock {
    /// A Redlock called `name` over the servers of `clients` (each must be an independent
    /// master: no replication between them), with a 10 s TTL.
    ///
    /// Three or five servers is the usual choice: five tolerate two failures. Each
    /// client's namespace applies to the key on its server.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `clients` is empty, names the same server twice
    /// (the same client, or the same URL and namespace), or `name` is empty or longer
    /// than 1 KiB.
    ///
    /// ```no_run
    /// # fn demo(clients: Vec<ferrisson::Client>) -> ferrisson::Result<()> {
    /// let redlock = ferrisson::Redlock::new(&clients, "orders")?;
    /// assert_eq!(redlock.nodes(), clients.len());
    /// # Ok(()) }
    /// ```
    pub fn new(clients: &[Client], name: &str) -> Result<Self> {
        if clients.is_empty() {
            return Err(Error::invalid("a redlock needs at least one client"));
        }
        for (i, a) in clients.iter().enumerate() {
            for b in &clients[..i] {
                let same = Arc::ptr_eq(&a.inner, &b.inner)
                    || (a.inner.redacted_url == b.inner.redacted_url
                        && a.inner.namespace == b.inner.namespace);
                if same {
                    return Err(Error::invalid(format!(
                        "redlock nodes must be independent servers; {} is given twice",
                        a.inner.redacted_url
                    )));
                }
            }
        }
        let nodes = clients
            .iter()
            .map(|client| {
                let keys = client.keys(name)?;
                Ok(Node {
                    client: client.clone(),
                    key: keys.main().to_owned(),
                    channel: keys.channel(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            name: Arc::from(name),
            nodes: nodes.into(),
            ttl: DEFAULT_REDLOCK_TTL,
            node_timeout: None,
            retry_delay: DEFAULT_REDLOCK_RETRY_DELAY,
            retry_jitter: DEFAULT_REDLOCK_RETRY_JITTER,
        })
    }

    /// The same Redlock with another TTL for its keys (default 10 s).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a TTL under 10 ms, over a year, or not above an
    /// explicitly set per-node timeout.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let redlock = redlock.with_ttl(Duration::from_secs(2))?;
    /// assert_eq!(redlock.ttl(), Duration::from_secs(2));
    /// assert!(redlock.with_ttl(Duration::from_millis(1)).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Self> {
        validate_lease(ttl)?;
        if ttl < MIN_TTL {
            return Err(Error::invalid(format!(
                "redlock ttl must be at least {MIN_TTL:?}, got {ttl:?}"
            )));
        }
        if let Some(timeout) = self.node_timeout
            && timeout >= ttl
        {
            return Err(Error::invalid(format!(
                "redlock ttl {ttl:?} must exceed the per-node timeout {timeout:?}"
            )));
        }
        self.ttl = ttl;
        Ok(self)
    }

    /// The same Redlock with another per-node timeout: how long one server may take to
    /// answer before it counts as down for that call. Default: a tenth of the TTL, at
    /// most 100 ms. Keep it far below the TTL, since the validity shrinks by the time
    /// the slowest answering node takes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero timeout or one not below the TTL.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let redlock = redlock.with_node_timeout(Duration::from_millis(20))?;
    /// assert_eq!(redlock.node_timeout(), Duration::from_millis(20));
    /// # Ok(()) }
    /// ```
    pub fn with_node_timeout(mut self, timeout: Duration) -> Result<Self> {
        if timeout.is_zero() || timeout >= self.ttl {
            return Err(Error::invalid(format!(
                "redlock per-node timeout must be above zero and below the ttl {:?}, got {timeout:?}",
                self.ttl
            )));
        }
        self.node_timeout = Some(timeout);
        Ok(self)
    }

    /// The same Redlock with another pause between attempts of a waiting acquire: at
    /// least `delay`, plus a uniformly random part up to `jitter` (defaults 50 ms and
    /// 50 ms). The random part keeps contenders that split the votes from colliding
    /// again on their next try.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when both are zero (the waiter would spin) or either
    /// is over an hour.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let redlock = redlock.with_retry(Duration::from_millis(5), Duration::from_millis(20))?;
    /// assert!(redlock.with_retry(Duration::ZERO, Duration::ZERO).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_retry(mut self, delay: Duration, jitter: Duration) -> Result<Self> {
        if delay.is_zero() && jitter.is_zero() {
            return Err(Error::invalid(
                "redlock retry delay and jitter must not both be zero",
            ));
        }
        if delay > MAX_RETRY_PAUSE || jitter > MAX_RETRY_PAUSE {
            return Err(Error::invalid(format!(
                "redlock retry delay and jitter must be at most {MAX_RETRY_PAUSE:?}"
            )));
        }
        self.retry_delay = delay;
        self.retry_jitter = jitter;
        Ok(self)
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) {
    /// assert_eq!(redlock.name(), "orders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many servers the lock spans.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) {
    /// assert!(redlock.nodes() >= redlock.quorum());
    /// # }
    /// ```
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// How many servers must agree: `N/2 + 1`.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) {
    /// // 3 of 5, 2 of 3, 1 of 1
    /// assert_eq!(redlock.quorum(), redlock.nodes() / 2 + 1);
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The TTL written to every server.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) {
    /// assert_eq!(redlock.ttl(), ferrisson::DEFAULT_REDLOCK_TTL);
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long one server may take to answer (see [`Redlock::with_node_timeout`]).
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::Redlock) {
    /// assert!(redlock.node_timeout() < redlock.ttl());
    /// # }
    /// ```
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| (self.ttl / 10).min(MAX_DEFAULT_NODE_TIMEOUT))
    }

    /// Makes one attempt on every server; `Ok(None)` when no majority agreed in time
    /// (the keys this attempt set are deleted again before it returns).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] (a connection error or a timeout) when fewer than a majority of
    /// the servers answered: the lock cannot be taken while they are unreachable.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the attempt runs on a spawned task, which deletes its keys again if
    /// it succeeds after the caller went away.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// match redlock.try_lock().await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => println!("held elsewhere (or the votes were split)"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<RedlockGuard>> {
        self.attempt().await
    }

    /// Acquires the lock, trying again after a random pause until it succeeds or `wait`
    /// runs out; `Ok(None)` when it ran out.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`], for any attempt.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Redlock::try_lock`].
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let Some(guard) = redlock.lock_timeout(Duration::from_secs(2)).await? else {
    ///     return Ok(()); // busy: give up
    /// };
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<RedlockGuard>> {
        self.acquire(Instant::now().checked_add(wait)).await
    }

    /// Acquires the lock, trying again after a random pause as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`], for any attempt.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Redlock::try_lock`].
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert!(guard.is_valid());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<RedlockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::Protocol("unbounded wait ended without the lock".into()))
    }

    /// Reads, without changing anything, who holds the lock on each server and for how
    /// long. Every server is asked at once, each bounded by the per-node timeout.
    ///
    /// # Errors
    ///
    /// None so far: an unreachable server shows as `reachable: false`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// let state = redlock.inspect().await?;
    /// assert_eq!(state.majority_holder.as_deref(), Some(guard.token()));
    /// for node in &state.nodes {
    ///     println!("{}: {:?} for {:?}", node.url, node.holder, node.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<RedlockState> {
        let timeout = self.node_timeout();
        let replies = join_all(self.nodes.iter().map(|node| {
            let mut conn = node.client.conn();
            let key = node.key.clone();
            within(timeout, async move {
                SCRIPTS
                    .redlock_inspect
                    .key(&key)
                    .invoke_async::<(Option<String>, i64)>(&mut conn)
                    .await
            })
        }))
        .await;
        let nodes: Vec<RedlockNodeState> = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| {
                let (holder, ttl, reachable) = match reply {
                    Ok((holder, pttl)) => (
                        holder,
                        u64::try_from(pttl).ok().map(Duration::from_millis),
                        true,
                    ),
                    Err(_) => (None, None, false),
                };
                RedlockNodeState {
                    url: node.client.inner.redacted_url.clone(),
                    key: node.key.clone(),
                    reachable,
                    holder,
                    ttl,
                }
            })
            .collect();
        let quorum = self.quorum();
        let majority_holder = nodes
            .iter()
            .filter_map(|n| n.holder.as_deref())
            .find(|token| {
                nodes
                    .iter()
                    .filter(|n| n.holder.as_deref() == Some(*token))
                    .count()
                    >= quorum
            })
            .map(str::to_owned);
        Ok(RedlockState {
            majority_holder,
            nodes,
        })
    }

    async fn acquire(&self, deadline: Option<Instant>) -> Result<Option<RedlockGuard>> {
        loop {
            if let Some(guard) = self.attempt().await? {
                return Ok(Some(guard));
            }
            let jitter = millis_between(self.retry_jitter);
            let mut pause = self.retry_delay + jitter;
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(None);
                }
                pause = pause.min(deadline - now);
            }
            tokio::time::sleep(pause).await;
        }
    }

    async fn attempt(&self) -> Result<Option<RedlockGuard>> {
        let token = format!("{:032x}", rand::random::<u128>());
        let (tx, rx) = oneshot::channel();
        let this = self.clone();
        let sent_token = token.clone();
        // Spawned so that an attempt whose caller went away is undone, not leaked.
        tokio::spawn(async move {
            let tally = this.run_attempt(&sent_token).await;
            if let Err(Tally {
                deadline: Some(_), ..
            }) = tx.send(tally)
            {
                release_everywhere(&this.nodes, &sent_token, this.node_timeout()).await;
            }
        });
        let tally = rx
            .await
            .map_err(|_| Error::Protocol("redlock acquire task was cancelled".into()))?;
        if let Some(deadline) = tally.deadline {
            return Ok(Some(RedlockGuard {
                redlock: self.clone(),
                token,
                deadline: Mutex::new(deadline),
                released: false,
            }));
        }
        if tally.answered < self.quorum() {
            return Err(tally.first_error.unwrap_or_else(|| {
                Error::Protocol("redlock nodes neither answered nor failed".into())
            }));
        }
        Ok(None)
    }

    async fn run_attempt(&self, token: &str) -> Tally {
        let timeout = self.node_timeout();
        let ttl_ms = millis(self.ttl);
        let started = Instant::now();
        let replies = join_all(self.nodes.iter().map(|node| {
            let mut conn = node.client.conn();
            let key = node.key.clone();
            let token = token.to_owned();
            within(timeout, async move {
                SCRIPTS
                    .simple_acquire
                    .key(&key)
                    .arg(&token)
                    .arg(ttl_ms)
                    .invoke_async::<Vec<i64>>(&mut conn)
                    .await
            })
        }))
        .await;
        let elapsed = started.elapsed();
        let mut acquired = 0;
        let mut answered = 0;
        let mut first_error = None;
        for reply in replies {
            match reply {
                Ok(reply) => {
                    answered += 1;
                    if reply.first() == Some(&1) {
                        acquired += 1;
                    }
                }
                Err(e) => {
                    tracing::debug!(lock = %self.name, error = %e, "redlock node did not answer");
                    first_error.get_or_insert(e);
                }
            }
        }
        let valid_for = self
            .ttl
            .checked_sub(elapsed + drift(self.ttl))
            .filter(|v| !v.is_zero());
        if acquired >= self.quorum() && valid_for.is_some() {
            return Tally {
                deadline: Some(started + self.ttl.saturating_sub(drift(self.ttl))),
                answered,
                first_error,
            };
        }
        // Including the nodes that timed out: their SET may still land, and a release
        // sent on the same connection is executed after it.
        release_everywhere(&self.nodes, token, timeout).await;
        Tally {
            deadline: None,
            answered,
            first_error,
        }
    }
}

/// The clock drift allowance of Redis' Redlock description: 1% of the TTL plus 2 ms
/// for the granularity of expiry on the servers.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A uniformly random duration in `0..=max`, in whole milliseconds.
fn millis_between(max: Duration) -> Duration {
    let max = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(rand::random_range(0..=max))
}

/// Runs one node's call, counting a reply later than `timeout` as a failure.
async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(reply) => Ok(reply?),
        Err(_) => Err(Error::Redis(redis::RedisError::from(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("redlock node did not answer within {timeout:?}"),
        )))),
    }
}

/// Compare-and-delete on every node at once: 1 released, 0 gone, -1 someone else's.
async fn release_everywhere(nodes: &[Node], token: &str, timeout: Duration) -> Vec<Result<i64>> {
    join_all(nodes.iter().map(|node| {
        let mut conn = node.client.conn();
        let key = node.key.clone();
        let channel = node.channel.clone();
        let token = token.to_owned();
        within(timeout, async move {
            SCRIPTS
                .simple_release
                .key(&key)
                .key(&channel)
                .arg(&token)
                .invoke_async::<i64>(&mut conn)
                .await
        })
    }))
    .await
}

/// Proof of holding a [`Redlock`] for a limited validity; released on every server by
/// `unlock()` or, best-effort, on drop.
///
/// There is no watchdog: check [`RedlockGuard::is_valid`] before acting and call
/// [`RedlockGuard::extend`] before the validity runs out if the work takes longer.
///
/// ```no_run
/// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let guard = redlock.lock().await?;
/// if guard.validity() < Duration::from_secs(1) && !guard.extend(redlock.ttl()).await? {
///     return Ok(()); // lost: stop before touching the resource
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedlockGuard {
    redlock: Redlock,
    token: String,
    /// Local monotonic end of validity (moved by `extend`).
    deadline: Mutex<Instant>,
    released: bool,
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.redlock.name)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl RedlockGuard {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson::RedlockGuard) {
    /// assert_eq!(guard.name(), "orders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.redlock.name
    }

    /// The random token this guard stored on the servers (compare with
    /// [`RedlockState::majority_holder`]).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// let state = redlock.inspect().await?;
    /// assert_eq!(state.majority_holder.as_deref(), Some(guard.token()));
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> &str {
        &self.token
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How much longer the lock is held for sure, by this process' monotonic clock:
    /// `TTL - elapsed - drift` at acquisition (or at the last extend), counting down.
    /// Zero once it ran out.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert!(guard.validity() < redlock.ttl());
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// True while [`RedlockGuard::validity`] is above zero.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// if !guard.is_valid() {
    ///     return Ok(()); // too late: do not touch the resource
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.deadline()
    }

    /// Sets the TTL of this guard's key to `ttl` on every server that still holds this
    /// guard's token (compare and `PEXPIRE`). Returns `true`, with a new validity of
    /// `ttl - elapsed - drift`, when a majority did so before the current validity ran
    /// out; `false` otherwise (the validity then never grows, and shrinks to what a
    /// shorter `ttl` allows).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a `ttl` under 10 ms or over a year;
    /// [`Error::Redis`] when fewer than a majority of the servers answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the validity only grows once a majority has answered, so a dropped
    /// call leaves it as it was (some servers may have extended their key).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let guard = redlock.lock().await?;
    /// if guard.extend(Duration::from_secs(10)).await? {
    ///     assert!(guard.validity() > Duration::from_secs(9));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        validate_lease(ttl)?;
        if ttl < MIN_TTL {
            return Err(Error::invalid(format!(
                "redlock ttl must be at least {MIN_TTL:?}, got {ttl:?}"
            )));
        }
        let timeout = self.redlock.node_timeout();
        let ttl_ms = millis(ttl);
        let started = Instant::now();
        let replies = join_all(self.redlock.nodes.iter().map(|node| {
            let mut conn = node.client.conn();
            let key = node.key.clone();
            let token = self.token.clone();
            within(timeout, async move {
                SCRIPTS
                    .redlock_extend
                    .key(&key)
                    .arg(&token)
                    .arg(ttl_ms)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
        }))
        .await;
        let finished = Instant::now();
        let mut extended = 0;
        let mut answered = 0;
        let mut first_error = None;
        for reply in replies {
            match reply {
                Ok(code) => {
                    answered += 1;
                    if code == 1 {
                        extended += 1;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let new_deadline = started + (ttl.saturating_sub(drift(ttl)));
        let mut deadline = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        let in_time = finished < *deadline && finished < new_deadline;
        if extended >= self.redlock.quorum() && in_time {
            *deadline = new_deadline;
            return Ok(true);
        }
        // A shorter ttl may have reached some servers: never claim more than it allows.
        *deadline = (*deadline).min(new_deadline);
        drop(deadline);
        if answered < self.redlock.quorum() {
            return Err(first_error.unwrap_or_else(|| {
                Error::Protocol("redlock nodes neither answered nor failed".into())
            }));
        }
        Ok(false)
    }

    /// Deletes this guard's key on every server (only where it still holds this token).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when fewer than a majority of the servers answered (their keys
    /// expire after the TTL); [`Error::NotOwner`] when a majority holds another token;
    /// [`Error::LeaseExpired`] when this guard's keys were no longer on a majority.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may have reached only some
    /// servers; whatever it missed expires after the TTL.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// guard.unlock().await?;
    /// assert_eq!(redlock.inspect().await?.majority_holder, None);
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let replies = release_everywhere(
            &self.redlock.nodes,
            &self.token,
            self.redlock.node_timeout(),
        )
        .await;
        let quorum = self.redlock.quorum();
        let mut freed = 0;
        let mut others = 0;
        let mut answered = 0;
        let mut first_error = None;
        for reply in replies {
            match reply {
                Ok(code) => {
                    answered += 1;
                    match code {
                        1 => freed += 1,
                        -1 => others += 1,
                        _ => {}
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let name = self.redlock.name.to_string();
        if freed >= quorum {
            Ok(())
        } else if answered < quorum {
            Err(first_error.unwrap_or_else(|| {
                Error::Protocol("redlock nodes neither answered nor failed".into())
            }))
        } else if others >= quorum {
            Err(Error::NotOwner { name })
        } else {
            Err(Error::LeaseExpired { name })
        }
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let nodes = Arc::clone(&self.redlock.nodes);
        let token = std::mem::take(&mut self.token);
        let timeout = self.redlock.node_timeout();
        spawn_cleanup(
            &self.redlock.name,
            "releasing a dropped redlock guard",
            "its keys expire after the ttl",
            async move {
                release_everywhere(&nodes, &token, timeout).await;
                Ok(())
            },
        );
    }
}

/// What [`Redlock::inspect`] found: the lock as every server sees it.
///
/// ```no_run
/// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
/// let state = redlock.inspect().await?;
/// let reachable = state.nodes.iter().filter(|n| n.reachable).count();
/// println!("{reachable} of {} servers answer", state.nodes.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockState {
    /// The token found on a majority of the servers, if any: the current holder (see
    /// [`RedlockGuard::token`]).
    pub majority_holder: Option<String>,
    /// One entry per server, in the order of the clients given to [`Redlock::new`].
    pub nodes: Vec<RedlockNodeState>,
}

/// One server's view of a [`Redlock`], from [`Redlock::inspect`].
///
/// ```no_run
/// # async fn demo(redlock: ferrisson::Redlock) -> ferrisson::Result<()> {
/// for node in redlock.inspect().await?.nodes {
///     println!("{} {}: {:?} for {:?}", node.url, node.key, node.holder, node.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockNodeState {
    /// The server's URL, password redacted.
    pub url: String,
    /// The lock's key on that server (with the client's namespace).
    pub key: String,
    /// False when the server did not answer within the per-node timeout.
    pub reachable: bool,
    /// The token stored there, if the key exists.
    pub holder: Option<String>,
    /// The key's remaining time to live, if the key exists.
    pub ttl: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(drift(Duration::from_millis(200)), Duration::from_millis(4));
    }

    #[test]
    fn jitter_stays_in_range() {
        assert_eq!(millis_between(Duration::ZERO), Duration::ZERO);
        for _ in 0..1000 {
            assert!(millis_between(Duration::from_millis(7)) <= Duration::from_millis(7));
        }
    }
}
