//! The holder as a separate process: this same program run again with [`HOLDER_ENV`]
//! set, so a scenario can SIGKILL it, SIGSTOP it or run it on another wall clock.
//!
//! The protocol, on the holder's stdout and stdin:
//!
//! - it takes the lock and prints `holder-token TOKEN DEADLINE` (deadline in
//!   `CLOCK_MONOTONIC` nanoseconds, the clock of `Instant` on Linux, shared by both
//!   processes);
//! - on a `go` line it prints `holder-belief HELD DEADLINE WALL_MS` (`is_held()`, the
//!   guard's deadline, its own wall clock in milliseconds since the epoch), releases and
//!   prints `holder-release OUTCOME`;
//! - on a `lost?` line (before `go`) it waits up to one lease for the guard's `lost()`
//!   and prints `holder-lost-fired FIRED` (`true` or `false`);
//! - with [`REPORTS_LOST_ENV`] set, it prints `holder-lost INSTANT` (`CLOCK_MONOTONIC`
//!   nanoseconds) when its guard's `lost()` fires before the first line;
//! - on a `go-fenced KEY` line instead, it prints `holder-belief HELD DEADLINE WALL_MS
//!   LOST` (`LOST`: whether `lost()` has fired), then makes the store's own fenced write
//!   of `KEY` (etcd's `fenced_put`, a transaction guarded by the lock key's create
//!   revision) and prints `holder-fenced-put accepted|refused|unsupported|error`, then
//!   releases as after `go`;
//! - at the end of its input it holds the lock until it is killed.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use ferrisson::{AnyGuard, DistributedLock as _, Guard as _};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::harness::clients::connect_any;
use crate::harness::config::Config;
use crate::harness::record::outcome;
use crate::history::{EventKind, Recorder, ReleaseOutcome};

/// Environment variable that turns a process into the holder of the scenarios that need
/// one in another process: `URL LOCK_NAME LEASE_MS`. The URL names any store the facade
/// connects to (Redis, PostgreSQL, MySQL/MariaDB, ZooKeeper, etcd); the lock is the
/// store's default lock (`ferrisson::Client::lock`).
pub const HOLDER_ENV: &str = "FERRISSON_CHAOS_HOLDER";

/// The line that asks the holder whether its lock's `lost()` fired.
const LOST_QUERY: &str = "lost?";

/// Environment variable (any value) that has the holder report its guard's `lost()`
/// (see the module docs); read by [`HolderProcess::lost_within`].
pub(crate) const REPORTS_LOST_ENV: &str = "FERRISSON_CHAOS_HOLDER_REPORTS_LOST";

/// How long the holder may take to answer a line.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// A running holder process that holds the lock: its stdin, its output lines and its
/// grant (recorded in the history when it was spawned).
pub(crate) struct HolderProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<String>>,
    /// The grant's fencing token.
    pub(crate) token: u64,
}

/// What the holder believed when told to go on, and how its release ended.
pub(crate) struct HolderEnd {
    /// `is_held()` when told to go on.
    pub(crate) held: bool,
    /// Its wall clock then, minus ours, in milliseconds.
    pub(crate) wall_clock_offset_ms: i64,
}

/// The system-wide monotonic clock (`CLOCK_MONOTONIC`, the clock of `Instant` on
/// Linux), readable in both processes: how a child's deadline lands on our clock.
fn monotonic() -> anyhow::Result<Duration> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)?;
    Ok(Duration::from(now))
}

fn unix_millis() -> anyhow::Result<i64> {
    Ok(i64::try_from(
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis(),
    )?)
}

