//! The client: one reconnecting Redis connection, the shared subscription, the watchdog.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ProtocolVersion};
use tokio::sync::oneshot;

use crate::api::error::{Error, RedisStoreError, Result, STORE, redis_reason};
use crate::api::lease::validate_lease;
use crate::backend::acks::{Acknowledgements, AofAcks, AofWait, ReplicaAcks};
use crate::backend::connection::Connection;
use crate::backend::connection::cluster::ClusterNodes;
use crate::backend::connection::sentinel::{SentinelCredentials, SentinelMaster, SentinelSettings};
use crate::backend::endpoint::{Endpoint, redact_url};
use crate::backend::holds::Holds;
use crate::backend::keys::{Keys, validate_namespace};
use crate::backend::pubsub::Subscriptions;
use crate::backend::scripts;
use crate::backend::tls::{TlsConfig, install_crypto_provider};
use crate::backend::watchdog::Watchdog;
use crate::observe::metrics::Kind;
use crate::observe::probe::{ClassFn, Classes, Probe};

/// Default lease of [`Lease::Watchdog`](crate::Lease::Watchdog) locks (Redisson's 30 s).
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_RECONNECT_RETRIES: usize = 2;

/// A handle to one Redis server and everything ferrisson runs against it.
///
/// Cheap to clone (an `Arc`); every clone shares one multiplexed, self-reconnecting
/// connection (RESP3), one subscription that wakes every local waiter, and one watchdog
/// task that renews every held lock. Dropping the last clone (and every guard made from
/// it) stops the watchdog.
///
/// ```no_run
/// # async fn demo() -> ferrisson_redis::Result<()> {
/// let client = ferrisson_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:42")?;
/// let guard = lock.lock().await?;
/// // ... critical section ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) connection: Connection,
    pub(crate) namespace: String,
    pub(crate) redacted_url: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) subscriptions: Subscriptions,
    pub(crate) watchdog: Watchdog,
    pub(crate) holds: Holds,
    /// This client's id among the clients waiting for a lock that wakes one waiting
    /// client (`Lock`, `SimpleLock`): 16 random hex digits, which complete the client's
    /// own wake-up channel of each lock it waits on.
    pub(crate) wake_id: String,
    /// The class label of each primitive's metrics.
    pub(crate) classes: Classes,
    _shutdown: oneshot::Sender<()>,
}

impl Client {
    /// Connects with default settings. See [`ClientBuilder`] for the options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Connect`] when the server
    /// cannot be reached or refuses the credentials, [`RedisStoreError::UnsupportedServer`](crate::RedisStoreError::UnsupportedServer) when it
    /// is older than Redis 7.0.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Starts configuring a client for `url`, which also says the topology:
    ///
    /// - `redis://[user:password@]host[:port][/db]`: one server (`rediss://` for TLS;
    ///   settings beyond the URL: [`ClientBuilder::tls`]);
    /// - `redis+sentinel://[user:password@]host[:port][,host[:port]...]/master[/db]`: the
    ///   master a Sentinel group names (the sentinels' addresses, default port 26379),
    ///   followed across failovers;
    /// - `redis+cluster://[user:password@]host[:port][,host[:port]...]`: a Redis Cluster
    ///   through these seed nodes;
    ///
    /// and `rediss+sentinel://`, `rediss+cluster://` with TLS to every server.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// The key prefix every primitive of this client uses.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// The lease of [`Lease::Watchdog`](crate::Lease::Watchdog) locks.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.watchdog_lease
    }

    /// The one way to Redis (see [`Connection`]).
    pub(crate) fn connection(&self) -> &Connection {
        &self.inner.connection
    }

    /// The keys of the primitive called `name`.
    pub(crate) fn keys(&self, name: &str) -> Result<Keys> {
        Keys::new(&self.inner.namespace, name, self.inner.connection.floors())
    }

    /// What the `kind` primitive called `name` records its metrics and spans under.
    pub(crate) fn probe(&self, kind: Kind, name: &Arc<str>) -> Probe {
        self.inner.classes.probe(kind, name)
    }

    /// `key` with the client's namespace in front.
    pub(crate) fn namespaced(&self, key: &str) -> String {
        format!("{}{key}", self.inner.namespace)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.redacted_url)
            .field("namespace", &self.inner.namespace)
            .field("watchdog_lease", &self.inner.watchdog_lease)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Client`]; every setting has a default, so `connect()` may follow at once.
///
/// ```no_run
/// # async fn demo() -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson_redis::Client::builder("redis://:secret@127.0.0.1:6379/2")
///     .namespace("shop:")
///     .response_timeout(Duration::from_secs(2))
///     .watchdog_lease(Duration::from_secs(10))
///     .connect()
///     .await?;
/// assert_eq!(client.namespace(), "shop:");
/// // The password never shows: Debug prints redis://:***@127.0.0.1:6379/2
/// println!("{client:?}");
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    namespace: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    watchdog_lease: Duration,
    reconnect_retries: usize,
    tls: Option<TlsConfig>,
    metrics_class: Option<ClassFn>,
    sentinel_credentials: SentinelCredentials,
    acks: Acknowledgements,
    coalesce_calls: bool,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &redact_url(&self.url))
            .field("namespace", &self.namespace)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("reconnect_retries", &self.reconnect_retries)
            .field("tls", &self.tls)
            .field("metrics_class", &self.metrics_class.is_some())
            .field("replica_acks", &self.acks.replicas)
            .field("aof_acks", &self.acks.aof)
            .field("coalesce_calls", &self.coalesce_calls)
            .field(
                "sentinel_credentials",
                &self.sentinel_credentials.password.as_ref().map(|_| "<set>"),
            )
            .finish()
    }
}

