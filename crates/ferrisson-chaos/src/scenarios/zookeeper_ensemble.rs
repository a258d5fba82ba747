//! ZooKeeper, a three-member ensemble: its leader killed while a lock is held and
//! waited for, and members cut off the others (a minority: one follower; a majority:
//! two members, which leaves no quorum anywhere).
//!
//! The cuts are real network cuts: the members reach each other only through fault
//! proxies (`ferrisson_testkit::PartitionableEnsemble`), blackholed for the cut. One
//! path stays outside them: an election connection a member dialled back, before the
//! cut, to the address another member announced (see the kit's docs); the data path
//! between followers and leader, which decides whether a member serves, is cut.
//!
//! Every client asks for a session of ten leases (3 s with the default lease): long
//! enough to ride out an election.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ferrisson::zookeeper::{Client, Guard as _, Lock};
use ferrisson_testkit::{PartitionableEnsemble, ZooKeeper};

use crate::checker::Counters;
use crate::harness::config::Config;
use crate::harness::expectations::Expectations;
use crate::harness::poll::poll_until;
use crate::harness::record::{
    acquire, belief, critical_section, enter_checked, release, watch, write_with_token,
};
use crate::harness::scenario::{FaultScenario, Iteration, Setup};
use crate::history::{EventKind, Recorder};
use crate::resource::Resource;
use crate::scenarios::zookeeper_holder::nodes_left;

/// Time from the leader's SIGKILL until a write succeeds again: the ensemble's pause.
const PAUSE: &str = "pause_until_writes";
/// The same, summed over the iterations (for the mean).
const PAUSE_TOTAL: &str = "pause_until_writes_total_ms";
/// Time from the fault (kill, cut) or its healing until the waiter was granted.
const WAITER_GRANTED: &str = "waiter_granted_after";
/// Waiters granted after the fault: every iteration's.
const WAITERS_GRANTED: &str = "waiters_granted";
/// Holders whose node was still there after the fault (their session outlived it).
const NODE_SURVIVED: &str = "holder_node_survived";
/// Cuts that took effect: the cut-off members stopped serving.
const CUT_TOOK_EFFECT: &str = "cut_took_effect";
/// Grants while the majority was cut off (none expected).
const GRANTED_DURING_CUT: &str = "granted_during_cut";
/// Time from the cut until no member served.
const NO_QUORUM_AFTER: &str = "no_quorum_after_cut";

/// How long a member may take to stop serving once cut off, or an ensemble to serve
/// again.
const PATIENCE: Duration = Duration::from_secs(30);

/// The session every client of these scenarios asks for.
fn session_timeout(config: &Config) -> Duration {
    config.lease * 10
}

/// A client of `connect_string` with the scenario's session.
async fn client(connect_string: &str, config: &Config) -> anyhow::Result<Client> {
    let url = format!(
        "zk://{connect_string}?session_timeout_ms={}",
        session_timeout(config).as_millis()
    );
    Ok(Client::builder(&url).connect().await?)
}

/// `127.0.0.1:PORT,...` of the members `indexes`.
fn connect_string(zk: &ZooKeeper, indexes: &[usize]) -> String {
    indexes
        .iter()
        .map(|&i| format!("127.0.0.1:{}", zk.client_port(i)))
        .collect::<Vec<_>>()
        .join(",")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn count(rec: &Recorder, name: &str, count: u64) {
    rec.record(
        0,
        EventKind::Count {
            name: name.into(),
            count,
        },
    );
}

fn measure(rec: &Recorder, name: &str, since: Instant) {
    rec.record(
        0,
        EventKind::Measure {
            name: name.into(),
            millis: millis(since.elapsed()),
        },
    );
}

/// Waits until the lock has `count` nodes (the holder's and the waiters').
async fn queued(zk: &Client, lock: &Lock, count: usize) -> anyhow::Result<()> {
    let raw = zk.zookeeper();
    poll_until("the waiter's node", || async {
        Ok(raw.list_children(lock.path()).await.map_or(0, |c| c.len()) >= count)
    })
    .await
}

/// The waiter: waits for the lock (ten sessions at most), records when it was granted
/// (after `since`, read when granted), works and releases.
fn spawn_waiter(
    rec: &Recorder,
    lock: Lock,
    config: &Config,
    resource: &Arc<Resource>,
    since: Arc<std::sync::Mutex<Option<Instant>>>,
) -> tokio::task::JoinHandle<()> {
    let (rec, resource) = (rec.clone(), Arc::clone(resource));
    let (wait, work) = (session_timeout(config) * 10, config.lease / 4);
    tokio::spawn(async move {
        if let Some(guard) = acquire(&rec, 0, &lock, wait).await {
            count(&rec, WAITERS_GRANTED, 1);
            let since = *since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(since) = since {
                measure(&rec, WAITER_GRANTED, since);
            }
            critical_section(&rec, 0, guard, &resource, work).await;
        }
    })
}

/// The ensemble's leader SIGKILLed while A holds and B waits; restarted at the end of
/// the iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaderKilled;

/// A three-member ensemble.
pub(crate) struct Ensemble(ZooKeeper);

impl Setup for Ensemble {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        let zk = tokio::task::spawn_blocking(ZooKeeper::ensemble)
            .await?
            .context("ZooKeeper ensemble")?;
        Ok(Self(zk))
    }
}

