//! `holder-blackholed` ported to the other leased primitives: a [`FairLock`] holder with a
//! queued waiter, an [`RwLock`] writer with a waiting reader, and the holder of the only
//! permit of an [`ExpirableSemaphore`].
//!
//! [`FairLock`]: ferrisson::redis::FairLock
//! [`RwLock`]: ferrisson::redis::RwLock
//! [`ExpirableSemaphore`]: ferrisson::redis::ExpirableSemaphore

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use ferrisson::redis::{Client, ExpirableSemaphore, Lease};
use tokio::task::JoinHandle;

use crate::checker::Counters;
use crate::harness::config::Config;
use crate::harness::expectations::Expectations;
use crate::harness::hold::{ObservedHold, TokenlessPermit, TokenlessRead};
use crate::harness::poll::poll_until;
use crate::harness::record::{
    acquire, acquire_and_work, acquire_with, act_on_stale_check, belief, critical_section,
    enter_checked, record_keys_left, release, watch,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::harness::setups::{ServerIteration, SingleServer};
use crate::history::{EventKind, History, Recorder};

/// Time from the holder's last deadline (its own belief) to the next client's grant:
/// how promptly a waiter that sleeps for the holder's TTL or lease takes over.
const HANDOVER: &str = "handover_after_holder_deadline";

/// The scenarios of this module: whose holder is cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrimitiveBlackholed {
    /// A `FairLock` holder, with a waiter queued.
    FairLock,
    /// An `RwLock` writer, with a reader waiting.
    RwLockWriter,
    /// The holder of the only permit of an `ExpirableSemaphore`.
    ExpirablePermit,
}

impl FaultScenario for PrimitiveBlackholed {
    type Setup = SingleServer;

    async fn run_once(
        self,
        config: &Config,
        env: &mut SingleServer,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let cx = env.iteration(config, it).await?;
        match self {
            Self::FairLock => fair_lock(&cx).await?,
            Self::RwLockWriter => rwlock(&cx).await?,
            Self::ExpirablePermit => permit(&cx).await?,
        }
        record_handover(&it.history);
        Ok(())
    }

    fn expect(self, _config: &Config, c: &Counters, expect: &mut Expectations) {
        // B waits ten leases; the holder's lease runs out after one: a refusal means the
        // primitive never handed over.
        if c.acquires_failed != 0 {
            expect.fail(format!(
                "{} acquires failed, expected the waiter to get it every time",
                c.acquires_failed
            ));
        }
        if !c.measures.contains_key(HANDOVER) {
            expect.fail("the waiter was never granted after the holder");
        }
        if self == Self::ExpirablePermit {
            // A permit has no lost signal and no token: nothing to signal, nothing to fence.
            if c.lost_signals != 0 {
                expect.fail(format!("{} lost signals from permits", c.lost_signals));
            }
        } else {
            // The cut-off holder's watchdog must see the loss, and its late write must be
            // refused by fencing, in every iteration (one refused write each).
            if c.lost_signals == 0 {
                expect.fail("no lost signal: the holder never saw its lock go");
            }
            if c.stale_writes_refused_fenced == 0 {
                expect.fail("no stale write refused: the fault did not take effect");
            }
            if c.lost_signals != c.stale_writes_refused_fenced {
                expect.fail(format!(
                    "{} lost signals but {} stale writes refused, expected one of each per iteration",
                    c.lost_signals, c.stale_writes_refused_fenced
                ));
            }
        }
    }
}

/// The waiter's hand-over time of this iteration, as a measure (its maximum over the
/// run is reported): from A's last held deadline to B's first grant.
fn record_handover(history: &History) {
    let events = history.events();
    let a_deadline = events
        .iter()
        .filter(|e| e.client == 0 && e.grant == 0)
        .filter_map(|e| match e.kind {
            EventKind::AcquireOk { deadline, .. }
            | EventKind::Belief {
                held: true,
                deadline,
            } => Some(deadline),
            _ => None,
        })
        .max();
    let b_granted = events.iter().find_map(|e| match e.kind {
        EventKind::AcquireOk { .. } if e.client == 1 => Some(e.at),
        _ => None,
    });
    if let (Some(deadline), Some(granted)) = (a_deadline, b_granted) {
        history.recorder(1).record(
            0,
            EventKind::Measure {
                name: HANDOVER.into(),
                millis: granted.saturating_sub(deadline).as_millis() as u64,
            },
        );
    }
}

