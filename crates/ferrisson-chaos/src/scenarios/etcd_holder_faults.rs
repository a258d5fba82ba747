//! Faults that hit the holder of an etcd lock (three members, the lock etcd's
//! `concurrency.Mutex` layout, the session lease its watchdog): the holder process
//! frozen past its lease, its link blackholed, the holder process killed, its lease
//! revoked out of band. Every stale holder then writes twice: at the chaos resource
//! with its token, and in etcd with `fenced_put` (a transaction guarded by the lock
//! key's create revision); both must be refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::etcd::{Client, Guard as _, Lock, LockGuard};
use nix::sys::signal::{Signal, kill};

use crate::checker::Counters;
use crate::harness::config::Config;
use crate::harness::etcd_members::{
    EtcdMembers, LATE_FENCED_PUT_ACCEPTED, LATE_FENCED_PUT_FAILED, LATE_FENCED_PUT_REFUSED,
    connect, count, count_late_fenced_put, data_key, etcd_lease, keys_left, late_fenced_put,
    lease_of, measure,
};
use crate::harness::expectations::Expectations;
use crate::harness::holder_process::HolderProcess;
use crate::harness::record::{
    acquire, acquire_and_work, critical_section, enter_checked, release, watch, write_with_token,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::history::{EventKind, Recorder};
use crate::resource::Resource;

/// Time from the holder's SIGKILL to the next client holding the lock.
const REACQUIRE_AFTER_KILL: &str = "reacquire_after_sigkill";
/// Time from the out-of-band revoke to the holder's `lost()`.
const LOST_AFTER_REVOKE: &str = "lost_after_revoke";
/// Time from the out-of-band revoke to the waiter holding the lock.
const REACQUIRE_AFTER_REVOKE: &str = "reacquire_after_revoke";
/// Time from the blackhole to the waiter holding the lock.
const REACQUIRE_AFTER_BLACKHOLE: &str = "reacquire_after_blackhole";
/// A stale holder whose `lost()` had not fired when it acted again.
const LOST_NOT_FIRED: &str = "stale_holder_lost_not_fired";
/// A waiter that was never granted the lock the fault freed.
const WAITER_NEVER_GRANTED: &str = "waiter_never_granted";
/// The revoked holder still believed it held when the waiter was granted: the time
/// until its `lost()` fired.
const BELIEVED_AFTER_WAITER_GRANTED: &str = "believed_after_waiter_granted";

/// The scenarios of this module: what happens to the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EtcdHolderFault {
    /// The holder process frozen (SIGSTOP) until another client holds the lock, then
    /// resumed.
    Paused,
    /// The holder's link to its member blackholed until another client holds the lock.
    Blackholed,
    /// The holder process killed (SIGKILL) while it holds.
    Killed,
    /// The holder's lease revoked by another client, out of band.
    LeaseRevoked,
}

impl FaultScenario for EtcdHolderFault {
    type Setup = EtcdMembers;

    /// A revoke out of band frees the lock at once, for a waiter too, while the holder
    /// learns it from its watch a moment later: a documented unsafe case, whose double
    /// grants (by belief, for milliseconds) need the waiter's grant to outrun the
    /// holder's watch. Fencing refuses the holder's late writes.
    fn is_documented_unsafe(self) -> bool {
        self == Self::LeaseRevoked
    }

    fn double_grants_are_rare(self) -> bool {
        self == Self::LeaseRevoked
    }

    async fn run_once(
        self,
        config: &Config,
        env: &mut EtcdMembers,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let lease = etcd_lease(config, Duration::from_secs(1));
        let config = Config {
            lease,
            ..config.clone()
        };
        let direct = connect(&env.url(), lease).await?;
        let cx = Turn {
            it,
            lease,
            lock_b: direct.lock(&it.name)?,
            resource: Arc::new(Resource::default()),
            data_key: data_key(&it.name),
        };
        match self {
            Self::Paused => cx.holder_paused(&config, env).await?,
            Self::Blackholed => cx.holder_blackholed(env).await?,
            Self::Killed => cx.holder_killed(&config, env).await?,
            Self::LeaseRevoked => cx.lease_revoked(env, &direct).await?,
        }
        keys_left(&it.a, &direct, &it.name, lease).await
    }

    fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
        let iterations = u64::from(config.iterations);
        let lease = etcd_lease(config, Duration::from_secs(1));
        let counted = |name: &str| c.counts.get(name).copied().unwrap_or(0);
        expect.zero("waiters never granted", counted(WAITER_NEVER_GRANTED));
        if self == Self::Killed {
            // etcd frees the dead holder's key at most one TTL after its last renewal,
            // plus its expiry check (every 500 ms) and the revoke's round through raft;
            // twice the TTL leaves room for a busy machine and still tells that apart
            // from a waiter that slept to its own deadline (ten TTLs).
            let bound = lease * 2 + Duration::from_secs(1);
            match c.measures.get(REACQUIRE_AFTER_KILL) {
                Some(&ms) if Duration::from_millis(ms) <= bound => {}
                other => expect.fail(format!(
                    "time to the next holder after SIGKILL {other:?} ms, expected <= {} ms",
                    bound.as_millis()
                )),
            }
            return;
        }
        if self == Self::LeaseRevoked {
            // Checked for every scenario but the documented unsafe ones.
            expect.zero(
                "stale writes accepted with fencing",
                c.stale_writes_accepted_fenced,
            );
            expect.zero("token regressions", c.token_regressions);
        }
        // Every stale holder: its lost() fired, its write refused at the resource and
        // in etcd.
        expect.zero(
            "stale holders whose lost() had not fired",
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
        if c.lost_signals < iterations {
            expect.fail(format!(
                "lost signals = {}, expected one per iteration at least",
                c.lost_signals
            ));
        }
    }
}

/// One iteration's holder, waiter and resource.
struct Turn<'a> {
    it: &'a Iteration,
    lease: Duration,
    /// Client B's lock, on a client of every member.
    lock_b: Lock,
    resource: Arc<Resource>,
    /// What the stale holder writes with its fence.
    data_key: String,
}

