//! Faults that hit etcd members while locks are held and waited for: the leader
//! killed (with a dead holder's lock, to measure how long it outlives the failover:
//! etcd 3.4 resets every lease's remaining TTL when a new leader takes over, lease
//! checkpointing being off), and a minority (one member of three) cut off under its
//! holder.
//!
//! Each iteration also keeps a live lock held across the fault by a client of the
//! majority, with a waiter; that lock has a history of its own (the checker counts one
//! lock per history), whose violations are folded into the iteration's counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::etcd::{Guard as _, Lock, LockGuard};

use crate::checker::{Counters, check};
use crate::harness::config::Config;
use crate::harness::etcd_members::{
    EtcdMembers, LATE_FENCED_PUT_ACCEPTED, LATE_FENCED_PUT_FAILED, LATE_FENCED_PUT_REFUSED,
    connect, count, data_key, etcd_lease, keys_left, late_fenced_put, measure,
};
use crate::harness::expectations::Expectations;
use crate::harness::holder_process::HolderProcess;
use crate::harness::record::{
    acquire, acquire_and_work, critical_section, enter_checked, release, watch, write_with_token,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::history::{EventKind, History, Recorder};
use crate::resource::Resource;

/// The lease of these scenarios: a failover (an election timeout of 500 ms, and the
/// time to notice) must fit in it with room, for the live holder to keep its lock.
const LEASE_FLOOR: Duration = Duration::from_secs(2);

/// From the dead holder's SIGKILL to the waiter holding its lock.
const FREED_AFTER_KILL: &str = "dead_lock_freed_after_kill";
/// From the new leader's election (seen by the members' status) to the waiter holding
/// the dead holder's lock: how long the lock outlives the failover.
const OUTLIVED_FAILOVER: &str = "dead_lock_outlived_failover";
/// How much later than one TTL after the kill the dead holder's lock was freed.
const LATER_THAN_TTL: &str = "dead_lock_freed_later_than_ttl";
/// From the leader's SIGKILL to a new leader, as the members' status reports it.
const FAILOVER: &str = "failover";
/// Iterations whose dead lock outlived the failover by a whole TTL (the TTL reset).
const TTL_RESET_SEEN: &str = "ttl_reset_seen";
/// From the cut to the waiter holding the cut-off holder's lock, the cut member the
/// leader or a follower.
const REACQUIRE_LEADER_CUT: &str = "reacquire_after_cut_leader";
const REACQUIRE_FOLLOWER_CUT: &str = "reacquire_after_cut_follower";
/// A waiter that was never granted.
const WAITER_NEVER_GRANTED: &str = "waiter_never_granted";
/// A waiter whose own session lease ended while it waited across the failover (its
/// keep-alives unanswered for a whole TTL): it fails with `LeaseExpired`, as etcd's
/// `Mutex` fails with `ErrSessionExpired`. Reported: the keep-alive (every TTL/6, a new
/// stream when an answer is late) rides out a failover shorter than about 5/6 of the
/// TTL; a longer one ends the lease.
const WAITER_SESSION_LOST: &str = "waiter_session_lost";
/// The cut-off holder's `lost()` had not fired when it acted again.
const LOST_NOT_FIRED: &str = "stale_holder_lost_not_fired";
/// The live holder saw its lock lost during the fault (safe, but a failover that
/// outlasted its lease).
const LIVE_HOLDER_LOST: &str = "live_holder_lost";
/// The live lock's waiter was not granted (reported, not an expected result yet: seen
/// about once in ten iterations of the cut, reason under investigation).
const LIVE_WAITER_NOT_GRANTED: &str = "live_waiter_not_granted";
/// The live lock's violations, from its own history.
const LIVE_DOUBLE_GRANTS: &str = "live_lock_double_grants";
const LIVE_STALE_ACCEPTED: &str = "live_lock_stale_writes_accepted";
const LIVE_LIBRARY_VIOLATIONS: &str = "live_lock_library_violations";
const LIVE_TOKEN_REGRESSIONS: &str = "live_lock_token_regressions";

/// The scenarios of this module: what happens to the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EtcdMemberFault {
    /// The leader killed (SIGKILL) half a TTL after a holder process died holding a
    /// lock another client waits for; restarted at the end of the iteration.
    LeaderKilled,
    /// The member the holder's client talks to (the leader in even iterations, a
    /// follower in odd ones) cut off from the two others (its peer traffic held both
    /// ways; it keeps running and its clients reach it) until another client, of the
    /// majority, holds the lock.
    MinorityCut,
}