/// A holds a fair lock and enters the resource; B queues behind it; A's link is
/// blackholed for two leases. B must get the lock once A's lease ran out, and A's late
/// write must be refused.
async fn fair_lock(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease) = (cx.it, cx.lease);
    let lock_a = cx.client_a_impatient().await?.fair_lock(&it.name)?;
    let keys = fair_lock_keys(&cx.direct, &it.name);
    let Some(guard) = acquire(&it.a, 0, &lock_a, lease * 10).await else {
        return keys_left(cx, &keys).await;
    };
    enter_checked(&it.a, 0, &guard, &cx.resource);
    let b_turn = {
        let (b, lock) = (it.b.clone(), cx.direct.fair_lock(&it.name)?);
        let resource = Arc::clone(&cx.resource);
        tokio::spawn(async move {
            acquire_and_work(&b, 0, &lock, lease * 10, &resource, lease / 4).await;
        })
    };
    queued(cx, &keys).await?;
    cut_off_while(cx, guard, b_turn).await?;
    keys_left(cx, &keys).await
}

/// A's link blackholed for two leases while A watches its guard and `b_turn` (the
/// contender) takes over; then healed, and A acts on its stale check: writes with its
/// token and releases.
async fn cut_off_while(
    cx: &ServerIteration<'_>,
    guard: impl ObservedHold,
    b_turn: JoinHandle<()>,
) -> anyhow::Result<()> {
    let a = &cx.it.a;
    cx.env.proxy_a.control().set_blackhole(true);
    watch(a, 0, &guard, cx.lease * 2).await;
    cx.env.proxy_a.control().set_blackhole(false);
    b_turn.await?;
    act_on_stale_check(a, 0, guard, &cx.resource).await;
    Ok(())
}

/// Every key of the fair lock `name` that may be left behind, from the layout in
/// `locks/fair.rs`: the lock hash, the wait queue and the waiters' keep-alive deadlines.
/// The fencing floor of the name's hash slot (`ferrisson:fence:{tag}`), shared with every
/// name of that slot, is meant to outlive the lock.
fn fair_lock_keys(client: &Client, name: &str) -> Vec<String> {
    let base = format!("{}{{{name}}}", client.namespace());
    vec![
        base.clone(),
        format!("{base}:queue"),
        format!("{base}:deadlines"),
    ]
}

/// Waits until B's queue entry is visible, and checks that the raw keys `keys_left`
/// counts are the ones the lock uses (a changed layout would make it count nothing).
async fn queued(cx: &ServerIteration<'_>, keys: &[String]) -> anyhow::Result<()> {
    let lock = cx.direct.fair_lock(&cx.it.name)?;
    poll_until("B in the fair lock's queue", || async {
        Ok(lock.inspect().await?.queue_len() > 0)
    })
    .await?;
    let found = existing(cx, keys)?;
    if found != keys.len() as u64 {
        bail!("{found} of the fair lock keys {keys:?} exist while held and queued, expected all");
    }
    Ok(())
}

/// A writes under the write lock and enters the resource; B waits for the read lock;
/// A's link is blackholed for two leases. B's read grant must come after A's belief
/// ended. Readers have no fencing token, so B then takes the write lock and writes: only
/// that token lets the resource refuse A's late write (docs/SAFETY.md).
async fn rwlock(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease) = (cx.it, cx.lease);
    let lock_a = cx.client_a_impatient().await?.rwlock(&it.name)?;
    // The read-write lock is one hash (locks/rwlock.rs); its slot's fencing floor outlives it.
    let keys = vec![format!("{}{{{}}}", cx.direct.namespace(), it.name)];
    let Some(guard) = acquire_with(&it.a, 0, || lock_a.write_timeout(lease * 10)).await else {
        return keys_left(cx, &keys).await;
    };
    if existing(cx, &keys)? != 1 {
        bail!("the read-write lock key {keys:?} does not exist while write-locked");
    }
    enter_checked(&it.a, 0, &guard, &cx.resource);
    let b_turn = {
        let (b, lock) = (it.b.clone(), cx.direct.rwlock(&it.name)?);
        let resource = Arc::clone(&cx.resource);
        tokio::spawn(async move {
            let lock = &lock;
            let read = move || async move {
                let guard = lock.read_timeout(lease * 10).await;
                guard.map(|guard| guard.map(TokenlessRead))
            };
            // A reader enters the resource with no token to present, reads, and leaves.
            if let Some(reader) = acquire_with(&b, 0, read).await {
                critical_section(&b, 0, reader, &resource, lease / 4).await;
            }
            if let Some(writer) = acquire_with(&b, 1, || lock.write_timeout(lease * 10)).await {
                critical_section(&b, 1, writer, &resource, lease / 4).await;
            }
        })
    };
    cut_off_while(cx, guard, b_turn).await?;
    keys_left(cx, &keys).await
}

