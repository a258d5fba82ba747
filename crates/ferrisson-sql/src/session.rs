//! The one database session a client's session locks live on, and the heartbeat that
//! watches it: several held locks share it (PostgreSQL and MySQL/MariaDB both let one
//! session hold many), and when it dies, every hold on it is lost.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use ferrisson_core::hold::HoldState;
use ferrisson_core::{Error, FencingToken, Result, TaskKey};
use sha2::{Digest as _, Sha256};
use sqlx::Connection as _;
use sqlx::Executor as _;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use tokio::time::Instant;

use crate::dialect::Dialect;
use crate::error::db_error;
use crate::statements::Db;

/// The longest name MySQL's `GET_LOCK` takes.
const MYSQL_NAME_LIMIT: usize = 64;
/// The prefix of a hashed MySQL lock name.
const HASHED_PREFIX: &str = "ferrisson:";

/// The advisory key a lock called `name` takes on PostgreSQL (session, read-write and
/// transaction locks alike): the first 8 bytes of the name's SHA-256, big-endian, as a
/// signed bigint. Stable across versions, platforms and languages
/// (`('x' || substr(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint`
/// in SQL, checked against the server by a test). Among n names in use, two share a key
/// with odds of about n² / 2⁶⁵: one in 37 million for a million names; sharing one makes
/// them one lock, never a lock held twice. For a key of your own, see
/// [`Client::session_lock_by_key`](crate::Client::session_lock_by_key).
///
/// ```
/// assert_eq!(ferrisson_sql::advisory_key("a"), ferrisson_sql::advisory_key("a"));
/// assert_ne!(ferrisson_sql::advisory_key("a"), ferrisson_sql::advisory_key("A"));
/// ```
pub fn advisory_key(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The name a session lock called `name` takes on MySQL/MariaDB, whose lock names are
/// server-wide, compared without case and at most 64 characters: a name of at most 64
/// characters without upper case is sent as it is; any other becomes `ferrisson:` and
/// the first 54 hex digits of its SHA-256 (216 bits: collisions are out of reach).
///
/// ```
/// assert_eq!(ferrisson_sql::mysql_lock_name("orders:42"), "orders:42");
/// assert!(ferrisson_sql::mysql_lock_name("Orders:42").starts_with("ferrisson:"));
/// assert_eq!(ferrisson_sql::mysql_lock_name(&"x".repeat(65)).len(), 64);
/// ```
pub fn mysql_lock_name(name: &str) -> String {
    if name.chars().count() <= MYSQL_NAME_LIMIT && !name.chars().any(char::is_uppercase) {
        return name.to_owned();
    }
    let digest = Sha256::digest(name.as_bytes());
    let hex = digest.iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    format!(
        "{HASHED_PREFIX}{}",
        &hex[..MYSQL_NAME_LIMIT - HASHED_PREFIX.len()]
    )
}

/// What the session's statements take as the lock's identity: the advisory key or the
/// `GET_LOCK` name. Two primitives of one client with the same key are the same lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Postgres(i64),
    MySql(String),
}

impl Key {
    pub(crate) fn of(dialect: Dialect, name: &str) -> Self {
        match dialect {
            Dialect::Postgres => Self::Postgres(advisory_key(name)),
            Dialect::MySql => Self::MySql(mysql_lock_name(name)),
        }
    }
}

/// Which side of an advisory lock a hold is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `pg_advisory_lock`, `GET_LOCK`: one holder.
    Exclusive,
    /// `pg_advisory_lock_shared`: many holders, no exclusive one.
    Shared,
}

impl Mode {
    /// The suffix of PostgreSQL's advisory functions for this mode.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Self::Exclusive => "",
            Self::Shared => "_shared",
        }
    }

    /// The mode `pg_locks` shows for an advisory lock of this mode.
    fn pg_locks_mode(self) -> &'static str {
        match self {
            Self::Exclusive => "ExclusiveLock",
            Self::Shared => "ShareLock",
        }
    }
}

/// The open session.
enum Conn {
    Postgres(PgConnection),
    MySql(MySqlConnection),
}