impl FaultScenario for LeaderKilled {
    type Setup = Ensemble;

    async fn run_once(
        self,
        config: &Config,
        Ensemble(zk): &mut Ensemble,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let all = connect_string(zk, &[0, 1, 2]);
        let (a_client, b_client) = (client(&all, config).await?, client(&all, config).await?);
        let probe = client(&all, config).await?.zookeeper();
        let (lock_a, lock_b) = (a_client.lock(&it.name)?, b_client.lock(&it.name)?);
        let resource = Arc::new(Resource::default());
        let a = &it.a;
        let Some(guard) = acquire(a, 0, &lock_a, session_timeout(config) * 10).await else {
            return Ok(());
        };
        enter_checked(a, 0, &guard, &resource);
        let node = b_client.zookeeper().list_children(lock_a.path()).await?;
        let killed_at = Arc::new(std::sync::Mutex::new(None));
        let waiter = spawn_waiter(&it.b, lock_b.clone(), config, &resource, killed_at.clone());
        queued(&b_client, &lock_b, 2).await?;
        let leader = zk.leader().context("no member says it leads")?;
        tokio::task::block_in_place(|| zk.kill(leader))?;
        let killed = Instant::now();
        *killed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(killed);
        // The pause: until a write (a create, which goes through the leader) succeeds.
        let probe_path = format!("/{}-probe", it.name);
        let writes_again = async {
            loop {
                let mode = ferrisson::zookeeper::zookeeper_client::CreateMode::Ephemeral
                    .with_acls(ferrisson::zookeeper::zookeeper_client::Acls::anyone_all());
                if probe.create(&probe_path, b"", &mode).await.is_ok() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            () = watch(a, 0, &guard, PATIENCE) => anyhow::bail!("no write within {PATIENCE:?} of the leader's death"),
            () = writes_again => {}
        }
        let pause = killed.elapsed();
        it.a.record(
            0,
            EventKind::Measure {
                name: PAUSE.into(),
                millis: millis(pause),
            },
        );
        count(a, PAUSE_TOTAL, millis(pause));
        // Nothing lost: A's session, and so its node, outlived the election.
        let after = b_client
            .zookeeper()
            .list_children(lock_a.path())
            .await
            .unwrap_or_default();
        count(
            a,
            NODE_SURVIVED,
            u64::from(node.iter().all(|n| after.contains(n))),
        );
        // A writes only if it still believes it holds (a disconnection ends its belief:
        // it cannot tell whether the session lives), and releases.
        belief(a, 0, &guard);
        if guard.is_held() {
            write_with_token(a, 0, &guard, &resource);
        }
        resource.exit(a, 0);
        release(a, 0, guard).await;
        waiter.await?;
        tokio::task::block_in_place(|| zk.restart(leader))?;
        nodes_left(a, &b_client, &lock_b, config.lease).await
    }

    fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
        let n = u64::from(config.iterations);
        let counted = |name: &str| c.counts.get(name).copied().unwrap_or(0);
        for name in [NODE_SURVIVED, WAITERS_GRANTED] {
            if counted(name) != n {
                expect.fail(format!("{name} = {}, expected {n}", counted(name)));
            }
        }
        if !c.measures.contains_key(PAUSE) {
            expect.fail("the pause was not measured");
        }
    }
}

/// The scenarios of cut-off members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MembersCut {
    /// One follower cut off; the clients use the other two members.
    Minority,
    /// Two members cut off, so no two members reach each other.
    Majority,
}

impl Setup for PartitionableEnsemble {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        PartitionableEnsemble::start()
            .await
            .context("ZooKeeper ensemble behind fault proxies")
    }
}

