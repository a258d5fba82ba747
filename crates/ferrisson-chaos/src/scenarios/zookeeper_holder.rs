//! ZooKeeper, one standalone server: the holder's session hit while it holds — its
//! process frozen past the session timeout, its link blackholed, its process killed, or
//! its application reconnecting with a new session while the old session's node is
//! still there (the CURATOR-604 case).
//!
//! Every client asks for a session of five leases (1.5 s with the default lease); the
//! kit's server grants 0.4 s to 60 s.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ferrisson::zookeeper::{Client, Guard as _, Lock};
use ferrisson_testkit::{FaultProxy, ZooKeeper};
use nix::sys::signal::{Signal, kill};

use crate::checker::Counters;
use crate::harness::config::Config;
use crate::harness::expectations::Expectations;
use crate::harness::holder_process::{HolderProcess, REPORTS_LOST_ENV};
use crate::harness::record::{
    acquire, act_on_stale_check, belief, critical_section, enter_checked, watch,
};
use crate::harness::scenario::{FaultScenario, Iteration, Setup};
use crate::history::{EventKind, Recorder};
use crate::resource::Resource;

/// Time from the fault (SIGSTOP, blackhole, SIGKILL) to the next client holding.
const HANDOVER: &str = "handover_after_fault";
/// The same, summed over the iterations (for the mean).
const HANDOVER_TOTAL: &str = "handover_after_fault_total_ms";
/// Holders that reported their `lost()` after the fault.
const HOLDER_LOST: &str = "holder_lost_reported";
/// Times the new session queued while the old session's node was still there.
const OLD_NODE_PRESENT: &str = "new_session_queued_behind_old_node";
/// Times the new session was granted while the old session's node still existed.
const GRANTED_OVER_OLD_NODE: &str = "new_session_granted_over_old_node";
/// Time the new session waited for the old session's node.
const NEW_SESSION_WAIT: &str = "new_session_wait";

/// The session every client of these scenarios asks for.
pub(crate) fn session_timeout(config: &Config) -> Duration {
    config.lease * 5
}

/// The run's configuration with the lease the holder process is given set to the
/// session timeout: the facade asks for its watchdog lease as the session timeout.
fn holder_config(config: &Config) -> Config {
    Config {
        lease: session_timeout(config),
        ..config.clone()
    }
}

/// `zk://127.0.0.1:PORT?session_timeout_ms=N`.
fn url(port: u16, session: Duration) -> String {
    format!(
        "zk://127.0.0.1:{port}?session_timeout_ms={}",
        session.as_millis()
    )
}

/// A client of `port` with a session of `session`.
async fn client(port: u16, session: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(&url(port, session)).connect().await?)
}

/// The scenarios of this module: what hits the holder's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZkHolderFault {
    /// The holder process SIGSTOPped until another client held and wrote, then resumed.
    Paused,
    /// The holder's link blackholed until another client held and wrote.
    Blackholed,
    /// The holder process SIGKILLed.
    Killed,
    /// The holder cut off; once it knows its hold lost, its application connects again
    /// (a new session) and asks for the lock while the old session's node still exists.
    NewSessionOverOldNode,
}

/// One standalone server and a fault proxy in front of it for the holder.
pub(crate) struct ZkServer {
    zk: ZooKeeper,
    proxy_a: FaultProxy,
}

impl Setup for ZkServer {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        let zk = tokio::task::spawn_blocking(ZooKeeper::standalone)
            .await?
            .context("ZooKeeper standalone server")?;
        let proxy_a = FaultProxy::start(zk.client_port(0)).await?;
        Ok(Self { zk, proxy_a })
    }
}

impl FaultScenario for ZkHolderFault {
    type Setup = ZkServer;

