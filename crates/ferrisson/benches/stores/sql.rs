//! PostgreSQL and MariaDB (the machine's databases, as plain databases): `TableLock`
//! against a raw insert + delete of a row, `SessionLock` against the database's own lock
//! functions on one raw connection.

use std::sync::Arc;
use std::time::Instant;

use ferrisson::sql::{Client, advisory_key, mysql_lock_name};
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection as _, Executor as _};
use tokio::sync::Mutex;

use super::measure::{
    self, Config, Contestant, Held, Hold, Pair, contend, handoff_header, handoff_row, lock_hold,
    lock_pair, round_trip_p50,
};

/// The lock table the library's client uses, created for the run and dropped after.
const LOCK_TABLE: &str = "ferrisson_bench_lock";
/// The floor's table: the lock table's columns, no sequence.
const FLOOR_TABLE: &str = "ferrisson_bench_floor";
/// The pool size of the library's client (its default) and of the floor's pool.
const POOL: u32 = 10;
/// The pool size of each hand-off contender's client: the fewest a client may have
/// (PostgreSQL's listening connection and one for statements; a contender runs one
/// statement at a time), so that 32 clients fit in the database's 100 connections
/// beside the floor's pool and other users.
const CONTENDER_POOL: u32 = 2;

/// Which database.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Postgres,
    MariaDb,
}

