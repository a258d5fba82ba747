//! The lab runner (`seckill lab`): starts Redis servers and `seckill serve` processes,
//! fires the seed's load at every variant, checks the invariants in Redis and the
//! database, then runs the voucher scenario with the seed's lock flow, the same flow
//! without the lock, and the Lua flow.

mod bench;
mod cluster;
mod load;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use ferrisson_testkit::RedisServer;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

pub use bench::{BenchOptions, BenchReport, BenchRow, bench};
pub use cluster::{Cluster, InstanceArgs, LISTENING_PREFIX};
pub use load::{LoadResult, MakeRequest, Sample, fire};
pub use report::{Report, VariantRow, VoucherRow};

use crate::app::OrderFlow;
use crate::db::Db;
use crate::oversell::{LabConfig, LabState, Variant, Verdict};

/// Everything `seckill lab` can be told.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use seckill::runner::{self, LabOptions};
/// use seckill::{Variant, Verdict};
///
/// // A small lab: 20 clients x 2 loops against 20 units, two variants, no vouchers.
/// let options = LabOptions {
///     clients: 20,
///     loops: 2,
///     stock: 20,
///     variants: vec![Variant::Naive, Variant::TokenLua],
///     vouchers: false,
///     ..LabOptions::new("target/release/seckill".into())
/// };
/// let report = runner::run(&options).await?;
/// assert_eq!(report.variants[1].verdict, Verdict::Correct);
/// println!("{}", report.table());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The `seckill` binary to start instances from.
    pub binary: PathBuf,
    /// Concurrent clients.
    pub clients: usize,
    /// Requests per client.
    pub loops: usize,
    /// Stock of every run.
    pub stock: i64,
    /// Instances to start.
    pub instances: usize,
    /// Variants to run, in order.
    pub variants: Vec<Variant>,
    /// An existing Redis to use.
    pub redis: Option<String>,
    /// Three existing Redis servers for redlock.
    pub redlock_redis: Vec<String>,
    /// An existing database to use (its unique order index is dropped).
    pub database: Option<String>,
    /// Output directory.
    pub out: PathBuf,
    /// Lease of the expiring hand-made locks.
    pub lease: Duration,
    /// How long a request retries a held lock.
    pub lock_wait: Duration,
    /// The n-th lock holder gets the injected fault.
    pub fault_at: u64,
    /// The watchdog variant's stall.
    pub stall: Duration,
    /// The watchdog variant stalls when the stock read is a multiple of this (seed: 100).
    pub stall_every: i64,
    /// Watchdog lease of the instances' locks.
    pub watchdog_lease: Duration,
    /// Voucher scenario: buyers.
    pub users: usize,
    /// Voucher scenario: attempts per buyer.
    pub attempts: usize,
    /// Whether to run the voucher scenario.
    pub vouchers: bool,
    /// Whether to draw a progress bar.
    pub progress: bool,
}

impl LabOptions {
    /// The seed's load and the lab's defaults, with instances started from `binary`.
    pub fn new(binary: PathBuf) -> Self {
        Self {
            binary,
            clients: 200,
            loops: 4,
            stock: 200,
            instances: 2,
            variants: Variant::ALL.to_vec(),
            redis: None,
            redlock_redis: Vec::new(),
            database: None,
            out: PathBuf::from("target/lab"),
            lease: Duration::from_secs(1),
            lock_wait: Duration::from_secs(2),
            fault_at: 50,
            stall: Duration::from_millis(1500),
            stall_every: 100,
            watchdog_lease: Duration::from_secs(3),
            users: 1000,
            attempts: 3,
            vouchers: true,
            progress: false,
        }
    }
}

/// Redis servers the lab started itself (killed when dropped).
struct OwnServers {
    _servers: Vec<RedisServer>,
}

fn start_servers(n: usize) -> anyhow::Result<(Vec<String>, OwnServers)> {
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(
            RedisServer::start()
                .context("cannot start redis-server (install it or pass --redis)")?,
        );
    }
    let urls = servers.iter().map(RedisServer::url).collect();
    Ok((urls, OwnServers { _servers: servers }))
}

fn fresh_sqlite(out: &std::path::Path, name: &str) -> anyhow::Result<String> {
    let path = out.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        if file.exists() {
            std::fs::remove_file(&file)
                .with_context(|| format!("cannot remove {}", file.display()))?;
        }
    }
    Ok(format!("sqlite://{}?mode=rwc", path.display()))
}

