//! # ferrisson-sql
//!
//! Distributed locks on the database you already run, PostgreSQL or MySQL/MariaDB,
//! behind ferrisson's store-neutral contract ([`DistributedLock`], [`Guard`],
//! [`Fenced`]).
//!
//! [`TableLock`] is the classic lock table with its known flaws fixed:
//!
//! - **expiry in the database's time** (`clock_timestamp()`, `UTC_TIMESTAMP(6)`), so a
//!   holder that dies leaves a row that expires instead of a deadlock, and no client
//!   clock is ever compared with another;
//! - **one statement to acquire**: the insert, or the take-over of an expired row;
//! - **an owner per acquisition** (a random 128-bit id, never a host name), released by
//!   name, owner and token, so nobody releases someone else's lock;
//! - **a fencing token** from a sequence that never cycles, drawn while the row is held:
//!   every holder's token is greater than every earlier holder's;
//! - **re-entry per task**, a **watchdog** renewing the expiry while the guard lives, and
//!   a **lost signal** (`lost()`) when a renewal finds the row gone, taken or expired;
//! - **waiting without busy polling**: on PostgreSQL the release's `NOTIFY` wakes the
//!   waiters, heard by one listening connection per client (not one per waiter), with a
//!   look again after that connection reconnects and a slow safety poll; MySQL/MariaDB
//!   have no notifications, so their waiters poll with back-off and jitter;
//! - **cancellation safety**: a dropped acquire leaves no row behind.
//!
//! [`SessionLock`] is the database's own lock, honestly described: PostgreSQL's advisory
//! lock or MySQL's `GET_LOCK`, held by the client's one session connection (shared by
//! all its session locks), which a heartbeat watches; no fencing token, and freed by the
//! server only when it notices the session is gone. A URL chooses it with
//! `?lock=advisory` ([`Client::default_lock`]).
//!
//! [`TableElection`] is leader election on the same table: one leader at a time, a
//! fencing token per term. [`TableSemaphore`] is a counting semaphore there: N permits,
//! each a row with its expiry and owner.
//!
//! What each gives is declared in [`capabilities`].
//!
//! ```no_run
//! use ferrisson_core::{DistributedLock, Fenced, Guard};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
//! client.create_schema().await?;
//! let lock = client.lock("voucher:42")?;
//! let guard = lock.lock().await?;
//! // Write with the token; the resource refuses older ones:
//! // UPDATE stock SET n = n - 1, fence = $1 WHERE id = 42 AND fence <= $1
//! println!("token {}", guard.fencing_token());
//! guard.unlock().await?;
//! # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
//! ```
//!
//! ## The schema
//!
//! Nothing creates it behind your back: call [`Client::create_schema`] once, or run these
//! statements from your own migrations (shown for the default table name,
//! `ferrisson_lock`; another name set with [`ClientBuilder::table`] renames every
//! object the same way).
//!
//! PostgreSQL:
//!
//! ```sql
//! CREATE SEQUENCE IF NOT EXISTS ferrisson_lock_fence AS bigint MINVALUE 1 NO CYCLE;
//! CREATE TABLE IF NOT EXISTS ferrisson_lock (
//!     name       text        PRIMARY KEY,
//!     owner      text        NOT NULL,
//!     hold_count integer     NOT NULL,
//!     fence      bigint      NOT NULL,
//!     expires_at timestamptz NOT NULL
//! );
//! ```
//!
//! MySQL / MariaDB (names are `VARBINARY`: compared byte for byte, not folded to one
//! case as the default collations would):
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS ferrisson_lock (
//!     name       VARBINARY(255)  NOT NULL PRIMARY KEY,
//!     owner      CHAR(32)        NOT NULL,
//!     hold_count INT UNSIGNED    NOT NULL,
//!     fence      BIGINT UNSIGNED NOT NULL,
//!     expires_at DATETIME(6)     NOT NULL
//! ) ENGINE=InnoDB;
//! CREATE TABLE IF NOT EXISTS ferrisson_lock_fence (
//!     id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
//!     v  BIGINT UNSIGNED  NOT NULL
//! ) ENGINE=InnoDB;
//! INSERT IGNORE INTO ferrisson_lock_fence (id, v) VALUES (1, 0);
//! ```
//!
//! ## The statements, and why
//!
//! PostgreSQL acquires with
//!
//! ```sql
//! INSERT INTO ferrisson_lock AS l VALUES ($name, $owner, 1, 0, clock_timestamp() + $lease)
//! ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, hold_count = 1,
//!     fence = nextval('ferrisson_lock_fence'), expires_at = clock_timestamp() + $lease
//! WHERE l.expires_at <= clock_timestamp()
//! RETURNING l.fence;  -- no row: busy
//! ```
//!
//! and, when it inserted (fence 0), draws the token next with `UPDATE ... SET fence =
//! nextval(...) WHERE name = $name AND owner = $owner`. Drawing it in the insert itself
//! would be one round trip less but not safe: `nextval` in `VALUES` runs before the
//! unique check, so a statement stalled between the two could insert after a faster
//! holder came and went, with a smaller token than that holder's. `clock_timestamp()`,
//! not `now()`, which is the transaction's start.
//!
//! MySQL/MariaDB acquire with `INSERT IGNORE`, else `UPDATE ... WHERE name = ? AND
//! expires_at <= UTC_TIMESTAMP(6)`, then draw the token from the counter row
//! (`UPDATE ferrisson_lock_fence SET v = LAST_INSERT_ID(v + 1)`), which works on MySQL 8
//! and MariaDB alike.
//!
//! Renewal: `UPDATE ... SET expires_at = <now> + lease WHERE name, owner, fence AND
//! expires_at > <now>` (no row: lost). Release: `DELETE ... WHERE name, owner, fence`,
//! on PostgreSQL with `pg_notify` in the same statement.
//!
//! ## Limits, stated
//!
//! - The lock is as safe as the lease: a holder paused longer than its lease (a stop of
//!   the world, a partition) loses the row to the next holder while it still thinks it
//!   holds it. `lost()` tells it as soon as a renewal fails; the fencing token makes the
//!   resource refuse its late writes.
//! - Names are 1 to 255 bytes.
//! - A waiter on PostgreSQL behind PgBouncer in transaction mode hears no notifications
//!   (`LISTEN` needs a session): it then waits by its safety poll (5 s by default).

#![warn(clippy::missing_errors_doc)]

pub mod capabilities;
mod client;
mod dialect;
mod election;
mod error;
mod hold;
mod schema;
mod semaphore;
mod session;
mod session_claim;
mod session_lock;
mod session_rwlock;
mod statements;
mod table_lock;
mod transaction_lock;
mod wake;

pub use crate::client::{
    Client, ClientBuilder, DEFAULT_HEARTBEAT, DEFAULT_MAX_CONNECTIONS, DEFAULT_SAFETY_POLL,
    DEFAULT_WATCHDOG_LEASE, LockKind,
};
pub use crate::dialect::{DEFAULT_TABLE, Dialect};
pub use crate::election::TableElection;
pub use crate::error::SqlError;
pub use crate::semaphore::{MAX_PERMITS, TablePermit, TableSemaphore};
pub use crate::session::{advisory_key, mysql_lock_name};
pub use crate::session_lock::{SessionLock, SessionLockGuard};
pub use crate::session_rwlock::{SessionReadGuard, SessionRwLock, SessionWriteGuard};
pub use crate::table_lock::{MAX_NAME_LEN, TableLock, TableLockGuard};
pub use crate::transaction_lock::{TransactionLock, TransactionLockGuard};
pub use ferrisson_core::{
    self, DistributedElection, DistributedLock, DistributedRwLock, DistributedSemaphore, Error,
    Fenced, FencingToken, Guard, Lease, Permit, Result,
};
