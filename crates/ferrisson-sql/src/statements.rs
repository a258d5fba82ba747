//! Every statement the lock table runs, per database. Expiry is always computed by the
//! database (`clock_timestamp()`, `UTC_TIMESTAMP(6)`): clients' clocks never meet.

use std::time::Duration;

use ferrisson_core::{Error, FencingToken, Result};
use sqlx::mysql::{MySqlPool, MySqlQueryResult};
use sqlx::postgres::PgPool;
use sqlx::{Executor as _, Row as _};

use crate::dialect::{Dialect, Tables};
use crate::error::db_error;
use crate::schema;

/// A pool of connections to one database.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The row is ours, with this token.
    Won(FencingToken),
    /// Another owner holds it; its expiry is this far off, when the database said.
    Busy(Option<Duration>),
}

/// What releasing a hold found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseOutcome {
    /// Ours and live: released.
    Released,
    /// Ours, but past its expiry (removed all the same).
    Expired,
    /// Not there, or another owner's.
    Gone,
    /// Another owner holds the lock now.
    Taken,
}

/// What a statement updating a held row does besides moving its expiry.
#[derive(Debug, Clone, Copy)]
enum Extra {
    /// Nothing: the watchdog's renewal.
    Renewal,
    /// Counts one more hold, and never moves the expiry earlier.
    Reentry,
}

/// `expiry`, or the later of it and the current expiry when `keep` says so.
fn later_of(keep: bool, expiry: &str) -> String {
    if keep {
        format!("GREATEST(expires_at, {expiry})")
    } else {
        expiry.to_owned()
    }
}

/// Microseconds, as the statements take durations.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn token(value: i64) -> Result<FencingToken> {
    u64::try_from(value)
        .map(FencingToken::new)
        .map_err(|_| Error::Protocol(format!("a negative fencing token: {value}")))
}

/// A bind parameter of a MySQL statement.
#[derive(Clone, Copy)]
enum Arg<'a> {
    Bytes(&'a [u8]),
    Text(&'a str),
    Int(i64),
    Uint(u64),
}

/// How many times a MySQL statement chosen as a deadlock victim is sent again.
const DEADLOCK_RETRIES: u32 = 8;

/// True for InnoDB's deadlock victim (1213, SQLSTATE 40001): the statement was rolled
/// back whole. Concurrent `INSERT IGNORE`s of one key while its row is deleted are the
/// textbook case.
fn is_deadlock(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("40001"))
}

/// Runs a MySQL statement once.
async fn my_execute_once(
    pool: &MySqlPool,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<MySqlQueryResult, sqlx::Error> {
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match *arg {
            Arg::Bytes(v) => query.bind(v),
            Arg::Text(v) => query.bind(v),
            Arg::Int(v) => query.bind(v),
            Arg::Uint(v) => query.bind(v),
        };
    }
    query.execute(pool).await
}

/// Runs a MySQL statement, again when it was a deadlock victim (it had no effect then).
async fn my_execute(
    pool: &MySqlPool,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<MySqlQueryResult, sqlx::Error> {
    let mut tries = 0;
    loop {
        match my_execute_once(pool, sql, args).await {
            Err(e) if is_deadlock(&e) && tries < DEADLOCK_RETRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(u64::from(tries))).await;
            }
            other => return other,
        }
    }
}

