//! Connecting with the options every store understands, and each store's own.

use std::fmt;
use std::time::Duration;

use ferrisson_core::Result;

use crate::client::{Client, memory_store};
use crate::stores::StoreKind;

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl ClientBuilder {
    /// A database's client: the lock table named by the URL's `table=` parameter
    /// (`ferrisson_lock` by default).
    async fn connect_sql(self) -> Result<Client> {
        if self.namespace.as_deref().is_some_and(|n| !n.is_empty()) {
            return Err(ferrisson_core::Error::invalid(
                "a database keeps applications apart by table: give each its own with ?table=NAME in the url, not a namespace",
            ));
        }
        let mut builder = ferrisson_sql::Client::builder(&self.url);
        if let Some(lease) = self.watchdog_lease {
            builder = builder.watchdog_lease(lease);
        }
        Ok(Client::Sql(builder.connect().await?))
    }
}

/// The options of [`Client::builder`]: those every store understands, and a hook for a
/// store's own (TLS settings, acknowledgements, ...).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::builder("memory://builder")
///     .watchdog_lease(Duration::from_secs(10))
///     .namespace("shop")
///     .connect()
///     .await?;
/// assert_eq!(client.store(), ferrisson::StoreKind::Memory);
/// # Ok::<(), ferrisson::Error>(()) }).unwrap();
/// ```
#[must_use = "a builder does nothing until connect"]
pub struct ClientBuilder {
    url: String,
    watchdog_lease: Option<Duration>,
    namespace: Option<String>,
    #[cfg(feature = "redis")]
    redis: Option<RedisOptions>,
}

#[cfg(feature = "redis")]
type RedisOptions =
    Box<dyn FnOnce(ferrisson_redis::ClientBuilder) -> ferrisson_redis::ClientBuilder + Send>;

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may hold a password: only its scheme is shown.
        let scheme = self.url.split_once("://").map_or("?", |(scheme, _)| scheme);
        f.debug_struct("ClientBuilder")
            .field("scheme", &scheme)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Options for connecting to the store `url` names; see [`ClientBuilder`].
    ///
    /// ```
    /// let builder = ferrisson::Client::builder("redis://127.0.0.1:6379");
    /// # let _ = builder;
    /// ```
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            watchdog_lease: None,
            namespace: None,
            #[cfg(feature = "redis")]
            redis: None,
        }
    }
}

impl ClientBuilder {
    /// How long a hold with [`Lease::Watchdog`](ferrisson_core::Lease::Watchdog) lasts
    /// between renewals (renewed every third of it), and so how long a crashed holder's
    /// lock outlives it. Each store's default applies otherwise (Redis: 30 s); the
    /// in-process store has no renewals.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = Some(lease);
        self
    }

    /// A prefix that keeps this client's primitives apart from other applications' on
    /// the same store (Redis: a key prefix).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Redis's own options (TLS settings, replica or append-only file
    /// acknowledgements, timeouts), applied when the URL is a Redis one.
    ///
    /// ```
    /// let builder = ferrisson::Client::builder("rediss://cache.internal:6380")
    ///     .redis(|redis| redis.tls(ferrisson::redis::TlsConfig::new()));
    /// # let _ = builder;
    /// ```
    #[cfg(feature = "redis")]
    pub fn redis(
        mut self,
        options: impl FnOnce(ferrisson_redis::ClientBuilder) -> ferrisson_redis::ClientBuilder
        + Send
        + 'static,
    ) -> Self {
        self.redis = Some(Box::new(options));
        self
    }

    /// Connects to the store the URL names (see [`connect`](crate::connect)).
    ///
    /// # Errors
    ///
    /// As [`connect`](crate::connect), and [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for an option the store refuses (a zero watchdog lease).
    // Async in every build: a build with only the in-process store awaits nothing.
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "postgres",
            feature = "mysql",
            feature = "etcd",
            feature = "zookeeper"
        )),
        allow(clippy::unused_async)
    )]
    pub async fn connect(self) -> Result<Client> {
        let kind = StoreKind::of_url(&self.url)?;
        match kind {
            StoreKind::Memory => Ok(Client::Memory(memory_store(&self.url)?)),
            #[cfg(feature = "redis")]
            StoreKind::Redis => {
                let mut builder = ferrisson_redis::Client::builder(&self.url);
                if let Some(lease) = self.watchdog_lease {
                    builder = builder.watchdog_lease(lease);
                }
                if let Some(namespace) = self.namespace {
                    builder = builder.namespace(namespace);
                }
                if let Some(options) = self.redis {
                    builder = options(builder);
                }
                Ok(Client::Redis(builder.connect().await?))
            }
            #[cfg(feature = "postgres")]
            StoreKind::Postgres => self.connect_sql().await,
            #[cfg(feature = "mysql")]
            StoreKind::MySql => self.connect_sql().await,
            #[cfg(feature = "etcd")]
            StoreKind::Etcd => {
                let mut builder = ferrisson_etcd::Client::builder(&self.url);
                if let Some(lease) = self.watchdog_lease {
                    builder = builder.watchdog_lease(lease);
                }
                if let Some(namespace) = self.namespace {
                    builder = builder.namespace(namespace);
                }
                Ok(Client::Etcd(builder.connect().await?))
            }
            #[cfg(feature = "zookeeper")]
            StoreKind::ZooKeeper => {
                // A hold lives as long as the session: the watchdog lease is the session
                // timeout asked for. Namespaces are chroots, in the URL.
                let mut builder = ferrisson_zookeeper::Client::builder(&self.url);
                if let Some(lease) = self.watchdog_lease {
                    builder = builder.session_timeout(lease);
                }
                if self.namespace.as_deref().is_some_and(|n| !n.is_empty()) {
                    return Err(ferrisson_core::Error::invalid(
                        "a ZooKeeper namespace is the url's chroot: zk://HOST:PORT/NAMESPACE",
                    ));
                }
                Ok(Client::ZooKeeper(builder.connect().await?))
            }
            // Reached only in a build without some store's feature.
            #[allow(unreachable_patterns)]
            other => Err(other.not_compiled(&self.url)),
        }
    }
}