impl Database {
    fn url(self) -> String {
        match self {
            Self::Postgres => std::env::var("FERRISSON_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
            Self::MariaDb => std::env::var("FERRISSON_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned()),
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::MariaDb => "MariaDB",
        }
    }
}

/// A raw pool of either database.
#[derive(Clone)]
enum Pool {
    Pg(PgPool),
    My(MySqlPool),
}

/// A raw connection of either database.
enum Conn {
    Pg(PgConnection),
    My(MySqlConnection),
}

impl Pool {
    /// A pool of `size` connections; `ping` makes it ping a connection before handing it
    /// out (sqlx's default, which the library's client keeps).
    async fn connect(database: Database, size: u32, ping: bool) -> anyhow::Result<Self> {
        let url = database.url();
        Ok(match database {
            Database::Postgres => Self::Pg(
                PgPoolOptions::new()
                    .max_connections(size)
                    .test_before_acquire(ping)
                    .connect(&url)
                    .await?,
            ),
            Database::MariaDb => Self::My(
                MySqlPoolOptions::new()
                    .max_connections(size)
                    .test_before_acquire(ping)
                    .connect(&url)
                    .await?,
            ),
        })
    }

    async fn close(&self) {
        match self {
            Self::Pg(pool) => pool.close().await,
            Self::My(pool) => pool.close().await,
        }
    }

    async fn execute(&self, sql: &str) -> anyhow::Result<()> {
        match self {
            Self::Pg(pool) => {
                pool.execute(sql).await?;
            }
            Self::My(pool) => {
                pool.execute(sql).await?;
            }
        }
        Ok(())
    }

    /// Creates the floor's table (dropped first if a run left it).
    async fn create_floor_table(&self) -> anyhow::Result<()> {
        self.execute(&format!("DROP TABLE IF EXISTS {FLOOR_TABLE}"))
            .await?;
        self.execute(&match self {
            Self::Pg(_) => format!(
                "CREATE TABLE {FLOOR_TABLE} (name text PRIMARY KEY, owner text NOT NULL, \
                 hold_count integer NOT NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL)"
            ),
            Self::My(_) => format!(
                "CREATE TABLE {FLOOR_TABLE} (name VARBINARY(255) NOT NULL PRIMARY KEY, \
                 owner CHAR(32) NOT NULL, hold_count INT UNSIGNED NOT NULL, \
                 fence BIGINT UNSIGNED NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
            ),
        })
        .await
    }

    /// Drops the floor's table and the library's lock table and fence object.
    async fn drop_tables(&self) -> anyhow::Result<()> {
        self.execute(&format!("DROP TABLE IF EXISTS {FLOOR_TABLE}"))
            .await?;
        self.execute(&format!("DROP TABLE IF EXISTS {LOCK_TABLE}"))
            .await?;
        self.execute(&match self {
            Self::Pg(_) => format!("DROP SEQUENCE IF EXISTS {LOCK_TABLE}_fence"),
            Self::My(_) => format!("DROP TABLE IF EXISTS {LOCK_TABLE}_fence"),
        })
        .await
    }

    /// The floor of a table lock: insert the name's row (expiry in the database's time,
    /// as the lock table's), delete it by name and owner. Two statements, two commits.
    async fn insert_delete(&self, name: &str) -> anyhow::Result<()> {
        let owner = format!("{:032x}", rand::random::<u128>());
        let deleted = match self {
            Self::Pg(pool) => {
                sqlx::query(&format!(
                    "INSERT INTO {FLOOR_TABLE} (name, owner, hold_count, fence, expires_at) \
                     VALUES ($1, $2, 1, 0, clock_timestamp() + interval '30 seconds')"
                ))
                .bind(name)
                .bind(&owner)
                .execute(pool)
                .await?;
                sqlx::query(&format!(
                    "DELETE FROM {FLOOR_TABLE} WHERE name = $1 AND owner = $2"
                ))
                .bind(name)
                .bind(&owner)
                .execute(pool)
                .await?
                .rows_affected()
            }
            Self::My(pool) => {
                sqlx::query(&format!(
                    "INSERT INTO {FLOOR_TABLE} (name, owner, hold_count, fence, expires_at) \
                     VALUES (?, ?, 1, 0, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND)"
                ))
                .bind(name.as_bytes())
                .bind(&owner)
                .execute(pool)
                .await?;
                sqlx::query(&format!(
                    "DELETE FROM {FLOOR_TABLE} WHERE name = ? AND owner = ?"
                ))
                .bind(name.as_bytes())
                .bind(&owner)
                .execute(pool)
                .await?
                .rows_affected()
            }
        };
        anyhow::ensure!(deleted == 1, "the floor's row was not deleted");
        Ok(())
    }
}

impl Conn {
    async fn connect(database: Database) -> anyhow::Result<Self> {
        let url = database.url();
        Ok(match database {
            Database::Postgres => Self::Pg(PgConnection::connect(&url).await?),
            Database::MariaDb => Self::My(MySqlConnection::connect(&url).await?),
        })
    }

    /// One round trip: `SELECT 1`.
    async fn select_one(&mut self) -> anyhow::Result<()> {
        let one: i32 = match self {
            Self::Pg(conn) => sqlx::query_scalar("SELECT 1").fetch_one(&mut *conn).await?,
            Self::My(conn) => sqlx::query_scalar("SELECT 1").fetch_one(&mut *conn).await?,
        };
        anyhow::ensure!(one == 1, "SELECT 1 answered {one}");
        Ok(())
    }

    /// The database's session lock on `name` (the key or name the library derives from
    /// it), waiting in the server when it is held: `pg_advisory_lock`, `GET_LOCK` with a
    /// day's timeout.
    async fn lock(&mut self, name: &str) -> anyhow::Result<()> {
        match self {
            Self::Pg(conn) => {
                // (`pg_advisory_lock` returns void, which no Rust type decodes.)
                let _: i32 = sqlx::query_scalar("SELECT 1 FROM pg_advisory_lock($1)")
                    .bind(advisory_key(name))
                    .fetch_one(&mut *conn)
                    .await?;
            }
            Self::My(conn) => {
                let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 86400)")
                    .bind(mysql_lock_name(name))
                    .fetch_one(&mut *conn)
                    .await?;
                anyhow::ensure!(got == Some(1), "GET_LOCK answered {got:?}");
            }
        }
        Ok(())
    }

    /// `pg_advisory_unlock`, `RELEASE_LOCK`.
    async fn unlock(&mut self, name: &str) -> anyhow::Result<()> {
        let released = match self {
            Self::Pg(conn) => {
                sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
                    .bind(advisory_key(name))
                    .fetch_one(&mut *conn)
                    .await?
            }
            Self::My(conn) => {
                sqlx::query_scalar::<_, Option<i64>>("SELECT RELEASE_LOCK(?)")
                    .bind(mysql_lock_name(name))
                    .fetch_one(&mut *conn)
                    .await?
                    == Some(1)
            }
        };
        anyhow::ensure!(released, "the session lock was not held");
        Ok(())
    }
}

/// The session-lock floor: lock + unlock of `name` on one raw connection shared by
/// every name (as the library's client shares its one session). Holding the connection
/// across both statements instead made 64 tasks run at a fifth of one task's rate on
/// this machine (a `tokio::sync::Mutex` hand-off per pair between parked tasks), a cost
/// of the harness, not of the database.
fn session_floor_pair(conn: &Arc<Mutex<Conn>>, name: String) -> Pair {
    let conn = Arc::clone(conn);
    let name: Arc<str> = Arc::from(name);
    Box::new(move || {
        let (conn, name) = (Arc::clone(&conn), Arc::clone(&name));
        Box::pin(async move {
            // The connection is taken per statement, as the library takes its session:
            // other tasks' statements may run between the two.
            conn.lock().await.lock(&name).await?;
            conn.lock().await.unlock(&name).await
        })
    })
}

/// A hand-off floor contender: the database's own waiting session lock on a raw
/// connection of its own.
fn session_floor_hold(conn: Conn, name: &str) -> Hold {
    let conn = Arc::new(Mutex::new(conn));
    let name: Arc<str> = Arc::from(name);
    Box::new(move |hold| {
        let (conn, name) = (Arc::clone(&conn), Arc::clone(&name));
        Box::pin(async move {
            let mut conn = conn.lock().await;
            conn.lock(&name).await?;
            let granted = Instant::now();
            tokio::time::sleep(hold).await;
            let released = Instant::now();
            conn.unlock(&name).await?;
            Ok(Held { granted, released })
        })
    })
}

/// Lets the connections of a row's dropped clients close before the next row opens
/// its own (the database allows 100 or 151 at once, and other users share it).
async fn settle() {
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
}

fn lock_url(database: Database) -> String {
    let url = database.url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}table={LOCK_TABLE}")
}

