//! Redlock: one lock over N independent Redis servers, held while a majority agrees.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::api::error::{Error, RedisStoreError, Result};
use crate::api::fencing::FencingToken;
use crate::api::lease::{Lease, validate_lease};
use crate::backend::client::Client;
use crate::backend::holds::Hold;
use crate::backend::ids::OwnerId;
use crate::backend::keys::Keys;
use crate::backend::scripts::ScriptCall;
use crate::backend::scripts::simple::{
    Compared, KeyAcquired, RedlockAcquire, RedlockExtend, RedlockForceRelease, RedlockRaiseFloor,
    RedlockRelease, SimpleInspect,
};
use crate::observe::acquire::{Grant, observe_acquire, observe_wait};
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::cleanup::spawn_cleanup;
use ferrisson_core::DistributedLock;

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

/// A hold a majority granted: until when it is valid, and its token.
#[derive(Clone, Copy)]
struct MajorityGrant {
    /// When the requests were sent (renewals count from there).
    started: Instant,
    /// Local validity deadline.
    deadline: Instant,
    token: FencingToken,
}

/// What one acquire attempt found, counted over the nodes.
struct Tally {
    /// A majority said yes in time and took the token.
    grant: Option<MajorityGrant>,
    /// Nodes that answered at all (yes or no).
    answered: usize,
    /// The first failure of a node that did not answer.
    first_error: Option<Error>,
}

