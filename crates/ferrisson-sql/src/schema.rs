//! The lock table's DDL, per database. The crate docs show it for the default table
//! name; [`ddl`] gives it for any.

use crate::dialect::{Dialect, Tables};

/// The statements that create the lock table `tables` on `dialect`, each idempotent
/// (`IF NOT EXISTS`), in order.
pub(crate) fn ddl(dialect: Dialect, tables: &Tables) -> Vec<String> {
    let (lock, fence) = (&tables.lock, &tables.fence);
    match dialect {
        Dialect::Postgres => vec![
            // NO CYCLE (the default, said out loud): at the end of bigint nextval fails
            // rather than handing out a token that went back.
            format!("CREATE SEQUENCE IF NOT EXISTS {fence} AS bigint MINVALUE 1 NO CYCLE"),
            format!(
                "CREATE TABLE IF NOT EXISTS {lock} (\n    \
                     name       text        PRIMARY KEY,\n    \
                     owner      text        NOT NULL,\n    \
                     hold_count integer     NOT NULL,\n    \
                     fence      bigint      NOT NULL,\n    \
                     expires_at timestamptz NOT NULL\n\
                 )"
            ),
        ],
        Dialect::MySql => vec![
            // VARBINARY: names compare byte for byte (the default collations fold case).
            format!(
                "CREATE TABLE IF NOT EXISTS {lock} (\n    \
                     name       VARBINARY(255)  NOT NULL PRIMARY KEY,\n    \
                     owner      CHAR(32)        NOT NULL,\n    \
                     hold_count INT UNSIGNED    NOT NULL,\n    \
                     fence      BIGINT UNSIGNED NOT NULL,\n    \
                     expires_at DATETIME(6)     NOT NULL\n\
                 ) ENGINE=InnoDB"
            ),
            // One counter row; BIGINT UNSIGNED fails at its end instead of wrapping.
            format!(
                "CREATE TABLE IF NOT EXISTS {fence} (\n    \
                     id TINYINT UNSIGNED NOT NULL PRIMARY KEY,\n    \
                     v  BIGINT UNSIGNED  NOT NULL\n\
                 ) ENGINE=InnoDB"
            ),
            format!("INSERT IGNORE INTO {fence} (id, v) VALUES (1, 0)"),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate docs show the default table's DDL; they must say what the code runs.
    #[test]
    fn the_crate_docs_show_the_ddl_the_code_runs() {
        let docs = include_str!("lib.rs");
        let tables = Tables::new(crate::dialect::DEFAULT_TABLE).expect("default name");
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            for statement in ddl(dialect, &tables) {
                for line in statement.lines() {
                    assert!(
                        docs.contains(&format!("//! {line}")),
                        "the crate docs lack {line:?}"
                    );
                }
            }
        }
    }
}
