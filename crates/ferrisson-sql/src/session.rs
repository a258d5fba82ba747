//! The one database session a client's session locks live on, and the heartbeat that
//! watches it: several held locks share it (PostgreSQL and MySQL/MariaDB both let one
//! session hold many), and when it dies, every hold on it is lost.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use ferrisson_core::hold::HoldState;
use ferrisson_core::{Error, Result, TaskKey};
use sha2::{Digest as _, Sha256};
use sqlx::Connection as _;
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

/// The key a session lock called `name` takes on PostgreSQL: the first 8 bytes of the
/// name's SHA-256, big-endian, as a signed bigint. Stable across versions, platforms and
/// languages (`('x' || substr(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint`
/// in SQL). Two of n names collide with odds about n² / 2⁶⁵: one in 3.6 million for a
/// million names.
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

/// What the session's statements take as the lock's identity.
#[derive(Debug, Clone)]
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
    pub(crate) task: TaskKey,
    /// The session it lives on: a hold of an earlier session is gone with it.
    pub(crate) generation: u64,
    /// A fixed lease: the heartbeat does not move its deadline.
    pub(crate) fixed: bool,
    pub(crate) state: HoldState,
    /// Live guards; changed under the holds mutex.
    pub(crate) guards: std::sync::atomic::AtomicUsize,
}

/// The session, its holds, and its heartbeat's settings.
pub(crate) struct Session {
    db: Db,
    table: String,
    conn: tokio::sync::Mutex<Option<(u64, Conn)>>,
    generation: std::sync::atomic::AtomicU64,
    pub(crate) holds: Mutex<HashMap<Arc<str>, Arc<SessionHold>>>,
    pub(crate) heartbeat: Duration,
    /// Held by the try in flight (see `SessionLock::attempt`).
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

    pub(crate) fn holds(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<SessionHold>>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn err(&self, e: sqlx::Error) -> Error {
        db_error(self.db.dialect(), &self.table, e)
    }

    /// How long a hold is known valid after a heartbeat answered: until the next one
    /// should have answered.
    pub(crate) fn validity(&self) -> Duration {
        self.heartbeat * 2
    }

    /// The session, opened if there is none.
    async fn open<'a>(&self, slot: &'a mut Option<(u64, Conn)>) -> Result<&'a mut (u64, Conn)> {
        if slot.is_none() {
            let conn = match &self.db {
                Db::Postgres(pool) => {
                    Conn::Postgres(pool.acquire().await.map_err(|e| self.err(e))?.detach())
                }
                Db::MySql(pool) => {
                    Conn::MySql(pool.acquire().await.map_err(|e| self.err(e))?.detach())
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
            holds.retain(|_, hold| {
                if hold.generation == generation {
                    hold.state.mark_lost();
                    false
                } else {
                    true
                }
            });
        }
    }

    /// Tries the lock once, without waiting, on the session.
    pub(crate) async fn try_lock(&self, key: &Key) -> Result<Tried> {
        let mut slot = self.conn.lock().await;
        let (generation, conn) = self.open(&mut slot).await?;
        let generation = *generation;
        let tried = match (conn, key) {
            (Conn::Postgres(conn), Key::Postgres(key)) => {
                sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
                    .bind(*key)
                    .fetch_one(conn)
                    .await
                    .map(Some)
            }
            (Conn::MySql(conn), Key::MySql(name)) => {
                sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, 0)")
                    .bind(name.as_str())
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

    /// The error of a statement on the session; a session the connection or the server
    /// ended (an I/O error, `pg_terminate_backend`, `KILL`, a shutdown) is ended here
    /// too, so that the next statement opens a new one.
    fn failed(&self, slot: &mut Option<(u64, Conn)>, e: sqlx::Error) -> Error {
        let error = self.err(e);
        if error.is_connection_error() {
            self.fail(slot);
        }
        error
    }

    /// Releases the lock on the session it was taken on; false when that session is
    /// gone (the lock went with it) or the database says it was not held.
    pub(crate) async fn unlock(&self, key: &Key, generation: u64) -> Result<bool> {
        let mut slot = self.conn.lock().await;
        let Some((current, conn)) = slot.as_mut() else {
            return Ok(false);
        };
        if *current != generation {
            return Ok(false);
        }
        let released = match (conn, key) {
            (Conn::Postgres(conn), Key::Postgres(key)) => {
                sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
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

    /// One heartbeat: a round trip on the session while it holds anything. Moves every
    /// hold's deadline, or ends the session (and its holds) when it does not answer.
    async fn beat(&self) {
        if self.holds().is_empty() {
            return;
        }
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
            for hold in self.holds().values().filter(|hold| !hold.fixed) {
                hold.state.extend(sent + self.validity());
            }
        } else {
            self.fail(&mut slot);
        }
    }
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

    fn hex8(hex: &str) -> [u8; 8] {
        let mut out = [0u8; 8];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_default();
        }
        out
    }
}
