//! What each SQL primitive gives, declared once: the README's capability table is
//! rendered from [`CAPABILITIES`] and each primitive's `capabilities()` returns its row.

use ferrisson_core::capabilities::{CancelSafety, Capabilities, Fencing, Reentry, Validity, Wait};

use crate::dialect::Dialect;

const LEASE: Validity = Validity::Lease(
    "a row whose expiry is kept in the database's time; the client's watchdog renews it every lease/3 (30 s lease by default), or a fixed lease",
);
const LOST: &str = "at once when a renewal finds the row gone, taken or expired; at the lease's end when renewals fail";
const CANCEL: CancelSafety = CancelSafety::SafeAtCost(
    "an attempt in flight runs to its end on its own task, and a grant nobody awaits is deleted by one more statement",
);

/// [`TableLock`](crate::TableLock) on PostgreSQL.
pub const POSTGRES_TABLE_LOCK: Capabilities = Capabilities::new(
    "postgres",
    "TableLock",
    Reentry::PerTask,
    false,
    LEASE,
    Fencing::Token(
        "a sequence (NO CYCLE) drawn while the row is held; goes back only if the sequence is reset or restored from an older backup",
    ),
    LOST,
    Wait::EventDriven(
        "the release's NOTIFY, heard by one listening connection per client; every waiter looks again after that connection reconnects, and every 5 s or at the holder's expiry without one",
    ),
    CANCEL,
);

/// [`TableLock`](crate::TableLock) on MySQL or MariaDB.
pub const MYSQL_TABLE_LOCK: Capabilities = Capabilities::new(
    "mysql",
    "TableLock",
    Reentry::PerTask,
    false,
    LEASE,
    Fencing::Token(
        "a counter row (LAST_INSERT_ID(v + 1)) drawn while the row is held; goes back only if that row is reset or restored from an older backup",
    ),
    LOST,
    Wait::Polled(
        "5 ms doubling to 100 ms, jittered; a release in the same client wakes its waiters at once",
    ),
    CANCEL,
);

const SESSION_CANCEL: CancelSafety = CancelSafety::SafeAtCost(
    "a try in flight runs to its end on its own task, and a lock it got with nobody waiting is released by one more statement",
);
const SESSION_LOST: &str = "at the heartbeat after the session died (5 s by default); the server frees the lock at once on a clean close, and over a half-open connection after about 4 heartbeats (the TCP keepalive or wait_timeout the client sets on its session)";
const SESSION_WAIT: Wait = Wait::Polled(
    "a try, then waits of at most 20 ms in the server's queue, bounded by lock_timeout and re-checked in pg_locks after 55P03, between pauses of 5 ms doubling to 200 ms, jittered; a release in the same client wakes its waiters at once",
);
const MYSQL_SESSION_WAIT: Wait = Wait::Polled(
    "GET_LOCK(name, 0), then GET_LOCK(name, 0.02), which MariaDB waits and MySQL rounds to a try, between pauses of 5 ms doubling to 200 ms, jittered; a release in the same client wakes its waiters at once",
);

/// [`SessionLock`](crate::SessionLock) on PostgreSQL (an advisory lock).
pub const POSTGRES_SESSION_LOCK: Capabilities = Capabilities::new(
    "postgres",
    "SessionLock",
    Reentry::PerTask,
    false,
    Validity::Session(
        "pg_advisory_lock on the client's one session connection, shared by all its session locks, pinged every heartbeat",
    ),
    Fencing::None,
    SESSION_LOST,
    SESSION_WAIT,
    SESSION_CANCEL,
);

/// [`SessionRwLock`](crate::SessionRwLock) on PostgreSQL (`pg_advisory_lock_shared` /
/// `pg_advisory_lock`).
pub const POSTGRES_SESSION_RWLOCK: Capabilities = Capabilities::new(
    "postgres",
    "SessionRwLock",
    Reentry::PerTask,
    false,
    Validity::Session(
        "pg_advisory_lock_shared (read) / pg_advisory_lock (write) on the client's one session connection, pinged every heartbeat",
    ),
    Fencing::Token(
        "write side only: advisory locks have none of their own, so the writer draws txid_current() (the server's 64-bit transaction counter) once granted; goes back only on a restore from an older backup",
    ),
    SESSION_LOST,
    SESSION_WAIT,
    SESSION_CANCEL,
);

/// [`TransactionLock`](crate::TransactionLock) on PostgreSQL
/// (`pg_advisory_xact_lock[_shared]`); MySQL/MariaDB have none.
pub const POSTGRES_TRANSACTION_LOCK: Capabilities = Capabilities::new(
    "postgres",
    "TransactionLock",
    Reentry::None,
    false,
    Validity::Session(
        "pg_advisory_xact_lock in a transaction the guard hands to the caller, freed by its commit or rollback; works behind PgBouncer in transaction mode",
    ),
    Fencing::None,
    "never: the caller's own statements in the transaction see it fail",
    Wait::EventDriven(
        "the server's lock queue, on the transaction's connection, one per waiter, bounded by SET LOCAL lock_timeout",
    ),
    CancelSafety::SafeAtCost(
        "the transaction is rolled back before its connection is used again, after the wait in flight is answered",
    ),
);