/// One hold of a session lock in this client.
#[derive(Debug)]
pub(crate) struct SessionHold {
    pub(crate) name: Arc<str>,
    pub(crate) key: Key,
    pub(crate) mode: Mode,
    pub(crate) task: TaskKey,
    /// The session it lives on: a hold of an earlier session is gone with it.
    pub(crate) generation: u64,
    /// A fixed lease: the heartbeat does not move its deadline.
    pub(crate) fixed: bool,
    pub(crate) state: HoldState,
    /// Live guards; changed under the holds mutex.
    pub(crate) guards: std::sync::atomic::AtomicUsize,
    /// The write side's fencing token, drawn once while held (see
    /// [`Session::draw_token`]).
    pub(crate) token: std::sync::OnceLock<FencingToken>,
}

/// What this client's own holds say about taking `key` in a mode, before the database is
/// asked (the database's locks stack per session: it would grant all of this client's
/// tasks at once).
pub(crate) enum Local {
    /// The asking task holds it in this mode: one more guard on that hold.
    Reenter(Arc<SessionHold>),
    /// Another task of this client holds it in a conflicting mode.
    Busy,
    /// The asking task holds the read side and asks for the write side.
    Upgrade,
    /// Ask the database; `first` when this session holds nothing on the key (a timed-out
    /// wait can then be checked against `pg_locks` without doubt).
    Free { first: bool },
}

/// The session, its holds, and its heartbeat's settings.
pub(crate) struct Session {
    db: Db,
    table: String,
    conn: tokio::sync::Mutex<Option<(u64, Conn)>>,
    generation: std::sync::atomic::AtomicU64,
    pub(crate) holds: Mutex<HashMap<Key, Vec<Arc<SessionHold>>>>,
    pub(crate) heartbeat: Duration,
    /// Held by the try in flight (see `Claim::attempt`).
    pub(crate) acquiring: tokio::sync::Mutex<()>,
}

/// What one try on the session found.
pub(crate) enum Tried {
    Granted(u64),
    Busy,
}

impl Session {
    pub(crate) fn new(db: Db, table: String, heartbeat: Duration) -> Self {
        Self {
            db,
            table,
            conn: tokio::sync::Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
            holds: Mutex::default(),
            heartbeat,
            acquiring: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn holds(&self) -> MutexGuard<'_, HashMap<Key, Vec<Arc<SessionHold>>>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What this client's holds say about `task` taking `key` in `mode`; a re-entry is
    /// counted here, under the holds mutex.
    pub(crate) fn local(&self, key: &Key, mode: Mode, task: TaskKey) -> Local {
        let holds = self.holds();
        let Some(list) = holds.get(key) else {
            return Local::Free { first: true };
        };
        let mut live = list.iter().filter(|hold| hold.state.is_held()).peekable();
        if live.peek().is_none() {
            return Local::Free { first: true };
        }
        let mut mine = None;
        let mut conflicting_other = false;
        let mut mine_shared = false;
        for hold in live {
            let own = hold.task == task;
            if hold.mode == mode && own {
                mine = Some(hold);
            }
            match (mode, hold.mode) {
                (Mode::Exclusive, Mode::Shared) if own => mine_shared = true,
                (Mode::Exclusive, _) | (Mode::Shared, Mode::Exclusive) if !own => {
                    conflicting_other = true;
                }
                _ => {}
            }
        }
        if let Some(hold) = mine {
            hold.guards
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            return Local::Reenter(Arc::clone(hold));
        }
        if mine_shared {
            return Local::Upgrade;
        }
        if conflicting_other {
            return Local::Busy;
        }
        Local::Free { first: false }
    }

    fn err(&self, e: sqlx::Error) -> Error {
        db_error(self.db.dialect(), &self.table, e)
    }

    /// How long a hold is known valid after a heartbeat answered: until the next one
    /// should have answered.
    pub(crate) fn validity(&self) -> Duration {
        self.heartbeat * 2
    }

    /// How the server is told to watch the session, so that it frees the locks of a
    /// client that vanished without closing its connection (a host lost, a cable cut)
    /// in seconds, not the 2 hours of the operating system's default TCP keepalive.
    /// PostgreSQL: TCP keepalive probes after one heartbeat of silence, one per
    /// heartbeat, 3 unanswered end it (about 4 heartbeats). MySQL/MariaDB have no
    /// per-session keepalive: `wait_timeout` of 4 heartbeats ends a session that stops
    /// sending, which a live client never does (its heartbeat pings every heartbeat).
    /// Whole seconds, at least 1.
    fn server_watch(&self) -> String {
        let beat = self.heartbeat.as_secs().max(1);
        match self.db.dialect() {
            Dialect::Postgres => format!(
                "SET tcp_keepalives_idle = {beat}; SET tcp_keepalives_interval = {beat}; \
                 SET tcp_keepalives_count = 3"
            ),
            Dialect::MySql => format!("SET SESSION wait_timeout = {}", beat * 4),
        }
    }

    /// The session, opened if there is none.
    async fn open<'a>(&self, slot: &'a mut Option<(u64, Conn)>) -> Result<&'a mut (u64, Conn)> {
        if slot.is_none() {
            let watch = self.server_watch();
            let conn = match &self.db {
                Db::Postgres(pool) => {
                    let mut conn = pool.acquire().await.map_err(|e| self.err(e))?.detach();
                    conn.execute(watch.as_str())
                        .await
                        .map_err(|e| self.err(e))?;
                    Conn::Postgres(conn)
                }
                Db::MySql(pool) => {
                    let mut conn = pool.acquire().await.map_err(|e| self.err(e))?.detach();
                    conn.execute(watch.as_str())
                        .await
                        .map_err(|e| self.err(e))?;
                    Conn::MySql(conn)
                }
            };
            let generation = self
                .generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
                + 1;
            *slot = Some((generation, conn));
        }
        slot.as_mut().ok_or(Error::ShuttingDown)
    }

