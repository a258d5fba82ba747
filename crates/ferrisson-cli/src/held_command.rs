//! Running COMMAND while a hold lasts, the same way for `lock` and `elect`: in a process
//! group of its own that dies with ferrisson, with SIGINT, SIGTERM and SIGHUP passed on,
//! stopped (SIGTERM, then SIGKILL after the grace) when the hold is lost.

use std::cell::Cell;
use std::ffi::OsString;
use std::time::Duration;

use anyhow::Context as _;
use ferrisson::{Client, Guard};
use nix::sys::signal::{Signal, killpg};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::arguments::{Refused, check_lease, check_namespace};
use crate::connection::ConnectionArgs;
use crate::group_watcher::{self, GroupWatcher};
use crate::terminal::sanitized;

/// How long after --wait ferrisson gives up at the latest. The wait for the holder ends
/// at --wait; this leaves room for a round trip in flight then (and, with a wait shorter
/// than a connect, for connecting and one try: `--wait 0s` tries once, like `flock -n`).
const WAIT_MARGIN: Duration = Duration::from_millis(500);

/// How long a release after a lost hold may take before ferrisson exits without it: the
/// store may be what made the hold lost.
const RELEASE_AFTER_LOSS: Duration = Duration::from_secs(1);

/// Exit status when COMMAND was found but could not be started (as shells use it).
const EXIT_CANNOT_RUN: u8 = 126;
/// Exit status when COMMAND was not found (as shells use it).
const EXIT_NOT_FOUND: u8 = 127;

/// The flags `lock` and `elect` share: where the store is, how long to wait, the lease, how
/// to stop COMMAND, and the exit statuses of ferrisson's own outcomes.
#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    #[command(flatten)]
    connection: ConnectionArgs,

    /// Give up after waiting this long for the lock, or to be elected, connecting included (e.g. 500ms, 10s, 2m) [default: wait forever]
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub wait: Option<Duration>,

    /// Exit status when --wait ran out (flock's option of the same name)
    #[arg(short = 'E', long, value_name = "N", default_value_t = 75)]
    pub conflict_exit_code: u8,

    /// Exit status when the lock or leadership was lost while COMMAND ran
    #[arg(long, value_name = "N", default_value_t = 74)]
    pub lost_exit_code: u8,

    /// Watchdog lease, at least 100ms: the lock or leadership is renewed every third of it, and outlives a crashed holder by at most this long
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
    /// Refuses what no connect could use.
    pub fn check(&self) -> Result<(), Refused> {
        self.connection.check()?;
        check_namespace(&self.namespace)?;
        check_lease(self.lease)
    }

    /// A client of the store the URL names, with these connection flags, namespace and
    /// watchdog lease.
    async fn connect(&self) -> anyhow::Result<Client> {
        Ok(self
            .connection
            .any_builder()?
            .namespace(self.namespace.clone())
            .watchdog_lease(self.lease)
            .connect()
            .await?)
    }

    /// Connects and takes the hold with `take`, all of it within --wait when given (and
    /// [`WAIT_MARGIN`]): one deadline bounds connecting, every round trip to the store and
    /// the wait for the holder, so a store that does not answer (paused, or packets
    /// dropped on the way) counts against the wait like a holder that does not let go.
    ///
    /// `take` gets the client and the time left of the wait (`None`: no limit); it waits
    /// for the holder at most that long. When the deadline passes first, whatever it was
    /// doing is dropped (the library's acquires are cancel safe). The guard it returns
    /// keeps the client (and its renewals) alive.
    ///
    /// `failed` says in errors what failed (`cannot take lock "jobs"`).
    pub async fn connect_and_take<G>(
        &self,
        failed: &str,
        take: impl AsyncFnOnce(&Client, Option<Duration>) -> ferrisson::Result<Option<G>>,
    ) -> anyhow::Result<Taken<G>> {
        let start = Instant::now();
        let connected = Cell::new(false);
        let taking = async {
            let client = self.connect().await.context(failed.to_owned())?;
            connected.set(true);
            let left = self.wait.map(|wait| wait.saturating_sub(start.elapsed()));
            take(&client, left).await.context(failed.to_owned())
        };
        self.within_wait(start, taking, || connected.get()).await
    }

    /// Takes the hold again on the client already connected (`elect --recampaign`), within
    /// --wait as [`HoldArgs::connect_and_take`] does.
    pub async fn take_again<G>(
        &self,
        failed: &str,
        take: impl AsyncFnOnce(Option<Duration>) -> ferrisson::Result<Option<G>>,
    ) -> anyhow::Result<Taken<G>> {
        let taking = async { take(self.wait).await.context(failed.to_owned()) };
        self.within_wait(Instant::now(), taking, || true).await
    }

    /// `taking`'s outcome, or [`Taken::TimedOut`] when --wait (and [`WAIT_MARGIN`]) from
    /// `start` passes first; `connected` tells whether it got past connecting.
    async fn within_wait<G>(
        &self,
        start: Instant,
        taking: impl Future<Output = anyhow::Result<Option<G>>>,
        connected: impl Fn() -> bool,
    ) -> anyhow::Result<Taken<G>> {
        let outcome = match self.wait {
            Some(wait) => tokio::time::timeout_at(start + wait + WAIT_MARGIN, taking).await,
            None => Ok(taking.await),
        };
        Ok(match outcome {
            Ok(Ok(Some(guard))) => Taken::Held(guard),
            Ok(Ok(None)) => Taken::TimedOut(None),
            Ok(Err(e)) => return Err(e),
            Err(_elapsed) if connected() => {
                Taken::TimedOut(Some("the server did not answer in time"))
            }
            Err(_elapsed) => Taken::TimedOut(Some("the server did not answer while connecting")),
        })
    }

    /// What to tell when --wait ran out `waiting` (`waiting for lock "jobs"`): how long,
    /// and why when it was not the holder (`timed out after 2s waiting for lock "jobs":
    /// the server did not answer`).
    pub fn timed_out(&self, waiting: &str, why: Option<&str>) -> String {
        let waited = humantime::format_duration(self.wait.unwrap_or_default());
        match why {
            Some(why) => format!("timed out after {waited} {waiting}: {why}"),
            None => format!("timed out after {waited} {waiting}"),
        }
    }
}

/// How taking a hold within --wait ended.
pub enum Taken<G> {
    /// Held.
    Held(G),
    /// --wait ran out; why, when it was the store that did not answer rather than the
    /// holder that did not let go.
    TimedOut(Option<&'static str>),
}

/// Releases a hold that was lost (or that nothing ran under), without a word: the loss
/// or the failure was told already, and a release that finds the hold gone, or a store
/// that does not answer, is expected then. Whatever is left expires with its lease.
pub async fn release_lost(release: impl Future<Output = ferrisson::Result<()>>) {
    let _ = tokio::time::timeout(RELEASE_AFTER_LOSS, release).await;
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
                eprintln!(
                    "ferrisson: cannot run {}: {e}",
                    sanitized(&program.to_string_lossy())
                );
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
