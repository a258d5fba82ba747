//! `seckill-bench`: orders per second of the voucher flow, two instances, 1,000
//! concurrent buyers, for the correct flows (the lock flow and the Lua flow, and on
//! request the lock flow with its lock calls coalesced) next to the same flow without
//! any lock, measured in the same run as the floor.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use seckill::OrderFlow;
use seckill::db::Db;
use seckill::oversell::LabConfig;

use crate::cluster::new_admin_token;
use crate::cluster::{Cluster, InstanceArgs};
use crate::load::http_client;
use crate::scratch::ScratchDb;
use crate::servers::start_servers;
use crate::shop::{buy, log_in, open_voucher};

/// What one row of the benchmark runs: an order flow, and for the lock flow whether the
/// instances coalesce their lock calls (`seckill serve --coalesce-calls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchFlow {
    /// The flow without any lock: the floor (`--order-flow no-lock`).
    NoLock,
    /// The ferrisson lock per user (`--order-flow lock`).
    Lock,
    /// The same, the lock calls that meet one in flight sent together
    /// (`--order-flow lock --coalesce-calls`).
    LockCoalesced,
    /// One Lua script in Redis (`--order-flow lua`).
    Lua,
}

impl BenchFlow {
    /// The name on the command line and in the report.
    ///
    /// ```
    /// assert_eq!(seckill_lab::BenchFlow::LockCoalesced.name(), "lock-coalesced");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Self::LockCoalesced => "lock-coalesced",
            other => other.order_flow().name(),
        }
    }

    /// The instances' `--order-flow`.
    pub fn order_flow(self) -> OrderFlow {
        match self {
            Self::NoLock => OrderFlow::NoLock,
            Self::Lock | Self::LockCoalesced => OrderFlow::Lock,
            Self::Lua => OrderFlow::Lua,
        }
    }

    /// The instances' further `seckill serve` flags.
    fn serve_args(self) -> Vec<String> {
        match self {
            Self::LockCoalesced => vec!["--coalesce-calls".to_owned()],
            _ => Vec::new(),
        }
    }
}

/// What `seckill bench` can be told.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `seckill` binary to start instances from.
    pub binary: PathBuf,
    /// Instances.
    pub instances: usize,
    /// Concurrent buyers (clients).
    pub buyers: usize,
    /// Orders per round: that many users buy once each, against that much stock.
    pub orders: usize,
    /// Rounds per flow (interleaved); the median round is reported.
    pub rounds: usize,
    /// Flows to measure, each once per round, each round starting one flow later than
    /// the last; the first is the floor the others are compared with, and must be
    /// [`BenchFlow::NoLock`].
    pub flows: Vec<BenchFlow>,
    /// An existing Redis to use (the report's Redis columns then count every client of
    /// it).
    pub redis: Option<String>,
    /// A PostgreSQL or MySQL/MariaDB server to run on, in a schema or database of the
    /// bench's own per round (default: a fresh SQLite file per round).
    pub database: Option<String>,
    /// Output directory (`bench.json`).
    pub out: PathBuf,
}

impl BenchOptions {
    /// Two instances, 1,000 buyers, 5,000 orders, 3 rounds of no-lock, lock and lua.
    pub fn new(binary: PathBuf) -> Self {
        Self {
            binary,
            instances: 2,
            buyers: 1000,
            orders: 5000,
            rounds: 3,
            flows: vec![BenchFlow::NoLock, BenchFlow::Lock, BenchFlow::Lua],
            redis: None,
            database: None,
            out: PathBuf::from("target/lab"),
        }
    }
}

/// One flow's median round.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// The flow.
    pub flow: BenchFlow,
    /// Orders created per second (median round).
    pub orders_per_s: f64,
    /// `orders_per_s` of this flow divided by the floor's, same run.
    pub ratio_to_floor: f64,
    /// Every round's orders per second.
    pub rounds: Vec<f64>,
    /// Orders created in the median round.
    pub orders: i64,
    /// Requests without a 2xx reply in the median round.
    pub errors: usize,
    /// Median latency of the median round, ms.
    pub p50_ms: f64,
    /// 99th percentile latency of the median round, ms.
    pub p99_ms: f64,
    /// Script calls (`EVALSHA`) Redis ran per order while the median round's buyers
    /// bought (every script: the lock's, the buy limit's, the Lua flow's).
    pub script_calls_per_order: f64,
    /// Redis's CPU time (user + system) per order while the median round's buyers
    /// bought, µs.
    pub redis_cpu_us_per_order: f64,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Database backend.
    pub database: &'static str,
    /// Instances.
    pub instances: usize,
    /// Concurrent buyers.
    pub buyers: usize,
    /// Orders per round.
    pub orders: usize,
    /// One row per flow; the first is the floor.
    pub rows: Vec<BenchRow>,
}