impl Db {
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Self::Postgres(_) => Dialect::Postgres,
            Self::MySql(_) => Dialect::MySql,
        }
    }

    /// Creates the lock table's objects if they are missing.
    pub(crate) async fn create_schema(&self, tables: &Tables) -> Result<()> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        match self {
            Self::Postgres(pool) => {
                // Two sessions running `CREATE ... IF NOT EXISTS` at once can both find
                // the name free and one then fails on the catalog's unique index: one at
                // a time, under a transaction-scoped advisory lock.
                let mut tx = pool.begin().await.map_err(err)?;
                sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                    .bind(format!("ferrisson schema {}", tables.lock))
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?;
                for statement in schema::ddl(Dialect::Postgres, tables) {
                    tx.execute(statement.as_str()).await.map_err(err)?;
                }
                tx.commit().await.map_err(err)
            }
            Self::MySql(pool) => {
                for statement in schema::ddl(Dialect::MySql, tables) {
                    pool.execute(statement.as_str()).await.map_err(err)?;
                }
                Ok(())
            }
        }
    }

    /// One acquire attempt by `owner`: insert the row, or take over an expired one. The
    /// token is drawn while the row is ours, so it is greater than the token of anyone
    /// who held the row before (drawing it before the insert could hand an older
    /// number to a statement that stalled between drawing and inserting).
    pub(crate) async fn attempt(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt> {
        match self {
            Self::Postgres(pool) => attempt_postgres(pool, tables, name, owner, lease).await,
            Self::MySql(pool) => attempt_mysql(pool, tables, name, owner, lease).await,
        }
    }

    /// Re-entry of a live hold: one more hold counted, the expiry moved to `lease` from
    /// now if that is later (a re-entry with a shorter lease never shortens the hold the
    /// outer guard and its watchdog count on). False when the hold is gone or expired.
    pub(crate) async fn reenter(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
        fence: FencingToken,
        lease: Duration,
    ) -> Result<bool> {
        self.update_held(tables, name, owner, fence, lease, Extra::Reentry)
            .await
    }

    /// The watchdog's renewal: the expiry moved to `lease` from now. False when the hold
    /// is gone, taken or expired (lost).
    pub(crate) async fn renew(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
        fence: FencingToken,
        lease: Duration,
    ) -> Result<bool> {
        self.update_held(tables, name, owner, fence, lease, Extra::Renewal)
            .await
    }

    async fn update_held(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
        fence: FencingToken,
        lease: Duration,
        extra: Extra,
    ) -> Result<bool> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        let lock = &tables.lock;
        let (also, keep) = match extra {
            Extra::Renewal => ("", false),
            Extra::Reentry => ("hold_count = hold_count + 1,", true),
        };
        let rows = match self {
            Self::Postgres(pool) => sqlx::query(&format!(
                "UPDATE {lock} SET {also} \
                   expires_at = {} \
                 WHERE name = $1 AND owner = $2 AND fence = $3 AND expires_at > clock_timestamp()",
                later_of(
                    keep,
                    "clock_timestamp() + $4::float8 * interval '1 microsecond'"
                )
            ))
            .bind(name)
            .bind(owner)
            .bind(fence.get() as i64)
            .bind(micros(lease) as f64)
            .execute(pool)
            .await
            .map_err(err)?
            .rows_affected(),
            // FOUND_ROWS (sqlx sets it): rows matched, even if nothing changed.
            Self::MySql(pool) => my_execute(
                pool,
                &format!(
                    "UPDATE {lock} SET {also} \
                       expires_at = {} \
                     WHERE name = ? AND owner = ? AND fence = ? AND expires_at > UTC_TIMESTAMP(6)",
                    later_of(keep, "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND")
                ),
                &[
                    Arg::Int(micros(lease)),
                    Arg::Bytes(name.as_bytes()),
                    Arg::Text(owner),
                    Arg::Uint(fence.get()),
                ],
            )
            .await
            .map_err(err)?
            .rows_affected(),
        };
        Ok(rows == 1)
    }

    /// Releases one of several holds of a re-entered lock: the count goes down, the row
    /// stays.
    pub(crate) async fn release_one(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
        fence: FencingToken,
    ) -> Result<ReleaseOutcome> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        let lock = &tables.lock;
        // The count is what the row shows; the client's own count decides when the row
        // goes, so a count that drifted (a cancelled re-entry) never frees it early.
        let rows = match self {
            Self::Postgres(pool) => sqlx::query(&format!(
                "UPDATE {lock} SET hold_count = GREATEST(hold_count - 1, 1) \
                 WHERE name = $1 AND owner = $2 AND fence = $3 AND expires_at > clock_timestamp()"
            ))
            .bind(name)
            .bind(owner)
            .bind(fence.get() as i64)
            .execute(pool)
            .await
            .map_err(err)?
            .rows_affected(),
            Self::MySql(pool) => my_execute(
                pool,
                &format!(
                    "UPDATE {lock} SET hold_count = GREATEST(hold_count, 2) - 1 \
                     WHERE name = ? AND owner = ? AND fence = ? AND expires_at > UTC_TIMESTAMP(6)"
                ),
                &[
                    Arg::Bytes(name.as_bytes()),
                    Arg::Text(owner),
                    Arg::Uint(fence.get()),
                ],
            )
            .await
            .map_err(err)?
            .rows_affected(),
        };
        if rows == 1 {
            return Ok(ReleaseOutcome::Released);
        }
        self.why_not_held(tables, name, owner).await
    }

    /// Releases the last hold: deletes the row by name, owner and token (PostgreSQL:
    /// and announces it to the waiters, in the same statement).
    pub(crate) async fn release_last(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
        fence: FencingToken,
    ) -> Result<ReleaseOutcome> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        let lock = &tables.lock;
        match self {
            Self::Postgres(pool) => {
                let channel = tables.channel();
                let live: Option<bool> = sqlx::query_scalar(&format!(
                    "WITH gone AS (\
                       DELETE FROM {lock} WHERE name = $1 AND owner = $2 AND fence = $3 \
                       RETURNING name, expires_at > clock_timestamp() AS live) \
                     SELECT gone.live FROM gone \
                       CROSS JOIN LATERAL (SELECT pg_notify('{channel}', gone.name)) AS announced"
                ))
                .bind(name)
                .bind(owner)
                .bind(fence.get() as i64)
                .fetch_optional(pool)
                .await
                .map_err(err)?;
                match live {
                    Some(true) => Ok(ReleaseOutcome::Released),
                    Some(false) => Ok(ReleaseOutcome::Expired),
                    None => self.why_not_held(tables, name, owner).await,
                }
            }
            Self::MySql(pool) => {
                let live = format!(
                    "DELETE FROM {lock} WHERE name = ? AND owner = ? AND fence = ? \
                     AND expires_at > UTC_TIMESTAMP(6)"
                );
                let any = format!("DELETE FROM {lock} WHERE name = ? AND owner = ? AND fence = ?");
                for (sql, outcome) in [
                    (live, ReleaseOutcome::Released),
                    (any, ReleaseOutcome::Expired),
                ] {
                    let args = [
                        Arg::Bytes(name.as_bytes()),
                        Arg::Text(owner),
                        Arg::Uint(fence.get()),
                    ];
                    let rows = my_execute(pool, &sql, &args)
                        .await
                        .map_err(err)?
                        .rows_affected();
                    if rows == 1 {
                        return Ok(outcome);
                    }
                }
                self.why_not_held(tables, name, owner).await
            }
        }
    }

    /// After a release found nothing of `owner`'s: is someone else holding the lock?
    async fn why_not_held(
        &self,
        tables: &Tables,
        name: &str,
        owner: &str,
    ) -> Result<ReleaseOutcome> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        let lock = &tables.lock;
        let holder: Option<String> = match self {
            Self::Postgres(pool) => sqlx::query_scalar(&format!(
                "SELECT owner FROM {lock} WHERE name = $1 AND expires_at > clock_timestamp()"
            ))
            .bind(name)
            .fetch_optional(pool)
            .await
            .map_err(err)?,
            Self::MySql(pool) => sqlx::query_scalar(&format!(
                "SELECT owner FROM {lock} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
            ))
            .bind(name.as_bytes())
            .fetch_optional(pool)
            .await
            .map_err(err)?,
        };
        Ok(match holder {
            Some(other) if other != owner => ReleaseOutcome::Taken,
            _ => ReleaseOutcome::Gone,
        })
    }

    /// Deletes whatever row `owner` has for `name` (an acquire nobody awaited any more).
    pub(crate) async fn undo(&self, tables: &Tables, name: &str, owner: &str) -> Result<()> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        let lock = &tables.lock;
        match self {
            Self::Postgres(pool) => {
                let channel = tables.channel();
                sqlx::query(&format!(
                    "WITH gone AS (DELETE FROM {lock} WHERE name = $1 AND owner = $2 RETURNING name) \
                     SELECT 1 FROM gone CROSS JOIN LATERAL (SELECT pg_notify('{channel}', gone.name)) AS announced"
                ))
                .bind(name)
                .bind(owner)
                .fetch_optional(pool)
                .await
                .map_err(err)?;
            }
            Self::MySql(pool) => {
                my_execute(
                    pool,
                    &format!("DELETE FROM {lock} WHERE name = ? AND owner = ?"),
                    &[Arg::Bytes(name.as_bytes()), Arg::Text(owner)],
                )
                .await
                .map_err(err)?;
            }
        }
        Ok(())
    }

    /// Terminates the session that holds the session lock `key` (an administrator's
    /// hand). True when one held it.
    pub(crate) async fn end_session_holding(
        &self,
        tables: &Tables,
        key: &crate::session::Key,
    ) -> Result<bool> {
        use crate::session::Key;
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        match (self, key) {
            (Self::Postgres(pool), Key::Postgres(key)) => {
                // pg_locks shows a bigint key as two unsigned halves.
                let bits = *key as u64;
                let ended: Option<bool> = sqlx::query_scalar(
                    "SELECT bool_or(pg_terminate_backend(pid)) FROM pg_locks \
                     WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
                       AND classid::bigint = $1 AND objid::bigint = $2",
                )
                .bind((bits >> 32) as i64)
                .bind((bits & 0xffff_ffff) as i64)
                .fetch_one(pool)
                .await
                .map_err(err)?;
                Ok(ended.unwrap_or(false))
            }
            (Self::MySql(pool), Key::MySql(name)) => {
                let holder: Option<i64> =
                    sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                        .bind(name.as_str())
                        .fetch_one(pool)
                        .await
                        .map_err(err)?;
                let Some(holder) = holder else {
                    return Ok(false);
                };
                // KILL takes no placeholder; the id is the server's own integer.
                sqlx::query(&format!("KILL CONNECTION {holder}"))
                    .execute(pool)
                    .await
                    .map_err(err)?;
                Ok(true)
            }
            _ => Err(Error::Protocol("a key of the other database".into())),
        }
    }

    /// Ends whatever hold `name` has, as an administrator would. True when there was one.
    pub(crate) async fn force_unlock(&self, tables: &Tables, name: &str) -> Result<bool> {
        let err = |e| db_error(self.dialect(), &tables.lock, e);
        let lock = &tables.lock;
        match self {
            Self::Postgres(pool) => {
                let channel = tables.channel();
                let gone: Option<i32> = sqlx::query_scalar(&format!(
                    "WITH gone AS (DELETE FROM {lock} WHERE name = $1 RETURNING name) \
                     SELECT 1 FROM gone CROSS JOIN LATERAL (SELECT pg_notify('{channel}', gone.name)) AS announced"
                ))
                .bind(name)
                .fetch_optional(pool)
                .await
                .map_err(err)?;
                Ok(gone.is_some())
            }
            Self::MySql(pool) => Ok(my_execute(
                pool,
                &format!("DELETE FROM {lock} WHERE name = ?"),
                &[Arg::Bytes(name.as_bytes())],
            )
            .await
            .map_err(err)?
            .rows_affected()
                == 1),
        }
    }
}

