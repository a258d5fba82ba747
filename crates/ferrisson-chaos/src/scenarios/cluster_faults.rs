//! A Redis Cluster changing under a held watchdog lock while other clients wait for it:
//! the lock's master failed over to its replica, the lock's slot migrated to another
//! master, the lock's master paused until the cluster fails it over.
//!
//! The cluster is the test kit's (three masters with a replica each), with a node
//! timeout of one second (`harness/setups.rs`). Each iteration's lock name is new, so
//! its slot, and the master serving it, vary; each fault leaves the cluster whole
//! (every node agreeing, every slot served) for the next iteration.

use std::time::Duration;

use anyhow::Context;
use ferrisson_testkit::{RedisCluster, key_slot};

use crate::checker::Counters;
use crate::harness::clients::connect;
use crate::harness::config::Config;
use crate::harness::contest::{
    Contest, Held, PATIENCE, WAITERS, ask_until_done, expect_waiters_granted,
    expect_waiters_granted_no_silent_loss, record_silent_double_grant,
};
use crate::harness::expectations::Expectations;
use crate::harness::record::keys_left;
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::history::Recorder;

/// The scenarios of this module: what happens to the lock's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClusterFault {
    /// `CLUSTER FAILOVER` on the replica of the lock's master (coordinated: the master
    /// stops taking writes until the replica has caught up, then hands over).
    MasterFailover,
    /// The lock's slot, with its keys, moved to another master (`MIGRATING` /
    /// `IMPORTING`, `MIGRATE`, `SETSLOT NODE`).
    SlotMigrated,
    /// The lock's master SIGSTOPped until the cluster has failed it over to its replica,
    /// then resumed (it rejoins as a replica). The clients' lease is ten times the run's,
    /// so that the holder's lease outlives the failover.
    NodePartitioned,
}

impl ClusterFault {
    /// The clients' lease in this scenario.
    fn lease(self, config: &Config) -> Duration {
        match self {
            Self::MasterFailover | Self::SlotMigrated => config.lease,
            Self::NodePartitioned => config.lease * 10,
        }
    }

    /// How long the holder goes on after the fault, renewing against the new topology:
    /// two of the run's leases (six renewals), one lease (three) when partitioned.
    fn after(self, config: &Config) -> Duration {
        match self {
            Self::MasterFailover | Self::SlotMigrated => config.lease * 2,
            Self::NodePartitioned => self.lease(config),
        }
    }

    /// Runs the fault on the lock's slot; returns once the cluster is whole again. A
    /// `CLUSTER FAILOVER` the nodes let lapse (a manual failover not done within its
    /// 5 s is aborted) is asked for again (`ask_until_done`).
    fn inject(self, cluster: &RedisCluster, slot: u16, rec: &Recorder) -> anyhow::Result<()> {
        let master = cluster.master_of_slot(slot)?;
        match self {
            Self::MasterFailover => {
                let replica = *cluster
                    .replicas_of(master)?
                    .first()
                    .context("the lock's master has no replica")?;
                ask_until_done(rec, || cluster.failover(replica))?;
            }
            Self::SlotMigrated => {
                let target = cluster
                    .masters()?
                    .into_iter()
                    .find(|&m| m != master)
                    .context("no other master")?;
                cluster.migrate_slot(slot, target)?;
            }
            Self::NodePartitioned => {
                cluster.nodes()[master].pause()?;
                let promoted = cluster.wait_for_new_master(slot, master);
                cluster.nodes()[master].resume()?;
                promoted?;
                cluster.wait_until_ok()?;
            }
        }
        Ok(())
    }
}

impl FaultScenario for ClusterFault {
    type Setup = RedisCluster;

    /// A partitioned master, resumed, may answer a renewal A sent it before it learns it
    /// was replaced: that renewal is lost with its data, while A's lease now runs past
    /// the new master's copy (see docs/SAFETY.md). It takes a race inside the resumed
    /// server, so a short run may show no double grant.
    fn is_documented_unsafe(self) -> bool {
        self == Self::NodePartitioned
    }

    fn double_grants_are_rare(self) -> bool {
        self == Self::NodePartitioned
    }

    async fn run_once(
        self,
        config: &Config,
        cluster: &mut RedisCluster,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let url = cluster.url();
        let lease = self.lease(config);
        let holder = connect(&url, lease).await?.lock(&it.name)?;
        let mut waiters = Vec::new();
        for _ in 0..WAITERS {
            waiters.push(connect(&url, lease).await?.lock(&it.name)?);
        }
        let contest = Contest {
            a: &it.a,
            waiter_recorders: (1..=WAITERS).map(|n| it.history.recorder(n)).collect(),
            holder,
            waiters,
            lease,
            patience: PATIENCE,
        };
        if let Held::Holding(running) = contest.start().await {
            // The lock's keys are `{NAME}...`: the slot of the hash tag.
            let slot = key_slot(format!("{{{}}}", it.name));
            tokio::task::block_in_place(|| self.inject(cluster, slot, &it.a))?;
            running.finish(self.after(config)).await?;
        }
        record_silent_double_grant(it);
        let checker = connect(&url, lease).await?;
        keys_left(&it.a, &checker, &it.name, lease).await
    }

    fn expect(self, _config: &Config, c: &Counters, expect: &mut Expectations) {
        if self == Self::NodePartitioned {
            // A grant by the deposed master is lost with its data, and its holder learns
            // it at its first renewal: one that finishes sooner never does.
            expect_waiters_granted(c, expect);
            return;
        }
        expect_waiters_granted_no_silent_loss(c, expect);
        if self == Self::SlotMigrated {
            // The renewals follow the slot (MOVED, ASK): the holder keeps its lock.
            expect.zero("lost signals", c.lost_signals);
        }
    }
}