/// A takes the only permit of an expirable semaphore with a lease of one lease; its link
/// is blackholed and it tries to extend the permit through the cut link; B waits for the
/// permit and must get it only after A's own deadline. Permits carry no fencing token,
/// so no resource is involved: a resource could not tell A's late write from B's.
async fn permit(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease, env) = (cx.it, cx.lease, cx.env);
    let a = &it.a;
    let semaphore = cx
        .direct
        .expirable_semaphore(&it.name)?
        .with_lease(Lease::Fixed(lease))?;
    if !semaphore.try_set_permits(1).await? {
        bail!("the semaphore {} existed before the iteration", it.name);
    }
    // The held permits: a sorted set next to the free-permit counter
    // (sync/expirable_semaphore.rs). The counter is the semaphore itself, deleted below.
    let held = vec![format!("{}{{{}}}:permits", cx.direct.namespace(), it.name)];
    let semaphore_a = cx
        .client_a_impatient()
        .await?
        .expirable_semaphore(&it.name)?
        .with_lease(Lease::Fixed(lease))?;
    let Some(permit) = acquire_permit(a, &semaphore_a, lease).await else {
        return keys_left(cx, &held).await;
    };
    if existing(cx, &held)? != 1 {
        bail!("the held-permit key {held:?} does not exist while a permit is held");
    }
    belief(a, 0, &permit);
    let b_turn = {
        let (b, semaphore) = (it.b.clone(), semaphore.clone());
        tokio::spawn(async move {
            if let Some(p) = acquire_permit(&b, &semaphore, lease).await {
                watch(&b, 0, &p, lease / 4).await;
                release(&b, 0, p).await;
            }
        })
    };
    env.proxy_a.control().set_blackhole(true);
    // What a watchdog would do for a lock: extend before the lease runs out. The request
    // is dropped; the permit must keep its old deadline, and a late success would show
    // as a renewal after B's grant.
    let extended = permit.0.update_lease(lease).await;
    belief(a, 0, &permit);
    if let Ok(true) = extended {
        bail!("the permit was extended through a blackholed link");
    }
    watch(a, 0, &permit, lease * 2).await;
    env.proxy_a.control().set_blackhole(false);
    b_turn.await?;
    release(a, 0, permit).await;
    keys_left(cx, &held).await?;
    let free = semaphore.available_permits().await?;
    if free != 1 {
        bail!("{free} free permits after both released, expected the one permit back");
    }
    semaphore.delete().await?;
    Ok(())
}

/// `rec`'s permit of `semaphore` (whose handle carries the lease), waited for at most ten
/// leases.
async fn acquire_permit(
    rec: &Recorder,
    semaphore: &ExpirableSemaphore,
    lease: Duration,
) -> Option<TokenlessPermit> {
    let take = move || async move {
        let permit = semaphore.acquire_timeout(lease * 10).await;
        permit.map(|permit| permit.map(TokenlessPermit))
    };
    acquire_with(rec, 0, take).await
}

/// How many of `keys` exist on the server, read directly (not through the library, which
/// hides expired entries).
fn existing(cx: &ServerIteration<'_>, keys: &[String]) -> anyhow::Result<u64> {
    let mut args = vec!["EXISTS"];
    args.extend(keys.iter().map(String::as_str));
    let reply = cx.env.server.command(&args)?;
    reply
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("EXISTS answered {reply:?}"))
}

/// After healing: none of `keys` may exist, at the latest one lease later.
async fn keys_left(cx: &ServerIteration<'_>, keys: &[String]) -> anyhow::Result<()> {
    record_keys_left(&cx.it.a, cx.lease, || async { existing(cx, keys) }).await
}
