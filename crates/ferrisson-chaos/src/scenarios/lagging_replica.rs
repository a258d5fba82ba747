//! Failover to a lagging replica, done by hand (`REPLICAOF NO ONE`, what Sentinel does
//! minus the timing): a documented unsafe case.

use anyhow::bail;
use ferrisson_testkit::{FaultProxy, RedisServer};

use crate::harness::clients::connect;
use crate::harness::config::Config;
use crate::harness::record::{acquire, belief, critical_section, keys_left, write_with_token};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::resource::Resource;

/// The scenario of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaggingReplicaPromoted;

impl FaultScenario for LaggingReplicaPromoted {
    /// A master and its replica per iteration: the master is killed in each.
    type Setup = ();

    fn is_documented_unsafe(self) -> bool {
        true
    }

    /// Master M, replica R replicating through a proxy. A warm-up grant replicates; then
    /// replication is blackholed, A takes the lock on M, M is killed and R promoted, and
    /// B takes the lock on R while A still believes it holds it.
    async fn run_once(
        self,
        config: &Config,
        _shared: &mut (),
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let lease = config.lease * 3;
        let (a, b) = (&it.a, &it.b);
        let resource = Resource::default();
        // No delay before the full sync, so the replica is attached at once.
        let mut master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"])?;
        let link = FaultProxy::start(master.port()).await?;
        let replica =
            RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &link.port().to_string()])?;
        let lock_a = connect(&master.url(), lease).await?.lock(&it.name)?;
        // Warm-up: one grant, replicated, so the replica has the fencing floor.
        lock_a.lock().await?.unlock().await?;
        let acked = master.command(&["WAIT", "1", "10000"])?;
        if acked.trim().trim_start_matches(':') != "1" {
            bail!("the replica did not catch up: WAIT answered {acked:?}");
        }
        link.control().set_blackhole(true);
        let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await else {
            bail!("A could not take the lock on the master");
        };
        master.kill()?;
        replica.command(&["REPLICAOF", "NO", "ONE"])?;
        let cb = connect(&replica.url(), lease).await?;
        belief(a, 0, &guard);
        if let Some(g) = acquire(b, 0, &cb.lock(&it.name)?, lease * 10).await {
            belief(a, 0, &guard);
            // A acts on its belief; B writes as the new holder.
            if guard.is_held() {
                write_with_token(a, 0, &guard, &resource);
            }
            critical_section(b, 0, g, &resource, lease / 10).await;
        }
        drop(guard);
        keys_left(b, &cb, &it.name, lease).await
    }
}