impl ClientBuilder {
    fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            namespace: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            reconnect_retries: DEFAULT_RECONNECT_RETRIES,
            tls: None,
            metrics_class: None,
            sentinel_credentials: SentinelCredentials::default(),
            acks: Acknowledgements::default(),
            coalesce_calls: false,
        }
    }

    /// A prefix put in front of every key and channel (default: none), e.g. `"shop:"`.
    /// At most [`MAX_NAMESPACE_LEN`](crate::MAX_NAMESPACE_LEN) bytes, without `{` or `}`
    /// (they would change the keys' hash tag).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long one connection attempt may take, TLS handshake and login included
    /// (default 5 s). [`ClientBuilder::connect`] makes one attempt: a server that is
    /// refused or unresolvable fails at once, one that does not answer fails after this.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The lease of [`Lease::Watchdog`](crate::Lease::Watchdog) locks, renewed every
    /// third of it (default 30 s).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How many times one reconnection retries before the command fails (default 2).
    /// Only for a connection lost after [`ClientBuilder::connect`] succeeded; the first
    /// connect is never retried.
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// TLS settings for a `rediss://`, `rediss+sentinel://` or `rediss+cluster://` URL:
    /// the CA to verify the servers with, a client certificate, or the insecure mode.
    /// Behind Sentinel they serve the sentinels and the master they name; on a cluster,
    /// every node, the ones the client discovers included. Refused at connect with a
    /// plain URL.
    ///
    /// ```no_run
    /// # async fn demo(ca_pem: Vec<u8>, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> ferrisson_redis::Result<()> {
    /// use ferrisson_redis::{Client, TlsConfig};
    ///
    /// let client = Client::builder("rediss://127.0.0.1:6380")
    ///     .tls(TlsConfig::new().ca_certificates(ca_pem.clone()))
    ///     .connect()
    ///     .await?;
    ///
    /// // A cluster with TLS only, client certificates and an ACL user.
    /// let tls = TlsConfig::new()
    ///     .ca_certificates(ca_pem)
    ///     .client_certificate(cert_pem, key_pem);
    /// let cluster = Client::builder("rediss+cluster://locker:secret@10.0.0.1:6380,10.0.0.2:6380")
    ///     .tls(tls)
    ///     .connect()
    ///     .await?;
    /// # let _ = (client, cluster); Ok(()) }
    /// ```
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Adds a `class` label to the metrics of every primitive of this client: `class_of`
    /// maps a primitive's name to its class once, when the handle is made (see
    /// [`metrics`](crate::metrics)). Without it (the default) the metrics carry no name at
    /// all.
    ///
    /// Every distinct class is a series per metric in the application's metrics store:
    /// map names to a few classes (`orders:42` to `orders`). Mapping each name to itself
    /// is possible, and right for a handful of long-lived locks, but with per-order or
    /// per-user names the series grow without bound.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson_redis::Result<()> {
    /// let client = ferrisson_redis::Client::builder("redis://127.0.0.1:6379")
    ///     .metrics_class(|name| name.split(':').next().unwrap_or(name).to_owned())
    ///     .connect()
    ///     .await?;
    /// // `orders:42` and `orders:43` both count under class="orders".
    /// let lock = client.lock("orders:42")?;
    /// # let _ = lock; Ok(()) }
    /// ```
    pub fn metrics_class(
        mut self,
        class_of: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.metrics_class = Some(Arc::new(class_of));
        self
    }

    /// Credentials for the sentinels of a `redis+sentinel://` or `rediss+sentinel://` URL,
    /// when they require authentication (`requirepass` or an ACL user on the sentinels;
    /// the URL's credentials are the master's). Without it, sentinels are asked without
    /// credentials.
    ///
    /// ```no_run
    /// # async fn demo(tls: ferrisson_redis::TlsConfig) -> ferrisson_redis::Result<()> {
    /// let client = ferrisson_redis::Client::builder("redis+sentinel://:data-pw@10.0.0.1,10.0.0.2,10.0.0.3/shop")
    ///     .sentinel_credentials(None, "sentinel-pw")
    ///     .connect()
    ///     .await?;
    ///
    /// // TLS to the sentinels and the master, an ACL user on each.
    /// let secured = ferrisson_redis::Client::builder(
    ///     "rediss+sentinel://locker:secret@10.0.0.1:26380,10.0.0.2:26380,10.0.0.3:26380/shop",
    /// )
    /// .tls(tls)
    /// .sentinel_credentials(Some("watcher"), "sentinel-secret")
    /// .connect()
    /// .await?;
    /// # let _ = (client, secured); Ok(()) }
    /// ```
    pub fn sentinel_credentials(
        mut self,
        username: Option<&str>,
        password: impl Into<String>,
    ) -> Self {
        self.sentinel_credentials = SentinelCredentials {
            username: username.map(str::to_owned),
            password: Some(password.into()),
        };
        self
    }

    /// Requires `replicas` replicas to acknowledge every grant and every renewal of a
    /// lock within `timeout` (`WAIT`) before it counts (default: none).
    ///
    /// A grant that fewer replicas acknowledged is undone and reported as
    /// [`RedisStoreError::NotReplicated`](crate::RedisStoreError::NotReplicated); a renewal that fewer acknowledged counts as failed, so a
    /// holder's lease is extended only by renewals its replicas have. Then a failover to
    /// one of those replicas keeps every lock its holders believe they hold (see
    /// `docs/SAFETY.md` for what it does not cover: a replica that acknowledged and then
    /// lost its data, a failover to a replica that was not among those counted). Costs
    /// the replicas' round trip on every grant and renewal; waits, releases and reads are
    /// unchanged.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    ///
    /// let client = ferrisson_redis::Client::builder("redis+sentinel://10.0.0.1,10.0.0.2,10.0.0.3/shop")
    ///     .replica_acks(2, Duration::from_millis(200))
    ///     .connect()
    ///     .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.acks.replicas = Some(ReplicaAcks { replicas, timeout });
        self
    }

    /// Requires every grant and every renewal of a lock to be on disk in the append-only
    /// files `acks` names (the master's own, `n` replicas', or both) within `timeout`
    /// (`WAITAOF`) before it counts (default: none). Needs `WAITAOF`: Redis 7.2 or newer
    /// (or Valkey), with `appendonly yes` on every server whose file is required.
    ///
    /// A grant that fewer files had on disk in time is undone and reported as
    /// [`RedisStoreError::NotPersisted`](crate::RedisStoreError::NotPersisted); a renewal that fewer had counts as failed, so a holder's
    /// lease is extended only by renewals on disk where required. Then a restart of the
    /// master, or of a replica that acknowledged, keeps every lock its holders believe
    /// they hold, as far as the server's `appendfsync` policy keeps its file (see
    /// `docs/SAFETY.md` for what it does not cover: a failover to a replica that was not
    /// among those counted, clocks). Costs the disks' round trip on every grant and
    /// renewal; waits, releases and reads are unchanged.
    ///
    /// Replicas count once their file has the write on disk, so a replica count here
    /// also gives what [`ClientBuilder::replica_acks`] gives for as many replicas; with
    /// both set, the `WAIT` is sent only when it asks for more replicas than this, and
    /// the two timeouts together must fit in a third of the watchdog lease. With
    /// `appendfsync everysec` (the default) a replica syncs its file about once a
    /// second, so a timeout under a second fails most grants that count replicas; the
    /// master syncs its own at once for a waiting `WAITAOF`.
    ///
    /// The server is checked at connect: one without `WAITAOF`, or with the master's own
    /// file required and `appendonly no` or `appendfsync no` (it never syncs by itself,
    /// so it never acknowledges), is refused with [`RedisStoreError::AofAcksUnavailable`](crate::RedisStoreError::AofAcksUnavailable).
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson_redis::AofAcks;
    ///
    /// // The master's own file and one replica's, within 1.5 s.
    /// let client = ferrisson_redis::Client::builder("redis+sentinel://10.0.0.1,10.0.0.2,10.0.0.3/shop")
    ///     .aof_acks(AofAcks::local().and_replicas(1), Duration::from_millis(1500))
    ///     .connect()
    ///     .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn aof_acks(mut self, acks: AofAcks, timeout: Duration) -> Self {
        self.acks.aof = Some(AofWait { acks, timeout });
        self
    }

    /// Whether acquires and releases that many tasks of this client make at once go to
    /// Redis together (default: off, see "Measured" below).
    ///
    /// On, a call of a lock's or a semaphore's acquire or release script that finds a
    /// call of the same script in flight waits until the client's tasks that are ready to
    /// run have run, and goes with every other call they made meanwhile as one script
    /// call (at most 128; on a cluster, per hash slot), without waiting for the call ahead
    /// to answer; with 8 calls of that script in flight, it waits for one of them. Redis then pays the fixed cost of a script call (parsing, the
    /// script lookup, the Lua call's set-up, the reply) once per batch instead of once
    /// per call (measured alone, about a quarter of an acquire's Redis CPU). A call
    /// that finds none in flight goes out at once, exactly as with coalescing off: a
    /// lone caller never waits for company.
    ///
    /// Nothing of a call's guarantees changes: its owner, lease, fencing token, reply,
    /// errors, undo on cancellation, metrics and span stay its own; a call whose caller
    /// stops waiting before its batch is sent is never sent. What it costs: a call that
    /// queues waits for the client's ready tasks to run (one round trip at most when 8
    /// calls are in flight) before its batch goes, and a batch runs as one script, during which Redis serves nothing
    /// else (about a millisecond for 128 acquires). After a dropped connection cut a
    /// batch off, its calls that are safe to resend are resent alone and the others
    /// report the error, each as it would alone. The acquires of one batch read the
    /// server's clock once, so locks of different hash slots granted together may get
    /// the same fencing token value; each lock's tokens still strictly increase, which
    /// is all a token promises.
    ///
    /// Measured (BENCHMARKS.md, 64 tasks on one server, client and Redis on one
    /// 2-core machine): `Lock` and `SimpleLock` run 20 to 40 % more lock+unlock pairs
    /// per second on distinct names, with about half the client's CPU and a fifth less
    /// of Redis's per pair; `Semaphore` and `ExpirableSemaphore` with permits to spare
    /// 10 to 25 % more. Where many tasks wait on few permits it cost 10 to 25 % when a
    /// batch still waited for the reply of the call ahead (a refused acquire's retry
    /// waited behind it). Behind a slow link (a delaying proxy, about 3.5 ms a round trip),
    /// 64 tasks on distinct names run 0.92 to 0.98 of the pairs per second of raw
    /// `SET NX PX` and compare-and-delete calls (0.60 to 0.64 when a batch waited for
    /// the reply ahead). Hence off
    /// by default: turn it on for a client whose many tasks take locks at once.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson_redis::Result<()> {
    /// let client = ferrisson_redis::Client::builder("redis://127.0.0.1:6379")
    ///     .coalesce_calls(true)
    ///     .connect()
    ///     .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn coalesce_calls(mut self, on: bool) -> Self {
        self.coalesce_calls = on;
        self
    }

    /// Connects, loads every script and starts the client's background tasks.
    ///
    /// Makes one connection attempt, bounded by the connect timeout: a refused port, an
    /// unresolvable host, a TLS or login failure is reported at once with its reason.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL (the message names what is wrong),
    /// unusable TLS settings, a bad namespace, a zero timeout or lease,
    /// [`Error::Connect`] when the server cannot be reached, does not answer within the
    /// connect timeout, or refuses the TLS handshake or the credentials,
    /// [`RedisStoreError::UnsupportedServer`] when it is older than Redis 7.0,
    /// [`RedisStoreError::AofAcksUnavailable`] when [`ClientBuilder::aof_acks`] asks for what it
    /// cannot give.
    pub async fn connect(self) -> Result<Client> {
        let redacted_url = redact_url(&self.url);
        self.validate()?;
        let connect_error = |cause| Error::Connect {
            target: redacted_url.clone(),
            cause: Box::new(RedisStoreError::Connect(cause)),
        };
        let wake_id = format!("{:016x}", rand::random::<u64>());
        let (subscriptions, push_handler) = Subscriptions::new(&wake_id);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(self.reconnect_retries)
            .set_automatic_resubscription();
        let endpoint = Endpoint::parse(&self.url)?;
        // A timeout says how long, and for TLS the likeliest cause.
        let no_answer = NoAnswer {
            timeout: self.connect_timeout,
            tls: endpoint.is_tls(),
        };
        let connect_error = |cause: redis::RedisError| connect_error(no_answer.explain(cause));
        let connection = match endpoint {
            Endpoint::Single(info) => {
                let redis_client = self.single_client(info)?;
                self.first_attempt(&redis_client, no_answer).await?;
                let mut conn = ConnectionManager::new_with_config(
                    redis_client,
                    config.set_push_sender(push_handler),
                )
                .await
                .map_err(connect_error)?;
                check_server(&mut conn, self.acks.aof, &connect_error).await?;
                Connection::single(conn)
            }
            Endpoint::Sentinel {
                sentinels,
                master,
                data,
            } => {
                let settings = SentinelSettings {
                    sentinels: &sentinels,
                    master: &master,
                    data: &data,
                    tls: self.tls.as_ref(),
                    credentials: &self.sentinel_credentials,
                    connect_timeout: self.connect_timeout,
                };
                let master = SentinelMaster::connect(&settings, config, push_handler)
                    .await
                    .map_err(|e| connect_failure(e, &connect_error))?;
                check_server(&mut master.manager(), self.acks.aof, &connect_error).await?;
                Connection::sentinel(master)
            }
            Endpoint::Cluster { seeds } => {
                let nodes = ClusterNodes::connect(
                    &seeds,
                    self.tls.as_ref(),
                    self.connect_timeout,
                    self.response_timeout,
                    config,
                    push_handler,
                )
                .await
                .map_err(|e| connect_failure(e, &connect_error))?;
                check_server(&mut nodes.commands(), self.acks.aof, &connect_error).await?;
                Connection::cluster(nodes)
            }
        };

        let connection = connection
            .with_acknowledgements(self.acks)
            .with_coalescing(self.coalesce_calls);
        // Here rather than once per process: a recorder installed after the first client
        // connected still learns what each metric means.
        crate::observe::metrics::describe();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        subscriptions.start(connection.clone());
        let watchdog = Watchdog::start(connection.clone(), self.watchdog_lease, shutdown_rx);
        Ok(Client {
            inner: Arc::new(Inner {
                connection,
                namespace: self.namespace,
                redacted_url,
                watchdog_lease: self.watchdog_lease,
                subscriptions,
                watchdog,
                holds: Holds::default(),
                wake_id,
                classes: Classes::new(STORE, self.metrics_class),
                _shutdown: shutdown_tx,
            }),
        })
    }
}