impl BenchReport {
    /// A Markdown table of the result.
    pub fn markdown(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{} instances, {} concurrent buyers, {} orders per round ({} users buying once, stock {}), {} database; median of {} rounds",
            self.instances,
            self.buyers,
            self.orders,
            self.orders,
            self.orders,
            self.database,
            self.rows.first().map_or(0, |r| r.rounds.len())
        );
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "| flow | orders/s | vs no-lock floor | p50 ms | p99 ms | errors | Redis scripts / order | Redis CPU µs / order | rounds (orders/s) |"
        );
        let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for r in &self.rows {
            let rounds: Vec<String> = r.rounds.iter().map(|x| format!("{x:.0}")).collect();
            let _ = writeln!(
                t,
                "| {} | {:.0} | {:.2} | {:.1} | {:.1} | {} | {:.2} | {:.0} | {} |",
                r.flow.name(),
                r.orders_per_s,
                r.ratio_to_floor,
                r.p50_ms,
                r.p99_ms,
                r.errors,
                r.script_calls_per_order,
                r.redis_cpu_us_per_order,
                rounds.join(", ")
            );
        }
        t
    }
}

struct Round {
    orders_per_s: f64,
    orders: i64,
    errors: usize,
    p50_ms: f64,
    p99_ms: f64,
    /// Redis's script calls and CPU µs per order while the buyers bought.
    redis: (f64, f64),
}

/// What Redis's `INFO` counts: script calls run, CPU time used.
#[derive(Debug, Clone, Copy, Default)]
struct RedisUsage {
    script_calls: u64,
    cpu_s: f64,
}

impl RedisUsage {
    /// The server's counts now.
    async fn read(conn: &mut MultiplexedConnection) -> anyhow::Result<Self> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query_async(conn)
            .await
            .context("INFO on the bench's Redis")?;
        let field = |prefix: &str| info.lines().find_map(|line| line.strip_prefix(prefix));
        // `cmdstat_evalsha:calls=N,usec=...`; no line before the first script call.
        let script_calls = field("cmdstat_evalsha:calls=")
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let cpu = |name: &str| field(name).and_then(|v| v.trim().parse::<f64>().ok());
        let cpu_s = cpu("used_cpu_user:").unwrap_or(0.0) + cpu("used_cpu_sys:").unwrap_or(0.0);
        Ok(Self {
            script_calls,
            cpu_s,
        })
    }

    /// What was spent between `before` and `self`, per order: script calls, CPU µs.
    fn per_order(self, before: Self, orders: i64) -> (f64, f64) {
        let orders = orders.max(1) as f64;
        (
            self.script_calls.saturating_sub(before.script_calls) as f64 / orders,
            (self.cpu_s - before.cpu_s).max(0.0) * 1e6 / orders,
        )
    }
}

impl BenchOptions {
    /// Checks the settings before anything starts.
    ///
    /// ```
    /// let mut options = seckill_lab::BenchOptions::new("seckill".into());
    /// assert!(options.validate().is_ok());
    /// options.rounds = 0;
    /// assert!(options.validate().unwrap_err().to_string().contains("--rounds"));
    /// ```
    ///
    /// # Errors
    ///
    /// The first setting that cannot work, named by its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.flows.first() == Some(&BenchFlow::NoLock),
            "invalid value for --flows: the first flow is the floor the others are compared with, no-lock"
        );
        for (i, flow) in self.flows.iter().enumerate() {
            anyhow::ensure!(
                !self.flows[..i].contains(flow),
                "invalid value for --flows: {} is given twice",
                flow.name()
            );
        }
        for (flag, value) in [
            ("--instances", self.instances),
            ("--buyers", self.buyers),
            ("--orders", self.orders),
            ("--rounds", self.rounds),
        ] {
            anyhow::ensure!(value > 0, "invalid value for {flag}: it must be at least 1");
        }
        crate::scratch::check_server_url(self.database.as_deref()).map(|_| ())
    }
}

/// The order in which a round runs `flows` flows (their indices): each round starts one
/// flow later than the last, so no flow always runs first (on a machine that idled) or
/// last (after the others warmed or loaded it).
fn round_order(flows: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..flows).map(move |k| (k + round) % flows)
}

