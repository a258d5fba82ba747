//! The `ferrisson` command: run a command under a distributed lock, make and read ids.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod chaos;
mod id;
mod lock;

/// Distributed locks and ids on Redis, from the shell.
#[derive(Debug, Parser)]
#[command(name = "ferrisson", version, about)]
struct Cli {
    /// Redis URL [default: $FERRISSON_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
    #[arg(long, global = true, value_name = "URL")]
    redis: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Lock(lock::Args),
    Id(id::Args),
    Chaos(chaos::Args),
}

/// The Redis URL: `--redis`, else `FERRISSON_REDIS_URL`, else `REDIS_URL`, else local.
fn redis_url(flag: Option<String>) -> String {
    flag.or_else(|| std::env::var("FERRISSON_REDIS_URL").ok())
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRISSON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let url = redis_url(cli.redis);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ferrisson: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Lock(args) => lock::run(args, &url).await,
            Command::Id(args) => id::run(args, &url).await,
            Command::Chaos(args) => chaos::run(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrisson: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause its parent already printed.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if line.ends_with(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}
