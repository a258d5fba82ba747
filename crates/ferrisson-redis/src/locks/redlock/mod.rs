//! Redlock: one lock over N independent Redis servers, held while a majority agrees.
//!
//! The lock and its settings here; the quorum algorithm (attempt, tally, floors, release)
//! in `quorum`, the fan-out to the servers in `fanout`, the guard in `guard`, the
//! watchdog's extensions in `renewal`, the read-only view in `inspect`.

mod fanout;
mod guard;
mod inspect;
mod quorum;
mod renewal;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::error::{Error, RedisStoreError, Result};
use crate::api::lease::{Lease, validate_lease};
use crate::backend::client::Client;
use crate::backend::keys::Keys;
use crate::observe::acquire::observe_acquire;
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use ferrisson_core::DistributedLock;

pub use guard::RedlockGuard;
pub use inspect::{RedlockInfo, RedlockNodeInfo};

/// Default lease of a [`Redlock`]: its keys live this long on every server (a fixed
/// lease; see [`Redlock::with_lease`]).
///
/// ```no_run
/// # fn demo(clients: &[ferrisson_redis::Client]) -> ferrisson_redis::Result<()> {
/// let redlock = ferrisson_redis::Redlock::new(clients, "orders")?;
/// assert_eq!(redlock.ttl(), ferrisson_redis::DEFAULT_REDLOCK_LEASE);
/// # Ok(()) }
/// ```
pub const DEFAULT_REDLOCK_LEASE: Duration = Duration::from_secs(10);
/// Default least pause between two acquire attempts of a waiting [`Redlock`].
///
/// ```
/// use ferrisson_redis::{DEFAULT_REDLOCK_RETRY_DELAY, DEFAULT_REDLOCK_RETRY_JITTER};
/// // A waiter pauses 50 to 100 ms between attempts.
/// let longest = DEFAULT_REDLOCK_RETRY_DELAY + DEFAULT_REDLOCK_RETRY_JITTER;
/// assert_eq!(longest, std::time::Duration::from_millis(100));
/// ```
pub const DEFAULT_REDLOCK_RETRY_DELAY: Duration = Duration::from_millis(50);
/// Default random extra pause between two attempts (uniform in `0..=jitter`).
///
/// ```
/// assert!(!ferrisson_redis::DEFAULT_REDLOCK_RETRY_JITTER.is_zero());
/// ```
pub const DEFAULT_REDLOCK_RETRY_JITTER: Duration = Duration::from_millis(50);

/// The default per-node timeout is a tenth of the TTL, but never more than this: a node
/// that does not answer within it is treated as down for this attempt.
const MAX_DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Shortest TTL accepted: below it the drift allowance leaves no validity.
const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest retry delay or jitter accepted (keeps deadline arithmetic far from overflow).
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(3600);

/// One node of a Redlock: an independent server and the lock's keys on it.
struct Node {
    client: Client,
    keys: Keys,
}

