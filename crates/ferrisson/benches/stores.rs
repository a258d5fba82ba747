//! Lock benchmarks of the stores other than Redis, each against a raw floor measured in
//! the same run: PostgreSQL and MariaDB (the machine's own, db `test`, as plain
//! databases), ZooKeeper (a private standalone server) and etcd (a private one-member
//! cluster), both started by the test kit.
//!
//! `cargo bench -p ferrisson --all-features --bench stores` runs every store; name some
//! to run only those: `-- postgres mariadb zookeeper etcd`. Run without `--bench`
//! (`cargo test --benches`), it makes a short smoke pass. `STORES_BENCH_PAIRS`,
//! `_ROUNDS`, `_TASKS`, `_SLICE_ROUNDS`, `_SLICE_MS`, `_GRANTS`, `_HOLD_US`, `_PAUSE_US`,
//! `_WAITED_US` change the sizes; `FERRISSON_TEST_POSTGRES_URL` and
//! `FERRISSON_TEST_MYSQL_URL` the databases.
//!
//! Per store, as markdown tables:
//!
//! - uncontended acquire + release, one pair at a time: p50 and p99, as a ratio to the
//!   floor's p50 and to one round trip measured in the same rounds;
//! - throughput of 64 tasks, each on a name of its own, in interleaved rounds with the
//!   floor: pairs/s and the median of the per-round ratios to the floor;
//! - contended hand-off with 2, 8 and 32 contenders on one name, each on its own client
//!   (as separate processes would be), holding 3 ms and pausing 1 ms after a release:
//!   from the holder starting its release to another contender, already waiting,
//!   holding; a floor row where the store has a waiting primitive of its own, and the
//!   round trip measured right before each row.
//!
//! Floors: `TableLock` against an `INSERT` + `DELETE` of a row (a table with the lock
//! table's columns, through a pool of the client's size); `SessionLock` against
//! `pg_advisory_lock` + `pg_advisory_unlock` (PostgreSQL) or `GET_LOCK` + `RELEASE_LOCK`
//! (MariaDB) on one raw connection; ZooKeeper's `Lock` against create + delete of an
//! ephemeral sequential node with `zookeeper-client`; etcd's `Lock` against a
//! put-if-absent transaction + delete with `etcd-client`.

mod stores {
    pub mod etcd;
    pub mod measure;
    pub mod sql;
    pub mod zookeeper;
}

use stores::measure::Config;
use stores::sql::Database;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = !args.iter().any(|a| a == "--bench");
    let wanted: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let runs = |store: &str| wanted.is_empty() || wanted.contains(&store);
    let config = Config::from_env(quick);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        if runs("postgres") {
            stores::sql::run(Database::Postgres, &config).await?;
        }
        if runs("mariadb") {
            stores::sql::run(Database::MariaDb, &config).await?;
        }
        if runs("zookeeper") {
            stores::zookeeper::run(&config).await?;
        }
        if runs("etcd") {
            stores::etcd::run(&config).await?;
        }
        anyhow::Ok(())
    })
}
