//! The lab's own databases. The lab never writes to a database it did not create: by
//! default a fresh SQLite file under its output directory; given a PostgreSQL or
//! MySQL/MariaDB server, a schema (PostgreSQL) or database (MySQL) of its own there,
//! dropped when the run ends.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use seckill::db::{Backend, Db, redact};
use sqlx::{AnyConnection, Connection as _, Executor as _};

/// A database the lab created for one run.
#[derive(Debug)]
pub struct ScratchDb {
    url: String,
    backend: Backend,
    place: Place,
}

#[derive(Debug)]
enum Place {
    /// A SQLite file (and its WAL files), removed by `drop`.
    File(PathBuf),
    /// A schema or database on a server: `drop_sql` run on `admin_url`.
    Server { admin_url: String, drop_sql: String },
}

impl ScratchDb {
    /// A new database for the lab: a SQLite file `name.db` under `out` (an older one of
    /// that name is removed), or, with `server`, a schema or database named after
    /// `name` with a random suffix on that PostgreSQL or MySQL/MariaDB server.
    ///
    /// # Errors
    ///
    /// When `server` is a SQLite URL (the lab keeps its SQLite file under `--out`) or
    /// not a database URL, or the server refuses to create the schema or database.
    pub async fn create(server: Option<&str>, out: &Path, name: &str) -> anyhow::Result<Self> {
        let Some(server) = server else {
            return Self::sqlite(out, name);
        };
        sqlx::any::install_default_drivers();
        let backend = check_server_url(Some(server))?.unwrap_or(Backend::Sqlite);
        let unique = format!("{name}_{:012x}", rand::random::<u64>() >> 16);
        let (create_sql, drop_sql, url) = match backend {
            Backend::Sqlite => anyhow::bail!(SQLITE_REFUSED),
            Backend::Postgres => (
                format!("CREATE SCHEMA {unique}"),
                format!("DROP SCHEMA {unique} CASCADE"),
                with_search_path(server, &unique),
            ),
            Backend::MySql => (
                format!("CREATE DATABASE {unique}"),
                format!("DROP DATABASE {unique}"),
                with_database(server, &unique)?,
            ),
        };
        let mut admin = AnyConnection::connect(server)
            .await
            .with_context(|| format!("cannot connect to {}", redact(server)))?;
        admin.execute(create_sql.as_str()).await.with_context(|| {
            format!("cannot create the lab's own database on {}", redact(server))
        })?;
        let _ = admin.close().await;
        Ok(Self {
            url,
            backend,
            place: Place::Server {
                admin_url: server.to_owned(),
                drop_sql,
            },
        })
    }

    fn sqlite(out: &Path, name: &str) -> anyhow::Result<Self> {
        let path = out.join(format!("{name}.db"));
        remove_sqlite_files(&path)?;
        Ok(Self {
            url: format!("sqlite://{}?mode=rwc", path.display()),
            backend: Backend::Sqlite,
            place: Place::File(path),
        })
    }

    /// The URL `seckill serve` instances are given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Creates the service's schema in it (the migrations) and opens a small pool.
    ///
    /// # Errors
    ///
    /// When the database cannot be reached or a migration fails.
    pub async fn open(&self) -> anyhow::Result<Db> {
        Db::connect(&self.url, 2, std::time::Duration::from_secs(10)).await
    }

    /// Drops the unique (user, voucher) index so that the voucher scenario shows what
    /// each order flow does alone, and marks the database as the lab's, so that `seckill
    /// serve` accepts it without that index. Only on a database this lab created.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn without_unique_order_index(&self) -> anyhow::Result<()> {
        let mut conn = AnyConnection::connect(&self.url).await?;
        seckill::db::schema::mark_lab_scratch(&mut conn, self.backend).await?;
        let _ = conn.close().await;
        Ok(())
    }

    /// Removes the database: the file, or the schema or database on the server.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or refuses.
    pub async fn drop(self) -> anyhow::Result<()> {
        match self.place {
            Place::File(path) => remove_sqlite_files(&path),
            Place::Server {
                admin_url,
                drop_sql,
            } => {
                let mut admin = AnyConnection::connect(&admin_url).await?;
                admin
                    .execute(drop_sql.as_str())
                    .await
                    .with_context(|| format!("cannot drop the lab's own database ({drop_sql})"))?;
                let _ = admin.close().await;
                Ok(())
            }
        }
    }
}

/// `url` with the PostgreSQL `search_path` set to `schema`, so that every table the
/// service makes and uses lives there.
const SQLITE_REFUSED: &str = "invalid value for --database: it takes a PostgreSQL or MySQL/MariaDB server, where the lab creates a database of its own; on SQLite it always uses its own file under --out";

/// Checks a `--database` server URL before anything starts: PostgreSQL or
/// MySQL/MariaDB (none: the lab's own SQLite file); its backend.
pub(crate) fn check_server_url(server: Option<&str>) -> anyhow::Result<Option<Backend>> {
    let Some(server) = server else {
        return Ok(None);
    };
    let backend = Backend::of_url(server)
        .map_err(|e| anyhow::anyhow!("invalid value for --database: {e}"))?;
    anyhow::ensure!(backend != Backend::Sqlite, SQLITE_REFUSED);
    Ok(Some(backend))
}

fn with_search_path(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// `url` with its database (the path) replaced by `database`.
fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").context("a database URL has a scheme")? + 3;
    let server = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    Ok(match query {
        Some(q) => format!("{server}/{database}?{q}"),
        None => format!("{server}/{database}"),
    })
}

fn remove_sqlite_files(path: &Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        if file.exists() {
            std::fs::remove_file(&file)
                .with_context(|| format!("cannot remove {}", file.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{with_database, with_search_path};

    #[test]
    fn urls_point_at_the_lab_database() {
        assert_eq!(
            with_search_path("postgres://u@h:5432/test", "lab_1"),
            "postgres://u@h:5432/test?options=-c%20search_path%3Dlab_1"
        );
        assert_eq!(
            with_search_path("postgres://u@h/test?sslmode=disable", "lab_1"),
            "postgres://u@h/test?sslmode=disable&options=-c%20search_path%3Dlab_1"
        );
        assert_eq!(
            with_database("mysql://root@h:3306/test", "lab_1").ok(),
            Some("mysql://root@h:3306/lab_1".to_owned())
        );
        assert_eq!(
            with_database("mysql://root@h:3306", "lab_1").ok(),
            Some("mysql://root@h:3306/lab_1".to_owned())
        );
        assert_eq!(
            with_database("mysql://root@h/test?ssl-mode=disabled", "lab_1").ok(),
            Some("mysql://root@h/lab_1?ssl-mode=disabled".to_owned())
        );
    }
}