/// A lock over N independent Redis servers (the Redlock algorithm of Redis' authors).
///
/// Each server holds a plain string key with the holder's owner id and a TTL. An acquire
/// sends `SET key owner NX PX ttl` to every server at once, each call bounded by a
/// per-node timeout far below the TTL, and succeeds when a majority (`N/2 + 1`) said yes
/// and time is left: the guard's validity is `TTL - elapsed - drift`, with `elapsed`
/// measured on a monotonic clock from before the requests to after the last reply and
/// `drift = TTL/100 + 2 ms`. A failed attempt deletes its key on every server (compare
/// and delete, so nobody else's key) and a waiting caller tries again after a random
/// pause, so that contenders who split the votes do not collide again.
///
/// Every granting server hands out a fencing token from its clock (as every lock of this
/// crate does); the guard's token is the largest of the majority's, written back to those
/// servers before the guard is returned, so that the next majority, which shares a
/// server with this one, hands out a larger token. What that guarantees, and what not
/// (clocks, servers restarted without their data), is in `docs/REDLOCK.md`: read it
/// before choosing a Redlock over a [`Lock`](crate::Lock).
///
/// The lease is fixed (10 s) unless set otherwise; with [`Lease::Watchdog`] a task the
/// guard owns extends the keys on every server every third of the watchdog lease, and
/// the guard's [`lost`](RedlockGuard::lost) fires when an extension does not reach a
/// majority in time.
///
/// ```no_run
/// # async fn demo() -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
/// use ferrisson_redis::{Client, Lease, Redlock};
///
/// let mut clients = Vec::new();
/// for port in [7001, 7002, 7003, 7004, 7005] {
///     clients.push(Client::connect(&format!("redis://10.0.0.1:{port}")).await?);
/// }
/// let redlock = Redlock::new(&clients, "voucher:42")?
///     .with_lease(Lease::Fixed(Duration::from_secs(5)))?;
/// assert_eq!(redlock.quorum(), 3);
/// if let Some(guard) = redlock.lock_timeout(Duration::from_secs(1)).await? {
///     // Work only while the hold lasts, and pass the token to the resource.
///     assert!(guard.is_held());
///     println!("token {}", guard.fencing_token());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    name: Arc<str>,
    probe: Probe,
    nodes: Arc<[Node]>,
    lease: Lease,
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
            .field("lease", &self.lease)
            .field("node_timeout", &self.node_timeout())
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// A Redlock called `name` over the servers of `clients` (each must be an independent
    /// master: no replication between them), with a fixed 10 s lease.
    ///
    /// Three or five servers is the usual choice: five tolerate two failures. Each
    /// client's namespace applies to the key on its server.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `clients` is empty, names the same server twice
    /// (the same client, or the same URL and namespace), or `name` is empty, longer
    /// than 1 KiB or holds `{` or `}`.
    ///
    /// ```no_run
    /// # fn demo(clients: Vec<ferrisson_redis::Client>) -> ferrisson_redis::Result<()> {
    /// let redlock = ferrisson_redis::Redlock::new(&clients, "orders")?;
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
                Ok(Node {
                    client: client.clone(),
                    keys: client.keys(name)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let name = Arc::from(name);
        Ok(Self {
            probe: clients[0].probe(Kind::Redlock, &name),
            name,
            nodes: nodes.into(),
            lease: Lease::Fixed(DEFAULT_REDLOCK_LEASE),
            node_timeout: None,
            retry_delay: DEFAULT_REDLOCK_RETRY_DELAY,
            retry_jitter: DEFAULT_REDLOCK_RETRY_JITTER,
        })
    }

    /// The same Redlock with another lease for future acquisitions (default: fixed,
    /// 10 s). [`Lease::Fixed`] writes that TTL and never renews (call
    /// [`RedlockGuard::extend`] if the work takes longer); [`Lease::Watchdog`] writes the
    /// clients' watchdog lease (the shortest, if they differ) and extends it on every
    /// server every third of it while the guard lives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a TTL under 10 ms, over a year, or not above an
    /// explicitly set per-node timeout.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson_redis::Lease;
    /// let redlock = redlock.with_lease(Lease::Fixed(Duration::from_secs(2)))?;
    /// assert_eq!(redlock.ttl(), Duration::from_secs(2));
    /// assert!(redlock.clone().with_lease(Lease::Fixed(Duration::from_millis(1))).is_err());
    /// let renewed = redlock.with_lease(Lease::Watchdog)?;
    /// # Ok(()) }
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        let ttl = lease.validate()?.duration(self.watchdog_lease());
        validate_lease(ttl)?;
        if ttl < MIN_TTL {
            return Err(Error::invalid(format!(
                "redlock lease must be at least {MIN_TTL:?}, got {ttl:?}"
            )));
        }
        if let Some(timeout) = self.node_timeout
            && timeout >= ttl
        {
            return Err(Error::invalid(format!(
                "redlock lease {ttl:?} must exceed the per-node timeout {timeout:?}"
            )));
        }
        self.lease = lease;
        Ok(self)
    }

    /// The shortest watchdog lease of the clients: what [`Lease::Watchdog`] writes.
    fn watchdog_lease(&self) -> Duration {
        self.nodes
            .iter()
            .map(|node| node.client.watchdog_lease())
            .min()
            .unwrap_or(crate::backend::client::DEFAULT_WATCHDOG_LEASE)
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
    /// # fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let redlock = redlock.with_node_timeout(Duration::from_millis(20))?;
    /// assert_eq!(redlock.node_timeout(), Duration::from_millis(20));
    /// # Ok(()) }
    /// ```
    pub fn with_node_timeout(mut self, timeout: Duration) -> Result<Self> {
        if timeout.is_zero() || timeout >= self.ttl() {
            return Err(Error::invalid(format!(
                "redlock per-node timeout must be above zero and below the ttl {:?}, got {timeout:?}",
                self.ttl()
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
    /// # fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
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
    /// # fn demo(redlock: ferrisson_redis::Redlock) {
    /// assert_eq!(redlock.name(), "orders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many servers the lock spans.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson_redis::Redlock) {
    /// assert!(redlock.nodes() >= redlock.quorum());
    /// # }
    /// ```
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// How many servers must agree: `N/2 + 1`.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson_redis::Redlock) {
    /// // 3 of 5, 2 of 3, 1 of 1
    /// assert_eq!(redlock.quorum(), redlock.nodes() / 2 + 1);
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The error for too few answers when no server reported an error of its own.
    fn no_quorum(&self, answered: usize) -> Error {
        RedisStoreError::NoQuorum {
            name: self.name.to_string(),
            answered,
            quorum: self.quorum(),
        }
        .into()
    }

    /// The lease this Redlock acquires with.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson_redis::Redlock) {
    /// use ferrisson_redis::Lease;
    /// assert_eq!(redlock.lease(), Lease::Fixed(ferrisson_redis::DEFAULT_REDLOCK_LEASE));
    /// # }
    /// ```
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The TTL written to every server: the fixed lease, or the watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson_redis::Redlock) {
    /// assert_eq!(redlock.ttl(), ferrisson_redis::DEFAULT_REDLOCK_LEASE);
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.lease.duration(self.watchdog_lease())
    }

    /// How long one server may take to answer (see [`Redlock::with_node_timeout`]).
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson_redis::Redlock) {
    /// assert!(redlock.node_timeout() < redlock.ttl());
    /// # }
    /// ```
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| (self.ttl() / 10).min(MAX_DEFAULT_NODE_TIMEOUT))
    }

    /// Makes one attempt on every server; `Ok(None)` when no majority agreed in time
    /// (the keys this attempt set are deleted again before it returns).
    ///
    /// # Errors
    ///
    /// [`Error::Store`] (a connection error or a timeout) or [`RedisStoreError::NoQuorum`](crate::RedisStoreError::NoQuorum) when
    /// fewer than a majority of the servers answered: the lock cannot be taken while
    /// they are unreachable.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the attempt runs on a spawned task, which deletes its keys again if
    /// it succeeds after the caller went away.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// match redlock.try_lock().await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => println!("held elsewhere (or the votes were split)"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<RedlockGuard>> {
        observe_acquire(&self.probe, Some(Duration::ZERO), self.attempt()).await
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
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let Some(guard) = redlock.lock_timeout(Duration::from_secs(2)).await? else {
    ///     return Ok(()); // busy: give up
    /// };
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<RedlockGuard>> {
        let acquire = self.acquire(Instant::now().checked_add(wait));
        observe_acquire(&self.probe, Some(wait), acquire).await
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
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert!(guard.is_held());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<RedlockGuard> {
        observe_acquire(&self.probe, None, self.acquire(None))
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }
}

impl DistributedLock for Redlock {
    type Guard = RedlockGuard;

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::REDLOCK
    }

    fn name(&self) -> &str {
        Redlock::name(self)
    }

    async fn lock(&self) -> Result<RedlockGuard> {
        Redlock::lock(self).await
    }

    async fn try_lock(&self) -> Result<Option<RedlockGuard>> {
        Redlock::try_lock(self).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<RedlockGuard>> {
        Redlock::lock_timeout(self, wait).await
    }
}