impl ClientBuilder {
    /// Refuses settings no connect could use: a bad lease, namespace, timeout or replica
    /// acknowledgement.
    fn validate(&self) -> Result<()> {
        validate_lease(self.watchdog_lease)?;
        validate_namespace(&self.namespace)?;
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::invalid("timeouts must be greater than zero"));
        }
        self.acks.validate(self.watchdog_lease)
    }

    /// The redis-rs client for one server and the TLS settings, RESP3.
    fn single_client(&self, info: ConnectionInfo) -> Result<redis::Client> {
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            install_crypto_provider();
        }
        match &self.tls {
            Some(tls) => tls.apply(info),
            None => redis::Client::open(info).map_err(|e| {
                Error::invalid(format!(
                    "redis url {}: {}",
                    redact_url(&self.url),
                    redis_reason(&e)
                ))
            }),
        }
    }

    /// One connection attempt bounded by the connect timeout, so that a refused port or a
    /// wrong certificate fails at once: the connection manager would retry with backoff.
    async fn first_attempt(&self, redis_client: &redis::Client, no_answer: NoAnswer) -> Result<()> {
        let first_attempt = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        match redis_client
            .get_multiplexed_async_connection_with_config(&first_attempt)
            .await
        {
            Ok(connection) => {
                drop(connection);
                Ok(())
            }
            Err(e) => Err(Error::Connect {
                target: redact_url(&self.url),
                cause: Box::new(RedisStoreError::Connect(no_answer.explain(e))),
            }),
        }
    }
}

