//! `ferrisson elect`: run a command only while elected leader.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use ferrisson::{AnyElection, AnyLeadership, DistributedElection, Fenced, Guard};

use crate::arguments::{Refused, check_candidate_id, check_name};
use crate::held_command::{Ended, HeldCommand, HoldArgs, Taken, release_lost};
use crate::terminal::quoted;

/// Run a command only while this process is the elected leader.
///
/// Campaigns in the election NAME (waiting as long as it takes unless --wait is given),
/// runs COMMAND once elected, with FERRISSON_ELECTION_NAME, FERRISSON_LEADER_ID and
/// FERRISSON_FENCING_TOKEN (the term's token, greater than every earlier term's) in its
/// environment, keeps the leadership renewed while COMMAND runs, and steps down when
/// COMMAND exits, which elects the next waiting candidate at once. If this process dies
/// without stepping down, the next candidate is elected one --lease later at most.
///
/// --wait bounds all of it, connecting included, as with `ferrisson lock`.
///
/// When leadership is lost while COMMAND runs (renewals failed for a whole lease, or the
/// election key was deleted), COMMAND gets SIGTERM, and SIGKILL after --grace; then
/// ferrisson exits 74, or with --recampaign campaigns again and runs COMMAND anew when
/// elected (a new term, a new token).
///
/// Exit status:
///   COMMAND's own     COMMAND ran to its end (128+N when signal N killed it)
///   75                --wait ran out; nothing was run       (change: --conflict-exit-code)
///   74                leadership was lost while COMMAND ran (change: --lost-exit-code)
///   125               ferrisson itself failed, e.g. Redis unreachable; a one-line reason
///                     is on stderr
///   126, 127          COMMAND could not be started, or was not found
///   2                 the arguments were refused; nothing was run or connected
///
/// COMMAND dies with ferrisson, as with `ferrisson lock`: it runs in a process group of
/// its own that is killed (SIGKILL) as soon as ferrisson dies, however it dies, long
/// before the next leader can be elected. SIGINT, SIGTERM and SIGHUP sent to ferrisson
/// are passed on to the group.
///
/// The Redis URL comes from --url, else $FERRISSON_URL, else $REDIS_URL, else
/// redis://127.0.0.1:6379; TLS as with `ferrisson lock`. On ZooKeeper (--url zk://...)
/// the election is Curator's LeaderLatch at /ferrisson/elections/NAME.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    hold: HoldArgs,

    /// This candidate's id, reported to observers and to COMMAND as FERRISSON_LEADER_ID [default: HOSTNAME:PID]
    #[arg(long, value_name = "ID")]
    id: Option<String>,

    /// After losing leadership, campaign again and run COMMAND anew when elected, instead of exiting
    #[arg(long)]
    recampaign: bool,

    /// The election's name
    name: String,

    /// The command to run while leader, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

impl Args {
    /// Refuses what no run could use, before anything connects.
    pub fn check(&self) -> Result<(), Refused> {
        check_name("<NAME>", &self.name)?;
        if let Some(id) = &self.id {
            check_candidate_id(id)?;
        }
        self.hold.check()
    }
}

/// Campaigns, runs while leader, steps down.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let name = quoted(&args.name);
    let failed = format!("cannot campaign for leadership of {name}");
    let waiting = format!("waiting to be elected leader of {name}");
    let id = match &args.id {
        Some(id) => id.clone(),
        None => default_id(),
    };
    let mut election = None;
    let taken = args
        .hold
        .connect_and_take(&failed, async |client, wait| {
            let candidate = client.election(&args.name)?.with_candidate_id(id.clone())?;
            let mut leadership = campaign(&candidate, wait).await;
            if let Err(e) = &leadership
                && crate::lock::create_missing_table(client, e).await?
            {
                leadership = campaign(&candidate, wait).await;
            }
            election = Some(candidate);
            leadership
        })
        .await?;
    let mut leadership = match taken {
        Taken::Held(leadership) => leadership,
        Taken::TimedOut(why) => {
            eprintln!("ferrisson: {}", args.hold.timed_out(&waiting, why));
            return Ok(ExitCode::from(args.hold.conflict_exit_code));
        }
    };
    // Set by the campaign that elected this leadership.
    let Some(election) = election else {
        anyhow::bail!("{failed}: elected without an election");
    };
    loop {
        tracing::info!(election = %args.name, id = %id, term = %leadership.fencing_token(), "elected");
        let command = HeldCommand {
            command: &args.command,
            env: vec![
                ("FERRISSON_ELECTION_NAME", args.name.clone()),
                ("FERRISSON_LEADER_ID", id.clone()),
                (
                    "FERRISSON_FENCING_TOKEN",
                    leadership.fencing_token().to_string(),
                ),
            ],
            grace: args.hold.grace,
            what: format!("leadership of {name}"),
        };
        let ended = match command.run(&leadership).await {
            Ok(ended) => ended,
            Err(e) => {
                // Nothing ran (the watcher could not start): step down now rather than
                // leave the next leader waiting for the lease.
                release_lost(leadership.unlock()).await;
                return Err(e.context(format!("cannot run the command as leader of {name}")));
            }
        };
        let code = match ended {
            Ended::Lost if args.recampaign => {
                release_lost(leadership.unlock()).await;
                eprintln!("ferrisson: campaigning again for {name}");
                let again = args
                    .hold
                    .take_again(&failed, async |wait| campaign(&election, wait).await)
                    .await?;
                match again {
                    Taken::Held(next) => {
                        leadership = next;
                        continue;
                    }
                    Taken::TimedOut(why) => {
                        eprintln!("ferrisson: {}", args.hold.timed_out(&waiting, why));
                        return Ok(ExitCode::from(args.hold.conflict_exit_code));
                    }
                }
            }
            Ended::Lost => {
                release_lost(leadership.unlock()).await;
                return Ok(ExitCode::from(args.hold.lost_exit_code));
            }
            Ended::Exited(code) | Ended::NotStarted(code) => code,
        };
        if let Err(e) = leadership.unlock().await {
            eprintln!("ferrisson: stepping down from leadership of {name}: {e}");
        }
        return Ok(ExitCode::from(code));
    }
}

async fn campaign(
    election: &AnyElection,
    wait: Option<Duration>,
) -> ferrisson::Result<Option<AnyLeadership>> {
    match wait {
        Some(wait) => election.campaign_timeout(wait).await,
        None => election.campaign().await.map(Some),
    }
}

/// `HOSTNAME:PID`: which machine and which process lead, as an operator looks for them.
fn default_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
