//! The SQL stores' own errors, carried by [`ferrisson_core::Error::Store`].

use ferrisson_core::{Error, StoreError};

use crate::dialect::Dialect;

/// What only a database can report: the driver's error, or a lock table that is not
/// there.
///
/// ```
/// use ferrisson_sql::SqlError;
///
/// let error = ferrisson_core::Error::store(SqlError::MissingSchema {
///     store: "postgres",
///     table: "ferrisson_lock".into(),
/// });
/// assert!(error.to_string().contains("create_schema"));
/// assert!(error.store_error::<SqlError>().is_some());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// The database or the driver refused or failed a statement.
    #[error("{store}: {cause}")]
    Database {
        /// `postgres` or `mysql`.
        store: &'static str,
        /// The driver's error (sqlx never puts a password in its messages).
        cause: sqlx::Error,
    },

    /// The database broke a deadlock by failing this wait: PostgreSQL's `40P01`
    /// (`deadlock_detected`), MySQL's 3058 (`ER_USER_LOCK_DEADLOCK`, between `GET_LOCK`
    /// waits) or MariaDB's 1213 (`ER_LOCK_DEADLOCK`, which it raises for `GET_LOCK` waits
    /// too). Nothing was acquired by the failed wait: release what else you hold, then
    /// try again.
    #[error("{store}: deadlock: the database failed this wait to break a cycle of waiters")]
    Deadlock {
        /// `postgres` or `mysql`.
        store: &'static str,
        /// The driver's error.
        cause: sqlx::Error,
    },

    /// The lock table (or its fence sequence) does not exist.
    #[error(
        "{store}: the lock table {table} does not exist: create it with Client::create_schema() or the DDL in ferrisson-sql's docs"
    )]
    MissingSchema {
        /// `postgres` or `mysql`.
        store: &'static str,
        /// The table's name.
        table: String,
    },
}

impl SqlError {
    /// The driver's error, if this is one.
    ///
    /// ```
    /// let e = ferrisson_sql::SqlError::MissingSchema { store: "mysql", table: "t".into() };
    /// assert!(e.database_error().is_none());
    /// ```
    pub fn database_error(&self) -> Option<&sqlx::Error> {
        match self {
            Self::Database { cause, .. } | Self::Deadlock { cause, .. } => Some(cause),
            Self::MissingSchema { .. } => None,
        }
    }

    /// The SQLSTATE (PostgreSQL) or error number (MySQL, as text) the server answered
    /// with, if any.
    ///
    /// ```
    /// let e = ferrisson_sql::SqlError::MissingSchema { store: "mysql", table: "t".into() };
    /// assert_eq!(e.code(), None);
    /// ```
    pub fn code(&self) -> Option<String> {
        match self.database_error()? {
            sqlx::Error::Database(db) => db.code().map(std::borrow::Cow::into_owned),
            _ => None,
        }
    }
}

impl StoreError for SqlError {
    fn store(&self) -> &'static str {
        match self {
            Self::Database { store, .. }
            | Self::Deadlock { store, .. }
            | Self::MissingSchema { store, .. } => store,
        }
    }

    fn is_transient(&self) -> bool {
        // A deadlock victim may simply try again; so may a caller whose session the
        // server ended.
        if matches!(self, Self::Deadlock { .. }) {
            return true;
        }
        match self.database_error() {
            Some(sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_)) => true,
            Some(cause) => session_ended_by_server(cause),
            None => false,
        }
    }

    fn maybe_executed(&self) -> bool {
        // An I/O error after the statement went out: it may have run.
        matches!(self.database_error(), Some(sqlx::Error::Io(_)))
    }

    fn is_connection(&self) -> bool {
        match self.database_error() {
            Some(
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Tls(_),
            ) => true,
            Some(cause) => session_ended_by_server(cause),
            None => false,
        }
    }
}

/// MySQL/MariaDB error numbers that end the session: the connection killed (`KILL`,
/// 1927), the server shutting down (1053), a connection aborted (1152, 1184).
const MYSQL_SESSION_ENDED: [u16; 4] = [1927, 1053, 1152, 1184];

/// Whether the server answered that it ended the session: PostgreSQL's operator
/// intervention (`57P01` terminated by an administrator or a shutdown, `57P02` crash,
/// `57P03` cannot connect now) and connection exceptions (class `08`), MySQL's killed
/// connection or shutdown. The session is gone as surely as after an I/O error.
fn session_ended_by_server(cause: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = cause else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return MYSQL_SESSION_ENDED.contains(&mysql.number())
            || mysql.code().is_some_and(|state| state.starts_with("08"));
    }
    db.code()
        .is_some_and(|state| state.starts_with("08") || state.starts_with("57P"))
}