impl EtcdMemberFault {
    /// How long a key under the lock's prefix may outlive the iteration. After a leader
    /// kill, the dead holder's key lives until its lease runs out after the TTL reset:
    /// bounded as its outliving of the failover is (2 TTL + 1 s). Its waiter deletes
    /// nothing of it; when the waiter gave up (its own session lost in a failover longer
    /// than the lease) nobody waited for it, and one lease was seen to be too short (in
    /// one iteration after a 2040 ms failover, with a 2 s lease: the waiter's session
    /// lost, one key still there one lease after the first look).
    fn key_patience(self, lease: Duration) -> Duration {
        match self {
            Self::LeaderKilled => lease * 2 + Duration::from_secs(1),
            Self::MinorityCut => lease,
        }
    }
}

impl FaultScenario for EtcdMemberFault {
    type Setup = EtcdMembers;

    async fn run_once(
        self,
        config: &Config,
        env: &mut EtcdMembers,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let lease = etcd_lease(config, LEASE_FLOOR);
        let config = Config {
            lease,
            ..config.clone()
        };
        env.wait_whole()?;
        let leader = env.leader(None).await?;
        // The member the fault hits: the leader killed; the leader (even iterations) or
        // a follower (odd ones) cut off.
        let hit = match self {
            Self::MinorityCut if !it.number.is_multiple_of(2) => (leader + 1) % env.cluster.len(),
            _ => leader,
        };
        let majority: Vec<usize> = (0..env.cluster.len()).filter(|&i| i != hit).collect();
        let live = LiveLock::hold(env, it, lease, &majority).await?;
        match self {
            Self::LeaderKilled => leader_killed(&config, env, it, leader).await?,
            Self::MinorityCut => minority_cut(env, it, lease, hit, &majority).await?,
        }
        live.finish(&it.a).await?;
        let direct = connect(&env.url(), lease).await?;
        keys_left(&it.a, &direct, &it.name, self.key_patience(lease)).await
    }

    fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
        let iterations = u64::from(config.iterations);
        let lease = etcd_lease(config, LEASE_FLOOR);
        let counted = |name: &str| c.counts.get(name).copied().unwrap_or(0);
        expect.zero("waiters never granted", counted(WAITER_NEVER_GRANTED));
        expect.zero("live lock: double grants", counted(LIVE_DOUBLE_GRANTS));
        expect.zero(
            "live lock: stale writes accepted with fencing",
            counted(LIVE_STALE_ACCEPTED),
        );
        expect.zero(
            "live lock: token regressions",
            counted(LIVE_TOKEN_REGRESSIONS),
        );
        expect.zero(
            "live lock: library violations",
            counted(LIVE_LIBRARY_VIOLATIONS),
        );
        match self {
            Self::LeaderKilled => {
                // The dead holder's lock is freed one TTL after the new leader took
                // over (plus etcd's expiry check, every 500 ms, and the revoke's round
                // through raft): bounded by two TTLs after the failover, plus a second
                // for a busy machine (4078 ms seen once in 100 with a 2 s TTL).
                let bound = lease * 2 + Duration::from_secs(1);
                match c.measures.get(OUTLIVED_FAILOVER) {
                    Some(&ms) if Duration::from_millis(ms) <= bound => {}
                    other => expect.fail(format!(
                        "the dead holder's lock outlived the failover by {other:?} ms, \
                         expected <= {} ms",
                        bound.as_millis()
                    )),
                }
            }
            Self::MinorityCut => {
                expect.zero(
                    "cut-off holders whose lost() had not fired",
                    counted(LOST_NOT_FIRED),
                );
                expect.zero(
                    "late fenced puts accepted by etcd",
                    counted(LATE_FENCED_PUT_ACCEPTED),
                );
                expect.zero("late fenced puts failed", counted(LATE_FENCED_PUT_FAILED));
                if counted(LATE_FENCED_PUT_REFUSED) != iterations {
                    expect.fail(format!(
                        "late fenced puts refused by etcd = {}, expected {iterations}",
                        counted(LATE_FENCED_PUT_REFUSED)
                    ));
                }
                if c.stale_writes_refused_fenced != iterations {
                    expect.fail(format!(
                        "stale writes refused by the resource = {}, expected {iterations}",
                        c.stale_writes_refused_fenced
                    ));
                }
            }
        }
    }
}

