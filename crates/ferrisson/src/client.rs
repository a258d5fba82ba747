//! A client of whichever store a URL names, and the locks it hands out: enum dispatch,
//! no boxing on the acquire path.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use ferrisson_core::memory::MemoryStore;
use ferrisson_core::{Capabilities, Error, Result};

use crate::election::AnyElection;
use crate::lock::AnyLock;
use crate::rwlock::AnyRwLock;
use crate::semaphore::AnySemaphore;
use crate::stores::StoreKind;

/// A client of one store, picked by the URL given to [`connect`]; each variant is that
/// store's own client, for its own options and primitives.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson::{DistributedLock, Guard};
///
/// let client = ferrisson::connect("memory://docs").await?;
/// assert_eq!(client.store(), ferrisson::StoreKind::Memory);
/// let guard = client.lock("orders:42")?.lock().await?;
/// println!("token {:?}", guard.fencing_token());
/// guard.unlock().await?;
/// # Ok::<(), ferrisson::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Client {
    /// A Redis client (one server, Sentinel or Cluster).
    #[cfg(feature = "redis")]
    Redis(ferrisson_redis::Client),
    /// A PostgreSQL or MySQL/MariaDB client (its lock table).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Sql(ferrisson_sql::Client),
    /// An etcd client.
    #[cfg(feature = "etcd")]
    Etcd(ferrisson_etcd::Client),
    /// A ZooKeeper client (one session with a standalone server or an ensemble).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(ferrisson_zookeeper::Client),
    /// The in-process store.
    Memory(MemoryStore),
}

/// Connects to the store `url` names: `redis://`, `rediss://`, `redis+sentinel://`,
/// `redis+cluster://` (and their TLS forms), `postgres://` or `postgresql://`,
/// `mysql://` or `mariadb://` (the database's lock table, created if missing only by
/// [`ferrisson_sql::Client::create_schema`]), `zk://HOST:PORT[,HOST:PORT...][/CHROOT]`
/// (ZooKeeper), or `memory://NAME` (an in-process store, shared by every connect to the
/// same name in this process).
///
/// A store's own options (TLS settings, replica acknowledgements, ...) are on its own
/// builder: `ferrisson::redis::Client::builder(url)`; wrap its client with
/// `Client::from`.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a URL no store takes, [`Error::StoreNotCompiled`] for a
/// store this build was compiled without (the message names the Cargo feature),
/// [`Error::Connect`] when the store cannot be reached.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let error = ferrisson::connect("ftp://x").await.unwrap_err();
/// assert!(matches!(error, ferrisson::Error::InvalidArgument(_)));
/// # });
/// ```
pub async fn connect(url: &str) -> Result<Client> {
    Client::builder(url).connect().await
}

/// The process-wide memory stores, by the name in their `memory://NAME` URL.
static MEMORY_STORES: LazyLock<Mutex<HashMap<String, MemoryStore>>> = LazyLock::new(Mutex::default);

pub(crate) fn memory_store(url: &str) -> Result<MemoryStore> {
    let name = url
        .split_once("://")
        .map_or("", |(_, rest)| rest)
        .trim_end_matches('/');
    if name.contains(['/', '?', '#']) {
        return Err(Error::invalid(
            "a memory url is memory://NAME, with no path or query",
        ));
    }
    let mut stores = MEMORY_STORES.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(stores.entry(name.to_owned()).or_default().clone())
}