/// [`Db::attempt`] on PostgreSQL.
async fn attempt_postgres(
    pool: &PgPool,
    tables: &Tables,
    name: &str,
    owner: &str,
    lease: Duration,
) -> Result<Attempt> {
    let err = |e| db_error(Dialect::Postgres, &tables.lock, e);
    let (lock, fence) = (&tables.lock, &tables.fence);
    // Take-over draws its token inside ON CONFLICT, under the row's lock; an
    // insert returns fence 0 and draws next. When busy, the second branch
    // reads the holder's expiry from the statement's snapshot.
    let sql = format!(
        "WITH won AS (\
               INSERT INTO {lock} AS l (name, owner, hold_count, fence, expires_at) \
               VALUES ($1, $2, 1, 0, clock_timestamp() + $3::float8 * interval '1 microsecond') \
               ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, hold_count = 1, \
                 fence = nextval('{fence}'), \
                 expires_at = clock_timestamp() + $3::float8 * interval '1 microsecond' \
               WHERE l.expires_at <= clock_timestamp() \
               RETURNING l.fence) \
             SELECT fence, NULL::bigint AS left_us FROM won \
             UNION ALL \
             SELECT NULL, GREATEST(0, extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint \
               FROM {lock} WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM won)"
    );
    let row = sqlx::query(&sql)
        .bind(name)
        .bind(owner)
        .bind(micros(lease) as f64)
        .fetch_optional(pool)
        .await
        .map_err(err)?;
    let Some(row) = row else {
        // Taken by a statement our snapshot does not show: busy, expiry
        // unknown.
        return Ok(Attempt::Busy(None));
    };
    let won: Option<i64> = row.try_get(0).map_err(err)?;
    match won {
        Some(0) => {
            let drawn: Option<i64> = sqlx::query_scalar(&format!(
                "UPDATE {lock} SET fence = nextval('{fence}') \
                     WHERE name = $1 AND owner = $2 RETURNING fence"
            ))
            .bind(name)
            .bind(owner)
            .fetch_optional(pool)
            .await
            .map_err(err)?;
            // Gone already: only a lease shorter than a round trip allows it.
            drawn.map_or(Ok(Attempt::Busy(None)), |t| token(t).map(Attempt::Won))
        }
        Some(t) => token(t).map(Attempt::Won),
        None => {
            let left: Option<i64> = row.try_get(1).map_err(err)?;
            Ok(Attempt::Busy(
                left.map(|us| Duration::from_micros(us.max(0) as u64)),
            ))
        }
    }
}

