//! The stores this build knows, and which one a URL names.

use ferrisson_core::{Error, Result};

/// A store ferrisson can talk to, as URLs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreKind {
    /// Redis (or Valkey): one server, a Sentinel group or a Cluster (`redis://`,
    /// `rediss://`, `redis+sentinel://`, `redis+cluster://`, their TLS forms, `unix://`
    /// and `valkey://`).
    Redis,
    /// The in-process reference store (`memory://NAME`).
    Memory,
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL or MariaDB (`mysql://`, `mariadb://`).
    MySql,
    /// ZooKeeper (`zk://`, `zookeeper://`).
    ZooKeeper,
    /// etcd (`etcd://`).
    Etcd,
}

impl StoreKind {
    /// Every store, in the order of the capability table.
    pub const ALL: [StoreKind; 6] = [
        StoreKind::Redis,
        StoreKind::Postgres,
        StoreKind::MySql,
        StoreKind::ZooKeeper,
        StoreKind::Etcd,
        StoreKind::Memory,
    ];

    /// The store a URL names, by its scheme.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a string without `scheme://` or with a scheme no
    /// store uses.
    ///
    /// ```
    /// use ferrisson::StoreKind;
    ///
    /// assert_eq!(StoreKind::of_url("redis+sentinel://s1,s2/shop")?, StoreKind::Redis);
    /// assert_eq!(StoreKind::of_url("zk://127.0.0.1:2181/app")?, StoreKind::ZooKeeper);
    /// assert!(StoreKind::of_url("ftp://x").is_err());
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn of_url(url: &str) -> Result<Self> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Error::invalid(
                "a store url starts with scheme:// (redis://, postgres://, mysql://, zk://, etcd://, memory://)",
            ));
        };
        Ok(match scheme.to_ascii_lowercase().as_str() {
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
            | "rediss+cluster" | "redis+unix" | "unix" | "valkey" | "valkeys" | "valkey+unix" => {
                Self::Redis
            }
            "memory" => Self::Memory,
            "postgres" | "postgresql" => Self::Postgres,
            "mysql" | "mariadb" => Self::MySql,
            "zk" | "zookeeper" => Self::ZooKeeper,
            "etcd" | "etcds" => Self::Etcd,
            other => {
                return Err(Error::invalid(format!(
                    "unknown url scheme {:?}: use redis://, postgres://, mysql://, zk://, etcd:// or memory://",
                    other.escape_debug().to_string()
                )));
            }
        })
    }

    /// The store's name in metrics, the capability table and messages.
    ///
    /// ```
    /// assert_eq!(ferrisson::StoreKind::MySql.name(), "mysql");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Memory => "memory",
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::ZooKeeper => "zookeeper",
            Self::Etcd => "etcd",
        }
    }

    /// The Cargo feature of the `ferrisson` crate that adds the store (the memory store
    /// is always there).
    ///
    /// ```
    /// assert_eq!(ferrisson::StoreKind::ZooKeeper.feature(), Some("zookeeper"));
    /// assert_eq!(ferrisson::StoreKind::Memory.feature(), None);
    /// ```
    pub const fn feature(self) -> Option<&'static str> {
        match self {
            Self::Memory => None,
            Self::Redis => Some("redis"),
            Self::Postgres => Some("postgres"),
            Self::MySql => Some("mysql"),
            Self::ZooKeeper => Some("zookeeper"),
            Self::Etcd => Some("etcd"),
        }
    }

    /// True when this build has the store.
    ///
    /// ```
    /// assert!(ferrisson::StoreKind::Memory.is_compiled());
    /// ```
    pub const fn is_compiled(self) -> bool {
        match self {
            Self::Memory => true,
            Self::Redis => cfg!(feature = "redis"),
            Self::Postgres => cfg!(feature = "postgres"),
            Self::MySql => cfg!(feature = "mysql"),
            Self::ZooKeeper => cfg!(feature = "zookeeper"),
            Self::Etcd => cfg!(feature = "etcd"),
        }
    }

    /// True when this version of ferrisson has the store at all (whether or not this
    /// build compiled it in).
    ///
    /// ```
    /// assert!(ferrisson::StoreKind::Redis.is_available());
    /// ```
    pub const fn is_available(self) -> bool {
        matches!(
            self,
            Self::Redis
                | Self::Memory
                | Self::Postgres
                | Self::MySql
                | Self::ZooKeeper
                | Self::Etcd
        )
    }

    /// The error for a URL of this store in a build without it.
    pub(crate) fn not_compiled(self, url: &str) -> Error {
        if !self.is_available() {
            return Error::Unsupported {
                store: self.name(),
                what: format!(
                    "be used with ferrisson {}: its store is not released yet",
                    env!("CARGO_PKG_VERSION")
                ),
            };
        }
        let scheme = url.split_once("://").map_or(url, |(scheme, _)| scheme);
        Error::StoreNotCompiled {
            scheme: scheme.to_ascii_lowercase(),
            feature: self.feature().unwrap_or("default"),
        }
    }
}
