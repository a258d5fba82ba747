//! The variants the lab runs in its own process, in the same table as the service's:
//! the database's ways (a lock table, `SELECT ... FOR UPDATE`, advisory locks, a version
//! check), the timestamp lock of the old Redis docs with and without a skewed clock, and
//! ferrisson's locks on ZooKeeper and etcd.
//!
//! Each run has `--instances` instances, each with connections of its own (a pool, a
//! ferrisson client with its session, a clock), under the same load as the service's
//! variants: `--clients` tasks at once, `--clients × --loops` requests round-robin across
//! the instances, each reading the stock and, if it is positive, writing it back one
//! less and counting the sale. The instances share the lab's process, not a `seckill
//! serve` each: what is distributed is the lock and the stock, in the store.

mod getset_timestamp;
mod instance;
mod lab_variant;
mod lock_table_naive;
mod observed;
mod redis_stock;
mod sql_stock;
mod variant;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use crate::expect::verdict_of;
use crate::load::{LoadResult, Sample};
use crate::report::VariantRow;
use getset_timestamp::GetsetLock;
use instance::{Instance, Instances, Kind, Outcome, RedisAt, Settings, SqlAt};
use lock_table_naive::NaiveLockTable;
use observed::Observed;
use redis_stock::RedisStock;
use sql_stock::SqlStock;

pub use lab_variant::LabVariant;
pub use variant::{DirectVariant, Store};

/// The load and settings of a run of a variant the lab runs itself.
///
/// ```
/// let load = seckill_lab::DirectLoad::small();
/// assert!(load.requests >= load.stock as usize);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectLoad {
    /// Tasks at once.
    pub clients: usize,
    /// Requests in all.
    pub requests: usize,
    /// Stock to sell.
    pub stock: i64,
    /// Instances, each with connections of its own.
    pub instances: usize,
    /// How long a request waits for the lock before it gives up.
    pub lock_wait: Duration,
    /// The lease of the timestamp lock.
    pub lease: Duration,
    /// The lock acquisition whose holder crashes (`db-lock-table-naive`,
    /// `getset-timestamp`); 0: none.
    pub fault_at: u64,
    /// How far ahead of the others the last instance's clock runs
    /// (`getset-timestamp-skewed`).
    pub clock_skew: Duration,
}

impl DirectLoad {
    /// A small load for tests: 20 tasks, 60 requests, 20 units, 2 instances, the crash
    /// at the 5th holder, a 500 ms lease and a clock 3 s ahead.
    pub fn small() -> Self {
        Self {
            clients: 20,
            requests: 60,
            stock: 20,
            instances: 2,
            lock_wait: Duration::from_secs(2),
            lease: Duration::from_millis(500),
            fault_at: 5,
            clock_skew: Duration::from_secs(3),
        }
    }

    /// Whether the crash comes while stock is left.
    pub fn faults(&self) -> bool {
        self.fault_at != 0 && self.fault_at <= u64::try_from(self.stock).unwrap_or(u64::MAX)
    }
}

/// Where a run's stores are: the database or coordinator `url` of its store (unused for
/// Redis), the Redis server of the stock and the timestamp lock, and the store in words.
#[derive(Debug, Clone)]
pub struct Place {
    /// The store's URL: a database's, `zk://...`, `etcd://...`.
    pub url: String,
    /// The Redis server the stock and the timestamp lock live on.
    pub redis: String,
    /// The store in words, for the page.
    pub words: String,
}

/// Runs `variant` on `store` under `load` and returns its row.
///
/// # Errors
///
/// When the store cannot be reached or the run's tables or keys cannot be made. A
/// variant that misbehaves is not an error: it is the row's verdict.
pub async fn run_direct(
    variant: DirectVariant,
    store: Store,
    place: &Place,
    load: &DirectLoad,
) -> anyhow::Result<VariantRow> {
    let mut load = *load;
    load.instances = load.instances.max(1);
    if !variant.has_fault() {
        load.fault_at = 0;
    }
    match store {
        Store::Postgres | Store::MariaDb => run_sql(variant, store, place, &load).await,
        Store::Redis | Store::ZooKeeper | Store::Etcd => {
            run_redis(variant, store, place, &load).await
        }
    }
}

/// What a run left, for its row.
struct Tally {
    load: LoadResult,
    sold: i64,
    final_stock: i64,
    /// A lock left behind with no expiry, in words.
    left_behind: Option<String>,
}

