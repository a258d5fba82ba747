//! The service's schema: the migrations embedded in the binary, and the check at start
//! that the database holds what the service relies on — the tables and columns it uses,
//! and the unique `(user_id, voucher_id)` index that keeps one order per user whatever
//! the order flow does.

use std::borrow::Cow;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyConnection, AnyPool, Executor as _, Row as _};

use super::Backend;

/// The unique index on `voucher_order (user_id, voucher_id)` that the migrations create.
pub const UNIQUE_ORDER_INDEX: &str = "voucher_order_user_voucher";

/// A table that marks a database the oversell lab created for itself and whose unique
/// order index it dropped on purpose; `seckill serve` accepts such a database without
/// the index, and no other.
pub const LAB_SCRATCH_MARKER: &str = "seckill_lab_scratch";

/// Every table the service uses, with the columns it reads or writes.
const TABLES: [(&str, &str); 4] = [
    ("users", "id, phone, created_at, order_fence"),
    (
        "seckill_voucher",
        "id, title, stock, begin_time, end_time, created_at",
    ),
    ("voucher_order", "id, user_id, voucher_id, created_at"),
    ("lab_stock", "id, stock, sold"),
];

/// The migrations of one backend, in order: (version, description, SQL).
fn migrations(backend: Backend) -> [(i64, &'static str, &'static str); 2] {
    match backend {
        Backend::Sqlite => [
            (
                1,
                "init",
                include_str!("../../migrations/sqlite/0001_init.sql"),
            ),
            (
                2,
                "order fence",
                include_str!("../../migrations/sqlite/0002_order_fence.sql"),
            ),
        ],
        Backend::Postgres => [
            (
                1,
                "init",
                include_str!("../../migrations/postgres/0001_init.sql"),
            ),
            (
                2,
                "order fence",
                include_str!("../../migrations/postgres/0002_order_fence.sql"),
            ),
        ],
        Backend::MySql => [
            (
                1,
                "init",
                include_str!("../../migrations/mysql/0001_init.sql"),
            ),
            (
                2,
                "order fence",
                include_str!("../../migrations/mysql/0002_order_fence.sql"),
            ),
        ],
    }
}