/// Converts a driver error of `dialect` to the contract's error, recognising a missing
/// lock table (`table`).
pub(crate) fn db_error(dialect: Dialect, table: &str, cause: sqlx::Error) -> Error {
    let missing = match &cause {
        sqlx::Error::Database(db) => match dialect {
            // undefined_table (a missing sequence is reported as a relation too)
            Dialect::Postgres => db.code().as_deref() == Some("42P01"),
            // ER_NO_SUCH_TABLE
            Dialect::MySql => db.code().as_deref() == Some("42S02"),
        },
        _ => false,
    };
    if missing {
        return Error::store(SqlError::MissingSchema {
            store: dialect.store(),
            table: table.to_owned(),
        });
    }
    if is_deadlock(&cause) {
        return Error::store(SqlError::Deadlock {
            store: dialect.store(),
            cause,
        });
    }
    Error::store(SqlError::Database {
        store: dialect.store(),
        cause,
    })
}

/// PostgreSQL's `deadlock_detected`.
const PG_DEADLOCK: &str = "40P01";
/// MySQL's `ER_USER_LOCK_DEADLOCK`: a `GET_LOCK` wait that would close a cycle.
const ER_USER_LOCK_DEADLOCK: u16 = 3058;
/// `ER_LOCK_DEADLOCK`: MariaDB's answer to the same `GET_LOCK` cycle (and any InnoDB
/// deadlock on either server).
const ER_LOCK_DEADLOCK: u16 = 1213;

/// Whether the database failed this statement to break a deadlock.
pub(crate) fn is_deadlock(cause: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = cause else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(mysql.number(), ER_USER_LOCK_DEADLOCK | ER_LOCK_DEADLOCK);
    }
    db.code().as_deref() == Some(PG_DEADLOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;
    use sqlx::mysql::MySqlConnection;

    fn mysql_url() -> String {
        std::env::var("FERRISSON_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
    }

    /// Two sessions each holding the `GET_LOCK` the other waits for: the server fails
    /// the wait that closes the cycle (MariaDB: 1213, MySQL: 3058), and that failure is
    /// the typed deadlock error.
    #[tokio::test]
    async fn crossing_get_lock_waits_are_a_typed_deadlock() -> anyhow::Result<()> {
        let url = mysql_url();
        let mut a = MySqlConnection::connect(&url).await?;
        let mut b = MySqlConnection::connect(&url).await?;
        let mut watcher = MySqlConnection::connect(&url).await?;
        let suffix: u64 = rand::random();
        let (one, two) = (format!("dl-1-{suffix:x}"), format!("dl-2-{suffix:x}"));
        for (conn, name) in [(&mut a, &one), (&mut b, &two)] {
            let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                .bind(name)
                .fetch_one(conn)
                .await?;
            assert_eq!(got, Some(1));
        }
        let a_id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
            .fetch_one(&mut a)
            .await?;
        let two_for_a = two.clone();
        let a_waits = tokio::spawn(async move {
            let got = sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, 30)")
                .bind(two_for_a)
                .fetch_one(&mut a)
                .await;
            (a, got)
        });
        // Until the server shows A waiting (its state, not this process's: polled).
        let started = tokio::time::Instant::now();
        loop {
            anyhow::ensure!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "the first wait never showed"
            );
            let state: Option<String> =
                sqlx::query_scalar("SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = ?")
                    .bind(a_id)
                    .fetch_optional(&mut watcher)
                    .await?;
            if state.as_deref() == Some("User lock") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let closing = sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, 30)")
            .bind(&one)
            .fetch_one(&mut b)
            .await;
        let cause = closing
            .err()
            .ok_or_else(|| anyhow::anyhow!("the cycle was granted"))?;
        assert!(is_deadlock(&cause), "{cause}");
        let error = db_error(Dialect::MySql, "t", cause);
        assert!(
            matches!(
                error.store_error::<SqlError>(),
                Some(SqlError::Deadlock { store: "mysql", .. })
            ),
            "{error}"
        );
        assert!(error.is_transient());
        sqlx::query("SELECT RELEASE_ALL_LOCKS()")
            .execute(&mut b)
            .await?;
        let (_a, got) = a_waits.await?;
        assert_eq!(got?, Some(1), "the survivor did not get its lock");
        Ok(())
    }

    #[test]
    fn other_errors_are_not_deadlocks() {
        assert!(!is_deadlock(&sqlx::Error::PoolTimedOut));
        let error = db_error(Dialect::Postgres, "t", sqlx::Error::PoolTimedOut);
        assert!(matches!(
            error.store_error::<SqlError>(),
            Some(SqlError::Database { .. })
        ));
    }
}