/// [`Db::attempt`] on MySQL/MariaDB.
async fn attempt_mysql(
    pool: &MySqlPool,
    tables: &Tables,
    name: &str,
    owner: &str,
    lease: Duration,
) -> Result<Attempt> {
    let err = |e| db_error(Dialect::MySql, &tables.lock, e);
    let (lock, fence) = (&tables.lock, &tables.fence);
    let (name, lease) = (Arg::Bytes(name.as_bytes()), Arg::Int(micros(lease)));
    let insert = format!(
        "INSERT IGNORE INTO {lock} (name, owner, hold_count, fence, expires_at) \
             VALUES (?, ?, 1, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"
    );
    let take_over = format!(
        "UPDATE {lock} SET owner = ?, hold_count = 1, fence = 0, \
               expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE name = ? AND expires_at <= UTC_TIMESTAMP(6)"
    );
    // A deadlock victim among contenders for one row is simply not the
    // winner this time.
    let won = |done: Result<MySqlQueryResult, sqlx::Error>| match done {
        Ok(done) => Ok(done.rows_affected() == 1),
        Err(e) if is_deadlock(&e) => Ok(false),
        Err(e) => Err(err(e)),
    };
    let owner_arg = Arg::Text(owner);
    let won = won(my_execute_once(pool, &insert, &[name, owner_arg, lease]).await)?
        || won(my_execute_once(pool, &take_over, &[owner_arg, lease, name]).await)?;
    if !won {
        // Waiters poll; the holder's expiry would not bound them any better.
        return Ok(Attempt::Busy(None));
    }
    // The counter trick: LAST_INSERT_ID(expr) hands expr back in the reply.
    let drawn = my_execute(
        pool,
        &format!("UPDATE {fence} SET v = LAST_INSERT_ID(v + 1) WHERE id = 1"),
        &[],
    )
    .await
    .map_err(err)?;
    if drawn.rows_affected() != 1 {
        return Err(Error::store(crate::error::SqlError::MissingSchema {
            store: Dialect::MySql.store(),
            table: tables.fence.clone(),
        }));
    }
    let drawn = drawn.last_insert_id();
    let set = my_execute(
        pool,
        &format!("UPDATE {lock} SET fence = ? WHERE name = ? AND owner = ?"),
        &[Arg::Uint(drawn), name, owner_arg],
    )
    .await
    .map_err(err)?;
    Ok(if set.rows_affected() == 1 {
        Attempt::Won(FencingToken::new(drawn))
    } else {
        Attempt::Busy(None)
    })
}