/// What one round of extensions found, counted over the nodes.
struct ExtendRound {
    /// Nodes that extended this owner's key.
    extended: usize,
    /// Nodes that answered at all.
    answered: usize,
    first_error: Option<Error>,
    /// The validity a successful extension gives, counted from before the requests.
    new_deadline: Instant,
    /// When the last answer arrived.
    finished: Instant,
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
    /// [`Error::Redis`] (a connection error or a timeout) or [`Error::NoQuorum`] when
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
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// let info = redlock.inspect().await?;
    /// assert_eq!(info.holder, Some(guard.owner()));
    /// for node in &info.nodes {
    ///     println!("{}: {:?} for {:?}", node.url, node.holder, node.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<RedlockInfo> {
        let replies = self
            .on_every_node(|node| SimpleInspect {
                key: node.keys.main(),
            })
            .await;
        let nodes: Vec<RedlockNodeInfo> = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| {
                let (holder, ttl, reachable) = match reply {
                    Ok((holder, pttl)) => (
                        holder.and_then(|value| value.parse().ok()),
                        u64::try_from(pttl).ok().map(Duration::from_millis),
                        true,
                    ),
                    Err(_) => (None, None, false),
                };
                RedlockNodeInfo {
                    url: node.client.inner.redacted_url.clone(),
                    key: node.keys.main().to_owned(),
                    reachable,
                    holder,
                    ttl,
                }
            })
            .collect();
        let quorum = self.quorum();
        let holder = nodes
            .iter()
            .filter_map(|n| n.holder)
            .find(|owner| nodes.iter().filter(|n| n.holder == Some(*owner)).count() >= quorum);
        Ok(RedlockInfo {
            name: self.name.to_string(),
            holder,
            nodes,
        })
    }

    /// Deletes the lock's key on every server, whoever holds it. The holder's guard
    /// learns of it at its next extension. Returns whether a key was deleted anywhere.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] or [`Error::NoQuorum`] when fewer than a majority of the servers
    /// answered (keys on the others expire after their TTL).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// if redlock.force_unlock().await? {
    ///     eprintln!("removed a stuck lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let replies = self
            .on_every_node(|node| RedlockForceRelease {
                key: node.keys.main(),
                channel: node.keys.channel(),
            })
            .await;
        let (answers, first_error) = answers(replies);
        if answers.len() < self.quorum() {
            return Err(first_error.unwrap_or_else(|| self.no_quorum(answers.len())));
        }
        Ok(answers.contains(&true))
    }

    /// Runs the script call `call(node)` on every node at once, each bounded by the
    /// per-node timeout; the replies in node order.
    async fn on_every_node<'a, C, F>(&'a self, call: F) -> Vec<Result<C::Reply>>
    where
        C: ScriptCall + 'a,
        F: Fn(&'a Node) -> C,
    {
        let timeout = self.node_timeout();
        let call = &call;
        // Each node's call boxed: the calls run side by side in one `join_all`, and their
        // futures, nested in the acquire's, would otherwise make it too deep a type for a
        // caller's compiler.
        join_all(self.nodes.iter().map(|node| {
            Box::pin(within(&self.name, timeout, async move {
                node.client.connection().run(&call(node)).await
            }))
        }))
        .await
    }

    async fn acquire(&self, deadline: Option<Instant>) -> Result<Option<RedlockGuard>> {
        if let Some(guard) = self.attempt().await? {
            return Ok(Some(guard));
        }
        observe_wait(&self.probe, self.retry(deadline)).await
    }

    /// Attempts again after a random pause until one succeeds or `deadline` passes.
    async fn retry(&self, deadline: Option<Instant>) -> Result<Option<RedlockGuard>> {
        loop {
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
            if let Some(guard) = self.attempt().await? {
                return Ok(Some(guard));
            }
        }
    }

    async fn attempt(&self) -> Result<Option<RedlockGuard>> {
        let owner = OwnerId::random();
        let (tx, rx) = oneshot::channel();
        let this = self.clone();
        // Spawned so that an attempt whose caller went away is undone, not leaked.
        tokio::spawn(async move {
            let tally = this.run_attempt(owner).await;
            if let Err(Tally { grant: Some(_), .. }) = tx.send(tally) {
                release_everywhere(&this, owner).await;
            }
        });
        let tally = rx.await.map_err(|_| Error::cancelled(&self.name))?;
        if let Some(grant) = tally.grant {
            return Ok(Some(RedlockGuard::new(self.clone(), owner, grant)));
        }
        if tally.answered < self.quorum() {
            return Err(tally
                .first_error
                .unwrap_or_else(|| self.no_quorum(tally.answered)));
        }
        Ok(None)
    }

    async fn run_attempt(&self, owner: OwnerId) -> Tally {
        let ttl = self.ttl();
        let started = Instant::now();
        let replies = self
            .on_every_node(|node| RedlockAcquire {
                key: node.keys.main(),
                fence: node.keys.fence(),
                owner,
                ttl,
            })
            .await;
        let mut granted = Vec::new();
        let mut answered = 0;
        let mut first_error = None;
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply {
                Ok(reply) => {
                    answered += 1;
                    if let KeyAcquired::Granted { token } = reply {
                        granted.push((node, token));
                    }
                }
                Err(e) => {
                    tracing::debug!(lock = %self.name, error = %e, "redlock node did not answer");
                    first_error.get_or_insert(e);
                }
            }
        }
        let grant = match granted.iter().map(|&(_, token)| token).max() {
            Some(token) if granted.len() >= self.quorum() && time_left(started, ttl) => {
                let raised = self.raise_floors(owner, token, &granted).await;
                // The second round counts against the validity as well.
                (raised >= self.quorum() && time_left(started, ttl)).then(|| MajorityGrant {
                    started,
                    deadline: started + ttl.saturating_sub(drift(ttl)),
                    token,
                })
            }
            _ => None,
        };
        if grant.is_none() {
            // Including the nodes that timed out: their SET may still land, and a release
            // sent on the same connection is executed after it.
            release_everywhere(self, owner).await;
        }
        Tally {
            grant,
            answered,
            first_error,
        }
    }

    /// Raises the fencing floor of every granting server to `token` (where the key still
    /// holds `owner`); returns on how many it did.
    ///
    /// Each server handed out its own token from its own clock; the guard's is the
    /// largest. Every later majority shares a server with this one, and once that server's
    /// floor is at least `token`, it hands out a larger one, whatever the clocks of the
    /// others say. That holds only if a majority took `token`: any majority then meets one
    /// of them.
    async fn raise_floors(
        &self,
        owner: OwnerId,
        token: FencingToken,
        granted: &[(&Node, FencingToken)],
    ) -> usize {
        let timeout = self.node_timeout();
        let replies = join_all(granted.iter().map(|&(node, _)| {
            Box::pin(within(&self.name, timeout, async move {
                node.client
                    .connection()
                    .run(&RedlockRaiseFloor {
                        key: node.keys.main(),
                        fence: node.keys.fence(),
                        owner,
                        token,
                    })
                    .await
            }))
        }))
        .await;
        replies
            .into_iter()
            .filter(|r| matches!(r, Ok(true)))
            .count()
    }

    /// Extends this owner's key to `ttl` on every server that still holds it.
    async fn extend_everywhere(&self, owner: OwnerId, ttl: Duration) -> ExtendRound {
        let started = Instant::now();
        let replies = self
            .on_every_node(|node| RedlockExtend {
                key: node.keys.main(),
                owner,
                ttl,
            })
            .await;
        let finished = Instant::now();
        let (answers, first_error) = answers(replies);
        ExtendRound {
            extended: answers.iter().filter(|&&c| c == Compared::Done).count(),
            answered: answers.len(),
            first_error,
            new_deadline: started + ttl.saturating_sub(drift(ttl)),
            finished,
        }
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

/// True while `ttl - elapsed - drift` is above zero, `elapsed` counted from `started`.
fn time_left(started: Instant, ttl: Duration) -> bool {
    ttl.checked_sub(started.elapsed() + drift(ttl))
        .is_some_and(|left| !left.is_zero())
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

/// Runs one node's call for the Redlock `name`, counting a reply later than `timeout`
/// as [`Error::TimedOut`].
fn within<'a, T>(
    name: &'a str,
    timeout: Duration,
    call: impl Future<Output = Result<T>> + 'a,
) -> impl Future<Output = Result<T>> + 'a {
    tokio::time::timeout(timeout, call).map(move |reply| match reply {
        Ok(reply) => reply,
        Err(_) => Err(Error::TimedOut {
            name: name.to_owned(),
            after: timeout,
        }),
    })
}