/// What a failed connect reports beyond redis-rs's words: how long a timeout waited and,
/// for TLS, the likeliest cause (a port that does not speak TLS never answers the
/// handshake); for a plain connection that was reset, that a TLS port does that.
#[derive(Clone, Copy)]
struct NoAnswer {
    /// The connect timeout, which ran out.
    timeout: Duration,
    tls: bool,
}

impl NoAnswer {
    /// `cause`, or for a timeout an error that says the above.
    fn explain(self, cause: redis::RedisError) -> redis::RedisError {
        // redis-rs's cluster client reports its seeds' timeouts as text only.
        let timed_out = cause.is_timeout()
            || cause.kind() == redis::ErrorKind::Io
                && cause.detail().is_some_and(|detail| detail == "timed out");
        if !timed_out {
            // A TLS port resets a connection that does not start with a TLS handshake.
            // (The cluster client reports it as text only.)
            let reason = redis_reason(&cause);
            if !self.tls && reason.to_lowercase().contains("connection reset by peer") {
                return redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    format!(
                        "{reason}; a server that speaks TLS on this port resets plain \
                         connections (rediss://, rediss+sentinel:// and rediss+cluster:// ask for TLS)"
                    ),
                ));
            }
            return cause;
        }
        let hint = if self.tls {
            "; a TLS handshake gets no answer from a port that does not speak TLS"
        } else {
            ""
        };
        let waited = format!("within the connect timeout ({:?})", self.timeout);
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer {waited}{hint}"),
        ))
    }
}