impl HolderProcess {
    /// Starts the holder (with `env` added to its environment) and waits until it holds
    /// the lock, recording the acquire as client `rec`'s grant 0.
    pub(crate) fn spawn(
        config: &Config,
        url: &str,
        name: &str,
        rec: &Recorder,
        env: Vec<(OsString, OsString)>,
    ) -> anyhow::Result<Self> {
        let holder = config
            .holder
            .as_ref()
            .context("this scenario needs a holder command")?;
        rec.record(0, EventKind::AcquireInvoked);
        let mut child = Command::new(&holder.program)
            .args(&holder.args)
            .env(
                HOLDER_ENV,
                format!("{url} {name} {}", config.lease.as_millis()),
            )
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("piped")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may print around the holder's text, even on the same line.
                if let Some(at) = line.find("holder-")
                    && tx.send(line[at..].to_owned()).is_err()
                {
                    break;
                }
            }
        });
        let line = lines
            .recv_timeout(ANSWER_DEADLINE)
            .context("the holder process ended before holding the lock")?;
        // holder-token TOKEN DEADLINE_MONOTONIC_NANOS
        let mut parts = line.split_whitespace().skip(1);
        let token: u64 = parts.next().context("token")?.parse()?;
        let deadline = on_history_clock(rec, parts.next().context("deadline")?)?;
        rec.record(
            0,
            EventKind::AcquireOk {
                token: Some(token),
                deadline,
            },
        );
        let stdin = child.stdin.take();
        Ok(Self {
            child,
            stdin,
            lines: Some(lines),
            token,
        })
    }

    /// The process id, for signals.
    pub(crate) fn pid(&self) -> anyhow::Result<Pid> {
        Ok(Pid::from_raw(i32::try_from(self.child.id())?))
    }

    /// Kills the holder (SIGKILL) and reaps it.
    pub(crate) async fn kill(mut self) -> anyhow::Result<()> {
        kill(self.pid()?, Signal::SIGKILL)?;
        let mut child = self.child;
        tokio::task::spawn_blocking(move || child.wait()).await??;
        self.stdin.take();
        Ok(())
    }

    /// Tells the holder to go on: records its belief, runs `act` (what the holder does
    /// on that belief, e.g. a write), then records its release and reaps it.
    pub(crate) async fn finish(
        mut self,
        rec: &Recorder,
        act: impl FnOnce(bool),
    ) -> anyhow::Result<HolderEnd> {
        let mut stdin = self.stdin.take().context("piped")?;
        stdin.write_all(b"go\n")?;
        // holder-belief HELD DEADLINE_MONOTONIC_NANOS WALL_MS
        let line = self.next_line().await?;
        let mut parts = line.split_whitespace().skip(1);
        let held = parts.next() == Some("true");
        let deadline = on_history_clock(rec, parts.next().context("deadline")?)?;
        let wall: i64 = parts.next().context("wall clock")?.parse()?;
        let wall_clock_offset_ms = wall - unix_millis()?;
        rec.record(0, EventKind::Belief { held, deadline });
        act(held);
        rec.record(0, EventKind::ReleaseInvoked);
        let line = self.next_line().await?;
        let outcome = match line.split_whitespace().nth(1) {
            Some("ok") => ReleaseOutcome::Ok,
            Some("not-owner") => ReleaseOutcome::NotOwner,
            Some("expired") => ReleaseOutcome::Expired,
            _ => ReleaseOutcome::Error(line.clone()),
        };
        rec.record(0, EventKind::Released { outcome });
        drop(stdin);
        let mut child = self.child;
        tokio::task::spawn_blocking(move || child.wait()).await??;
        Ok(HolderEnd {
            held,
            wall_clock_offset_ms,
        })
    }

    /// Asks the holder (before [`HolderProcess::finish`]) whether its guard's `lost()`
    /// fires within one lease, recording the signal when it did.
    pub(crate) async fn lost_reported(&mut self, rec: &Recorder) -> anyhow::Result<bool> {
        let stdin = self.stdin.as_mut().context("piped")?;
        stdin.write_all(LOST_QUERY.as_bytes())?;
        stdin.write_all(b"\n")?;
        // holder-lost-fired FIRED
        let line = self.next_line().await?;
        let fired = line.split_whitespace().nth(1) == Some("true");
        if fired {
            rec.record(0, EventKind::Lost);
        }
        Ok(fired)
    }

    /// Waits at most `wait` for the holder (spawned with [`REPORTS_LOST_ENV`]) to report
    /// its guard's `lost()`, and records it at the instant the holder saw it. `false`
    /// when no report came in time.
    pub(crate) async fn lost_within(
        &mut self,
        rec: &Recorder,
        wait: Duration,
    ) -> anyhow::Result<bool> {
        let lines = self.lines.take().context("one reader at a time")?;
        let (line, lines) = tokio::task::spawn_blocking(move || {
            let line = lines.recv_timeout(wait);
            (line, lines)
        })
        .await?;
        self.lines = Some(lines);
        let Ok(line) = line else {
            return Ok(false);
        };
        // holder-lost INSTANT_MONOTONIC_NANOS
        let mut parts = line.split_whitespace();
        anyhow::ensure!(
            parts.next() == Some("holder-lost"),
            "the holder said {line:?} before reporting its lost signal"
        );
        let at = on_history_clock(rec, parts.next().context("instant")?)?;
        rec.record_at(at, 0, EventKind::Lost);
        Ok(true)
    }

    async fn next_line(&mut self) -> anyhow::Result<String> {
        let lines = self.lines.take().context("one reader at a time")?;
        let (line, lines) = tokio::task::spawn_blocking(move || {
            let line = lines.recv_timeout(ANSWER_DEADLINE);
            (line, lines)
        })
        .await?;
        self.lines = Some(lines);
        line.context("the holder process did not answer")
    }
}

