//! The `seckill` binary: `serve` runs the flash-sale service, `lab` runs the oversell lab.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use seckill::oversell::{LabConfig, Variant};
use seckill::runner::{self, BenchOptions, LabOptions};
use seckill::{OrderFlow, ServeConfig};

/// The flash-sale service of the seeds and its oversell lab.
#[derive(Debug, Parser)]
#[command(name = "seckill", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the HTTP service.
    Serve(ServeArgs),
    /// Runs the whole oversell lab and the voucher scenario, and prints the table.
    Lab(LabArgs),
    /// Measures orders per second of the voucher flows (no-lock floor, lock, lua).
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Instances to start.
    #[arg(long, default_value_t = 2)]
    instances: usize,
    /// Concurrent buyers.
    #[arg(long, default_value_t = 1000)]
    buyers: usize,
    /// Orders per round (users buying once each, and the stock).
    #[arg(long, default_value_t = 5000)]
    orders: usize,
    /// Rounds per flow; the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Use this Redis instead of starting one.
    #[arg(long)]
    redis: Option<String>,
    /// Use this database instead of a fresh SQLite file per round.
    #[arg(long)]
    database: Option<String>,
    /// Where bench.json goes (default: the cargo target directory's `lab/`).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Redis URL (tokens, locks, ids, the lab's stock).
    #[arg(long, env = "SECKILL_REDIS", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Database URL: sqlite://FILE?mode=rwc (default), postgres://..., mysql://...
    #[arg(
        long,
        env = "SECKILL_DATABASE",
        default_value = "sqlite://seckill.db?mode=rwc"
    )]
    database: String,
    /// Address to listen on; port 0 picks a free one (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// An independent Redis server for the lab's redlock variant (give three).
    #[arg(long = "redlock-redis")]
    redlock_redis: Vec<String>,
    /// How the order flow keeps one order per user: the seed's lock, no lock, or Lua.
    #[arg(long, value_enum, default_value = "lock")]
    order_flow: OrderFlow,
    /// Login token lifetime.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    token_ttl: Duration,
    /// Watchdog lease of the ferrisson locks (renewed every third of it).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    watchdog_lease: Duration,
    /// Database pool size.
    #[arg(long, default_value_t = 8)]
    db_connections: u32,
    #[command(flatten)]
    lab: LabServeArgs,
}

#[derive(Debug, Args)]
struct LabServeArgs {
    /// Lease of the lab's expiring hand-made locks (setnx-expire, set-nx-ex, token-check).
    #[arg(long = "lab-lease", default_value = "10s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// How long a lab request retries a held lock before answering sold: false.
    #[arg(long = "lab-lock-wait", default_value = "2s", value_parser = humantime::parse_duration)]
    lock_wait: Duration,
    /// Inject the variant's fault into the n-th holder of the lock in a run, or the next
    /// one if it could not show it (0: never).
    #[arg(long = "lab-fault-at", default_value_t = 0)]
    fault_at: u64,
    /// watchdog variant: stall this long on every --lab-stall-every-th unit (seed: 10s).
    #[arg(long = "lab-stall", default_value = "10s", value_parser = humantime::parse_duration)]
    stall: Duration,
    /// watchdog variant: stall when the stock read is a multiple of this.
    #[arg(long = "lab-stall-every", default_value_t = 100)]
    stall_every: i64,
    /// redlock variant: the lock's TTL.
    #[arg(long = "lab-redlock-ttl", default_value = "30s", value_parser = humantime::parse_duration)]
    redlock_ttl: Duration,
}

