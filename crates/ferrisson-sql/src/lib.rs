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
//! `?lock=advisory` ([`Client::default_lock`]). On PostgreSQL the same advisory lock also
//! comes as a read-write lock ([`SessionRwLock`]) and scoped to a transaction
//! ([`TransactionLock`], the form that works behind PgBouncer in transaction mode): see
//! [the database's own locks](#the-databases-own-locks) below.
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
//! ## The database's own locks
//!
//! | | PostgreSQL | MySQL / MariaDB |
//! |---|---|---|
//! | exclusive, session | [`SessionLock`]: `pg_advisory_lock` | [`SessionLock`]: `GET_LOCK` |
//! | read-write, session | [`SessionRwLock`]: `pg_advisory_lock_shared` / `pg_advisory_lock` | refused (`GET_LOCK` has no shared mode) |
//! | exclusive or shared, transaction | [`TransactionLock`]: `pg_advisory_xact_lock[_shared]` | refused (`GET_LOCK` outlives commit and rollback) |
//! | try / wait / wait at most | `try_*` / `lock`, `read`, `write` / `*_timeout` | the same, on `SessionLock` |
//! | fencing token | none of their own; the read-write lock's writer draws `txid_current()` | none |
//!
//! What is true of all of them, and what the capability table declares:
//!
//! - **No fencing token of their own.** The database only says "held" or "not held"; a
//!   holder paused past its session's end cannot be told apart from a live one.
//!   [`SessionRwLock`]'s writer (whose contract asks for a token) draws the server's
//!   transaction counter right after its grant: it grows with every writer on that
//!   server. For fencing everywhere, use [`TableLock`].
//! - **One connection for many holds.** A client's session locks share one session
//!   connection (both databases let a session hold many locks: MySQL since 5.7.5, MariaDB
//!   since 10.0.2); this client's own record keeps its tasks apart, since the database
//!   would grant one session the same lock twice. A [`TransactionLock`] holds the
//!   connection of its transaction.
//! - **A watched connection.** A heartbeat pings the session every 5 s
//!   ([`ClientBuilder::heartbeat`]); when it does not answer, every guard on it fires
//!   `lost()`. `remaining()` is the time until the next heartbeat is overdue (two
//!   heartbeats after the last answer): what the client knows, not a made-up forever.
//!   The session also asks the server to watch it, so that a client that vanished
//!   without closing its connection frees its locks in about 4 heartbeats rather than
//!   the 2 hours of the default TCP keepalive: `SET tcp_keepalives_idle`,
//!   `tcp_keepalives_interval` (one heartbeat) and `tcp_keepalives_count = 3` on
//!   PostgreSQL, `SET SESSION wait_timeout` (4 heartbeats) on MySQL/MariaDB.
//!
//! ### Keys: derived from the name, or given raw
//!
//! PostgreSQL's advisory locks take a bigint. [`advisory_key`] derives it from the name:
//! the first 8 bytes of the name's SHA-256, big-endian, as a signed bigint. It is stable
//! (pinned by a test; changing it would let two versions of an application hold one lock
//! at once) and computable anywhere, in SQL too:
//!
//! ```sql
//! SELECT ('x' || substr(encode(sha256(convert_to('orders:42', 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint;
//! ```
//!
//! Two different names share a key with odds of about n² / 2⁶⁵ among n names in use:
//! one in 37 trillion for a thousand names, one in 37 million for a million. A
//! collision makes two names one lock (they exclude each other), never a lock held twice.
//! To share a lock with a program that locks a number of its own, give the key raw:
//! [`Client::session_lock_by_key`], [`Client::session_rwlock_by_key`],
//! [`Client::transaction_lock_by_key`] (known here as `advisory key <n>`). The two-int4
//! form (`pg_advisory_lock(int, int)`) is a keyspace of its own, not reachable from a
//! bigint.
//!
//! ```no_run
//! use ferrisson_core::{DistributedLock, Guard};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
//! // The same lock as another service's `SELECT pg_advisory_lock(4242)`:
//! if let Some(guard) = client.session_lock_by_key(4242)?.try_lock().await? {
//!     guard.unlock().await?;
//! }
//! assert_eq!(
//!     client.session_lock("orders:42")?.name(),
//!     "orders:42" // key: ferrisson_sql::advisory_key("orders:42")
//! );
//! # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
//! ```
//!
//! MySQL/MariaDB's `GET_LOCK` takes a name, server-wide (every database on the server
//! shares one namespace). MySQL compares names without case and refuses names over 64
//! characters (MariaDB 10.11 does neither, but one rule serves both): [`mysql_lock_name`]
//! sends a name of at most 64 characters without upper case as it is, for other programs
//! to share, and any other as `ferrisson:` and 54 hex digits of its SHA-256 (216 bits:
//! collisions are out of reach).
//!
//! ### Waiting, `lock_timeout`, and the race it has
//!
//! PostgreSQL bounds a wait for a lock with `lock_timeout`, which has a race: the grant
//! can land just as the timeout fires, and the server then records the lock *and* raises
//! `55P03` (`lock_not_available`). Whether that grant leaks depends on the scope:
//!
//! - **Session locks** outlive the failed statement. So after a `55P03` the session's
//!   `pg_locks` row for the key and mode decides: found, the grant is kept and handed out
//!   as a success; not found, the wait ran out. Waits only happen when the session holds
//!   nothing else on that key, so the row cannot be anyone else's. A grant is never
//!   leaked.
//! - **Transaction locks** die with the statement's failure: [`TransactionLock`]'s own
//!   transaction is rolled back, and a wait inside your transaction
//!   ([`TransactionLock::lock_timeout_in`]) runs in a savepoint that is rolled back to.
//!   Either way the late grant is freed with it, and `None`/`false` means not held.
//!
//! A session lock's waiter does not block the shared session for long: its first try
//! never waits, each later one waits in the server's queue for at most 20 ms
//! (`SET LOCAL lock_timeout` in a transaction of its own, so the setting ends with it;
//! on MySQL/MariaDB `GET_LOCK(name, 0.02)`, which MySQL rounds to a try), between
//! back-off pauses of 5 to 200 ms. A [`TransactionLock`] waits on its own connection for
//! the whole time asked, with `SET LOCAL lock_timeout` (0, no limit, for `lock()`) and
//! `statement_timeout = 0`, both put back before the transaction is handed over.
//!
//! No ferrisson wait sends MySQL an unbounded `GET_LOCK`. If you write one yourself,
//! note that MariaDB answers `GET_LOCK(name, -1)` with NULL (warning 1411, "incorrect
//! timeout value") where MySQL waits forever; `GET_LOCK(name, 4294967295)` waits on both.
//! `GET_LOCK` answering NULL (an error: the thread killed, out of memory) is an error
//! here, never "busy".
//!
//! **Deadlocks.** A wait that would close a cycle of waiters is failed by the server:
//! PostgreSQL's `40P01` (after `deadlock_timeout`, 1 s by default), MySQL's 3058
//! (`ER_USER_LOCK_DEADLOCK`), MariaDB's 1213 (`ER_LOCK_DEADLOCK`, at once). All three are
//! [`SqlError::Deadlock`], which `is_transient()`: release what you hold and try again.
//!
//! ### Behind PgBouncer
//!
//! In transaction pooling mode a client's statements reach one server session only for
//! the length of a transaction: a session lock may be taken on one server session and
//! "released" on another, and `SET` leaks between clients. Only transaction-scoped locks
//! work there: [`TransactionLock`] (its wait limit is set with `SET LOCAL`, inside the
//! transaction), or [`TableLock`] (whose waiters, without `LISTEN`, fall back to their
//! safety poll).
//!
//! ```no_run
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::time::Duration;
//!
//! let client = ferrisson_sql::Client::connect("postgres://app@pgbouncer:6432/shop").await?;
//! let lock = client.transaction_lock("voucher:42")?;
//! if let Some(mut held) = lock.lock_timeout(Duration::from_secs(2)).await? {
//!     sqlx::query("UPDATE voucher SET stock = stock - 1 WHERE id = 42 AND stock > 0")
//!         .execute(&mut **held.transaction())
//!         .await?;
//!     held.commit().await?; // frees the lock
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
//! ```
//!
//! The read-write lock:
//!
//! ```no_run
//! use ferrisson_core::{DistributedRwLock, Fenced, Guard};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
//! let prices = client.session_rwlock("prices")?;
//! let reading = prices.read().await?; // pg_advisory_lock_shared
//! reading.unlock().await?;
//! let writing = prices.write().await?; // pg_advisory_lock
//! println!("writer's token {}", writing.fencing_token());
//! writing.unlock().await?;
//! # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
//! ```
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
//! - Session locks are as good as the session: a client paused past its heartbeats, or
//!   cut off, loses them (`lost()` says so when it runs again) and has no token to stop
//!   its late writes. The read-write lock promises no fairness: a steady stream of
//!   readers can keep a writer out.
//! - Galera clusters refuse `GET_LOCK` (with `wsrep_on`): use [`TableLock`] there.

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