async fn run_sql(
    variant: DirectVariant,
    store: Store,
    place: &Place,
    load: &DirectLoad,
) -> anyhow::Result<VariantRow> {
    let stock = SqlStock::new(store);
    let admin = sql_stock::pool(&place.url).await?;
    let naive = NaiveLockTable::of(&stock);
    let lock_table = stock.table("lock");
    let observed = Arc::new(Observed::default());
    let result: anyhow::Result<Tally> = async {
        stock.create(&admin, load.stock).await?;
        if variant == DirectVariant::DbLockTableNaive {
            naive.create(&admin).await?;
        }
        let mut instances = Vec::with_capacity(load.instances);
        for number in 1..=load.instances {
            let at = SqlAt {
                stock: stock.clone(),
                pool: sql_stock::pool(&place.url).await?,
            };
            let kind = match variant {
                DirectVariant::DbLockTableNaive => Kind::NaiveTable(naive.clone(), at),
                DirectVariant::DbLockTable => {
                    // Its own pool at the library's default size: each waiter's try
                    // takes a connection of it.
                    let client = ferrisson::sql::Client::builder(&place.url)
                        .table(lock_table.clone())
                        .connect()
                        .await?;
                    if number == 1 {
                        client.create_schema().await?;
                    }
                    Kind::TableLock(client.lock("seckill-lab:stock")?, at)
                }
                DirectVariant::PgAdvisory | DirectVariant::MysqlGetLock => {
                    let client = ferrisson::sql::Client::builder(&place.url)
                        .max_connections(sql_stock::POOL_SIZE)
                        .connect()
                        .await?;
                    // The key is the run's own: parallel runs do not wait for each other.
                    Kind::SessionLock(client.session_lock(&stock.table("stock"))?, at)
                }
                DirectVariant::DbForUpdate => Kind::ForUpdate(at),
                DirectVariant::DbVersionCas => Kind::VersionCas(at),
                other => anyhow::bail!("{other} does not run on a database"),
            };
            instances.push(Instance { number, kind });
        }
        let load_result = drive(instances, Arc::clone(&observed), load).await;
        let (final_stock, sold) = stock.state(&admin).await?;
        let left_behind = if variant == DirectVariant::DbLockTableNaive {
            naive.left(&admin).await?.map(|owner| {
                format!(
                    "the row of {owner} in {}, with no expiry: nothing will ever delete it",
                    naive.table()
                )
            })
        } else {
            None
        };
        Ok(Tally {
            load: load_result,
            sold,
            final_stock,
            left_behind,
        })
    }
    .await;
    let mut dropped = stock.drop_tables(&admin, &["stock", "locks", "lock"]).await;
    if variant == DirectVariant::DbLockTable && dropped.is_ok() {
        // The token's sequence (PostgreSQL) or counter table (MySQL) of the lock table.
        let fence = format!("{lock_table}_fence");
        let drop = match store {
            Store::Postgres => format!("DROP SEQUENCE IF EXISTS {fence}"),
            _ => format!("DROP TABLE IF EXISTS {fence}"),
        };
        dropped = sqlx::Executor::execute(&admin, drop.as_str())
            .await
            .map(|_| ())
            .with_context(|| format!("cannot drop the lab's {fence}"));
    }
    admin.close().await;
    let tally = result?;
    dropped?;
    Ok(row(variant, store, place, load, &observed, tally))
}

async fn run_redis(
    variant: DirectVariant,
    store: Store,
    place: &Place,
    load: &DirectLoad,
) -> anyhow::Result<VariantRow> {
    let stock = RedisStock::new();
    let mut admin = redis_stock::connect(&place.redis).await?;
    let observed = Arc::new(Observed::default());
    let result: anyhow::Result<Tally> = async {
        stock.create(&mut admin, load.stock).await?;
        let mut instances = Vec::with_capacity(load.instances);
        for number in 1..=load.instances {
            let at = RedisAt {
                stock: stock.clone(),
                conn: redis_stock::connect(&place.redis).await?,
            };
            let kind = match variant {
                DirectVariant::GetsetTimestamp | DirectVariant::GetsetTimestampSkewed => {
                    // The last instance's clock runs ahead of the others'.
                    let skewed = variant == DirectVariant::GetsetTimestampSkewed
                        && number == load.instances
                        && number > 1;
                    let skew = if skewed {
                        load.clock_skew
                    } else {
                        Duration::ZERO
                    };
                    Kind::Getset(GetsetLock::new(stock.key("lock"), load.lease, skew), at)
                }
                DirectVariant::Zookeeper | DirectVariant::Etcd => {
                    let client = ferrisson::connect(&place.url)
                        .await
                        .with_context(|| format!("cannot connect to {}", store.id()))?;
                    let lock = client.lock(&stock.key("lock"))?;
                    Kind::Coordinator {
                        lock,
                        _client: client,
                        at,
                    }
                }
                other => anyhow::bail!("{other} does not run on {}", store.id()),
            };
            instances.push(Instance { number, kind });
        }
        let load_result = drive(instances, Arc::clone(&observed), load).await;
        let (final_stock, sold) = stock.state(&mut admin).await?;
        Ok(Tally {
            load: load_result,
            sold,
            final_stock,
            left_behind: None,
        })
    }
    .await;
    let deleted = stock.delete(&mut admin, &["stock", "sold", "lock"]).await;
    let tally = result?;
    deleted?;
    Ok(row(variant, store, place, load, &observed, tally))
}