    async fn run_once(
        self,
        config: &Config,
        env: &mut ZkServer,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let session = session_timeout(config);
        let direct = env.zk.client_port(0);
        let b_client = client(direct, session).await?;
        let lock_b = b_client.lock(&it.name)?;
        let resource = Arc::new(Resource::default());
        match self {
            Self::Paused => holder_paused(config, env, it, &lock_b, &resource).await?,
            Self::Blackholed => {
                holder_blackholed(config, env, it, lock_b.clone(), &resource).await?;
            }
            Self::Killed => holder_killed(config, env, it, &lock_b, &resource).await?,
            Self::NewSessionOverOldNode => {
                new_session_over_old_node(config, env, it, lock_b.clone(), &resource).await?;
            }
        }
        nodes_left(&it.a, &b_client, &lock_b, config.lease).await
    }

    fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
        let n = u64::from(config.iterations);
        let count = |name: &str| c.counts.get(name).copied().unwrap_or(0);
        let session = session_timeout(config);
        match self {
            Self::Paused | Self::Blackholed => {
                if c.stale_writes_refused_fenced != n {
                    expect.fail(format!(
                        "stale writes refused by fencing = {}, expected {n} (one a resumed holder)",
                        c.stale_writes_refused_fenced
                    ));
                }
                if c.lost_signals < n {
                    expect.fail(format!(
                        "lost signals = {}, expected the holder's in each of {n} iterations",
                        c.lost_signals
                    ));
                }
                if self == Self::Paused && count(HOLDER_LOST) != n {
                    expect.fail(format!(
                        "{HOLDER_LOST} = {}, expected {n}",
                        count(HOLDER_LOST)
                    ));
                }
            }
            Self::Killed => {
                // The server ends a dead client's session one session timeout after it
                // last heard from it (rounded up to its 200 ms tick); the bound leaves
                // one more session timeout for a machine busy with other work.
                let bound = session * 2;
                match c.measures.get(HANDOVER) {
                    Some(ms) if Duration::from_millis(*ms) <= bound => {}
                    other => expect.fail(format!(
                        "time to the next holder after SIGKILL {other:?} ms, expected <= {} ms",
                        bound.as_millis()
                    )),
                }
            }
            Self::NewSessionOverOldNode => {
                expect.zero(GRANTED_OVER_OLD_NODE, count(GRANTED_OVER_OLD_NODE));
                // The race the case is about needs the new session to ask while the old
                // node lives: it must have been run at least once.
                if count(OLD_NODE_PRESENT) == 0 {
                    expect.fail(format!(
                        "{OLD_NODE_PRESENT} = 0: the new session never queued behind the old node"
                    ));
                }
                if c.stale_writes_refused_fenced != n {
                    expect.fail(format!(
                        "stale writes refused by fencing = {}, expected {n} (one the old session's)",
                        c.stale_writes_refused_fenced
                    ));
                }
            }
        }
    }
}

/// Records how long after `fault` a client was granted (max and total).
fn record_handover(rec: &Recorder, fault: Instant) {
    let millis = u64::try_from(fault.elapsed().as_millis()).unwrap_or(u64::MAX);
    rec.record(
        0,
        EventKind::Measure {
            name: HANDOVER.into(),
            millis,
        },
    );
    rec.record(
        0,
        EventKind::Count {
            name: HANDOVER_TOTAL.into(),
            count: millis,
        },
    );
}

/// B's turn after the fault: waits (ten sessions at most), records the handover, works
/// and releases.
async fn b_turn(
    rec: &Recorder,
    lock_b: &Lock,
    session: Duration,
    fault: Instant,
    resource: &Resource,
    work: Duration,
) {
    if let Some(guard) = acquire(rec, 0, lock_b, session * 10).await {
        record_handover(rec, fault);
        critical_section(rec, 0, guard, resource, work).await;
    }
}