    /// Ends the session after a connection error: every hold on it is lost.
    fn fail(&self, slot: &mut Option<(u64, Conn)>) {
        if let Some((generation, _)) = slot.take() {
            let mut holds = self.holds();
            holds.retain(|_, list| {
                list.retain(|hold| {
                    if hold.generation == generation {
                        hold.state.mark_lost();
                        false
                    } else {
                        true
                    }
                });
                !list.is_empty()
            });
        }
    }

    /// The error of `e`, ending the session first when the connection or the server ended
    /// it (an I/O error, `pg_terminate_backend`, `KILL`, a shutdown), so that the next
    /// statement opens a new one.
    fn failed(&self, slot: &mut Option<(u64, Conn)>, e: sqlx::Error) -> Error {
        let error = self.err(e);
        if error.is_connection_error() {
            self.fail(slot);
        }
        error
    }

    /// Tries the lock once on the session: without waiting when `wait` is zero, else (on
    /// PostgreSQL) waiting at most `wait` in the database's own queue, bounded by
    /// `lock_timeout` (on MySQL/MariaDB, `GET_LOCK(name, seconds)`). A wait is only asked
    /// for when the session holds nothing else on the key (the condition of
    /// [`grant_landed`]).
    pub(crate) async fn try_lock(&self, key: &Key, mode: Mode, wait: Duration) -> Result<Tried> {
        let mut slot = self.conn.lock().await;
        let (generation, conn) = self.open(&mut slot).await?;
        let generation = *generation;
        let tried = match (conn, key) {
            (Conn::Postgres(conn), Key::Postgres(key)) => {
                let wait_ms = wait.as_millis();
                if wait_ms == 0 {
                    sqlx::query_scalar::<_, bool>(&format!(
                        "SELECT pg_try_advisory_lock{}($1)",
                        mode.suffix()
                    ))
                    .bind(*key)
                    .fetch_one(&mut *conn)
                    .await
                    .map(Some)
                } else {
                    wait_on_postgres(conn, *key, mode, wait_ms).await
                }
            }
            (Conn::MySql(conn), Key::MySql(name)) => {
                if mode == Mode::Shared {
                    return Err(Error::Unsupported {
                        store: "mysql",
                        what: "take a shared lock with GET_LOCK".into(),
                    });
                }
                // Seconds; MariaDB waits for fractions, MySQL rounds a short slice down to
                // a plain try. A timed-out GET_LOCK answers 0: no grant can hide behind it.
                sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, ?)")
                    .bind(name.as_str())
                    .bind(wait.as_secs_f64())
                    .fetch_one(conn)
                    .await
                    .map(|got| got.map(|got| got == 1))
            }
            _ => return Err(Error::Protocol("a key of the other database".into())),
        };
        match tried {
            Ok(Some(true)) => Ok(Tried::Granted(generation)),
            Ok(Some(false)) => Ok(Tried::Busy),
            // GET_LOCK's NULL: an error (out of memory, the thread killed).
            Ok(None) => Err(Error::Protocol("GET_LOCK answered NULL".into())),
            Err(e) => Err(self.failed(&mut slot, e)),
        }
    }

    /// Draws a write side's fencing token on the session, while the lock is held:
    /// `txid_current()`, the server's transaction counter, which only grows (advisory
    /// locks have no token of their own).
    pub(crate) async fn draw_token(&self, generation: u64) -> Result<FencingToken> {
        let mut slot = self.conn.lock().await;
        let Some((current, Conn::Postgres(conn))) = slot.as_mut() else {
            return Err(Error::Protocol(
                "no PostgreSQL session to draw a token on".into(),
            ));
        };
        if *current != generation {
            return Err(Error::Protocol(
                "the session ended while drawing a token".into(),
            ));
        }
        match sqlx::query_scalar::<_, i64>("SELECT txid_current()")
            .fetch_one(conn)
            .await
        {
            Ok(txid) => u64::try_from(txid)
                .map(FencingToken::new)
                .map_err(|_| Error::Protocol("txid_current() answered a negative id".into())),
            Err(e) => Err(self.failed(&mut slot, e)),
        }
    }

    /// Releases the lock on the session it was taken on; false when that session is
    /// gone (the lock went with it) or the database says it was not held.
    pub(crate) async fn unlock(&self, key: &Key, mode: Mode, generation: u64) -> Result<bool> {
        let mut slot = self.conn.lock().await;
        let Some((current, conn)) = slot.as_mut() else {
            return Ok(false);
        };
        if *current != generation {
            return Ok(false);
        }
        let released = match (conn, key) {
            (Conn::Postgres(conn), Key::Postgres(key)) => {
                sqlx::query_scalar::<_, bool>(&format!(
                    "SELECT pg_advisory_unlock{}($1)",
                    mode.suffix()
                ))
                .bind(*key)
                .fetch_one(conn)
                .await
            }
            (Conn::MySql(conn), Key::MySql(name)) => {
                sqlx::query_scalar::<_, Option<i64>>("SELECT RELEASE_LOCK(?)")
                    .bind(name.as_str())
                    .fetch_one(conn)
                    .await
                    .map(|r| r == Some(1))
            }
            _ => return Err(Error::Protocol("a key of the other database".into())),
        };
        released.map_err(|e| self.failed(&mut slot, e))
    }

    /// One heartbeat: a round trip on the open session. Moves every
    /// hold's deadline, or ends the session (and its holds) when it does not answer.
    async fn beat(&self) {
        // Even without holds: MySQL's wait_timeout would end a silent session.
        let mut slot = self.conn.lock().await;
        let Some((_, conn)) = slot.as_mut() else {
            return;
        };
        let sent = Instant::now();
        let answered = tokio::time::timeout(self.heartbeat, async {
            match conn {
                Conn::Postgres(conn) => conn.ping().await,
                Conn::MySql(conn) => conn.ping().await,
            }
        })
        .await;
        if matches!(answered, Ok(Ok(()))) {
            for hold in self.holds().values().flatten().filter(|hold| !hold.fixed) {
                hold.state.extend(sent + self.validity());
            }
        } else {
            self.fail(&mut slot);
        }
    }
}

