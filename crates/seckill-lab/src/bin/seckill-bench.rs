//! `seckill-bench`: orders per second of the voucher flows (no-lock floor, lock, lua,
//! and the lock flow with its lock calls coalesced).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser};
use seckill_lab::{BenchFlow, BenchOptions};

/// Measures orders per second of the flash-sale order flows: two `seckill serve`
/// processes, 1,000 concurrent buyers, the no-lock flow as the floor next to the lock
/// and Lua flows, in one run.
#[derive(Debug, Parser)]
#[command(name = "seckill-bench", version)]
struct Cli {
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
    /// The flows to measure, comma-separated, each once per round in this order; the
    /// first must be no-lock, the floor the others are compared with. lock-coalesced is
    /// the lock flow with `seckill serve --coalesce-calls`.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "FLOW,...",
        default_values_t = [BenchFlow::NoLock, BenchFlow::Lock, BenchFlow::Lua]
    )]
    flows: Vec<BenchFlow>,
    /// Use this Redis instead of starting one (the report's Redis columns then count
    /// what every client of it did during the buys).
    #[arg(long = "url", visible_alias = "redis", value_name = "URL")]
    redis: Option<String>,
    /// A PostgreSQL or MySQL/MariaDB server to run on instead of a SQLite file: each
    /// round gets a schema (PostgreSQL) or database (MySQL) of its own there, dropped
    /// after it.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
    /// Where bench.json goes (default: the cargo target directory's `lab/`).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut options = options(Cli::parse());
    // A refused argument exits 2 under the usage line, before any server starts.
    if let Err(e) = options.validate() {
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                seckill::error::one_line(e.as_ref()),
            )
            .exit();
    }
    options.binary = match seckill_lab::seckill_binary() {
        Ok(binary) => binary,
        Err(e) => {
            eprintln!("seckill-bench: {}", seckill::error::one_line(e.as_ref()));
            return ExitCode::FAILURE;
        }
    };
    seckill::logging::init("warn");
    match seckill_lab::bench(&options).await {
        Ok(report) => {
            println!("{}", report.markdown());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("seckill-bench: {}", seckill::error::one_line(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// The options the flags give (the `seckill` binary is found after they are checked).
fn options(cli: Cli) -> BenchOptions {
    BenchOptions {
        instances: cli.instances,
        buyers: cli.buyers,
        orders: cli.orders,
        rounds: cli.rounds,
        flows: cli.flows,
        redis: cli.redis,
        database: cli.database,
        out: cli.out.unwrap_or_else(seckill_lab::default_out),
        ..BenchOptions::new(PathBuf::new())
    }
}