/// The migrations kept in `crates/seckill/migrations/<backend>/`, embedded in the binary.
#[derive(Debug)]
struct Embedded(Backend);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(self) -> BoxFuture<'s, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async move {
            Ok(migrations(self.0)
                .into_iter()
                .map(|(version, description, sql)| {
                    Migration::new(
                        version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// Applies the migrations not applied yet.
///
/// # Errors
///
/// When a migration fails, or one applied before differs from the embedded one.
pub(super) async fn migrate(pool: &AnyPool, backend: Backend) -> anyhow::Result<()> {
    let migrator = Migrator::new(Embedded(backend)).await?;
    // Several instances may start on one database at once; the migrator's lock
    // (advisory lock on PostgreSQL/MySQL) lets one apply, the rest see it applied.
    // SQLite has no such lock: a racing instance may fail on "table exists" and is
    // retried once the winner has committed.
    let mut attempt = 0;
    loop {
        match migrator.run(pool).await {
            Ok(()) => return Ok(()),
            Err(e) if backend == Backend::Sqlite && attempt < 20 => {
                attempt += 1;
                tracing::debug!(error = %e, "migration raced another instance; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Checks that every table has the columns the service uses and that the unique order
/// index exists (or that this is the lab's own database, which dropped it on purpose).
///
/// # Errors
///
/// What is missing, and the SQL that repairs it.
pub(super) async fn check(pool: &AnyPool, backend: Backend) -> anyhow::Result<()> {
    for (table, columns) in TABLES {
        let probe = format!("SELECT {columns} FROM {table} WHERE 1 = 0");
        if let Err(e) = pool.execute(probe.as_str()).await {
            anyhow::bail!(
                "table {table} does not have the columns the service uses ({columns}): {}. \
                 The migrations under crates/seckill/migrations/{}/ make them; a table of \
                 that name made by something else cannot be used",
                crate::error::one_line(&e),
                backend.name()
            );
        }
    }
    if has_unique_order_index(pool, backend).await? {
        return Ok(());
    }
    let marker = format!("SELECT 1 FROM {LAB_SCRATCH_MARKER} WHERE 1 = 0");
    if pool.execute(marker.as_str()).await.is_ok() {
        tracing::warn!(
            "this is the oversell lab's own database: its unique order index is off on purpose"
        );
        return Ok(());
    }
    anyhow::bail!(
        "voucher_order has no unique index on (user_id, voucher_id), so nothing in the \
         database stops a second order of one user. Refusing to start. Repair: remove \
         duplicate orders (SELECT user_id, voucher_id FROM voucher_order GROUP BY user_id, \
         voucher_id HAVING COUNT(*) > 1), then run: CREATE UNIQUE INDEX {UNIQUE_ORDER_INDEX} \
         ON voucher_order (user_id, voucher_id);"
    )
}

/// Whether a unique, non-partial index covers exactly `voucher_order (user_id,
/// voucher_id)`, in either column order, whatever its name.
async fn has_unique_order_index(pool: &AnyPool, backend: Backend) -> anyhow::Result<bool> {
    // (index name, column name) of every unique index, in column order.
    let sql = match backend {
        Backend::Sqlite => {
            "SELECT il.name, ii.name FROM pragma_index_list('voucher_order') AS il \
             JOIN pragma_index_info(il.name) AS ii \
             WHERE il.\"unique\" = 1 AND il.partial = 0 \
             ORDER BY il.name, ii.seqno"
        }
        Backend::Postgres => {
            "SELECT ix.relname::text, a.attname::text \
             FROM pg_index i \
             JOIN pg_class t ON t.oid = i.indrelid \
             JOIN pg_class ix ON ix.oid = i.indexrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
             WHERE t.relname = 'voucher_order' AND n.nspname = current_schema() \
             AND i.indisunique AND i.indpred IS NULL \
             ORDER BY 1, k.ord"
        }
        Backend::MySql => {
            "SELECT index_name, column_name FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = 'voucher_order' \
             AND non_unique = 0 \
             ORDER BY index_name, seq_in_index"
        }
    };
    let rows = sqlx::query(sql).fetch_all(pool).await?;
    let mut indexes: Vec<(String, Vec<String>)> = Vec::new();
    for row in rows {
        let (index, column): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        match indexes.last_mut() {
            Some((name, columns)) if *name == index => columns.push(column.to_ascii_lowercase()),
            _ => indexes.push((index, vec![column.to_ascii_lowercase()])),
        }
    }
    Ok(indexes.iter().any(|(_, columns)| {
        columns == &["user_id", "voucher_id"] || columns == &["voucher_id", "user_id"]
    }))
}

/// Drops the unique order index and marks the database as the lab's own (see
/// [`LAB_SCRATCH_MARKER`]). For the oversell lab's voucher scenario, on a database the
/// lab created: with the index gone only the order flow keeps one order per user.
///
/// # Errors
///
/// Database errors.
pub async fn mark_lab_scratch(conn: &mut AnyConnection, backend: Backend) -> anyhow::Result<()> {
    let create = format!("CREATE TABLE {LAB_SCRATCH_MARKER} (note VARCHAR(200) NOT NULL)");
    conn.execute(create.as_str()).await?;
    let note = format!(
        "INSERT INTO {LAB_SCRATCH_MARKER} (note) VALUES \
         ('made by seckill-lab; the unique order index is dropped on purpose')"
    );
    conn.execute(note.as_str()).await?;
    let drop = match backend {
        Backend::MySql => format!("DROP INDEX {UNIQUE_ORDER_INDEX} ON voucher_order"),
        Backend::Sqlite | Backend::Postgres => format!("DROP INDEX {UNIQUE_ORDER_INDEX}"),
    };
    conn.execute(drop.as_str()).await?;
    Ok(())
}