/// PostgreSQL's SQLSTATE for a wait cut off by `lock_timeout` (`lock_not_available`).
pub(crate) const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Whether `e` is a wait cut off by `lock_timeout`.
pub(crate) fn is_lock_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some(LOCK_NOT_AVAILABLE))
}

/// Waits at most `wait_ms` for a session-level advisory lock in PostgreSQL's own queue:
/// `SET LOCAL lock_timeout` in a transaction of its own (so the setting ends with it;
/// the session-level lock outlives it). On `55P03` the grant may have landed as the
/// timeout fired (the server then grants and raises the error all the same): the
/// session's `pg_locks` row decides, and a grant found there is kept as a grant, so none
/// is ever leaked. Only called when the session holds nothing else on the key.
async fn wait_on_postgres(
    conn: &mut PgConnection,
    key: i64,
    mode: Mode,
    wait_ms: u128,
) -> std::result::Result<Option<bool>, sqlx::Error> {
    // Numbers only: the key and the wait are ours, never text from a caller.
    // Without arguments sqlx sends the simple-query protocol, which runs several
    // statements in one round trip.
    let statements = format!(
        "BEGIN; SET LOCAL lock_timeout = '{wait_ms}ms'; SET LOCAL statement_timeout = 0; \
         SELECT pg_advisory_lock{}({key}); COMMIT",
        mode.suffix()
    );
    let waited = (&mut *conn).execute(statements.as_str()).await;
    match waited {
        Ok(_) => Ok(Some(true)),
        Err(e) => {
            if matches!(e, sqlx::Error::Database(_)) {
                (&mut *conn).execute("ROLLBACK").await?;
            }
            if is_lock_timeout(&e) {
                grant_landed(conn, key, mode).await.map(Some)
            } else {
                Err(e)
            }
        }
    }
}