/// Waits until the members `cut` all stop serving.
async fn stopped_serving(ensemble: &PartitionableEnsemble, cut: &[usize]) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while cut.iter().any(|&i| ensemble.zookeeper().mode(i).is_ok()) {
        anyhow::ensure!(Instant::now() < deadline, "the cut members kept serving");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

impl FaultScenario for MembersCut {
    type Setup = PartitionableEnsemble;

    async fn run_once(
        self,
        config: &Config,
        ensemble: &mut PartitionableEnsemble,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let zk = ensemble.zookeeper();
        let leader = zk.leader().context("no member says it leads")?;
        let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        let (cut, reach): (Vec<usize>, Vec<usize>) = match self {
            Self::Minority => (vec![followers[0]], vec![leader, followers[1]]),
            Self::Majority => (followers.clone(), vec![0, 1, 2]),
        };
        let reach = connect_string(zk, &reach);
        let (a_client, b_client) = (client(&reach, config).await?, client(&reach, config).await?);
        let (lock_a, lock_b) = (a_client.lock(&it.name)?, b_client.lock(&it.name)?);
        // A third client, which asks for the lock while the majority is cut off.
        let (c, lock_c) = (
            it.history.recorder(2),
            client(&reach, config).await?.lock(&it.name)?,
        );
        let resource = Arc::new(Resource::default());
        let a = &it.a;
        let Some(guard) = acquire(a, 0, &lock_a, session_timeout(config) * 10).await else {
            return Ok(());
        };
        enter_checked(a, 0, &guard, &resource);
        let since = Arc::new(std::sync::Mutex::new(None));
        let waiter = spawn_waiter(&it.b, lock_b.clone(), config, &resource, since.clone());
        queued(&b_client, &lock_b, 2).await?;
        for &member in &cut {
            ensemble.cut_off(member);
        }
        let cut_at = Instant::now();
        match self {
            Self::Minority => {
                // A holds on while the cut takes effect, and a lease longer.
                tokio::select! {
                    () = watch(a, 0, &guard, PATIENCE) => {}
                    stopped = stopped_serving(ensemble, &cut) => stopped?,
                }
                count(a, CUT_TOOK_EFFECT, 1);
                watch(a, 0, &guard, config.lease).await;
                // A finishes its critical section and releases while the cut lasts: the
                // waiter is granted by the majority.
                *since
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
                if guard.is_held() {
                    write_with_token(a, 0, &guard, &resource);
                }
                resource.exit(a, 0);
                release(a, 0, guard).await;
                waiter.await?;
                ensemble.heal_all();
            }
            Self::Majority => {
                let cut_on_history = a.now();
                tokio::select! {
                    () = watch(a, 0, &guard, PATIENCE) => {}
                    stopped = stopped_serving(ensemble, &[0, 1, 2]) => stopped?,
                }
                count(a, CUT_TOOK_EFFECT, 1);
                measure(a, NO_QUORUM_AFTER, cut_at);
                // A, told its hold may be lost, stops and releases while nothing serves:
                // its delete goes through once the ensemble is back.
                belief(a, 0, &guard);
                resource.exit(a, 0);
                let released = {
                    let a = a.clone();
                    tokio::spawn(async move { release(&a, 0, guard).await })
                };
                // A third client asks for the lock meanwhile (three leases).
                if let Some(guard) = acquire(&c, 0, &lock_c, config.lease * 3).await {
                    release(&c, 0, guard).await;
                }
                // Healed well within the clients' patience (they give their session up
                // 1.4 session timeouts after they last heard from a member).
                let healed_on_history = a.now();
                ensemble.heal_all();
                *since
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
                released.await?;
                waiter.await?;
                // No grant while no quorum could have made one.
                let during = it
                    .history
                    .events()
                    .iter()
                    .filter(|e| {
                        matches!(e.kind, EventKind::AcquireOk { .. })
                            && e.at > cut_on_history
                            && e.at < healed_on_history
                    })
                    .count();
                count(a, GRANTED_DURING_CUT, during as u64);
            }
        }
        tokio::task::block_in_place(|| ensemble.zookeeper_mut().wait_serving())?;
        nodes_left(a, &b_client, &lock_b, config.lease).await
    }

    fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
        let n = u64::from(config.iterations);
        let counted = |name: &str| c.counts.get(name).copied().unwrap_or(0);
        for name in [CUT_TOOK_EFFECT, WAITERS_GRANTED] {
            if counted(name) != n {
                expect.fail(format!("{name} = {}, expected {n}", counted(name)));
            }
        }
        match self {
            // No effect on the clients of the majority: the holder kept its hold.
            Self::Minority => expect.zero("lost signals", c.lost_signals),
            Self::Majority => expect.zero(GRANTED_DURING_CUT, counted(GRANTED_DURING_CUT)),
        }
    }
}
