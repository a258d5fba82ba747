//! The `ferrisson` command: run a command under a distributed Redis lock or only while
//! elected leader, make and decode ids, look at what is held and waited for (and remove a
//! stuck lock), and (with the `chaos` feature) run the fault suite.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(feature = "chaos")]
mod chaos;
mod connection;
mod elect;
mod group_watcher;
mod held_command;
mod id;
mod inspect;
mod listing;
mod lock;
mod ls;
mod top;
mod unlock;

/// Distributed locks and ids on Redis, from the shell.
#[derive(Debug, Parser)]
#[command(name = "ferrisson", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Lock(lock::Args),
    Elect(elect::Args),
    Id(id::Args),
    Ls(ls::Args),
    Inspect(inspect::Args),
    Unlock(unlock::Args),
    Top(top::Args),
    #[cfg(feature = "chaos")]
    Chaos(chaos::Args),
    /// Stands in for the fault suite in a build without it, to say how to get it.
    #[cfg(not(feature = "chaos"))]
    #[command(hide = true)]
    Chaos {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        _args: Vec<std::ffi::OsString>,
    },
    /// The process that kills the command of `lock` or `elect` if ferrisson dies (started by them).
    #[command(name = group_watcher::SUBCOMMAND, hide = true)]
    GroupWatcher,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRISSON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .init();
    let cli = Cli::parse();
    // The exit status of a failure of ferrisson's own: `lock` and `elect` keep the usual
    // 1 free for the command they run.
    let error_exit = match cli.command {
        Command::Lock(_) | Command::Elect(_) => ExitCode::from(held_command::EXIT_ERROR),
        _ => ExitCode::FAILURE,
    };
    let result = run(cli.command);
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrisson: {}", one_line(&e));
            error_exit
        }
    }
}

/// Runs a subcommand.
fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        // No runtime: the watcher is one blocking read, on one thread.
        Command::GroupWatcher => group_watcher::watch().map(|()| ExitCode::SUCCESS),
        Command::Lock(args) => block_on(lock::run(args)),
        Command::Elect(args) => block_on(elect::run(args)),
        Command::Id(args) => block_on(id::run(args)),
        Command::Ls(args) => block_on(ls::run(args)),
        Command::Inspect(args) => block_on(inspect::run(args)),
        Command::Unlock(args) => block_on(unlock::run(args)),
        Command::Top(args) => block_on(top::run(args)),
        #[cfg(feature = "chaos")]
        Command::Chaos(args) => block_on(chaos::run(args)),
        #[cfg(not(feature = "chaos"))]
        Command::Chaos { .. } => Err(anyhow::anyhow!(
            "this ferrisson was built without the fault suite; build it with \
             `cargo install --path crates/ferrisson-cli --features chaos`"
        )),
    }
}

/// Runs `task` on a tokio runtime. The task itself runs on this (the main) thread, which
/// `lock` relies on: its command's parent-death signal fires when the thread that
/// started the command ends.
fn block_on(
    task: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?
        .block_on(task)
}

/// Colour in log lines only for a person at a terminal who did not set `NO_COLOR`
/// (no-color.org: set and not empty), never in redirected output or log files.
fn colour_on_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The error and its causes on one line, skipping a cause its parent already printed.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if line.contains(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}
