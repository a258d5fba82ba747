//! Which database a client talks to, and the names of the lock table's objects.

use ferrisson_core::{Error, Result};

/// The database a [`Client`](crate::Client) talks to, picked by the URL's scheme.
///
/// ```
/// use ferrisson_sql::Dialect;
///
/// assert_eq!(Dialect::of_url("postgresql://db/app")?, Dialect::Postgres);
/// assert_eq!(Dialect::of_url("mariadb://db/app")?, Dialect::MySql);
/// assert_eq!(Dialect::MySql.store(), "mysql");
/// # Ok::<(), ferrisson_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL or MariaDB (`mysql://`, `mariadb://`).
    MySql,
}

impl Dialect {
    /// The dialect a URL names, by its scheme.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for any other scheme.
    pub fn of_url(url: &str) -> Result<Self> {
        let scheme = url
            .split_once("://")
            .map_or("", |(scheme, _)| scheme)
            .to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "mysql" | "mariadb" => Ok(Self::MySql),
            _ => Err(Error::invalid(
                "a database url starts with postgres://, postgresql://, mysql:// or mariadb://",
            )),
        }
    }

    /// The store's name in metrics, errors and the capability table.
    pub const fn store(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
        }
    }
}

/// The default name of the lock table.
pub const DEFAULT_TABLE: &str = "ferrisson_lock";

/// Longest table name accepted: the fence object's name appends `_fence`, and both
/// databases cap identifiers at 63 (PostgreSQL) or 64 (MySQL) characters.
const MAX_TABLE_LEN: usize = 57;

/// The lock table's objects: its name, its fence sequence (PostgreSQL) or counter table
/// (MySQL), and the notification channel (PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tables {
    pub(crate) lock: String,
    pub(crate) fence: String,
}

impl Tables {
    /// The objects of the lock table `name`. Names are spliced into statements (SQL has
    /// no bind parameters for identifiers), so only lowercase ASCII letters, digits and
    /// underscores are accepted.
    pub(crate) fn new(name: &str) -> Result<Self> {
        let valid = !name.is_empty()
            && name.len() <= MAX_TABLE_LEN
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(Error::invalid(format!(
                "a lock table name is 1 to {MAX_TABLE_LEN} lowercase ASCII letters, digits or underscores, starting with a letter or underscore; got {:?}",
                name.escape_debug().to_string()
            )));
        }
        Ok(Self {
            lock: name.to_owned(),
            fence: format!("{name}_fence"),
        })
    }

    /// The channel releases are announced on (PostgreSQL `NOTIFY`).
    pub(crate) fn channel(&self) -> &str {
        &self.lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(Tables::new("ferrisson_lock").is_ok());
        assert!(Tables::new("_t1").is_ok());
        for bad in ["", "1t", "T", "a-b", "a;drop table x", &"x".repeat(58)] {
            assert!(Tables::new(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Tables::new("t").map(|t| t.fence).ok().as_deref(),
            Some("t_fence")
        );
    }

    #[test]
    fn schemes_pick_the_dialect() {
        assert_eq!(
            Dialect::of_url("POSTGRES://x").ok(),
            Some(Dialect::Postgres)
        );
        assert_eq!(Dialect::of_url("mysql://x").ok(), Some(Dialect::MySql));
        assert!(Dialect::of_url("redis://x").is_err());
    }
}