/// A `CLOCK_MONOTONIC` instant printed by the holder, on the history's clock.
fn on_history_clock(rec: &Recorder, nanos: &str) -> anyhow::Result<Duration> {
    let instant = Duration::from_nanos(nanos.parse()?);
    let (now, now_mono) = (rec.now(), monotonic()?);
    Ok((now + instant).saturating_sub(now_mono))
}

/// The holder process (see the module's protocol). Returns `Ok(false)` at once when
/// [`HOLDER_ENV`] is not set.
///
/// # Errors
///
/// When the variable is malformed or the lock cannot be taken.
pub async fn run_killable_holder() -> anyhow::Result<bool> {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return Ok(false);
    };
    let mut parts = spec.split_whitespace();
    let (Some(url), Some(name), Some(lease)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("{HOLDER_ENV} must be `URL NAME LEASE_MS`, got {spec:?}");
    };
    let lease = Duration::from_millis(lease.parse()?);
    let client = connect_any(url, lease).await?;
    let guard = client.lock(name)?.lock().await?;
    let deadline = |guard: &AnyGuard| -> anyhow::Result<u128> {
        Ok((monotonic()? + guard.remaining()).as_nanos())
    };
    let token = guard
        .fencing_token()
        .context("the holder's store gives no fencing token")?;
    println!("holder-token {} {}", token.get(), deadline(&guard)?);
    let read_line = || {
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
    };
    let mut read = read_line();
    let mut line = if std::env::var_os(REPORTS_LOST_ENV).is_some() {
        tokio::select! {
            () = guard.lost() => {
                println!("holder-lost {}", monotonic()?.as_nanos());
                (&mut read).await??
            }
            line = &mut read => line??,
        }
    } else {
        read.await??
    };
    if line.trim() == LOST_QUERY {
        let fired = tokio::time::timeout(lease, guard.lost()).await.is_ok();
        println!("holder-lost-fired {fired}");
        line = read_line().await??;
    }
    if let Some(key) = line.trim().strip_prefix(GO_FENCED) {
        finish_fenced(&client, guard, key).await?;
        return Ok(true);
    }
    if line.trim() != "go" {
        // Held (and renewed) until the parent kills this process.
        std::future::pending::<()>().await;
    }
    let held = guard.is_held();
    println!(
        "holder-belief {held} {} {}",
        deadline(&guard)?,
        unix_millis()?
    );
    let outcome = match outcome(guard.unlock().await) {
        ReleaseOutcome::Ok => "ok".to_owned(),
        ReleaseOutcome::NotOwner => "not-owner".to_owned(),
        ReleaseOutcome::Expired => "expired".to_owned(),
        ReleaseOutcome::Error(e) => format!("error:{}", e.replace(' ', "_")),
    };
    println!("holder-release {outcome}");
    Ok(true)
}