/// B (client 1) waits for `lock` (spawned); the receiver gets the time B was granted
/// (B then works and releases).
fn waiter(
    history: &History,
    b: &Recorder,
    lock: Lock,
    resource: &Arc<Resource>,
    lease: Duration,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<Instant>,
) {
    let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
    let (b, resource, history) = (b.clone(), Arc::clone(resource), history.clone());
    let turn = tokio::spawn(async move {
        match acquire(&b, 0, &lock, lease * 10).await {
            Some(guard) => {
                let _ = granted_tx.send(Instant::now());
                critical_section(&b, 0, guard, &resource, lease / 4).await;
            }
            None => {
                let session_lost = history.events().iter().any(|e| {
                    e.client == b.client()
                        && matches!(&e.kind, EventKind::AcquireFailed { reason }
                            if reason.contains("lease expired"))
                });
                let name = if session_lost {
                    WAITER_SESSION_LOST
                } else {
                    WAITER_NEVER_GRANTED
                };
                count(&b, 0, name);
            }
        }
    });
    (turn, granted_rx)
}

/// A holder process (client A) takes the lock on every member and is killed; B waits.
/// Half a TTL later the leader is killed. The dead holder's lock is freed one TTL after
/// the new leader took over, not one TTL after the holder died: measured. The killed
/// member is restarted.
async fn leader_killed(
    config: &Config,
    env: &mut EtcdMembers,
    it: &Iteration,
    leader: usize,
) -> anyhow::Result<()> {
    let (a, lease) = (&it.a, config.lease);
    let resource = Arc::new(Resource::default());
    let lock_b = connect(&env.url(), lease).await?.lock(&it.name)?;
    let holder = HolderProcess::spawn(config, &env.url(), &it.name, a, Vec::new())?;
    let (b_turn, granted) = waiter(&it.history, &it.b, lock_b, &resource, lease);
    holder.kill().await?;
    let holder_killed = Instant::now();
    // A dead process believes nothing.
    a.record(0, EventKind::Lost);
    // The schedule of the fault, not a wait for an event: the leader dies while the
    // dead holder's lease still runs.
    tokio::time::sleep(lease / 2).await;
    env.kill(leader)?;
    let leader_killed = Instant::now();
    let elected = env.leader(Some(leader)).await.map(|_| Instant::now());
    if let Ok(elected) = elected {
        measure(a, FAILOVER, elected - leader_killed);
    }
    if let (Ok(freed), Ok(elected)) = (granted.await, elected) {
        let outlived = freed.saturating_duration_since(elected);
        let after_kill = freed - holder_killed;
        measure(a, FREED_AFTER_KILL, after_kill);
        measure(a, OUTLIVED_FAILOVER, outlived);
        measure(a, LATER_THAN_TTL, after_kill.saturating_sub(lease));
        if outlived >= lease {
            count(a, 0, TTL_RESET_SEEN);
        }
    }
    b_turn.await?;
    env.restart(leader)?;
    Ok(())
}

/// A holds through a client of one member only (the leader in even iterations, a
/// follower in odd ones) and checks; that member is cut off from the two others while
/// B, a client of the majority, waits; once B holds the lock the cut heals and A acts
/// on its check: two stale writes (the resource, etcd's fenced put) and a release.
async fn minority_cut(
    env: &EtcdMembers,
    it: &Iteration,
    lease: Duration,
    cut: usize,
    majority: &[usize],
) -> anyhow::Result<()> {
    let a = &it.a;
    let leader_cut = it.number.is_multiple_of(2);
    let resource = Arc::new(Resource::default());
    let client_a = connect(&env.url_of(&[cut]), lease).await?;
    let lock_a = client_a.lock(&it.name)?;
    let lock_b = connect(&env.url_of(majority), lease)
        .await?
        .lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await else {
        return Ok(());
    };
    enter_checked(a, 0, &guard, &resource);
    env.partition.cut_off(&env.cluster, cut);
    let cut_at = Instant::now();
    let (b_turn, granted) = waiter(&it.history, &it.b, lock_b, &resource, lease);
    tokio::select! {
        () = watch(a, 0, &guard, lease * 10) => {}
        at = granted => if let Ok(at) = at {
            let name = if leader_cut { REACQUIRE_LEADER_CUT } else { REACQUIRE_FOLLOWER_CUT };
            measure(a, name, at - cut_at);
        },
    }
    env.partition.heal();
    b_turn.await?;
    env.wait_whole()?;
    stale_holder_acts(a, &client_a, guard, &resource, &data_key(&it.name)).await;
    Ok(())
}