impl Turn<'_> {
    /// B waits for the lock (spawned); resolves with the time it was granted once it
    /// holds (and B then works and releases), or never if B is not granted.
    fn waiter(
        &self,
    ) -> (
        tokio::task::JoinHandle<()>,
        tokio::sync::oneshot::Receiver<Instant>,
    ) {
        let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
        let (b, lock_b, resource, lease) = (
            self.it.b.clone(),
            self.lock_b.clone(),
            Arc::clone(&self.resource),
            self.lease,
        );
        let turn = tokio::spawn(async move {
            match acquire(&b, 0, &lock_b, lease * 10).await {
                Some(guard) => {
                    let _ = granted_tx.send(Instant::now());
                    critical_section(&b, 0, guard, &resource, lease / 4).await;
                }
                None => count(&b, 0, WAITER_NEVER_GRANTED),
            }
        });
        (turn, granted_rx)
    }

    /// Freezes a holder process until B holds the lock (B works and releases), resumes
    /// it: it reports whether `lost()` fired, writes at the resource with its old token,
    /// makes its fenced put in etcd and releases.
    async fn holder_paused(&self, config: &Config, env: &EtcdMembers) -> anyhow::Result<()> {
        let (a, resource) = (&self.it.a, &self.resource);
        let holder = HolderProcess::spawn(config, &env.url(), &self.it.name, a, Vec::new())?;
        let token = holder.token;
        resource.enter(a, 0, Some(token));
        kill(holder.pid()?, Signal::SIGSTOP)?;
        let granted = acquire(&self.it.b, 0, &self.lock_b, self.lease * 10).await;
        let b_granted = granted.is_some();
        if let Some(guard) = granted {
            critical_section(&self.it.b, 0, guard, resource, self.lease / 4).await;
        }
        kill(holder.pid()?, Signal::SIGCONT)?;
        if !b_granted {
            count(&self.it.b, 0, WAITER_NEVER_GRANTED);
        }
        // The resumed process goes on with its critical section: two stale writes.
        let end = holder
            .finish_fenced(a, &self.data_key, |_| {
                resource.write(a, 0, token);
                resource.exit(a, 0);
            })
            .await?;
        if !end.lost {
            count(a, 0, LOST_NOT_FIRED);
        }
        count_late_fenced_put(a, &end.fenced_put);
        Ok(())
    }

    /// A holds through the proxy to member 0, checks, and its link is blackholed until
    /// B holds the lock; healed, A acts on its check: two stale writes and a release.
    async fn holder_blackholed(&self, env: &EtcdMembers) -> anyhow::Result<()> {
        let a = &self.it.a;
        let client_a = connect(&env.proxied_url(), self.lease).await?;
        let lock_a = client_a.lock(&self.it.name)?;
        let Some(guard) = acquire(a, 0, &lock_a, self.lease * 10).await else {
            return Ok(());
        };
        enter_checked(a, 0, &guard, &self.resource);
        env.proxy_a.control().set_blackhole(true);
        let blackholed = Instant::now();
        let (b_turn, granted) = self.waiter();
        tokio::select! {
            () = watch(a, 0, &guard, self.lease * 10) => {}
            at = granted => if let Ok(at) = at {
                measure(a, REACQUIRE_AFTER_BLACKHOLE, at - blackholed);
            },
        }
        env.proxy_a.control().set_blackhole(false);
        b_turn.await?;
        self.stale_holder_acts(a, &client_a, guard).await;
        Ok(())
    }

    /// A holder process killed once it holds: the time until B holds the lock; B then
    /// takes it once more and works.
    async fn holder_killed(&self, config: &Config, env: &EtcdMembers) -> anyhow::Result<()> {
        let (a, b) = (&self.it.a, &self.it.b);
        let holder = HolderProcess::spawn(config, &env.url(), &self.it.name, a, Vec::new())?;
        holder.kill().await?;
        let killed = Instant::now();
        // A dead process believes nothing.
        a.record(0, EventKind::Lost);
        match acquire(b, 0, &self.lock_b, self.lease * 10).await {
            Some(guard) => {
                measure(b, REACQUIRE_AFTER_KILL, killed.elapsed());
                release(b, 0, guard).await;
            }
            None => count(b, 0, WAITER_NEVER_GRANTED),
        }
        acquire_and_work(
            b,
            1,
            &self.lock_b,
            self.lease * 10,
            &self.resource,
            self.lease / 4,
        )
        .await;
        Ok(())
    }

    /// A holds and checks while B waits; another client revokes A's lease (a raw
    /// etcd-client call): A's `lost()` must fire and B be granted; A then acts on its
    /// check: two stale writes and a release.
    async fn lease_revoked(&self, env: &EtcdMembers, other: &Client) -> anyhow::Result<()> {
        let a = &self.it.a;
        let client_a = connect(&env.url(), self.lease).await?;
        let lock_a = client_a.lock(&self.it.name)?;
        let Some(guard) = acquire(a, 0, &lock_a, self.lease * 10).await else {
            return Ok(());
        };
        enter_checked(a, 0, &guard, &self.resource);
        let lease_id = lease_of(other, guard.key()).await?;
        let (b_turn, granted) = self.waiter();
        let revoked = Instant::now();
        other.etcd().lease_client().revoke(lease_id).await?;
        let lost_at = tokio::select! {
            () = guard.lost() => {
                a.record(0, EventKind::Lost);
                measure(a, LOST_AFTER_REVOKE, revoked.elapsed());
                Some(Instant::now())
            }
            () = tokio::time::sleep(self.lease * 5) => None,
        };
        if let Ok(at) = granted.await {
            measure(a, REACQUIRE_AFTER_REVOKE, at - revoked);
            if let Some(lost_at) = lost_at
                && lost_at > at
            {
                measure(a, BELIEVED_AFTER_WAITER_GRANTED, lost_at - at);
            }
        }
        b_turn.await?;
        self.stale_holder_acts(a, &client_a, guard).await;
        Ok(())
    }

    /// A holder that checked before the fault acts on that check: writes at the
    /// resource with its token, makes its fenced put in etcd, leaves and releases.
    async fn stale_holder_acts(&self, a: &Recorder, client_a: &Client, guard: LockGuard) {
        // Fired already when it resolves at the first poll.
        if tokio::time::timeout(Duration::ZERO, guard.lost())
            .await
            .is_err()
        {
            count(a, 0, LOST_NOT_FIRED);
        }
        write_with_token(a, 0, &guard, &self.resource);
        late_fenced_put(a, 0, client_a, &guard, &self.data_key).await;
        self.resource.exit(a, 0);
        release(a, 0, guard).await;
    }
}
