//! The holder as a process of its own, signalled while it holds: killed (SIGKILL), or
//! frozen (SIGSTOP) for two leases and resumed.

use std::time::{Duration, Instant};

use ferrisson::redis::Lock;
use nix::sys::signal::{Signal, kill};

use crate::checker::Counters;
use crate::harness::config::Config;
use crate::harness::expectations::Expectations;
use crate::harness::holder_process::HolderProcess;
use crate::harness::record::{acquire, acquire_and_work, release};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::harness::setups::{ServerIteration, SingleServer};
use crate::history::EventKind;

/// Time from the SIGKILL to the next client holding the lock.
const REACQUIRE: &str = "reacquire_after_sigkill";

/// The scenarios of this module: what the holder process is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HolderSignal {
    /// SIGKILL while holding: the next acquire must come within the lease.
    Killed,
    /// SIGSTOP for two leases, then SIGCONT: the holder's write with its old token must
    /// be refused.
    Paused,
}

impl FaultScenario for HolderSignal {
    type Setup = SingleServer;

    async fn run_once(
        self,
        config: &Config,
        env: &mut SingleServer,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let cx = env.iteration(config, it).await?;
        let lock_b = cx.direct.lock(&it.name)?;
        match self {
            Self::Killed => holder_killed(config, &cx, &lock_b).await?,
            Self::Paused => holder_paused(config, &cx, &lock_b).await?,
        }
        cx.keys_left().await
    }

    fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
        if self == Self::Killed {
            // The waiter sleeps for the dead holder's TTL and takes the lock when it runs
            // out (typically lease + a few ms, reported in the table). The bound only has
            // to tell that apart from a waiter that slept through to its own deadline (10
            // leases), with room for a machine busy with other work.
            let bound = config.lease * 5;
            match c.measures.get(REACQUIRE) {
                Some(ms) if Duration::from_millis(*ms) <= bound => {}
                other => expect.fail(format!(
                    "time to the next acquire after SIGKILL {other:?} ms, expected <= {} ms",
                    bound.as_millis()
                )),
            }
        }
    }
}

/// Starts a holder process, kills it with SIGKILL once it holds the lock, and measures
/// how long until B holds it; B then takes it once more and works.
async fn holder_killed(
    config: &Config,
    cx: &ServerIteration<'_>,
    lock_b: &Lock,
) -> anyhow::Result<()> {
    let (a, b, lease) = (&cx.it.a, &cx.it.b, cx.lease);
    let holder = HolderProcess::spawn(config, &cx.env.server.url(), &cx.it.name, a, Vec::new())?;
    holder.kill().await?;
    let killed = Instant::now();
    // A dead process believes nothing.
    a.record(0, EventKind::Lost);
    if let Some(guard) = acquire(b, 0, lock_b, lease * 10).await {
        b.record(
            0,
            EventKind::Measure {
                name: REACQUIRE.into(),
                millis: killed.elapsed().as_millis() as u64,
            },
        );
        release(b, 0, guard).await;
    }
    acquire_and_work(b, 1, lock_b, lease * 10, &cx.resource, lease / 4).await;
    Ok(())
}

/// Freezes a holder process (SIGSTOP) for two leases while B takes the lock and writes;
/// then resumes it. The holder reports its belief, writes with its old token (the
/// resource judges it) and releases.
async fn holder_paused(
    config: &Config,
    cx: &ServerIteration<'_>,
    lock_b: &Lock,
) -> anyhow::Result<()> {
    let (a, lease, resource) = (&cx.it.a, cx.lease, &cx.resource);
    let holder = HolderProcess::spawn(config, &cx.env.server.url(), &cx.it.name, a, Vec::new())?;
    let token = holder.token;
    resource.enter(a, 0, Some(token));
    kill(holder.pid()?, Signal::SIGSTOP)?;
    acquire_and_work(&cx.it.b, 0, lock_b, lease * 10, resource, lease / 4).await;
    kill(holder.pid()?, Signal::SIGCONT)?;
    // The resumed process goes on with its critical section: a stale write.
    holder
        .finish(a, |_| {
            resource.write(a, 0, token);
            resource.exit(a, 0);
        })
        .await?;
    Ok(())
}