/// A failure to reach a Sentinel group or a cluster is a connect error.
fn connect_failure(e: Error, connect_error: &impl Fn(redis::RedisError) -> Error) -> Error {
    match e.store_error::<RedisStoreError>() {
        Some(RedisStoreError::Command(cause)) => connect_error(cause.clone()),
        _ => e,
    }
}

/// The start-up checks on the connection: server version, what the append-only file
/// acknowledgements need, scripts loaded, eviction policy.
async fn check_server<C: ConnectionLike + Send>(
    conn: &mut C,
    aof: Option<AofWait>,
    connect_error: &impl Fn(redis::RedisError) -> Error,
) -> Result<()> {
    // Before the scripts: an old server would fail them with a Lua compile error.
    let version = check_server_version(conn).await?;
    if let Some(aof) = aof {
        check_aof_acks(conn, aof.acks, version.as_deref()).await?;
    }
    scripts::preload(conn)
        .await
        .map_err(|e| connect_failure(e, connect_error))?;
    warn_if_keys_may_be_evicted(conn).await;
    Ok(())
}

/// The oldest major version that can load the scripts, which start with a Redis 7
/// shebang (`#!lua flags=allow-oom`, ...).
const MIN_SERVER_MAJOR: u32 = 7;

/// Refuses a server older than Redis 7.0 with [`RedisStoreError::UnsupportedServer`](crate::RedisStoreError::UnsupportedServer); returns the
/// version it reported.
///
/// Reads the version from `HELLO`, not `INFO`: an ACL may forbid `INFO`, but not `HELLO`,
/// which the RESP3 connection itself needed to start. A reply without a readable version
/// does not block the connect (the script load then shows what the server lacks).
async fn check_server_version<C: ConnectionLike + Send>(conn: &mut C) -> Result<Option<String>> {
    // `HELLO 3` on a RESP3 connection switches nothing; `HELLO` without arguments would
    // be simpler but needs 6.2, and a 6.0 server must get the version error too.
    let reply: redis::RedisResult<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("HELLO").arg(3).query_async(conn).await;
    let version = match reply {
        Ok(mut fields) => match fields.remove("version") {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Some(redis::Value::SimpleString(text) | redis::Value::VerbatimString { text, .. }) => {
                text
            }
            other => {
                tracing::debug!(reply = ?other, "HELLO gave no readable server version");
                return Ok(None);
            }
        },
        Err(e) => {
            tracing::debug!(error = %e, "HELLO failed; server version not checked");
            return Ok(None);
        }
    };
    if version_too_old(&version) {
        return Err(RedisStoreError::UnsupportedServer { version }.into());
    }
    Ok(Some(version))
}

