//! `SENTINEL FAILOVER` while a watchdog lock is held and other clients wait for it, with
//! and without the library's replica acknowledgements.
//!
//! The group is the test kit's (a master, two replicas, three sentinels). A Sentinel
//! failover promotes a replica first and turns the old master into a replica of it only
//! once a sentinel sees the old master still claiming the role, about a second later;
//! meanwhile the old master takes writes that the new one never gets: the holder's
//! renewals, which then extend a lease the new master does not have.

use std::time::Duration;

use ferrisson::redis::Client;
use ferrisson_testkit::SentinelGroup;

use crate::checker::Counters;
use crate::harness::clients::{connect, connect_acked};
use crate::harness::config::Config;
use crate::harness::contest::{
    Contest, Held, PATIENCE, WAITERS, ask_until_done, expect_waiters_granted_no_silent_loss,
    record_silent_double_grant,
};
use crate::harness::expectations::Expectations;
use crate::harness::record::keys_left;
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::harness::sentinel::wait_until_roles_reported;

/// The scenarios of this module: the same failover, the clients with or without replica
/// acknowledgements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SentinelFailover {
    /// Grants and renewals count once the master answered.
    Unacknowledged,
    /// Grants and renewals count once both replicas have them (`replica_acks(2, ...)`):
    /// whichever replica is promoted has every lease a holder believes in. (One of two
    /// is not enough: during the failover the other replica still follows the old
    /// master and acknowledges writes the new master never gets.)
    Acknowledged,
}

/// Replicas that must acknowledge, in the acknowledged variant: all of the group's.
const REPLICAS: u32 = 2;

impl SentinelFailover {
    /// A client of this variant.
    async fn client(self, url: &str, lease: Duration) -> anyhow::Result<Client> {
        match self {
            Self::Unacknowledged => connect(url, lease).await,
            Self::Acknowledged => connect_acked(url, lease, REPLICAS).await,
        }
    }
}

impl FaultScenario for SentinelFailover {
    type Setup = SentinelGroup;

    /// Without acknowledgements the holder renews on the old master after the new one
    /// was promoted, and a waiter is granted on the new one while the holder's lease
    /// still runs (see docs/SAFETY.md).
    fn is_documented_unsafe(self) -> bool {
        self == Self::Unacknowledged
    }

    /// Until a sentinel turns the old master into a replica two masters take writes, and
    /// a holder's renewal on one can overlap a waiter's grant on the other (seen in a CI
    /// run: the renewal sent 3 ms before the waiter's acquire, its reply 0.4 ms after the
    /// grant; on one server one of the two would have been refused). The checker, which
    /// sees beliefs rather than servers, counts it as a foreign renewal; it is the
    /// failure itself, reported in that column. With acknowledgements such a renewal
    /// never counts: the replica that was promoted cannot acknowledge it.
    fn renewals_may_reach_a_deposed_master(self) -> bool {
        self == Self::Unacknowledged
    }

    async fn run_once(
        self,
        config: &Config,
        group: &mut SentinelGroup,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let url = group.url();
        let lease = config.lease;
        let holder = self.client(&url, lease).await?.lock(&it.name)?;
        let mut waiters = Vec::new();
        for _ in 0..WAITERS {
            waiters.push(self.client(&url, lease).await?.lock(&it.name)?);
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
            // Returns once the group is settled around the new master: the old one
            // replicates it.
            // A sentinel now and then lets a forced failover lapse (an abort): it is
            // asked again.
            tokio::task::block_in_place(|| {
                wait_until_roles_reported(group)?;
                ask_until_done(&it.a, || group.failover())
            })?;
            running.finish(lease * 2).await?;
        }
        record_silent_double_grant(it);
        let checker = connect(&url, lease).await?;
        keys_left(&it.a, &checker, &it.name, lease).await
    }

    fn expect(self, _config: &Config, c: &Counters, expect: &mut Expectations) {
        expect_waiters_granted_no_silent_loss(c, expect);
    }
}