/// Whether this connection holds the session-level advisory lock `key` in `mode`, as
/// `pg_locks` shows it: the decision after a wait ended in `55P03`, when the grant may
/// have landed as the timeout fired. `pg_locks` shows a bigint key as two unsigned
/// halves (`classid`, `objid`) with `objsubid = 1`.
pub(crate) async fn grant_landed(
    conn: &mut PgConnection,
    key: i64,
    mode: Mode,
) -> std::result::Result<bool, sqlx::Error> {
    let bits = key as u64;
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
           AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
           AND classid::bigint = $1 AND objid::bigint = $2 AND mode = $3)",
    )
    .bind((bits >> 32) as i64)
    .bind((bits & 0xffff_ffff) as i64)
    .bind(mode.pg_locks_mode())
    .fetch_one(conn)
    .await
}

/// The heartbeat's loop: beats every `heartbeat` until the client is gone.
pub(crate) async fn run_heartbeat(session: Weak<Session>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        session.beat().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented derivation, pinned: changing it would let two versions of an
    /// application hold one lock at once.
    #[test]
    fn the_key_derivations_are_stable() {
        // SHA-256("orders:42") starts 0x8a5f217d db0c9f03 (computed independently with
        // sha256sum).
        assert_eq!(
            advisory_key("orders:42"),
            i64::from_be_bytes(hex8("8a5f217ddb0c9f03"))
        );
        assert_eq!(mysql_lock_name("a"), "a");
        let hashed = mysql_lock_name("A");
        assert_eq!(hashed.len(), 64);
        assert!(hashed.starts_with(HASHED_PREFIX));
    }

    fn postgres_url() -> String {
        std::env::var("FERRISSON_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    fn fresh_key() -> i64 {
        rand::random()
    }

    /// The decision after a `55P03`, on server states built for it: a grant held on the
    /// connection (what a grant landing as the timeout fires leaves) is found, in its
    /// mode only; one held by another connection, or released, is not.
    #[tokio::test]
    async fn a_grant_that_landed_is_found_in_pg_locks() -> anyhow::Result<()> {
        let url = postgres_url();
        let mut mine = PgConnection::connect(&url).await?;
        let mut other = PgConnection::connect(&url).await?;
        let key = fresh_key();
        assert!(!grant_landed(&mut mine, key, Mode::Exclusive).await?);
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(key)
            .execute(&mut mine)
            .await?;
        assert!(grant_landed(&mut mine, key, Mode::Exclusive).await?);
        assert!(!grant_landed(&mut mine, key, Mode::Shared).await?);
        assert!(!grant_landed(&mut mine, key.wrapping_add(1), Mode::Exclusive).await?);
        assert!(!grant_landed(&mut other, key, Mode::Exclusive).await?);
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(key)
            .execute(&mut mine)
            .await?;
        assert!(!grant_landed(&mut mine, key, Mode::Exclusive).await?);
        // Both halves of a negative key (its high bit set) map onto pg_locks' unsigned
        // columns.
        let negative = -(key.checked_abs().unwrap_or(1).max(1));
        sqlx::query("SELECT pg_advisory_lock_shared($1)")
            .bind(negative)
            .execute(&mut other)
            .await?;
        assert!(grant_landed(&mut other, negative, Mode::Shared).await?);
        Ok(())
    }

    /// A wait cut off by `lock_timeout` leaves the session as it found it: no
    /// transaction open, no lock, `lock_timeout` at its usual value; and a wait whose
    /// lock is freed in time gets it.
    #[tokio::test]
    async fn a_timed_out_wait_leaves_the_session_clean() -> anyhow::Result<()> {
        let url = postgres_url();
        let mut waiter = PgConnection::connect(&url).await?;
        let mut holder = PgConnection::connect(&url).await?;
        let key = fresh_key();
        let usual: String = sqlx::query_scalar("SELECT current_setting('lock_timeout')")
            .fetch_one(&mut waiter)
            .await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(key)
            .execute(&mut holder)
            .await?;
        assert_eq!(
            wait_on_postgres(&mut waiter, key, Mode::Exclusive, 30).await?,
            Some(false)
        );
        // SAVEPOINT outside a transaction block fails with no_active_sql_transaction.
        let outside = sqlx::query("SAVEPOINT probe").execute(&mut waiter).await;
        let code = match &outside {
            Err(sqlx::Error::Database(db)) => db.code().map(std::borrow::Cow::into_owned),
            _ => None,
        };
        assert_eq!(
            code.as_deref(),
            Some("25P01"),
            "a transaction was left open"
        );
        let setting: String = sqlx::query_scalar("SELECT current_setting('lock_timeout')")
            .fetch_one(&mut waiter)
            .await?;
        assert_eq!(setting, usual);
        assert!(!grant_landed(&mut waiter, key, Mode::Exclusive).await?);
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(key)
            .execute(&mut holder)
            .await?;
        assert_eq!(
            wait_on_postgres(&mut waiter, key, Mode::Exclusive, 30).await?,
            Some(true)
        );
        // The grant outlives the wait's own transaction: it is a session lock.
        assert!(grant_landed(&mut waiter, key, Mode::Exclusive).await?);
        Ok(())
    }

    /// The session asks the server to watch it: TCP keepalive (PostgreSQL) or
    /// `wait_timeout` (MySQL/MariaDB) in heartbeats.
    #[tokio::test]
    async fn the_server_is_told_to_watch_the_session() -> anyhow::Result<()> {
        let heartbeat = Duration::from_secs(2);
        let pg = Session::new(
            Db::Postgres(sqlx::PgPool::connect(&postgres_url()).await?),
            "t".into(),
            heartbeat,
        );
        let mut slot = pg.conn.lock().await;
        let (_, conn) = pg.open(&mut slot).await?;
        let Conn::Postgres(conn) = conn else {
            anyhow::bail!("not a PostgreSQL session");
        };
        let settings: (String, String, String) = sqlx::query_as(
            "SELECT current_setting('tcp_keepalives_idle'), \
                    current_setting('tcp_keepalives_interval'), \
                    current_setting('tcp_keepalives_count')",
        )
        .fetch_one(conn)
        .await?;
        assert_eq!(settings, ("2".into(), "2".into(), "3".into()));
        let mysql_url = std::env::var("FERRISSON_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
        let my = Session::new(
            Db::MySql(sqlx::MySqlPool::connect(&mysql_url).await?),
            "t".into(),
            heartbeat,
        );
        let mut slot = my.conn.lock().await;
        let (_, conn) = my.open(&mut slot).await?;
        let Conn::MySql(conn) = conn else {
            anyhow::bail!("not a MySQL session");
        };
        let wait_timeout: i64 = sqlx::query_scalar("SELECT CAST(@@SESSION.wait_timeout AS SIGNED)")
            .fetch_one(conn)
            .await?;
        assert_eq!(wait_timeout, 8);
        Ok(())
    }

    fn hex8(hex: &str) -> [u8; 8] {
        let mut out = [0u8; 8];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_default();
        }
        out
    }
}