/// A library client on the bench's lock table, with `size` pool connections.
async fn client(database: Database, size: u32) -> anyhow::Result<Client> {
    Ok(Client::builder(&lock_url(database))
        .max_connections(size)
        .connect()
        .await?)
}

/// Every table of one database.
pub async fn run(database: Database, config: &Config) -> anyhow::Result<()> {
    println!(
        "\n## {} (load before: {})\n",
        database.title(),
        measure::load_average()
    );
    let pool = Pool::connect(database, POOL, false).await?;
    pool.drop_tables().await?;
    pool.create_floor_table().await?;
    let result = tables(database, config, &pool).await;
    pool.drop_tables().await?;
    pool.close().await;
    println!("\n(load after: {})", measure::load_average());
    result
}

async fn tables(database: Database, config: &Config, pool: &Pool) -> anyhow::Result<()> {
    let library = client(database, POOL).await?;
    library.create_schema().await?;
    let pinging = Pool::connect(database, POOL, true).await?;
    let session_conn = Arc::new(Mutex::new(Conn::connect(database).await?));
    let reference = Arc::new(Mutex::new(Conn::connect(database).await?));
    let advisory = match database {
        Database::Postgres => "`pg_advisory_lock` + `pg_advisory_unlock`",
        Database::MariaDb => "`GET_LOCK` + `RELEASE_LOCK`",
    };
    let insert_delete = |label: &str, pool: &Pool| {
        let pool = pool.clone();
        Contestant::new(label, move |name| {
            let pool = pool.clone();
            async move {
                let name: Arc<str> = Arc::from(name);
                let pair: Pair = Box::new(move || {
                    let (pool, name) = (pool.clone(), Arc::clone(&name));
                    Box::pin(async move { pool.insert_delete(&name).await })
                });
                Ok(pair)
            }
        })
    };
    let table_rows = || {
        let client = library.clone();
        vec![
            insert_delete("floor: INSERT + DELETE of a row", pool),
            insert_delete(
                "floor through a pool that pings each connection it hands out (sqlx's default, kept by the library)",
                &pinging,
            ),
            Contestant::new("`TableLock`", move |name| {
                let lock = client.lock(&name);
                async move { Ok(lock_pair(lock?)) }
            }),
        ]
    };
    let session_rows = || {
        let (conn, client) = (Arc::clone(&session_conn), library.clone());
        vec![
            Contestant::new(
                format!("floor: {advisory} on one connection"),
                move |name| {
                    let pair = session_floor_pair(&conn, name);
                    async move { Ok(pair) }
                },
            ),
            Contestant::new("`SessionLock`", move |name| {
                let lock = client.session_lock(&name);
                async move { Ok(lock_pair(lock?)) }
            }),
        ]
    };
    let round_trip = {
        let conn = Arc::clone(&reference);
        Contestant::new(
            "one round trip (`SELECT 1` on a raw connection)",
            move |_| {
                let conn = Arc::clone(&conn);
                async move {
                    let pair: Pair = Box::new(move || {
                        let conn = Arc::clone(&conn);
                        Box::pin(async move { conn.lock().await.select_one().await })
                    });
                    Ok(pair)
                }
            },
        )
    };
    println!("#### Lock table");
    measure::uncontended(&table_rows(), &round_trip, None, config).await?;
    measure::throughput(&table_rows(), config).await?;
    println!("\n#### Session lock");
    measure::uncontended(&session_rows(), &round_trip, None, config).await?;
    measure::throughput(&session_rows(), config).await?;

    // Only the reference connection stays open: 32 contenders with a client each need
    // the database's connections.
    drop(library);
    pinging.close().await;
    drop(session_conn);
    let rtt_pair = round_trip.pair("round-trip".to_owned()).await?;
    handoffs(database, config, advisory, rtt_pair).await
}