fn progress_bar(enabled: bool, len: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn http_client(clients: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(clients.max(1))
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// Runs the lab and writes `report.json`, `table.txt` and `chart.svg` under `out`.
///
/// # Errors
///
/// When a Redis server, the database or an instance cannot be started, or a request to
/// set up a run fails. A variant that misbehaves is not an error: it is the lab's result.
pub async fn run(options: &LabOptions) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    let (redis_url, _main) = match &options.redis {
        Some(url) => (url.clone(), None),
        None => {
            let (urls, own) = start_servers(1)?;
            (urls[0].clone(), Some(own))
        }
    };
    let needs_redlock = options.variants.contains(&Variant::Redlock);
    let (redlock, _redlock_servers) = if !options.redlock_redis.is_empty() || !needs_redlock {
        (options.redlock_redis.clone(), None)
    } else {
        let (urls, own) = start_servers(3)?;
        (urls, Some(own))
    };
    let database = match &options.database {
        Some(url) => url.clone(),
        None => fresh_sqlite(&options.out, "lab.db")?,
    };
    // The voucher scenario shows what the lock alone does: no unique index behind it.
    let db = Db::connect(&database, 2).await?;
    db.drop_unique_order_index().await?;
    let mut conn = redis::Client::open(redis_url.as_str())?
        .get_connection_manager()
        .await?;

    let instance_args = InstanceArgs {
        binary: options.binary.clone(),
        redis: redis_url.clone(),
        database: database.clone(),
        redlock,
        order_flow: OrderFlow::Lock,
        watchdog_lease: options.watchdog_lease,
        lab: LabConfig {
            lease: options.lease,
            lock_wait: options.lock_wait,
            fault_at: options.fault_at,
            stall: options.stall,
            stall_every: options.stall_every,
            redlock_ttl: Duration::from_secs(30),
        },
        log_dir: Some(options.out.join("logs")),
    };
    let total = options.clients * options.loops;
    let voucher_requests = if options.vouchers {
        3 * (options.users + options.users * options.attempts)
    } else {
        0
    };
    let bar = progress_bar(
        options.progress,
        (options.variants.len() * total + voucher_requests) as u64,
    );
    let http = http_client(options.clients)?;

    let cluster = Cluster::start(options.instances, &instance_args).await?;
    let mut rows = Vec::new();
    for &variant in &options.variants {
        bar.set_message(variant.name());
        let row = run_variant(&http, &cluster, &mut conn, &db, options, variant, &bar).await?;
        rows.push(row);
    }

    let mut vouchers = Vec::new();
    if options.vouchers {
        bar.set_message("vouchers, lock");
        vouchers.push(run_vouchers(&http, &cluster, &db, options, OrderFlow::Lock, &bar).await?);
        cluster.stop().await?;
        for flow in [OrderFlow::NoLock, OrderFlow::Lua] {
            let other = Cluster::start(
                options.instances,
                &InstanceArgs {
                    order_flow: flow,
                    ..instance_args.clone()
                },
            )
            .await?;
            bar.set_message(format!("vouchers, {}", flow.name()));
            vouchers.push(run_vouchers(&http, &other, &db, options, flow, &bar).await?);
            other.stop().await?;
        }
    } else {
        cluster.stop().await?;
    }
    bar.finish_and_clear();
    db.close().await;

    let report = Report::new(options, db.backend(), rows, vouchers);
    report.write(&options.out)?;
    Ok(report)
}

/// Round-robin over the instances by request index.
fn instance(urls: &[String], i: usize) -> &str {
    &urls[i % urls.len()]
}

async fn run_variant(
    http: &reqwest::Client,
    cluster: &Cluster,
    conn: &mut redis::aio::ConnectionManager,
    db: &Db,
    options: &LabOptions,
    variant: Variant,
    bar: &ProgressBar,
) -> anyhow::Result<VariantRow> {
    let urls: Arc<Vec<String>> = Arc::new(cluster.urls().to_vec());
    let reset = http
        .post(format!("{}/lab/stock", urls[0]))
        .json(&serde_json::json!({ "stock": options.stock }))
        .send()
        .await?;
    anyhow::ensure!(
        reset.status().is_success(),
        "POST /lab/stock failed: {}",
        reset.status()
    );
    let make: MakeRequest = {
        let urls = Arc::clone(&urls);
        Arc::new(move |http, i| {
            http.post(format!(
                "{}/lab/deduct/{}",
                instance(&urls, i),
                variant.name()
            ))
        })
    };
    let progress = bar.clone();
    let load = fire(
        http,
        options.clients,
        options.clients * options.loops,
        make,
        Arc::new(move || progress.inc(1)),
    )
    .await;
    let state = LabState::read(conn, db).await?;
    // A fault is injected when its holder comes while stock is left.
    let faults = options.fault_at != 0 && options.fault_at <= options.stock as u64;
    let expected = variant.expected_in(options.instances, faults);
    Ok(VariantRow::new(
        variant,
        expected,
        options.stock,
        &load,
        &state,
    ))
}

/// Counts of reply codes (`created` for an order, else the error code).
fn reply_codes(load: &LoadResult) -> BTreeMap<String, usize> {
    let mut codes = BTreeMap::new();
    for s in &load.samples {
        let code = match (s.status, s.body.get("code").and_then(|c| c.as_str())) {
            (Some(200), _) => "created".to_owned(),
            (_, Some(code)) => code.to_owned(),
            (Some(status), None) => format!("HTTP {status}"),
            (None, None) => "transport error".to_owned(),
        };
        *codes.entry(code).or_insert(0) += 1;
    }
    codes
}

#[derive(Debug, Serialize)]
struct NewVoucher {
    title: String,
    stock: i64,
    begin_time: String,
    end_time: String,
}

async fn run_vouchers(
    http: &reqwest::Client,
    cluster: &Cluster,
    db: &Db,
    options: &LabOptions,
    flow: OrderFlow,
    bar: &ProgressBar,
) -> anyhow::Result<VoucherRow> {
    let urls: Arc<Vec<String>> = Arc::new(cluster.urls().to_vec());
    let now = chrono::Utc::now();
    let voucher: serde_json::Value = http
        .post(format!("{}/vouchers", urls[0]))
        .json(&NewVoucher {
            title: format!("lab voucher ({} flow)", flow.name()),
            stock: options.stock,
            begin_time: (now - chrono::Duration::seconds(1)).to_rfc3339(),
            end_time: (now + chrono::Duration::hours(1)).to_rfc3339(),
        })
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let voucher_id = voucher["id"]
        .as_i64()
        .context("POST /vouchers returned no id")?;

    // Log every buyer in; phone numbers differ per scenario so the users are fresh.
    let base: u64 = match flow {
        OrderFlow::Lock => 13_100_000_000,
        OrderFlow::NoLock => 13_200_000_000,
        OrderFlow::Lua => 13_300_000_000,
    };
    let progress = bar.clone();
    let on_done: Arc<dyn Fn() + Send + Sync> = Arc::new(move || progress.inc(1));
    let logins = {
        let urls = Arc::clone(&urls);
        let make: MakeRequest = Arc::new(move |http, i| {
            http.post(format!("{}/users/login", instance(&urls, i)))
                .json(&serde_json::json!({ "phone": (base + i as u64).to_string() }))
        });
        fire(
            http,
            options.clients,
            options.users,
            make,
            Arc::clone(&on_done),
        )
        .await
    };
    let tokens: Vec<String> = logins
        .samples
        .iter()
        .map(|s| s.body["token"].as_str().map(str::to_owned))
        .collect::<Option<_>>()
        .context("a login failed")?;
    let tokens = Arc::new(tokens);

    // Each buyer's attempts are adjacent, so they run at once on different instances.
    let attempts = options.attempts.max(1);
    let make: MakeRequest = {
        let urls = Arc::clone(&urls);
        let tokens = Arc::clone(&tokens);
        Arc::new(move |http, i| {
            http.post(format!(
                "{}/vouchers/{voucher_id}/seckill",
                instance(&urls, i)
            ))
            .bearer_auth(&tokens[i / attempts])
        })
    };
    let load = fire(
        http,
        options.clients,
        options.users * attempts,
        make,
        on_done,
    )
    .await;
    let orders = db.orders(voucher_id).await?;
    let stock_left = db.voucher(voucher_id).await?.map_or(0, |v| v.stock);
    let duplicates = db.users_with_several_orders(voucher_id).await?;
    Ok(VoucherRow {
        order_flow: flow,
        users: options.users,
        attempts,
        requests: load.samples.len(),
        stock: options.stock,
        orders: orders.len() as i64,
        users_with_two_orders: duplicates,
        stock_left,
        replies: reply_codes(&load),
        throughput: load.throughput(),
        p50_ms: load.latency_ms(0.5),
        p99_ms: load.latency_ms(0.99),
    })
}

/// The verdict of one variant's run from the state it left in Redis and the database.
pub fn verdict(variant: Variant, initial: i64, state: &LabState) -> (Verdict, i64, i64, i64) {
    let (sold, final_stock) = match variant {
        Variant::DbOptimistic => (
            state.db_sold.unwrap_or(0),
            state.db_stock.unwrap_or(initial),
        ),
        _ => (state.sold, state.stock.unwrap_or(initial)),
    };
    let oversold = (sold - initial).max(0);
    let lost_updates = (sold - (initial - final_stock)).max(0);
    let deadlocked = state.lock.present && state.lock.ttl_ms.is_none() && sold < initial;
    let verdict = if deadlocked {
        Verdict::Deadlocked
    } else if state.foreign_deletes > 0 {
        Verdict::WrongLockDeleted
    } else if oversold > 0 || lost_updates > 0 {
        Verdict::Oversold
    } else if sold == initial && final_stock == 0 {
        Verdict::Correct
    } else {
        Verdict::Undersold
    };
    (verdict, sold, oversold, lost_updates)
}
