//! The `seckill` binary: `seckill serve` runs the flash-sale service.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory as _, Parser, Subcommand};
use seckill::error::one_line;
use seckill::http::LISTENING_PREFIX;
use seckill::http::admin::AdminToken;
use seckill::oversell::LabConfig;
use seckill::settings::{self, DEFAULT_DATABASE, TlsFiles};
use seckill::{OrderFlow, ServeConfig};

/// A flash-sale (seckill) service on ferrisson locks: users, vouchers with stock and a
/// sale window, one order per user, and the oversell lab's routes.
#[derive(Debug, Parser)]
#[command(name = "seckill", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the HTTP service until SIGINT or SIGTERM (requests in flight get up to
    /// --shutdown-timeout to finish).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Redis URL (login tokens, locks, ids, the lab's stock): one server
    /// redis://[user:password@]host[:port][/db]; the master a Sentinel group names
    /// redis+sentinel://host:port,host:port,.../NAME; a Redis Cluster
    /// redis+cluster://host:port,host:port,...; rediss... for TLS [default:
    /// $FERRISSON_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
    #[arg(long, visible_alias = "redis", value_name = "URL")]
    url: Option<String>,
    #[command(flatten)]
    tls: TlsFiles,
    /// How long one Redis call of a request may take before the request answers 503
    /// UNAVAILABLE (also the Redis connect and reply timeout).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    redis_timeout: Duration,
    /// Database URL: sqlite://FILE?mode=rwc, postgres://..., or mysql://... (MySQL and
    /// MariaDB).
    #[arg(long, env = "SECKILL_DATABASE", value_name = "URL", default_value = DEFAULT_DATABASE)]
    database: String,
    /// How long connecting to the database, or waiting for a free pooled connection,
    /// may take.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    db_timeout: Duration,
    /// Database pool size (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 8)]
    db_connections: u32,
    /// Address to listen on; port 0 picks a free one (printed on stdout).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// How the order flow keeps one order per user: a ferrisson lock per user, no lock
    /// (the unique index alone), or one Lua script in Redis.
    #[arg(long, value_enum, default_value = "lock")]
    order_flow: OrderFlow,
    /// The store of the `lock` order flow's per-user locks, by URL (postgres://,
    /// mysql://, zk://, etcd://, redis://...); without it, the service's Redis. Stock,
    /// ids and login tokens stay on the Redis either way.
    #[arg(
        long,
        env = "SECKILL_LOCK_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    lock_url: Option<String>,
    /// Login token lifetime, renewed on every authenticated request (1s to 365 days).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = humantime::parse_duration)]
    token_ttl: Duration,
    /// Watchdog lease of the ferrisson locks (renewed every third of it).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    watchdog_lease: Duration,
    /// Batch the lock calls that requests make at the same time: while one call taking
    /// or releasing a lock is on its way to Redis, the ones that come meanwhile wait for
    /// it and then go together as one call. Costs the service and Redis less CPU when
    /// many buyers order at once; a call that waits takes up to one Redis round trip
    /// longer. Applies to every Redis the service's locks are on (--url, a Redis
    /// --lock-url, --redlock-redis). Off by default.
    #[arg(long)]
    coalesce_calls: bool,
    /// One user's buy attempts allowed per second, across every instance on this Redis
    /// (bursts of as many); more answer 429 RATE_LIMITED with Retry-After. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = settings::DEFAULT_BUY_RATE)]
    buy_rate: u32,
    /// An independent Redis server for the lab's redlock variant: give the flag once
    /// per server, three or more (without it the variant answers 400).
    #[arg(long = "redlock-redis", value_name = "URL")]
    redlock_redis: Vec<String>,
    /// How long a client may take to send a request's head, and then its body (408
    /// REQUEST_TIMEOUT); a connection idle that long between requests is closed too.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    read_timeout: Duration,
    /// After SIGTERM or SIGINT: how long requests in flight may take to finish; then
    /// every connection still open is closed and the process exits.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    shutdown_timeout: Duration,
    /// The token that creating vouchers, listing a voucher's orders and every /lab route
    /// require (Authorization: Bearer TOKEN): 16 to 128 printable characters. Prefer
    /// the environment variable: a command line is visible to every user of the
    /// machine. Without it those routes answer 403 ADMIN_DISABLED.
    #[arg(
        long,
        env = "SECKILL_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    admin_token: Option<String>,
    #[command(flatten)]
    lab: LabConfig,
}

/// Exits 2 with `error` under `seckill serve`'s usage line, as clap does for a refused
/// argument.
fn refuse(error: &dyn std::fmt::Display) -> ! {
    let kind = clap::error::ErrorKind::ValueValidation;
    let mut cli = Cli::command();
    cli.build();
    let clap_error = cli
        .find_subcommand_mut("serve")
        .map(|serve| serve.error(kind, error));
    clap_error.unwrap_or_else(|| cli.error(kind, error)).exit()
}

fn main() -> ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    let admin_token = match args
        .admin_token
        .filter(|t| !t.is_empty())
        .map(AdminToken::new)
    {
        None => None,
        Some(Ok(token)) => Some(token),
        Some(Err(reason)) => refuse(&format!(
            "invalid value for --admin-token (or SECKILL_ADMIN_TOKEN): {reason}"
        )),
    };
    let (redis, source) = settings::redis_url(args.url);
    let config = ServeConfig {
        redis,
        tls: args.tls,
        redis_timeout: args.redis_timeout,
        database: args.database,
        db_timeout: args.db_timeout,
        db_connections: args.db_connections,
        listen: args.listen,
        redlock: args.redlock_redis,
        order_flow: args.order_flow,
        lock_url: args.lock_url.filter(|url| !url.is_empty()),
        token_ttl: args.token_ttl,
        watchdog_lease: args.watchdog_lease,
        coalesce_calls: args.coalesce_calls,
        buy_rate: args.buy_rate,
        read_timeout: args.read_timeout,
        shutdown_timeout: args.shutdown_timeout,
        admin_token,
        lab: args.lab,
    };
    if let Err(e) = config.validate() {
        refuse(&e);
    }
    seckill::logging::init("info,tower_http=info,sqlx=warn");
    // Before anything connects: ferrisson describes its metrics to the recorder then.
    if let Err(e) = seckill::http::metrics::install_recorder() {
        eprintln!("seckill: cannot install the metrics recorder: {e}");
        return ExitCode::FAILURE;
    }
    tracing::info!(url = %seckill::db::redact(&config.redis), from = %source, "redis");
    if config.admin_token.is_none() {
        tracing::info!(
            "admin routes are off (no SECKILL_ADMIN_TOKEN or --admin-token): POST /vouchers, GET /vouchers/{{id}}/orders for every buyer, /lab/*"
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("seckill: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(seckill::serve(config, |addr| {
        // The lab reads this line to learn the port.
        println!("{LISTENING_PREFIX}{addr}");
    }));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let message = one_line(e.as_ref());
            eprintln!("seckill: {message}");
            if message.contains("invalid peer certificate") {
                eprintln!(
                    "seckill: the Redis server's certificate was not signed by a trusted CA: give the CA that signed it with --cacert FILE"
                );
            }
            ExitCode::FAILURE
        }
    }
}