#[derive(Debug, Args)]
struct LabArgs {
    /// Concurrent clients (JMeter threads), all started at once.
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// Requests per client (JMeter loops).
    #[arg(long, default_value_t = 4)]
    loops: usize,
    /// Stock to sell in every run.
    #[arg(long, default_value_t = 200)]
    stock: i64,
    /// `seckill serve` processes to start (2 or more shows local-mutex failing).
    #[arg(long, default_value_t = 2)]
    instances: usize,
    /// Variants to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// Use this Redis instead of starting one.
    #[arg(long)]
    redis: Option<String>,
    /// Use these three Redis servers for redlock instead of starting them.
    #[arg(long = "redlock-redis")]
    redlock_redis: Vec<String>,
    /// Use this database instead of a fresh SQLite file (its unique order index is dropped!).
    #[arg(long)]
    database: Option<String>,
    /// Where the report, chart and instance logs go (default: the cargo target
    /// directory's `lab/`, e.g. target/lab).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Lease of the expiring hand-made locks.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// How long a request retries a held lock.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    lock_wait: Duration,
    /// The n-th holder of the lock gets the injected fault (crash, stall or pause).
    #[arg(long, default_value_t = 50)]
    fault_at: u64,
    /// watchdog variant: the stall on every 100th unit (the seed: 10s).
    #[arg(long, default_value = "1500ms", value_parser = humantime::parse_duration)]
    stall: Duration,
    /// watchdog variant: stall when the stock read is a multiple of this (the seed: 100).
    #[arg(long, default_value_t = 100)]
    stall_every: i64,
    /// Watchdog lease of the instances' locks (short, so renewals show during a stall).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    watchdog_lease: Duration,
    /// Voucher scenario: buyers.
    #[arg(long, default_value_t = 1000)]
    users: usize,
    /// Voucher scenario: attempts per buyer.
    #[arg(long, default_value_t = 3)]
    attempts: usize,
    /// Skip the voucher scenario.
    #[arg(long)]
    no_vouchers: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// `target/lab` next to the binary's profile directory (`target/release/seckill` →
/// `target/lab`), wherever the target directory is; `target/lab` otherwise.
fn default_out() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let profile_dir = exe.parent()?;
            let name = profile_dir.file_name()?.to_str()?;
            matches!(name, "release" | "debug")
                .then(|| profile_dir.parent().map(|t| t.join("lab")))?
        })
        .unwrap_or_else(|| PathBuf::from("target/lab"))
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            init_tracing("info,tower_http=info,sqlx=warn");
            let config = ServeConfig {
                redis: args.redis,
                database: args.database,
                listen: args.listen,
                redlock: args.redlock_redis,
                order_flow: args.order_flow,
                token_ttl: args.token_ttl,
                watchdog_lease: args.watchdog_lease,
                db_connections: args.db_connections,
                lab: LabConfig {
                    lease: args.lab.lease,
                    lock_wait: args.lab.lock_wait,
                    fault_at: args.lab.fault_at,
                    stall: args.lab.stall,
                    stall_every: args.lab.stall_every,
                    redlock_ttl: args.lab.redlock_ttl,
                },
            };
            seckill::serve(config, |addr| {
                // The lab runner reads this line to learn the port.
                println!("{}{addr}", runner::LISTENING_PREFIX);
            })
            .await
        }
        Command::Bench(args) => {
            init_tracing("warn");
            let options = BenchOptions {
                instances: args.instances,
                buyers: args.buyers,
                orders: args.orders,
                rounds: args.rounds,
                redis: args.redis,
                database: args.database,
                out: args.out.unwrap_or_else(default_out),
                ..BenchOptions::new(std::env::current_exe()?)
            };
            let report = runner::bench(&options).await?;
            println!("{}", report.markdown());
            Ok(())
        }
        Command::Lab(args) => {
            init_tracing("warn");
            let variants = if args.variants.is_empty() {
                Variant::ALL.to_vec()
            } else {
                args.variants
                    .iter()
                    .map(|name| {
                        Variant::parse(name.trim())
                            .ok_or_else(|| anyhow::anyhow!("unknown variant {name:?}"))
                    })
                    .collect::<anyhow::Result<_>>()?
            };
            let options = LabOptions {
                binary: std::env::current_exe()?,
                clients: args.clients,
                loops: args.loops,
                stock: args.stock,
                instances: args.instances,
                variants,
                redis: args.redis,
                redlock_redis: args.redlock_redis,
                database: args.database,
                out: args.out.unwrap_or_else(default_out),
                lease: args.lease,
                lock_wait: args.lock_wait,
                fault_at: args.fault_at,
                stall: args.stall,
                stall_every: args.stall_every,
                watchdog_lease: args.watchdog_lease,
                users: args.users,
                attempts: args.attempts,
                vouchers: !args.no_vouchers,
                progress: !args.no_progress,
            };
            let report = runner::run(&options).await?;
            println!("{}", report.table());
            println!("report: {}", options.out.join("report.json").display());
            println!("chart:  {}", options.out.join("chart.svg").display());
            if let Some(problem) = report.problems().first() {
                anyhow::bail!("the lab did not show what the seeds describe: {problem}");
            }
            Ok(())
        }
    }
}