/// The answers of the nodes that answered, and the first failure of one that did not.
fn answers<T>(replies: Vec<Result<T>>) -> (Vec<T>, Option<Error>) {
    let mut answers = Vec::with_capacity(replies.len());
    let mut first_error = None;
    for reply in replies {
        match reply {
            Ok(answer) => answers.push(answer),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    (answers, first_error)
}

/// Compare-and-delete of `owner`'s key on every node at once.
async fn release_everywhere(redlock: &Redlock, owner: OwnerId) -> Vec<Result<Compared>> {
    redlock
        .on_every_node(|node| RedlockRelease {
            key: node.keys.main(),
            channel: node.keys.channel(),
            owner,
        })
        .await
}

/// Proof of holding a [`Redlock`] for a limited validity; released on every server by
/// `unlock()` or, best effort, on drop.
///
/// With a fixed lease nothing renews the hold: check [`RedlockGuard::is_held`] before
/// acting and call [`RedlockGuard::extend`] before [`RedlockGuard::remaining`] runs out if
/// the work takes longer. With [`Lease::Watchdog`] a task this guard owns extends it.
///
/// ```no_run
/// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
///
/// let guard = redlock.lock().await?;
/// if guard.remaining() < Duration::from_secs(1) && !guard.extend(redlock.ttl()).await? {
///     return Ok(()); // lost: stop before touching the resource
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedlockGuard {
    redlock: Redlock,
    /// The owner id, the token and the validity (not registered with any client: the
    /// hold spans several).
    hold: Arc<Hold>,
    /// The task that extends the hold under [`Lease::Watchdog`].
    renewal: Option<JoinHandle<()>>,
    released: bool,
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.redlock.name)
            .field("owner", &self.hold.owner)
            .field("fencing_token", &self.hold.token)
            .field("held", &self.hold.is_held())
            .field("renewed", &self.renewal.is_some())
            .finish_non_exhaustive()
    }
}

impl RedlockGuard {
    fn new(redlock: Redlock, owner: OwnerId, grant: MajorityGrant) -> Self {
        let hold = Arc::new(Hold::new(
            &redlock.probe,
            redlock.nodes[0].keys.clone(),
            owner,
            grant.token,
            None,
            grant.deadline,
        ));
        hold.meter().start();
        let renewal = (redlock.lease == Lease::Watchdog).then(|| {
            tokio::spawn(keep_extended(
                redlock.clone(),
                Arc::clone(&hold),
                grant.started,
            ))
        });
        Self {
            redlock,
            hold,
            renewal,
            released: false,
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson_redis::RedlockGuard) {
    /// assert_eq!(guard.name(), "orders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.redlock.name
    }

    /// The owner id this guard's keys hold on the servers (compare with
    /// [`RedlockInfo::holder`]).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert_eq!(redlock.inspect().await?.holder, Some(guard.owner()));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> OwnerId {
        self.hold.owner
    }