#[cfg(feature = "redis")]
impl From<ferrisson_redis::Client> for Client {
    fn from(client: ferrisson_redis::Client) -> Self {
        Self::Redis(client)
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl From<ferrisson_sql::Client> for Client {
    fn from(client: ferrisson_sql::Client) -> Self {
        Self::Sql(client)
    }
}

#[cfg(feature = "etcd")]
impl From<ferrisson_etcd::Client> for Client {
    fn from(client: ferrisson_etcd::Client) -> Self {
        Self::Etcd(client)
    }
}

#[cfg(feature = "zookeeper")]
impl From<ferrisson_zookeeper::Client> for Client {
    fn from(client: ferrisson_zookeeper::Client) -> Self {
        Self::ZooKeeper(client)
    }
}

impl From<MemoryStore> for Client {
    fn from(store: MemoryStore) -> Self {
        Self::Memory(store)
    }
}

impl Client {
    /// Which store this client talks to.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert_eq!(client.store(), ferrisson::StoreKind::Memory);
    /// ```
    pub fn store(&self) -> StoreKind {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(_) => StoreKind::Redis,
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => match client.dialect() {
                ferrisson_sql::Dialect::Postgres => StoreKind::Postgres,
                ferrisson_sql::Dialect::MySql => StoreKind::MySql,
            },
            #[cfg(feature = "etcd")]
            Self::Etcd(_) => StoreKind::Etcd,
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(_) => StoreKind::ZooKeeper,
            Self::Memory(_) => StoreKind::Memory,
        }
    }

    /// What each primitive of this client's store gives.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert!(client.capabilities().iter().all(|c| c.store == "memory"));
    /// ```
    pub fn capabilities(&self) -> &'static [Capabilities] {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(_) => ferrisson_redis::capabilities::CAPABILITIES,
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => ferrisson_sql::capabilities::of(client.dialect()),
            #[cfg(feature = "etcd")]
            Self::Etcd(_) => ferrisson_etcd::CAPABILITIES,
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(_) => ferrisson_zookeeper::CAPABILITIES,
            Self::Memory(_) => ferrisson_core::memory::CAPABILITIES,
        }
    }

    /// The store's reentrant lock called `name` (Redis: [`ferrisson_redis::Lock`];
    /// PostgreSQL, MySQL/MariaDB: the lock table's `TableLock`, or with `?lock=advisory`
    /// in the URL the database's `SessionLock`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name the store refuses.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert!(client.lock("").is_err());
    /// ```
    pub fn lock(&self, name: &str) -> Result<AnyLock> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(client) => AnyLock::Redis(client.lock(name)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => match client.default_lock() {
                ferrisson_sql::LockKind::Session => AnyLock::SqlSession(client.session_lock(name)?),
                ferrisson_sql::LockKind::Table => AnyLock::Sql(client.lock(name)?),
            },
            #[cfg(feature = "etcd")]
            Self::Etcd(client) => AnyLock::Etcd(client.lock(name)?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(client) => AnyLock::ZooKeeper(client.lock(name)?),
            Self::Memory(store) => AnyLock::Memory(store.lock(name)?),
        })
    }

    /// The store's leader election called `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name the store refuses.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert!(client.election("nightly").is_ok());
    /// ```
    pub fn election(&self, name: &str) -> Result<AnyElection> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(client) => AnyElection::Redis(client.election(name)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => AnyElection::Sql(client.election(name)?),
            #[cfg(feature = "etcd")]
            Self::Etcd(client) => AnyElection::Etcd(client.election(name)?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(client) => AnyElection::ZooKeeper(client.election(name)?),
            Self::Memory(store) => AnyElection::Memory(store.election(name)?),
        })
    }

    /// The store's semaphore called `name`, with `permits` permits (see [`AnySemaphore`]
    /// for how each store keeps the count).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name the store refuses or no permits.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert!(client.semaphore("exports", 4).is_ok());
    /// assert!(client.semaphore("exports", 0).is_err());
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<AnySemaphore> {
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(client) => AnySemaphore::Redis(crate::semaphore::RedisSemaphore::new(
                client.expirable_semaphore(name)?,
                permits,
            )),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => AnySemaphore::Sql(client.semaphore(name, permits)?),
            #[cfg(feature = "etcd")]
            Self::Etcd(client) => AnySemaphore::Etcd(client.semaphore(name, permits)?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(client) => AnySemaphore::ZooKeeper(client.semaphore(name, permits)?),
            Self::Memory(store) => AnySemaphore::Memory(store.semaphore(name, permits)?),
        })
    }

    /// The store's read-write lock called `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name the store refuses;
    /// [`Error::Unsupported`] on a database's lock table, which has no read-write form
    /// (PostgreSQL's advisory locks have one: a `?lock=advisory` URL), and on
    /// MySQL/MariaDB, whose `GET_LOCK` has no shared mode.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert!(client.rwlock("prices").is_ok());
    /// ```
    pub fn rwlock(&self, name: &str) -> Result<AnyRwLock> {
        Ok(match self {
            #[cfg(feature = "redis")]
            Self::Redis(client) => AnyRwLock::Redis(client.rwlock(name)?),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => match client.default_lock() {
                ferrisson_sql::LockKind::Session => {
                    AnyRwLock::SqlSession(client.session_rwlock(name)?)
                }
                ferrisson_sql::LockKind::Table => {
                    return Err(Error::Unsupported {
                        store: self.store().name(),
                        what: "take a read-write lock in its lock table (PostgreSQL's \
                               advisory locks have one: add ?lock=advisory to the URL)"
                            .to_owned(),
                    });
                }
            },
            #[cfg(feature = "etcd")]
            Self::Etcd(client) => AnyRwLock::Etcd(client.rwlock(name)?),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(client) => AnyRwLock::ZooKeeper(client.rwlock(name)?),
            Self::Memory(store) => AnyRwLock::Memory(store.rwlock(name)?),
        })
    }

    /// How long a [`Lease::Watchdog`](ferrisson_core::Lease::Watchdog) lasts between renewals on this client.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert_eq!(client.watchdog_lease(), None); // memory holds last until released
    /// ```
    pub fn watchdog_lease(&self) -> Option<Duration> {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(client) => Some(client.watchdog_lease()),
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Sql(client) => Some(client.watchdog_lease()),
            #[cfg(feature = "etcd")]
            Self::Etcd(client) => Some(client.watchdog_lease()),
            // A ZooKeeper hold lasts as long as its session, confirmed every third of
            // its timeout.
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(client) => Some(client.session_timeout()),
            Self::Memory(_) => None,
        }
    }

    /// The Redis client, when this is one.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// # #[cfg(feature = "redis")]
    /// assert!(client.as_redis().is_none());
    /// ```
    #[cfg(feature = "redis")]
    pub fn as_redis(&self) -> Option<&ferrisson_redis::Client> {
        match self {
            Self::Redis(client) => Some(client),
            _ => None,
        }
    }

    /// The PostgreSQL or MySQL/MariaDB client, when this is one (for
    /// [`create_schema`](ferrisson_sql::Client::create_schema) and its other options).
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// assert!(client.as_sql().is_none());
    /// ```
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub fn as_sql(&self) -> Option<&ferrisson_sql::Client> {
        match self {
            Self::Sql(client) => Some(client),
            _ => None,
        }
    }

    /// The etcd client, when this is one.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// # #[cfg(feature = "etcd")]
    /// assert!(client.as_etcd().is_none());
    /// ```
    #[cfg(feature = "etcd")]
    pub fn as_etcd(&self) -> Option<&ferrisson_etcd::Client> {
        match self {
            Self::Etcd(client) => Some(client),
            _ => None,
        }
    }

    /// The ZooKeeper client, when this is one.
    ///
    /// ```
    /// let client = ferrisson::Client::from(ferrisson::memory::MemoryStore::new());
    /// # #[cfg(feature = "zookeeper")]
    /// assert!(client.as_zookeeper().is_none());
    /// ```
    #[cfg(feature = "zookeeper")]
    pub fn as_zookeeper(&self) -> Option<&ferrisson_zookeeper::Client> {
        match self {
            Self::ZooKeeper(client) => Some(client),
            _ => None,
        }
    }
}