/// The holder process, frozen (SIGSTOP) once it holds and has entered the resource,
/// stays frozen while the server expires its session and B takes the lock and writes;
/// resumed, it reports its `lost()`, its belief, writes with its old token (refused by
/// the fence) and releases.
async fn holder_paused(
    config: &Config,
    env: &ZkServer,
    it: &Iteration,
    lock_b: &Lock,
    resource: &Resource,
) -> anyhow::Result<()> {
    let (a, session) = (&it.a, session_timeout(config));
    let reports_lost = vec![(OsString::from(REPORTS_LOST_ENV), OsString::from("1"))];
    let holder_url = url(env.zk.client_port(0), session);
    let mut holder = HolderProcess::spawn(
        &holder_config(config),
        &holder_url,
        &it.name,
        a,
        reports_lost,
    )?;
    let token = holder.token;
    resource.enter(a, 0, Some(token));
    kill(holder.pid()?, Signal::SIGSTOP)?;
    let paused = Instant::now();
    b_turn(&it.b, lock_b, session, paused, resource, config.lease / 4).await;
    kill(holder.pid()?, Signal::SIGCONT)?;
    if holder.lost_within(a, session * 4).await? {
        a.record(
            0,
            EventKind::Count {
                name: HOLDER_LOST.into(),
                count: 1,
            },
        );
    }
    // The resumed process goes on with its critical section: a late write.
    holder
        .finish(a, |_| {
            resource.write(a, 0, token);
            resource.exit(a, 0);
        })
        .await?;
    Ok(())
}

/// A holds through the proxy and has entered the resource; its link is blackholed
/// while B takes the lock and writes; healed, A acts on its old check: a late write
/// with its token, then the release.
async fn holder_blackholed(
    config: &Config,
    env: &ZkServer,
    it: &Iteration,
    lock_b: Lock,
    resource: &Arc<Resource>,
) -> anyhow::Result<()> {
    let (a, session) = (&it.a, session_timeout(config));
    let lock_a = client(env.proxy_a.port(), session).await?.lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &lock_a, session * 10).await else {
        return Ok(());
    };
    enter_checked(a, 0, &guard, resource);
    env.proxy_a.control().set_blackhole(true);
    let cut = Instant::now();
    let mut b = {
        let (b, resource, work) = (it.b.clone(), Arc::clone(resource), config.lease / 4);
        tokio::spawn(async move { b_turn(&b, &lock_b, session, cut, &resource, work).await })
    };
    tokio::select! {
        () = watch(a, 0, &guard, session * 12) => {}
        done = &mut b => done?,
    }
    if !b.is_finished() {
        b.await?;
    }
    env.proxy_a.control().set_blackhole(false);
    act_on_stale_check(a, 0, guard, resource).await;
    Ok(())
}

/// The holder process, SIGKILLed once it holds: the time until B holds is the session
/// timeout (the server's only way to learn of the death); B then takes it once more.
async fn holder_killed(
    config: &Config,
    env: &ZkServer,
    it: &Iteration,
    lock_b: &Lock,
    resource: &Resource,
) -> anyhow::Result<()> {
    let (a, b, session) = (&it.a, &it.b, session_timeout(config));
    let holder_url = url(env.zk.client_port(0), session);
    let holder =
        HolderProcess::spawn(&holder_config(config), &holder_url, &it.name, a, Vec::new())?;
    holder.kill().await?;
    let killed = Instant::now();
    // A dead process believes nothing.
    a.record(0, EventKind::Lost);
    b_turn(b, lock_b, session, killed, resource, config.lease / 4).await;
    if let Some(guard) = acquire(b, 1, lock_b, session * 10).await {
        critical_section(b, 1, guard, resource, config.lease / 4).await;
    }
    Ok(())
}