/// [`SessionLock`](crate::SessionLock) on MySQL or MariaDB (`GET_LOCK`).
pub const MYSQL_SESSION_LOCK: Capabilities = Capabilities::new(
    "mysql",
    "SessionLock",
    Reentry::PerTask,
    false,
    Validity::Session(
        "GET_LOCK on the client's one session connection, shared by all its session locks, pinged every heartbeat",
    ),
    Fencing::None,
    SESSION_LOST,
    MYSQL_SESSION_WAIT,
    SESSION_CANCEL,
);

/// [`TableElection`](crate::TableElection) on PostgreSQL.
pub const POSTGRES_TABLE_ELECTION: Capabilities = Capabilities::new(
    "postgres",
    "TableElection",
    Reentry::None,
    false,
    LEASE,
    Fencing::Token("one per term, from the lock table's sequence, as TableLock's"),
    LOST,
    POSTGRES_TABLE_LOCK.wait,
    CANCEL,
);

/// [`TableElection`](crate::TableElection) on MySQL or MariaDB.
pub const MYSQL_TABLE_ELECTION: Capabilities = Capabilities::new(
    "mysql",
    "TableElection",
    Reentry::None,
    false,
    LEASE,
    Fencing::Token("one per term, from the lock table's counter row, as TableLock's"),
    LOST,
    MYSQL_TABLE_LOCK.wait,
    CANCEL,
);

/// [`TableSemaphore`](crate::TableSemaphore) on PostgreSQL.
pub const POSTGRES_TABLE_SEMAPHORE: Capabilities = Capabilities::new(
    "postgres",
    "TableSemaphore",
    Reentry::None,
    false,
    Validity::Lease(
        "each permit a row with its expiry in the database's time, renewed like TableLock's",
    ),
    Fencing::Token("per permit, from the lock table's sequence"),
    LOST,
    POSTGRES_TABLE_LOCK.wait,
    CANCEL,
);

/// [`TableSemaphore`](crate::TableSemaphore) on MySQL or MariaDB.
pub const MYSQL_TABLE_SEMAPHORE: Capabilities = Capabilities::new(
    "mysql",
    "TableSemaphore",
    Reentry::None,
    false,
    Validity::Lease(
        "each permit a row with its expiry in the database's time, renewed like TableLock's",
    ),
    Fencing::Token("per permit, from the lock table's counter row"),
    LOST,
    MYSQL_TABLE_LOCK.wait,
    CANCEL,
);

/// Every SQL primitive's declaration, in the order of the capability table.
pub const CAPABILITIES: &[Capabilities] = &[
    POSTGRES_TABLE_LOCK,
    POSTGRES_SESSION_LOCK,
    POSTGRES_SESSION_RWLOCK,
    POSTGRES_TRANSACTION_LOCK,
    POSTGRES_TABLE_ELECTION,
    POSTGRES_TABLE_SEMAPHORE,
    MYSQL_TABLE_LOCK,
    MYSQL_SESSION_LOCK,
    MYSQL_TABLE_ELECTION,
    MYSQL_TABLE_SEMAPHORE,
];

/// The lock table's declaration on `dialect`.
pub(crate) fn table_lock(dialect: Dialect) -> Capabilities {
    match dialect {
        Dialect::Postgres => POSTGRES_TABLE_LOCK,
        Dialect::MySql => MYSQL_TABLE_LOCK,
    }
}

/// The declarations of the PostgreSQL store.
pub const POSTGRES: &[Capabilities] = &[
    POSTGRES_TABLE_LOCK,
    POSTGRES_SESSION_LOCK,
    POSTGRES_SESSION_RWLOCK,
    POSTGRES_TRANSACTION_LOCK,
    POSTGRES_TABLE_ELECTION,
    POSTGRES_TABLE_SEMAPHORE,
];
/// The declarations of the MySQL/MariaDB store.
pub const MYSQL: &[Capabilities] = &[
    MYSQL_TABLE_LOCK,
    MYSQL_SESSION_LOCK,
    MYSQL_TABLE_ELECTION,
    MYSQL_TABLE_SEMAPHORE,
];

/// The semaphore's declaration on `dialect`.
pub(crate) fn table_semaphore(dialect: Dialect) -> Capabilities {
    match dialect {
        Dialect::Postgres => POSTGRES_TABLE_SEMAPHORE,
        Dialect::MySql => MYSQL_TABLE_SEMAPHORE,
    }
}

/// The election's declaration on `dialect`.
pub(crate) fn table_election(dialect: Dialect) -> Capabilities {
    match dialect {
        Dialect::Postgres => POSTGRES_TABLE_ELECTION,
        Dialect::MySql => MYSQL_TABLE_ELECTION,
    }
}

/// The session lock's declaration on `dialect`.
pub(crate) fn session_lock(dialect: Dialect) -> Capabilities {
    match dialect {
        Dialect::Postgres => POSTGRES_SESSION_LOCK,
        Dialect::MySql => MYSQL_SESSION_LOCK,
    }
}

/// The declarations of the store `dialect` names.
///
/// ```
/// use ferrisson_sql::{Dialect, capabilities};
///
/// assert!(capabilities::of(Dialect::MySql).iter().all(|c| c.store == "mysql"));
/// ```
pub fn of(dialect: Dialect) -> &'static [Capabilities] {
    match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MYSQL,
    }
}
