//! The `ferrisson` command: run a command under a distributed lock or only while
//! elected leader, make and decode ids, look at what is held and waited for (and remove a
//! stuck lock).

use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Subcommand};

mod arguments;
mod connection;
mod elect;
mod group_watcher;
mod held_command;
mod id;
mod inspect;
mod listing;
mod lock;
mod log;
mod ls;
mod terminal;
mod top;
mod unlock;

use arguments::Refused;

/// Exit status of `inspect` and `unlock` when there is nothing by that name (or `unlock`
/// removed nothing); `lock` and `elect` leave 1 to their command.
pub const EXIT_NOT_FOUND: u8 = 1;
/// Exit status when an argument was refused; nothing connected.
pub const EXIT_REFUSED: u8 = 2;
/// Exit status when ferrisson itself failed: the store could not be reached, refused the
/// login or a command (as `env`, `nice` and `timeout` use it, so that `lock` and `elect`
/// keep 1 to 124 for their command).
pub const EXIT_ERROR: u8 = 125;

/// Distributed locks and ids on Redis, from the shell.
#[derive(Debug, clap::Parser)]
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
    /// Stands in for the fault suite, a program of its own since 0.3, to say where it is.
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
    log::init();
    // clap prints its own refusals and exits 2 (help and version: 0).
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut Cli::command()).exit(),
    };
    if let Err(refused) = cli.command.check() {
        return refuse(&matches, &refused.to_string());
    }
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            let line = one_line(&e);
            if refused_argument(&e) {
                return refuse(&matches, &line);
            }
            eprintln!("ferrisson: {line}");
            if e.chain()
                .any(<dyn std::error::Error>::is::<inspect::NotFound>)
            {
                ExitCode::from(EXIT_NOT_FOUND)
            } else {
                ExitCode::from(EXIT_ERROR)
            }
        }
    }
}

impl Command {
    /// Refuses what no run could use, before anything connects.
    fn check(&self) -> Result<(), Refused> {
        match self {
            Self::Lock(args) => args.check(),
            Self::Elect(args) => args.check(),
            Self::Id(args) => args.check(),
            Self::Ls(args) => args.check(),
            Self::Inspect(args) => args.check(),
            Self::Unlock(args) => args.check(),
            Self::Top(args) => args.check(),
            Self::Chaos { .. } => Err(Refused::because(
                "the fault suite is a program of its own: run `ferrisson-chaos` \
                 (`cargo install --path crates/ferrisson-chaos`)",
            )),
            Self::GroupWatcher => Ok(()),
        }
    }
}

/// Whether `error` is an argument refused late: by the library, which checks the URL,
/// the TLS settings and every value it is given before it sends anything (so still
/// before anything connected).
fn refused_argument(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.is::<Refused>()
            || matches!(
                cause.downcast_ref::<ferrisson::Error>(),
                Some(ferrisson::Error::InvalidArgument(_))
            )
    })
}

/// Prints `message` as clap prints the arguments it refuses (with the usage of the
/// subcommand `matches` ran) and returns [`EXIT_REFUSED`].
fn refuse(matches: &ArgMatches, message: &str) -> ExitCode {
    let mut path = Vec::new();
    let mut current = matches;
    while let Some((name, sub)) = current.subcommand() {
        path.push(name.to_owned());
        current = sub;
    }
    let mut cli = Cli::command();
    // Gives every subcommand its full name for the usage line (`ferrisson id next`).
    cli.build();
    let _ = subcommand(cli, &path)
        .error(clap::error::ErrorKind::ValueValidation, message)
        .print();
    ExitCode::from(EXIT_REFUSED)
}

/// The subcommand at `path` under `command` (as deep as it is found).
fn subcommand(command: clap::Command, path: &[String]) -> clap::Command {
    match path.split_first() {
        Some((name, rest)) => match command.find_subcommand(name) {
            Some(sub) => subcommand(sub.clone(), rest),
            None => command,
        },
        None => command,
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
        // Refused by `Command::check`.
        Command::Chaos { .. } => Ok(ExitCode::from(EXIT_REFUSED)),
    }
}

/// Runs `task` on a tokio runtime. The task itself runs on this (the main) thread, which
/// `lock` relies on: its command's parent-death signal fires when the thread that
/// started the command ends.
///
/// The runtime is then shut down without waiting for its blocking threads: a host name
/// still being resolved for a connect that `--wait` gave up on must not hold the exit.
fn block_on(
    task: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(task);
    runtime.shutdown_background();
    result
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
