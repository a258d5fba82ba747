//! `SENTINEL FAILOVER`, and clients that connect while it runs: each must reach the new
//! master, never the old one.
//!
//! The group: a master, two replicas and three sentinels, `down-after` 1 s and
//! `failover-timeout` 5 s. The failover is started at the sentinel listed first in the
//! first contender's URL. That sentinel, leading it, names the promoted replica in
//! `GET-MASTER-ADDR-BY-NAME` at once, but keeps the old master in `SENTINEL MASTER(S)`
//! until the failover ends; the other sentinels name the new master once they hear of
//! its configuration epoch; and the old master goes on answering `ROLE` as a master, and
//! granting locks, until a sentinel demotes it seconds later. As soon as a sentinel names
//! the new master, contenders connect one fresh client after another (each lists the
//! sentinels in another order), each taking the lock once for a short critical section,
//! until the group has settled around the new master. A client sent to the old master
//! grants the lock beside the clients of the new one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use ferrisson::redis::Client;
use ferrisson_testkit::SentinelGroup;

use crate::checker::Counters;
use crate::harness::clients::connect;
use crate::harness::config::Config;
use crate::harness::contest::ask_until_done;
use crate::harness::expectations::Expectations;
use crate::harness::record::{acquire_and_work, keys_left};
use crate::harness::scenario::{FaultScenario, Iteration, Setup};
use crate::harness::sentinel::{start_failover, wait_until_roles_reported};
use crate::history::{EventKind, Recorder};
use crate::resource::Resource;

/// The scenario: clients that connect after the failover started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentinelNewClients;

/// The group of this scenario: the test kit's shape with the timing.
pub(crate) struct QuickSentinelGroup(SentinelGroup);

impl Setup for QuickSentinelGroup {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        let group = tokio::task::spawn_blocking(|| {
            SentinelGroup::builder()
                .replicas(2)
                .sentinels(3)
                .down_after(Duration::from_secs(1))
                .failover_timeout(Duration::from_secs(5))
                .start()
        })
        .await?
        .context("sentinel group")?;
        Ok(Self(group))
    }
}

/// Clients connecting in turn, each with its own order of the sentinels.
const CONTENDERS: usize = 3;
/// The critical section.
const WORK: Duration = Duration::from_millis(5);
/// Rounds each contender runs at least, settled or not.
const MIN_ROUNDS: usize = 3;
/// Rounds each contender runs at most (grant numbers stay below the harness's void
/// grants, numbered from 1000).
const MAX_ROUNDS: usize = 900;
/// Connections that reached the old master, as counted by the contenders.
const ON_THE_OLD_MASTER: &str = "new_clients_on_the_old_master";
/// Clients connected during the failover, over the run.
const NEW_CLIENTS: &str = "new_clients";

impl FaultScenario for SentinelNewClients {
    type Setup = QuickSentinelGroup;

    async fn run_once(
        self,
        config: &Config,
        setup: &mut QuickSentinelGroup,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let group = &mut setup.0;
        let lease = config.lease;
        let (old, old_port) = tokio::task::block_in_place(|| {
            group.wait_until_ok()?;
            wait_until_roles_reported(group)?;
            let old = group.master()?;
            anyhow::Ok((old, group.servers()[old].port()))
        })?;
        let addresses = group.sentinel_addrs();
        let urls: Vec<String> = (0..CONTENDERS)
            .map(|first| {
                let mut order = addresses.clone();
                order.rotate_left(first % addresses.len());
                format!(
                    "redis+sentinel://{}/{}",
                    order.join(","),
                    group.master_name()
                )
            })
            .collect();
        tokio::task::block_in_place(|| {
            ask_until_done(&it.a, || {
                start_failover(group, &group.sentinels()[0], old_port).map(drop)
            })
        })?;
        let settled = Arc::new(AtomicBool::new(false));
        let resource = Arc::new(Resource::default());
        let contenders: Vec<_> = urls
            .into_iter()
            .enumerate()
            .map(|(number, url)| {
                let contender = Contender {
                    rec: it.history.recorder(number),
                    url,
                    name: it.name.clone(),
                    old_port,
                    lease,
                    settled: Arc::clone(&settled),
                    resource: Arc::clone(&resource),
                };
                tokio::spawn(contender.run())
            })
            .collect();
        let waited = tokio::task::block_in_place(|| group.wait_for_new_master(old));
        settled.store(true, Ordering::SeqCst);
        for contender in contenders {
            contender.await??;
        }
        waited?;
        let checker = connect(&group.url(), lease).await?;
        keys_left(&it.a, &checker, &it.name, lease).await
    }

    fn expect(self, _config: &Config, c: &Counters, expect: &mut Expectations) {
        match c.counts.get(ON_THE_OLD_MASTER) {
            Some(&n) => expect.zero(ON_THE_OLD_MASTER, n),
            None => expect.fail(format!("{ON_THE_OLD_MASTER} never recorded")),
        }
        if c.counts.get(NEW_CLIENTS).copied().unwrap_or(0) == 0 {
            expect.fail("no client connected during the failover");
        }
    }
}

/// One contender: a fresh client per round until the group settled.
struct Contender {
    rec: Recorder,
    url: String,
    name: String,
    old_port: u16,
    lease: Duration,
    settled: Arc<AtomicBool>,
    resource: Arc<Resource>,
}

impl Contender {
    async fn run(self) -> anyhow::Result<()> {
        let mut on_old = 0;
        let mut rounds = 0;
        while rounds < MAX_ROUNDS && (rounds < MIN_ROUNDS || !self.settled.load(Ordering::SeqCst)) {
            rounds += 1;
            let client = connect(&self.url, self.lease).await?;
            if served_port(&client).await? == self.old_port {
                on_old += 1;
            }
            let lock = client.lock(&self.name)?;
            acquire_and_work(
                &self.rec,
                rounds,
                &lock,
                self.lease * 20,
                &self.resource,
                WORK,
            )
            .await;
        }
        for (name, count) in [(ON_THE_OLD_MASTER, on_old), (NEW_CLIENTS, rounds)] {
            self.rec.record(
                0,
                EventKind::Count {
                    name: name.to_owned(),
                    count: count as u64,
                },
            );
        }
        Ok(())
    }
}

/// The port of the server a client's commands reach (`INFO server`'s `tcp_port`).
async fn served_port(client: &Client) -> anyhow::Result<u16> {
    let info: String = ferrisson::redis::redis::cmd("INFO")
        .arg("server")
        .query_async(&mut client.commands())
        .await?;
    info.lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .and_then(|port| port.trim().parse().ok())
        .with_context(|| format!("no tcp_port in {info}"))
}