    /// The fencing token of this hold: the largest the granting majority handed out,
    /// written back to them, so the next holder's is larger (see `docs/REDLOCK.md` for
    /// what can break that). Pass it with every write to the protected resource.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let first = redlock.lock().await?;
    /// let token = first.fencing_token();
    /// first.unlock().await?;
    /// assert!(redlock.lock().await?.fencing_token() > token);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.token
    }

    /// True while the hold is valid by this process' monotonic clock: `TTL - elapsed -
    /// drift` from the acquisition or the last extension has not run out, and no
    /// extension found the lock gone from a majority.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// if !guard.is_held() {
    ///     return Ok(()); // too late: do not touch the resource
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// How much longer the lock is held for sure: `TTL - elapsed - drift` at the
    /// acquisition (or the last extension), counting down; zero once lost.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert!(guard.remaining() < redlock.ttl());
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.hold.remaining()
    }

    /// Resolves when the hold is no longer valid: its validity ran out (no extension in
    /// time), or an extension found a majority no longer holding it.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lost the lock: stop writing"),
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

    /// Sets the TTL of this guard's key to `ttl` on every server that still holds it
    /// (compare and `PEXPIRE`). Returns `true`, with a new validity of `ttl - elapsed -
    /// drift`, when a majority did so before the current validity ran out; `false`
    /// otherwise (the validity then never grows, and shrinks to what a shorter `ttl`
    /// allows).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a `ttl` under 10 ms or over a year;
    /// [`Error::Redis`] or [`Error::NoQuorum`] when fewer than a majority of the servers
    /// answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the validity only grows once a majority has answered, so a dropped
    /// call leaves it as it was (some servers may have extended their key).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let guard = redlock.lock().await?;
    /// if guard.extend(Duration::from_secs(10)).await? {
    ///     assert!(guard.remaining() > Duration::from_secs(9));
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
        extend_hold(&self.redlock, &self.hold, ttl).await
    }

    /// Deletes this guard's key on every server (only where it still holds this owner).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] or [`Error::NoQuorum`] when fewer than a majority of the servers
    /// answered (their keys expire after the TTL); [`Error::NotOwner`] when a majority
    /// holds another owner; [`Error::LeaseExpired`] when this guard's keys were no longer
    /// on a majority.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may have reached only some
    /// servers; whatever it missed expires after the TTL.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// guard.unlock().await?;
    /// assert_eq!(redlock.inspect().await?.holder, None);
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.stop_renewal();
        self.hold
            .meter()
            .release(
                Some(self.hold.token),
                true,
                self.release_on_quorum(),
                |()| false,
            )
            .await
    }

    /// Deletes this guard's key everywhere and reads the outcome off the majority.
    async fn release_on_quorum(&self) -> Result<()> {
        let replies = release_everywhere(&self.redlock, self.hold.owner).await;
        let quorum = self.redlock.quorum();
        let (answers, first_error) = answers(replies);
        let answered = answers.len();
        let count = |wanted| answers.iter().filter(|&&c| c == wanted).count();
        let (freed, others) = (count(Compared::Done), count(Compared::Other));
        let name = self.redlock.name.to_string();
        if freed >= quorum {
            Ok(())
        } else if answered < quorum {
            Err(first_error.unwrap_or_else(|| self.redlock.no_quorum(answered)))
        } else if others >= quorum {
            Err(Error::NotOwner { name })
        } else {
            Err(Error::LeaseExpired { name })
        }
    }

    fn stop_renewal(&mut self) {
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
    }
}

impl Grant for RedlockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.hold.token)
    }
}

impl ferrisson_core::Fenced for RedlockGuard {
    fn fencing_token(&self) -> FencingToken {
        RedlockGuard::fencing_token(self)
    }
}