/// Sends `load.requests` requests with `load.clients` tasks at once, all released
/// together, request `i` on instance `i % instances`.
async fn drive(instances: Vec<Instance>, observed: Arc<Observed>, load: &DirectLoad) -> LoadResult {
    let instances: Instances = Arc::new(instances);
    let settings = Settings {
        lock_wait: load.lock_wait,
        fault_at: load.fault_at,
    };
    let total = load.requests;
    let next = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(load.clients.max(1) + 1));
    let mut tasks = Vec::with_capacity(load.clients);
    for _ in 0..load.clients.max(1) {
        let (instances, observed, next, start) = (
            Arc::clone(&instances),
            Arc::clone(&observed),
            Arc::clone(&next),
            Arc::clone(&start),
        );
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            start.wait().await;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return mine;
                }
                let sent = Instant::now();
                let outcome = instances[i % instances.len()]
                    .deduct(i + 1, &observed, settings)
                    .await;
                mine.push((i, sample(outcome, sent.elapsed(), &observed)));
            }
        }));
    }
    start.wait().await;
    let began = Instant::now();
    let mut all = Vec::with_capacity(total);
    for task in tasks {
        if let Ok(mine) = task.await {
            all.extend(mine);
        }
    }
    let elapsed = began.elapsed();
    all.sort_by_key(|(i, _)| *i);
    LoadResult {
        samples: all.into_iter().map(|(_, s)| s).collect(),
        elapsed,
    }
}

/// A request's outcome as a sample of the load: a reply (`200`, `sold`) or an error
/// (`500`, the first error kept for the row).
fn sample(outcome: anyhow::Result<Outcome>, latency: Duration, observed: &Observed) -> Sample {
    match outcome {
        Ok(outcome) => Sample {
            status: Some(200),
            body: serde_json::json!({ "sold": outcome == Outcome::Sold }),
            latency,
        },
        Err(e) => {
            observed.error(&e);
            Sample {
                status: Some(500),
                body: serde_json::Value::Null,
                latency,
            }
        }
    }
}

fn row(
    variant: DirectVariant,
    store: Store,
    place: &Place,
    load: &DirectLoad,
    observed: &Observed,
    tally: Tally,
) -> VariantRow {
    let deadlocked = tally.left_behind.is_some();
    let (verdict, oversold, lost_updates) =
        verdict_of(load.stock, tally.sold, tally.final_stock, deadlocked, 0);
    let skewed = variant == DirectVariant::GetsetTimestampSkewed && load.instances > 1;
    VariantRow {
        variant: variant.row_name(store),
        expected: variant.expected(load.instances, load.faults()),
        verdict,
        requests: tally.load.samples.len(),
        sold: tally.sold,
        sold_by_replies: tally
            .load
            .samples
            .iter()
            .filter(|s| s.body.get("sold").and_then(serde_json::Value::as_bool) == Some(true))
            .count(),
        final_stock: tally.final_stock,
        oversold,
        lost_updates,
        errors: tally.load.errors(),
        gave_up: Observed::count(&observed.gave_up),
        late_writes_refused: 0,
        foreign_deletes: 0,
        throughput: tally.load.throughput(),
        p50_ms: tally.load.latency_ms(0.5),
        p90_ms: tally.load.latency_ms(0.9),
        p99_ms: tally.load.latency_ms(0.99),
        max_ms: tally.load.latency_ms(1.0),
        faults: observed.events(),
        lock_left: None,
        ttl_samples: Vec::new(),
        ttl_refreshed: 0,
        runs_on: Some(place.words.clone()),
        in_process_instances: Some(load.instances),
        double_holds: Observed::count(&observed.double_holds),
        cas_conflicts: Observed::count(&observed.cas_conflicts),
        clock_skew_ms: skewed
            .then(|| i64::try_from(load.clock_skew.as_millis()).unwrap_or(i64::MAX)),
        left_behind: tally.left_behind,
        first_error: observed.first_error(),
    }
}
