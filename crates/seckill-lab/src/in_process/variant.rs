//! The variants the lab runs in its own process: the database's ways of taking one unit
//! of stock, the timestamp lock of the old Redis docs, and the ZooKeeper and etcd locks.

use std::fmt;

use crate::expect::Verdict;

/// Where a variant the lab runs itself keeps its lock and its stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Store {
    /// The machine's PostgreSQL.
    Postgres,
    /// The machine's MariaDB (or MySQL).
    MariaDb,
    /// A Redis server the lab starts for these variants.
    Redis,
    /// A ZooKeeper server the lab starts (the stock in the lab's Redis server).
    ZooKeeper,
    /// An etcd member the lab starts (the stock in the lab's Redis server).
    Etcd,
}

impl Store {
    /// Its id, as the store table and the row names spell it.
    pub fn id(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MariaDb => "mariadb",
            Self::Redis => "redis",
            Self::ZooKeeper => "zookeeper",
            Self::Etcd => "etcd",
        }
    }
}

/// A variant the lab runs in its own process, with `--instances` instances of its own,
/// each with its own connections (and, for `getset-timestamp-skewed`, its own clock).
///
/// ```
/// use seckill_lab::{DirectVariant, Verdict};
///
/// let v = DirectVariant::parse("db-version-cas").expect("a variant");
/// assert_eq!(v.expected(2, true), Verdict::Undersold);
/// assert_eq!(DirectVariant::DbLockTableNaive.expected(2, true), Verdict::Deadlocked);
/// assert_eq!(DirectVariant::DbLockTableNaive.expected(2, false), Verdict::Correct);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirectVariant {
    /// The classic lock table: a unique insert wins, a delete releases, no expiry.
    DbLockTableNaive,
    /// ferrisson-sql's `TableLock`.
    DbLockTable,
    /// `SELECT ... FOR UPDATE` on the stock row, in a transaction.
    DbForUpdate,
    /// PostgreSQL's advisory lock (ferrisson-sql's `SessionLock`).
    PgAdvisory,
    /// MySQL/MariaDB's `GET_LOCK` (ferrisson-sql's `SessionLock`).
    MysqlGetLock,
    /// `UPDATE ... WHERE stock = <the value read>`, once, no retry.
    DbVersionCas,
    /// `SETNX lock <expiry>`, else `GET`, compare with the own clock, `GETSET`.
    GetsetTimestamp,
    /// The same, with one instance's clock ahead of the others.
    GetsetTimestampSkewed,
    /// ferrisson's lock on ZooKeeper.
    Zookeeper,
    /// ferrisson's lock on etcd.
    Etcd,
}

impl DirectVariant {
    /// Every one, in the lab's order.
    pub const ALL: [Self; 10] = [
        Self::DbLockTableNaive,
        Self::DbLockTable,
        Self::DbForUpdate,
        Self::PgAdvisory,
        Self::MysqlGetLock,
        Self::DbVersionCas,
        Self::GetsetTimestamp,
        Self::GetsetTimestampSkewed,
        Self::Zookeeper,
        Self::Etcd,
    ];

    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::DbLockTableNaive => "db-lock-table-naive",
            Self::DbLockTable => "db-lock-table",
            Self::DbForUpdate => "db-for-update",
            Self::PgAdvisory => "pg-advisory",
            Self::MysqlGetLock => "mysql-get-lock",
            Self::DbVersionCas => "db-version-cas",
            Self::GetsetTimestamp => "getset-timestamp",
            Self::GetsetTimestampSkewed => "getset-timestamp-skewed",
            Self::Zookeeper => "zookeeper",
            Self::Etcd => "etcd",
        }
    }

    /// The variant called `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// The stores it runs on, once on each: the generic database variants on both
    /// databases.
    pub fn stores(self) -> &'static [Store] {
        match self {
            Self::DbLockTableNaive | Self::DbLockTable | Self::DbForUpdate | Self::DbVersionCas => {
                &[Store::Postgres, Store::MariaDb]
            }
            Self::PgAdvisory => &[Store::Postgres],
            Self::MysqlGetLock => &[Store::MariaDb],
            Self::GetsetTimestamp | Self::GetsetTimestampSkewed => &[Store::Redis],
            Self::Zookeeper => &[Store::ZooKeeper],
            Self::Etcd => &[Store::Etcd],
        }
    }

    /// The name of its row on `store`: the generic database variants say which database.
    pub fn row_name(self, store: Store) -> String {
        if self.stores().len() > 1 {
            format!("{}/{}", self.name(), store.id())
        } else {
            self.name().to_owned()
        }
    }

    /// Whether the lab makes one lock holder crash (the `--lab-fault-at`-th).
    pub fn has_fault(self) -> bool {
        matches!(self, Self::DbLockTableNaive | Self::GetsetTimestamp)
    }

    /// What it shows under the lab's load, with or without the injected crash: the
    /// naive lock table deadlocks on the crashed holder's row; the version check sells
    /// less than the stock (most buyers lose the compare while stock is left, and do
    /// not retry); one instance (of two or more) with a clock ahead breaks the timestamp lock (two
    /// holders at once: lost updates); the others sell exactly the stock.
    pub fn expected(self, instances: usize, faults: bool) -> Verdict {
        match self {
            Self::GetsetTimestampSkewed if instances < 2 => Verdict::Correct,
            Self::DbLockTableNaive if faults => Verdict::Deadlocked,
            Self::DbVersionCas => Verdict::Undersold,
            Self::GetsetTimestampSkewed => Verdict::Oversold,
            _ => Verdict::Correct,
        }
    }
}

impl fmt::Display for DirectVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