/// The hand-off table: the database's own waiting session lock, `SessionLock` and
/// `TableLock`, each contender on its own connection or client.
async fn handoffs(
    database: Database,
    config: &Config,
    advisory: &str,
    mut rtt_pair: Pair,
) -> anyhow::Result<()> {
    handoff_header(config);
    for contenders in [2, 8, 32] {
        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        // The session floor: the database queues the waiters itself.
        let name = format!("handoff-session-floor-{contenders}");
        let mut holds = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            holds.push(session_floor_hold(Conn::connect(database).await?, &name));
        }
        let floor = contend(holds, config.grants, config.pace).await?;
        handoff_row(
            contenders,
            &format!("floor: {advisory}, waiting in the server"),
            &floor,
            rtt,
            None,
        );
        settle().await;

        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        let name = format!("handoff-session-lock-{contenders}");
        let mut clients = Vec::with_capacity(contenders);
        let mut holds = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            let c = client(database, CONTENDER_POOL).await?;
            holds.push(lock_hold(c.session_lock(&name)?));
            clients.push(c);
        }
        let run = contend(holds, config.grants, config.pace).await?;
        handoff_row(contenders, "`SessionLock`", &run, rtt, Some(floor.p50()));
        drop(clients);
        settle().await;

        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        let name = format!("handoff-table-lock-{contenders}");
        let mut clients = Vec::with_capacity(contenders);
        let row = async {
            let mut holds = Vec::with_capacity(contenders);
            for _ in 0..contenders {
                let c = client(database, CONTENDER_POOL).await?;
                holds.push(lock_hold(c.lock(&name)?));
                clients.push(c);
            }
            contend(holds, config.grants, config.pace).await
        };
        match row.await {
            Ok(run) => handoff_row(contenders, "`TableLock`", &run, rtt, None),
            // A database shared with other users can still run out of connections.
            Err(e) => println!("| {contenders} | `TableLock` | did not run: {e} | | | | | |"),
        }
        drop(clients);
        settle().await;
    }
    Ok(())
}