/// Runs the benchmark and writes `bench.json` under `out`.
///
/// # Errors
///
/// When a server or instance cannot be started, or a round's set-up fails.
pub async fn bench(options: &BenchOptions) -> anyhow::Result<BenchReport> {
    options.validate()?;
    std::fs::create_dir_all(&options.out)?;
    let (redis_url, _own) = match &options.redis {
        Some(url) => (url.clone(), None),
        None => {
            let (urls, own) = start_servers(1)?;
            (urls[0].clone(), Some(own))
        }
    };
    let admin_token = new_admin_token();
    let http = http_client(options.buyers, Some(&admin_token))?;
    let mut redis = redis::Client::open(redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .context("cannot connect to the bench's Redis")?;
    let mut results: Vec<Vec<Round>> = options.flows.iter().map(|_| Vec::new()).collect();
    let mut backend = "sqlite";
    for round in 0..options.rounds.max(1) {
        for i in round_order(options.flows.len(), round) {
            let flow = options.flows[i];
            let scratch = ScratchDb::create(
                options.database.as_deref(),
                &options.out,
                &format!("seckill_bench_{}_{round}", flow.name().replace('-', "_")),
            )
            .await?;
            let db = scratch.open().await?;
            backend = db.backend().name();
            let args = InstanceArgs {
                binary: options.binary.clone(),
                redis: redis_url.clone(),
                database: scratch.url().to_owned(),
                redlock: Vec::new(),
                order_flow: flow.order_flow(),
                watchdog_lease: Duration::from_secs(30),
                lab: LabConfig::default(),
                log_dir: Some(options.out.join("logs")),
                extra_args: flow.serve_args(),
                admin_token: Some(admin_token.clone()),
            };
            let result = match Cluster::start(options.instances, &args).await {
                Ok(cluster) => {
                    let result =
                        bench_round(&http, &mut redis, &cluster, &db, options, round).await;
                    cluster.stop().await.and(result)
                }
                Err(e) => Err(e),
            };
            db.close().await;
            scratch.drop().await?;
            let r = result?;
            eprintln!(
                "bench round {round}: {} {:.0} orders/s ({} orders, {} errors)",
                flow.name(),
                r.orders_per_s,
                r.orders,
                r.errors
            );
            results[i].push(r);
        }
    }
    let mut rows = Vec::new();
    let mut floor = None;
    for (flow, mut rounds) in options.flows.iter().copied().zip(results) {
        rounds.sort_by(|a, b| a.orders_per_s.total_cmp(&b.orders_per_s));
        let all: Vec<f64> = rounds.iter().map(|r| r.orders_per_s).collect();
        let median = &rounds[rounds.len() / 2];
        let floor_value = *floor.get_or_insert(median.orders_per_s);
        let (script_calls_per_order, redis_cpu_us_per_order) = median.redis;
        rows.push(BenchRow {
            flow,
            orders_per_s: median.orders_per_s,
            ratio_to_floor: median.orders_per_s / floor_value.max(1e-9),
            rounds: all,
            orders: median.orders,
            errors: median.errors,
            p50_ms: median.p50_ms,
            p99_ms: median.p99_ms,
            script_calls_per_order,
            redis_cpu_us_per_order,
        });
    }
    let report = BenchReport {
        database: backend,
        instances: options.instances,
        buyers: options.buyers,
        orders: options.orders,
        rows,
    };
    std::fs::write(
        options.out.join("bench.json"),
        serde_json::to_string_pretty(&report)?,
    )
    .context("writing bench.json")?;
    Ok(report)
}

async fn bench_round(
    http: &reqwest::Client,
    redis: &mut MultiplexedConnection,
    cluster: &Cluster,
    db: &Db,
    options: &BenchOptions,
    round: usize,
) -> anyhow::Result<Round> {
    let urls: Arc<Vec<String>> = Arc::new(cluster.urls().to_vec());
    let voucher_id = open_voucher(http, &urls[0], "bench voucher", options.orders as i64).await?;
    let first_phone = 15_000_000_000_u64 + (round as u64) * 10_000_000;
    let nothing: Arc<dyn Fn() + Send + Sync> = Arc::new(|| {});
    let tokens = log_in(
        http,
        &urls,
        options.buyers,
        first_phone,
        options.orders,
        Arc::clone(&nothing),
    )
    .await?;
    let before = RedisUsage::read(redis).await?;
    let load = buy(http, &urls, options.buyers, voucher_id, tokens, 1, nothing).await;
    let spent = RedisUsage::read(redis).await?;
    let orders = db.orders(voucher_id).await?.len() as i64;
    Ok(Round {
        orders_per_s: orders as f64 / load.elapsed.as_secs_f64().max(1e-9),
        orders,
        errors: load.errors(),
        p50_ms: load.latency_ms(0.5),
        p99_ms: load.latency_ms(0.99),
        redis: spent.per_order(before, orders),
    })
}

#[cfg(test)]
mod tests {
    use super::round_order;

    #[test]
    fn every_round_runs_each_flow_once_and_starts_one_flow_later() {
        let rounds: Vec<Vec<usize>> = (0..4)
            .map(|round| round_order(3, round).collect())
            .collect();
        assert_eq!(rounds, [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]);
        assert_eq!(round_order(0, 5).count(), 0);
    }
}