/// A holder that checked before the fault acts on that check: writes at the resource
/// with its token, makes its fenced put in etcd, leaves and releases.
async fn stale_holder_acts(
    a: &Recorder,
    client_a: &ferrisson::etcd::Client,
    guard: LockGuard,
    resource: &Resource,
    data_key: &str,
) {
    // Fired already when it resolves at the first poll.
    if tokio::time::timeout(Duration::ZERO, guard.lost())
        .await
        .is_err()
    {
        count(a, 0, LOST_NOT_FIRED);
    }
    write_with_token(a, 0, &guard, resource);
    late_fenced_put(a, 0, client_a, &guard, data_key).await;
    resource.exit(a, 0);
    release(a, 0, guard).await;
}

/// A lock held across the fault by a client of every member (C), with a waiter of the
/// members the fault spares (D), in a history of its own. C may lose it (its calls may
/// go to the member hit: counted), never to a double grant.
struct LiveLock {
    history: History,
    holder: tokio::task::JoinHandle<()>,
    release_now: tokio::sync::oneshot::Sender<()>,
    waiter: tokio::task::JoinHandle<()>,
}

impl LiveLock {
    /// C takes `NAME-live` and holds it, watching, until told to release; D waits.
    async fn hold(
        env: &EtcdMembers,
        it: &Iteration,
        lease: Duration,
        majority: &[usize],
    ) -> anyhow::Result<Self> {
        let history = History::new();
        let (c, d) = (history.recorder(0), history.recorder(1));
        let name = format!("{}-live", it.name);
        let resource = Arc::new(Resource::default());
        let lock_c = connect(&env.url(), lease).await?.lock(&name)?;
        let lock_d = connect(&env.url_of(majority), lease).await?.lock(&name)?;
        let guard = acquire(&c, 0, &lock_c, lease * 10)
            .await
            .ok_or_else(|| anyhow::anyhow!("the live lock was not granted"))?;
        enter_checked(&c, 0, &guard, &resource);
        let (release_now, release_rx) = tokio::sync::oneshot::channel::<()>();
        let holder = {
            let (c, resource) = (c.clone(), Arc::clone(&resource));
            tokio::spawn(async move {
                tokio::select! {
                    () = watch(&c, 0, &guard, lease * 60) => {}
                    _ = release_rx => {}
                }
                if guard.is_held() {
                    write_with_token(&c, 0, &guard, &resource);
                } else {
                    count(&c, 0, LIVE_HOLDER_LOST);
                }
                resource.exit(&c, 0);
                release(&c, 0, guard).await;
            })
        };
        let waiter = {
            let resource = Arc::clone(&resource);
            tokio::spawn(async move {
                acquire_and_work(&d, 0, &lock_d, lease * 60, &resource, lease / 4).await;
            })
        };
        Ok(Self {
            history,
            holder,
            release_now,
            waiter,
        })
    }

    /// C releases; D is granted, works and releases; the live lock's history is
    /// checked, its violations counted into `rec`'s history.
    async fn finish(self, rec: &Recorder) -> anyhow::Result<()> {
        let _ = self.release_now.send(());
        self.holder.await?;
        self.waiter.await?;
        let events = self.history.events();
        // Why an acquire of the live lock failed, counted in the iteration's history.
        for e in &events {
            if let EventKind::AcquireFailed { reason } = &e.kind {
                rec.record(
                    e.grant,
                    EventKind::Count {
                        name: format!("live_lock_acquire_failed: {reason}"),
                        count: 1,
                    },
                );
            }
        }
        let c = check(&events);
        for (name, value) in [
            (LIVE_DOUBLE_GRANTS, c.double_grants),
            (LIVE_STALE_ACCEPTED, c.stale_writes_accepted_fenced),
            (LIVE_TOKEN_REGRESSIONS, c.token_regressions),
            (LIVE_LIBRARY_VIOLATIONS, c.library_violations()),
            (
                LIVE_HOLDER_LOST,
                c.counts.get(LIVE_HOLDER_LOST).copied().unwrap_or(0),
            ),
            // C's grant and D's (counted, with the reason above: not yet explained).
            (LIVE_WAITER_NOT_GRANTED, u64::from(c.acquires_ok < 2)),
        ] {
            if value > 0 {
                rec.record(
                    0,
                    EventKind::Count {
                        name: name.into(),
                        count: value,
                    },
                );
            }
        }
        Ok(())
    }
}