impl ferrisson_core::Guard for RedlockGuard {
    fn name(&self) -> &str {
        RedlockGuard::name(self)
    }

    fn is_held(&self) -> bool {
        RedlockGuard::is_held(self)
    }

    fn remaining(&self) -> Duration {
        RedlockGuard::remaining(self)
    }

    async fn lost(&self) {
        RedlockGuard::lost(self).await;
    }

    async fn unlock(self) -> Result<()> {
        RedlockGuard::unlock(self).await
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        self.stop_renewal();
        if self.released {
            return;
        }
        let redlock = self.redlock.clone();
        let hold = Arc::clone(&self.hold);
        spawn_cleanup(
            &self.redlock.name,
            "releasing a dropped redlock guard",
            "its keys expire after the ttl",
            async move {
                let release = async {
                    release_everywhere(&redlock, hold.owner).await;
                    Ok(())
                };
                hold.meter()
                    .release(Some(hold.token), true, release, |()| false)
                    .await
            },
        );
    }
}

/// Extends `hold`'s keys to `ttl` on every server; moves its validity on success, and
/// never lengthens it otherwise. Returns whether a majority extended in time.
async fn extend_hold(redlock: &Redlock, hold: &Hold, ttl: Duration) -> Result<bool> {
    let round = redlock.extend_everywhere(hold.owner, ttl).await;
    let current = hold.validity().deadline;
    let in_time = round.finished < current && round.finished < round.new_deadline;
    if round.extended >= redlock.quorum() && in_time {
        hold.extend(round.new_deadline);
        return Ok(true);
    }
    // A shorter ttl may have reached some servers: never claim more than it allows.
    hold.extend(current.min(round.new_deadline));
    if round.answered < redlock.quorum() {
        return Err(round
            .first_error
            .unwrap_or_else(|| redlock.no_quorum(round.answered)));
    }
    Ok(false)
}

/// The renewal task of a [`Lease::Watchdog`] guard: extends the keys every third of the
/// TTL (counted from before each successful round), retries an extension that too few
/// servers answered until the validity runs out, and marks the hold lost when a majority
/// answered without extending it. Stops when the hold is lost; the guard aborts it on
/// release.
async fn keep_extended(redlock: Redlock, hold: Arc<Hold>, acquired: Instant) {
    let ttl = redlock.ttl();
    let retry = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut next = acquired + ttl / 3;
    loop {
        tokio::select! {
            () = hold.lost() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let started = Instant::now();
        match extend_hold(&redlock, &hold, ttl).await {
            Ok(true) => next = started + ttl / 3,
            Ok(false) => {
                tracing::warn!(lock = %redlock.name, "redlock lost: an extension did not reach a majority in time");
                hold.mark_lost();
                return;
            }
            Err(e) => {
                tracing::warn!(lock = %redlock.name, error = %e, "redlock extension failed; retrying until the validity runs out");
                next = Instant::now() + retry;
            }
        }
    }
}

/// What [`Redlock::inspect`] found: the lock as every server sees it.
///
/// ```no_run
/// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
/// let info = redlock.inspect().await?;
/// let reachable = info.nodes.iter().filter(|n| n.reachable).count();
/// println!("{}: {reachable} of {} servers answer", info.name, info.nodes.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockInfo {
    /// The lock's name.
    pub name: String,
    /// The owner whose key a majority of the servers hold, if any: the current holder
    /// (see [`RedlockGuard::owner`]).
    pub holder: Option<OwnerId>,
    /// One entry per server, in the order of the clients given to [`Redlock::new`].
    pub nodes: Vec<RedlockNodeInfo>,
}

/// One server's view of a [`Redlock`], from [`Redlock::inspect`].
///
/// ```no_run
/// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
/// for node in redlock.inspect().await?.nodes {
///     println!("{} {}: {:?} for {:?}", node.url, node.key, node.holder, node.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockNodeInfo {
    /// The server's URL, password redacted.
    pub url: String,
    /// The lock's key on that server (with the client's namespace).
    pub key: String,
    /// False when the server did not answer within the per-node timeout.
    pub reachable: bool,
    /// The owner whose key is stored there, if the key exists (and holds an owner id).
    pub holder: Option<OwnerId>,
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
