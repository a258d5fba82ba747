//! `ferrisson lock`: run a command while holding a distributed lock (like `flock(1)`).

use std::ffi::OsString;
use std::process::ExitCode;

use ferrisson::{DistributedLock, Guard};

use crate::arguments::{Refused, check_name};
use crate::held_command::{Ended, HeldCommand, HoldArgs, Taken, release_lost};
use crate::terminal::quoted;

/// Run a command while holding a distributed lock.
///
/// Acquires the lock NAME (waiting as long as it takes unless --wait is given), runs
/// COMMAND with FERRISSON_LOCK_NAME and FERRISSON_FENCING_TOKEN in its environment, keeps
/// the lock renewed while COMMAND runs, and releases it when COMMAND exits.
///
/// --wait bounds all of it, connecting included: a server that does not answer (paused,
/// or unreachable behind a firewall) counts against the wait like a holder that does
/// not let go. ferrisson gives up at most 500ms after --wait (a round trip in flight then);
/// --wait 0s tries once, like flock -n.
///
/// Exit status:
///   COMMAND's own     COMMAND ran to its end (128+N when signal N killed it)
///   75                --wait ran out; nothing was run       (change: --conflict-exit-code)
///   74                the lock was lost while COMMAND ran   (change: --lost-exit-code)
///                     (COMMAND got SIGTERM, and SIGKILL after --grace)
///   125               ferrisson itself failed, e.g. Redis unreachable or a refused
///                     certificate; a one-line reason is on stderr
///   126, 127          COMMAND could not be started, or was not found; nothing was run
///   2                 the arguments were refused; nothing was run or connected
/// A command may exit 74 or 75 itself: give --conflict-exit-code and --lost-exit-code
/// values it never uses (as with flock -E) when a script must tell them apart.
///
/// COMMAND dies with ferrisson: it runs in a process group of its own that is killed
/// (SIGKILL) as soon as ferrisson dies, however it dies (kill -9, the OOM killer), long
/// before the lock can expire and pass to another holder. COMMAND's children are in that
/// group too, unless they leave it on purpose (setsid, daemons). On Linux the kernel also
/// sends COMMAND itself SIGKILL when ferrisson dies (a parent-death signal). SIGINT,
/// SIGTERM and SIGHUP sent to ferrisson are passed on to the group. When COMMAND exits
/// normally, the lock is released and anything COMMAND left running in the background
/// keeps running, without the lock.
///
/// The Redis URL comes from --url, else $FERRISSON_URL, else $REDIS_URL, else
/// redis://127.0.0.1:6379 ($FERRISSON_REDIS_URL, an older name, is read before
/// $REDIS_URL). A rediss:// URL connects with TLS, checked against the system's CA
/// certificates or --cacert, with a client certificate from --cert and --key.
///
/// A postgres:// or mysql:// (mariadb://) URL takes the lock in the database's lock
/// table (ferrisson_lock, or ?table=NAME in the URL), which is created if it is missing
/// (said on stderr); FERRISSON_FENCING_TOKEN comes from the table's fence sequence.
/// With ?lock=advisory in the URL it takes the database's session lock instead
/// (pg_try_advisory_lock, GET_LOCK): nothing to create, and no FERRISSON_FENCING_TOKEN.
///
/// On ZooKeeper (--url zk://HOST:PORT[,HOST:PORT...][/CHROOT]) the lock is Curator's
/// InterProcessMutex at /ferrisson/locks/NAME (at NAME itself when it starts with /, to
/// share a lock with Java services), FERRISSON_FENCING_TOKEN is its node's czxid, and
/// --lease is the session timeout asked for (the server may grant another).
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    hold: HoldArgs,

    /// The lock's name
    name: String,

    /// The command to run, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

impl Args {
    /// Refuses what no run could use, before anything connects.
    pub fn check(&self) -> Result<(), Refused> {
        check_name("<NAME>", &self.name)?;
        self.hold.check()
    }
}

/// After `error`: when it says the database's lock table is missing, creates it (and
/// says so on stderr) and returns true, so that the caller tries again.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn create_missing_table(
    client: &ferrisson::Client,
    error: &ferrisson::Error,
) -> ferrisson::Result<bool> {
    use ferrisson::sql::SqlError;
    let missing = matches!(
        error.store_error::<SqlError>(),
        Some(SqlError::MissingSchema { .. })
    );
    let Some(sql) = client.as_sql().filter(|_| missing) else {
        return Ok(false);
    };
    sql.create_schema().await?;
    eprintln!(
        "ferrisson: created the lock table {} in the {} database",
        quoted(sql.table()),
        sql.dialect().store()
    );
    Ok(true)
}

/// Without a database store nothing is ever missing.
#[cfg(not(any(feature = "postgres", feature = "mysql")))]
#[allow(clippy::unused_async)]
pub(crate) async fn create_missing_table(
    _client: &ferrisson::Client,
    _error: &ferrisson::Error,
) -> ferrisson::Result<bool> {
    Ok(false)
}

/// Acquires, runs, releases.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let what = format!("lock {}", quoted(&args.name));
    let taken = args
        .hold
        .connect_and_take(&format!("cannot take {what}"), async |client, wait| {
            let lock = client.lock(&args.name)?;
            let take = async || match wait {
                Some(wait) => lock.lock_timeout(wait).await,
                None => lock.lock().await.map(Some),
            };
            match take().await {
                Err(e) if create_missing_table(client, &e).await? => take().await,
                taken => taken,
            }
        })
        .await?;
    let guard = match taken {
        Taken::Held(guard) => guard,
        Taken::TimedOut(why) => {
            let waiting = format!("waiting for {what}");
            eprintln!("ferrisson: {}", args.hold.timed_out(&waiting, why));
            return Ok(ExitCode::from(args.hold.conflict_exit_code));
        }
    };
    let mut env = vec![("FERRISSON_LOCK_NAME", args.name.clone())];
    // A store without fencing tokens (a database session lock) sets none.
    if let Some(token) = guard.fencing_token() {
        env.push(("FERRISSON_FENCING_TOKEN", token.to_string()));
    }
    let command = HeldCommand {
        command: &args.command,
        env,
        grace: args.hold.grace,
        what: what.clone(),
    };
    let ended = match command.run(&guard).await {
        Ok(ended) => ended,
        Err(e) => {
            // Nothing ran (the watcher could not start): give the lock back now rather
            // than leave it to its lease.
            release_lost(guard.unlock()).await;
            return Err(e.context(format!("cannot run the command under {what}")));
        }
    };
    let code = match ended {
        Ended::Lost => {
            release_lost(guard.unlock()).await;
            return Ok(ExitCode::from(args.hold.lost_exit_code));
        }
        Ended::Exited(code) | Ended::NotStarted(code) => code,
    };
    if let Err(e) = guard.unlock().await {
        eprintln!("ferrisson: releasing {what}: {e}");
    }
    Ok(ExitCode::from(code))
}