/// Refuses, with [`RedisStoreError::AofAcksUnavailable`], a server that cannot give the append-only
/// file acknowledgements `acks` asks for: one without `WAITAOF` (`COMMAND INFO` knows no
/// such command: Redis before 7.2), or, with the master's own file required, one that
/// writes none (`appendonly no`) or never syncs it (`appendfsync no`: its `WAITAOF 1`
/// always times out). Never a silent downgrade: a server that does not let
/// the client ask (an ACL that forbids `COMMAND` or `CONFIG`) is let through, and its
/// first `WAITAOF` says what it lacks.
async fn check_aof_acks<C: ConnectionLike + Send>(
    conn: &mut C,
    acks: AofAcks,
    version: Option<&str>,
) -> Result<()> {
    let reply: redis::RedisResult<Vec<redis::Value>> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query_async(conn)
        .await;
    match reply {
        // One entry per command asked about: nil for a command the server does not know.
        Ok(entries)
            if entries
                .first()
                .is_none_or(|e| matches!(e, redis::Value::Nil)) =>
        {
            return Err(RedisStoreError::AofAcksUnavailable {
                reason: format!(
                    "they need WAITAOF (Redis 7.2 or newer), which the server{} does not have",
                    version.map_or_else(String::new, |v| format!(" (version {v})"))
                ),
            }
            .into());
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "COMMAND INFO failed; WAITAOF not checked"),
    }
    if acks.local_required() {
        let reply: redis::RedisResult<std::collections::HashMap<String, String>> =
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendonly")
                .arg("appendfsync")
                .query_async(conn)
                .await;
        match reply {
            Ok(config) if config.get("appendonly").is_some_and(|v| v == "no") => {
                return Err(RedisStoreError::AofAcksUnavailable {
                    reason: "they require the master's own append-only file and the server \
                             has appendonly off (set appendonly yes, or require replicas' \
                             files only)"
                        .to_owned(),
                }
                .into());
            }
            // The server never syncs its file itself: its own WAITAOF never succeeds.
            Ok(config) if config.get("appendfsync").is_some_and(|v| v == "no") => {
                return Err(RedisStoreError::AofAcksUnavailable {
                    reason: "they require the master's own append-only file and the server \
                             never syncs it (appendfsync no; set everysec or always)"
                        .to_owned(),
                }
                .into());
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "CONFIG GET appendonly failed; not checked"),
        }
    }
    Ok(())
}

