//! `ferrisson lock`: run a command while holding a distributed lock (like `flock(1)`).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use ferrisson::Client;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

/// Exit code when `--wait` ran out before the lock was acquired (EX_TEMPFAIL).
pub const EXIT_WAIT_TIMEOUT: u8 = 75;
/// Exit code when the lock was lost while the command ran (EX_IOERR).
pub const EXIT_LOCK_LOST: u8 = 74;

/// Run a command while holding a distributed lock.
///
/// Acquires the lock NAME (waiting as long as it takes unless --wait is given), runs
/// COMMAND with FERRISSON_LOCK_NAME and FERRISSON_FENCING_TOKEN in its environment, keeps
/// the lock renewed while COMMAND runs, releases it when COMMAND exits, and exits with
/// COMMAND's status (128+N when it was killed by signal N).
///
/// Exit codes of its own: 75 when --wait ran out (nothing was run); 74 when the lock was
/// lost while COMMAND ran (COMMAND got SIGTERM, and SIGKILL after --grace); 1 for other
/// errors, such as an unreachable Redis.
///
/// The Redis URL comes from --redis, else $FERRISSON_REDIS_URL, else $REDIS_URL, else
/// redis://127.0.0.1:6379. COMMAND runs in its own process group; SIGINT, SIGTERM and
/// SIGHUP sent to ferrisson are passed on to it.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Give up after waiting this long for the lock (e.g. 500ms, 10s, 2m) [default: wait forever]
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    wait: Option<Duration>,

    /// Watchdog lease: the lock is renewed every third of it, and outlives a crashed holder by at most this long
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = humantime::parse_duration)]
    lease: Duration,

    /// After SIGTERM on a lost lock, wait this long before SIGKILL
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,

    /// Key prefix (the client namespace)
    #[arg(long, default_value = "")]
    namespace: String,

    /// The lock's name
    name: String,

    /// The command to run, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Acquires, runs, releases.
pub async fn run(args: Args, url: &str) -> anyhow::Result<ExitCode> {
    let client = Client::builder(url)
        .namespace(args.namespace.clone())
        .watchdog_lease(args.lease)
        .connect()
        .await?;
    let lock = client.lock(&args.name)?;
    let guard = match args.wait {
        Some(wait) => match lock.lock_timeout(wait).await? {
            Some(guard) => guard,
            None => {
                eprintln!(
                    "ferrisson: timed out after {} waiting for lock {:?}",
                    humantime::format_duration(wait),
                    args.name
                );
                return Ok(ExitCode::from(EXIT_WAIT_TIMEOUT));
            }
        },
        None => lock.lock().await?,
    };

    let (program, rest) = args
        .command
        .split_first()
        .context("no command given after --")?;
    let mut child = Command::new(program)
        .args(rest)
        .env("FERRISSON_LOCK_NAME", &args.name)
        .env("FERRISSON_FENCING_TOKEN", guard.fencing_token().to_string())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .context("the command exited before it could be watched")?;

    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut lost = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            () = guard.lost(), if !lost => {
                lost = true;
                eprintln!("ferrisson: lock {:?} was lost; stopping the command", args.name);
                let _ = killpg(group, Signal::SIGTERM);
                if let Ok(status) = tokio::time::timeout(args.grace, child.wait()).await {
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
        drop(guard);
        return Ok(ExitCode::from(EXIT_LOCK_LOST));
    }
    if let Err(e) = guard.unlock().await {
        eprintln!("ferrisson: releasing lock {:?}: {e}", args.name);
    }
    Ok(ExitCode::from(exit_code(status)))
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
