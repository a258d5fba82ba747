//! Running COMMAND while a hold lasts, the same way for `lock` and `elect`: in a process
//! group of its own that dies with ferrisson, with SIGINT, SIGTERM and SIGHUP passed on,
//! stopped (SIGTERM, then SIGKILL after the grace) when the hold is lost.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Context as _;
use ferrisson::redis::{Client, Guard};
use nix::sys::signal::{Signal, killpg};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::connection::ConnectionArgs;
use crate::group_watcher::{self, GroupWatcher};

/// Exit status when ferrisson itself failed (as `env`, `nice` and `timeout` use it).
pub const EXIT_ERROR: u8 = 125;
/// Exit status when COMMAND was found but could not be started (as shells use it).
const EXIT_CANNOT_RUN: u8 = 126;
/// Exit status when COMMAND was not found (as shells use it).
const EXIT_NOT_FOUND: u8 = 127;

/// The flags `lock` and `elect` share: where Redis is, how long to wait, the lease, how
/// to stop COMMAND, and the exit statuses of ferrisson's own outcomes.
#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    #[command(flatten)]
    connection: ConnectionArgs,

    /// Give up after waiting this long for the lock, or to be elected (e.g. 500ms, 10s, 2m) [default: wait forever]
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub wait: Option<Duration>,

    /// Exit status when --wait ran out (flock's option of the same name)
    #[arg(short = 'E', long, value_name = "N", default_value_t = 75)]
    pub conflict_exit_code: u8,

    /// Exit status when the lock or leadership was lost while COMMAND ran
    #[arg(long, value_name = "N", default_value_t = 74)]
    pub lost_exit_code: u8,

    /// Watchdog lease: the lock or leadership is renewed every third of it, and outlives a crashed holder by at most this long
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = humantime::parse_duration)]
    lease: Duration,

    /// After SIGTERM on a lost lock or leadership, wait this long before SIGKILL
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,

    /// Key prefix (the client namespace)
    #[arg(long, default_value = "")]
    namespace: String,
}

impl HoldArgs {
    /// A client with these connection flags, namespace and watchdog lease.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        Ok(self
            .connection
            .builder()?
            .namespace(self.namespace.clone())
            .watchdog_lease(self.lease)
            .connect()
            .await?)
    }
}

/// How COMMAND's run under a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// COMMAND ran to its end: its exit status (128+N when signal N killed it). Anything
    /// it left running in the background goes on.
    Exited(u8),
    /// The hold was lost: COMMAND was stopped and everything left in its group killed.
    Lost,
    /// COMMAND could not be started (126) or was not found (127); nothing ran.
    NotStarted(u8),
}

/// What to run, and how to stop it.
pub struct HeldCommand<'a> {
    /// COMMAND and its arguments.
    pub command: &'a [OsString],
    /// Variables added to COMMAND's environment.
    pub env: Vec<(&'static str, String)>,
    /// After SIGTERM on a lost hold, how long before SIGKILL.
    pub grace: Duration,
    /// What is held, for the message on loss ("lock \"jobs\"").
    pub what: String,
}

impl HeldCommand<'_> {
    /// Runs COMMAND while `guard` holds, returning how it ended. The guard is left to the
    /// caller: release it after [`Ended::Exited`] and [`Ended::NotStarted`].
    pub async fn run(&self, guard: &impl Guard) -> anyhow::Result<Ended> {
        let (program, rest) = self
            .command
            .split_first()
            .context("no command given after --")?;
        let watcher = GroupWatcher::start().await?;
        let mut command = Command::new(program);
        command
            .args(rest)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .process_group(watcher.group().as_raw())
            .kill_on_drop(true);
        // Spawned here, on the thread that runs `block_on` for the whole program.
        group_watcher::die_with_parent(&mut command);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                eprintln!("ferrisson: cannot run {}: {e}", program.to_string_lossy());
                watcher.kill_group().await;
                return Ok(Ended::NotStarted(
                    if e.kind() == std::io::ErrorKind::NotFound {
                        EXIT_NOT_FOUND
                    } else {
                        EXIT_CANNOT_RUN
                    },
                ));
            }
        };
        let group = watcher.group();

        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sighup = signal(SignalKind::hangup())?;
        let mut lost = false;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status?,
                () = guard.lost(), if !lost => {
                    lost = true;
                    eprintln!("ferrisson: {} was lost; stopping the command", self.what);
                    let _ = killpg(group, Signal::SIGTERM);
                    if let Ok(status) = tokio::time::timeout(self.grace, child.wait()).await {
                        break status?;
                    }
                    let _ = killpg(group, Signal::SIGKILL);
                }
                _ = sigint.recv() => { let _ = killpg(group, Signal::SIGINT); }
                _ = sigterm.recv() => { let _ = killpg(group, Signal::SIGTERM); }
                _ = sighup.recv() => { let _ = killpg(group, Signal::SIGHUP); }
            }
        };
        if lost {
            // Nothing of the command may go on without the hold.
            watcher.kill_group().await;
            return Ok(Ended::Lost);
        }
        watcher.disarm().await;
        Ok(Ended::Exited(exit_code(status)))
    }
}

/// The command's exit code, or 128+N when signal N killed it (as shells report it).
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}