/// The line that tells the holder to go on with the store's own fenced write of a key.
const GO_FENCED: &str = "go-fenced ";

/// What a holder told `go-fenced` believed, and what its fenced write did.
pub(crate) struct FencedEnd {
    /// Whether its `lost()` had fired by then.
    pub(crate) lost: bool,
    /// `accepted`, `refused`, `unsupported` (a store without a fenced write) or `error`.
    pub(crate) fenced_put: String,
}

impl HolderProcess {
    /// Tells the holder to go on with a fenced write of `key` in the store (see the
    /// module's protocol): records its belief and its lost signal if it fired, runs
    /// `act` (what the holder does on that belief at the chaos resource), then records
    /// its release and reaps it.
    pub(crate) async fn finish_fenced(
        mut self,
        rec: &Recorder,
        key: &str,
        act: impl FnOnce(bool),
    ) -> anyhow::Result<FencedEnd> {
        let mut stdin = self.stdin.take().context("piped")?;
        stdin.write_all(format!("{GO_FENCED}{key}\n").as_bytes())?;
        // holder-belief HELD DEADLINE_MONOTONIC_NANOS WALL_MS LOST
        let line = self.next_line().await?;
        let mut parts = line.split_whitespace().skip(1);
        let held = parts.next() == Some("true");
        let deadline = on_history_clock(rec, parts.next().context("deadline")?)?;
        let lost = parts.nth(1) == Some("true");
        rec.record(0, EventKind::Belief { held, deadline });
        if lost {
            rec.record(0, EventKind::Lost);
        }
        act(held);
        // holder-fenced-put OUTCOME
        let line = self.next_line().await?;
        let fenced_put = line.split_whitespace().nth(1).unwrap_or("error").to_owned();
        rec.record(0, EventKind::ReleaseInvoked);
        let line = self.next_line().await?;
        let outcome = match line.split_whitespace().nth(1) {
            Some("ok") => ReleaseOutcome::Ok,
            Some("not-owner") => ReleaseOutcome::NotOwner,
            Some("expired") => ReleaseOutcome::Expired,
            _ => ReleaseOutcome::Error(line.clone()),
        };
        rec.record(0, EventKind::Released { outcome });
        drop(stdin);
        let mut child = self.child;
        tokio::task::spawn_blocking(move || child.wait()).await??;
        Ok(FencedEnd { lost, fenced_put })
    }
}

/// The holder's side of `go-fenced KEY`: its belief and whether `lost()` fired, the
/// store's fenced write of `KEY`, the release.
async fn finish_fenced(
    client: &ferrisson::Client,
    guard: AnyGuard,
    key: &str,
) -> anyhow::Result<()> {
    let held = guard.is_held();
    // Fired already when it resolves at the first poll.
    let lost = tokio::time::timeout(Duration::ZERO, guard.lost())
        .await
        .is_ok();
    let deadline = (monotonic()? + guard.remaining()).as_nanos();
    println!("holder-belief {held} {deadline} {} {lost}", unix_millis()?);
    let put = match (&guard, client.as_etcd()) {
        (AnyGuard::Etcd(etcd_guard), Some(etcd)) => {
            match etcd
                .fenced_put(etcd_guard, key, "written by a late holder")
                .await
            {
                Ok(ferrisson::etcd::FencedPut::Accepted { .. }) => "accepted",
                Ok(ferrisson::etcd::FencedPut::Refused { .. }) => "refused",
                Err(_) => "error",
            }
        }
        _ => "unsupported",
    };
    println!("holder-fenced-put {put}");
    let outcome = match outcome(guard.unlock().await) {
        ReleaseOutcome::Ok => "ok".to_owned(),
        ReleaseOutcome::NotOwner => "not-owner".to_owned(),
        ReleaseOutcome::Expired => "expired".to_owned(),
        ReleaseOutcome::Error(e) => format!("error:{}", e.replace(' ', "_")),
    };
    println!("holder-release {outcome}");
    Ok(())
}
