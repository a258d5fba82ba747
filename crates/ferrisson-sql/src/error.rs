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
            Self::Database { cause, .. } => Some(cause),
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
            Self::Database { store, .. } | Self::MissingSchema { store, .. } => store,
        }
    }

    fn is_transient(&self) -> bool {
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
    Error::store(SqlError::Database {
        store: dialect.store(),
        cause,
    })
}