/// A1 (client A's first session, through the proxy) holds and has entered the
/// resource; its link is blackholed. Once A1's `lost()` fired, A's application connects
/// again (A2, client 2 of the history: a session of its own, straight to the server) and
/// asks for the lock while A1's node is still there; B queues after it. The server
/// expires A1's session, deleting its node: only then may A2 hold. A2 works, writes and
/// releases; B follows; healed, A1 acts on its old check (refused by the fence).
async fn new_session_over_old_node(
    config: &Config,
    env: &ZkServer,
    it: &Iteration,
    lock_b: Lock,
    resource: &Arc<Resource>,
) -> anyhow::Result<()> {
    let (a, session) = (&it.a, session_timeout(config));
    let a2 = it.history.recorder(2);
    let lock_a1 = client(env.proxy_a.port(), session).await?.lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &lock_a1, session * 10).await else {
        return Ok(());
    };
    enter_checked(a, 0, &guard, resource);
    let checker = client(env.zk.client_port(0), session).await?.zookeeper();
    let old_node = only_child(&checker, lock_b.path()).await?;
    env.proxy_a.control().set_blackhole(true);
    let cut = Instant::now();
    if tokio::time::timeout(session * 4, guard.lost())
        .await
        .is_ok()
    {
        a.record(0, EventKind::Lost);
    }
    belief(a, 0, &guard);
    // A's application starts over: a new client, a new session, the same lock.
    let lock_a2 = client(env.zk.client_port(0), session)
        .await?
        .lock(&it.name)?;
    let present = checker.check_stat(&old_node).await?.is_some();
    a2.record(
        0,
        EventKind::Count {
            name: OLD_NODE_PRESENT.into(),
            count: u64::from(present),
        },
    );
    let asked = Instant::now();
    let a2_turn = {
        let (a2, resource, lock_a2) = (a2.clone(), Arc::clone(resource), lock_a2.clone());
        let (checker, old_node, work) = (checker.clone(), old_node.clone(), config.lease / 4);
        tokio::spawn(async move {
            let Some(guard) = acquire(&a2, 0, &lock_a2, session * 10).await else {
                return anyhow::Ok(());
            };
            let over_old = checker.check_stat(&old_node).await?.is_some();
            a2.record(
                0,
                EventKind::Count {
                    name: GRANTED_OVER_OLD_NODE.into(),
                    count: u64::from(over_old),
                },
            );
            a2.record(
                0,
                EventKind::Measure {
                    name: NEW_SESSION_WAIT.into(),
                    millis: u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX),
                },
            );
            critical_section(&a2, 0, guard, &resource, work).await;
            Ok(())
        })
    };
    // B queues behind A2 (its node after A2's), then takes its turn.
    let a2_node_queued = async {
        loop {
            let children = checker
                .list_children(lock_b.path())
                .await
                .unwrap_or_default();
            if children.len() >= 2 || a2_turn.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(session * 4, a2_node_queued)
        .await
        .context("A's new session never queued")?;
    b_turn(&it.b, &lock_b, session, cut, resource, config.lease / 4).await;
    a2_turn.await??;
    env.proxy_a.control().set_blackhole(false);
    act_on_stale_check(a, 0, guard, resource).await;
    drop(lock_a2);
    Ok(())
}

/// The one child of `path`: the holder's node.
async fn only_child(
    zk: &ferrisson::zookeeper::zookeeper_client::Client,
    path: &str,
) -> anyhow::Result<String> {
    let children = zk.list_children(path).await?;
    match children.as_slice() {
        [only] => Ok(format!("{path}/{only}")),
        _ => anyhow::bail!("expected the holder's node alone under the lock, found {children:?}"),
    }
}

/// After healing: the lock's nodes left (none expected), counted now and, if any, once
/// more a lease later.
pub(crate) async fn nodes_left(
    rec: &Recorder,
    client: &Client,
    lock: &Lock,
    lease: Duration,
) -> anyhow::Result<()> {
    let zk = client.zookeeper();
    crate::harness::record::record_keys_left(rec, lease, || async {
        match zk.list_children(lock.path()).await {
            Ok(children) => Ok(children.len() as u64),
            Err(ferrisson::zookeeper::zookeeper_client::Error::NoNode) => Ok(0),
            Err(e) => Err(e.into()),
        }
    })
    .await
}