/// True when `version` (`"6.2.14"`) names a major version below [`MIN_SERVER_MAJOR`];
/// false for anything unreadable, which is left to the script load to judge.
fn version_too_old(version: &str) -> bool {
    version
        .split('.')
        .next()
        .and_then(|major| major.trim().parse::<u32>().ok())
        .is_some_and(|major| major < MIN_SERVER_MAJOR)
}

/// Locks are keys with a TTL: a server that evicts such keys under memory pressure can
/// drop a held lock. Only `noeviction` keeps them.
async fn warn_if_keys_may_be_evicted<C: ConnectionLike + Send>(conn: &mut C) {
    // RESP3 answers CONFIG GET with a map; an ACL may forbid CONFIG (then stay silent).
    let reply: redis::RedisResult<std::collections::HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Ok(config) = reply
        && let Some(policy) = config.get("maxmemory-policy")
        && policy != "noeviction"
    {
        tracing::warn!(
            policy = %policy,
            "redis maxmemory-policy can evict lock keys under memory pressure; set it to noeviction"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::version_too_old;

    #[test]
    fn servers_before_redis_7_are_too_old() {
        assert!(version_too_old("6.2.14"));
        assert!(version_too_old("6.0.9"));
        assert!(version_too_old("5.0.7"));
        assert!(!version_too_old("7.0.15"));
        assert!(!version_too_old("7.2.4"));
        assert!(!version_too_old("8.0.0"));
        // Unstable builds report 255.255.255.
        assert!(!version_too_old("255.255.255"));
        // Unreadable: not refused here.
        assert!(!version_too_old(""));
        assert!(!version_too_old("unknown"));
    }
}
