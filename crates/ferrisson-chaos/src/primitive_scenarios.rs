//! `holder-blackholed` ported to the other leased primitives: a [`FairLock`] holder with a
//! queued waiter, an [`RwLock`] writer with a waiting reader, and the holder of the only
//! permit of an [`ExpirableSemaphore`].
//!
//! [`FairLock`]: ferrisson::FairLock
//! [`RwLock`]: ferrisson::RwLock
//! [`ExpirableSemaphore`]: ferrisson::ExpirableSemaphore

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use ferrisson::Client;

use crate::checker::Counters;
use crate::guard::{Guard, acquire_with};
use crate::history::{EventKind, History, Recorder};
use crate::resource::Resource;
use crate::scenarios::{
    Config, Env, Scenario, connect, connect_impatient, critical_section, enter_and_watch,
    rec_belief, release, watch,
};

/// Time from the holder's last deadline (its own belief) to the next client's grant:
/// how promptly a waiter that sleeps for the holder's TTL or lease takes over.
const HANDOVER: &str = "handover_after_holder_deadline";

#[allow(clippy::unused_async)] // a stub until the scenarios land
pub(crate) async fn run_once(
    scenario: Scenario,
    config: &Config,
    env: &Env,
    history: &History,
    name: &str,
) -> anyhow::Result<()> {
    match scenario {
        Scenario::FairLockHolderBlackholed => fair_lock(config, env, history, name).await?,
        Scenario::RwLockWriterBlackholed => rwlock(config, env, history, name).await?,
        Scenario::ExpirablePermitBlackholed => permit(config, env, history, name).await?,
        _ => bail!("{} is not a primitive scenario", scenario.name()),
    }
    record_handover(history);
    Ok(())
}

/// Scenario-specific expected results, added to `failures`.
pub(crate) fn expectations(scenario: Scenario, c: &Counters, failures: &mut Vec<String>) {
    if !matches!(
        scenario,
        Scenario::FairLockHolderBlackholed
            | Scenario::RwLockWriterBlackholed
            | Scenario::ExpirablePermitBlackholed
    ) {
        return;
    }
    // B waits ten leases; the holder's lease runs out after one: a refusal means the
    // primitive never handed over.
    if c.acquires_failed != 0 {
        failures.push(format!(
            "{} acquires failed, expected the waiter to get it every time",
            c.acquires_failed
        ));
    }
    if !c.measures.contains_key(HANDOVER) {
        failures.push("the waiter was never granted after the holder".to_owned());
    }
    if scenario == Scenario::ExpirablePermitBlackholed {
        // A permit has no lost signal and no token: nothing to signal, nothing to fence.
        if c.lost_signals != 0 {
            failures.push(format!("{} lost signals from permits", c.lost_signals));
        }
    } else {
        // The cut-off holder's watchdog must see the loss, and its late write must be
        // refused by fencing, in every iteration (one refused write each).
        if c.lost_signals == 0 {
            failures.push("no lost signal: the holder never saw its lock go".to_owned());
        }
        if c.stale_writes_refused_fenced == 0 {
            failures.push("no stale write refused: the fault did not take effect".to_owned());
        }
        if c.lost_signals != c.stale_writes_refused_fenced {
            failures.push(format!(
                "{} lost signals but {} stale writes refused, expected one of each per iteration",
                c.lost_signals, c.stale_writes_refused_fenced
            ));
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
async fn fair_lock(
    config: &Config,
    env: &Env,
    history: &History,
    name: &str,
) -> anyhow::Result<()> {
    let lease = config.lease;
    let (a, b) = (history.recorder(0), history.recorder(1));
    let resource = Arc::new(Resource::default());
    let direct = connect(&env.server.url(), lease).await?;
    let ca = connect_impatient(&env.proxy_a.url(), lease).await?;
    let keys = fair_lock_keys(&direct, name);
    let lock_a = ca.fair_lock(name)?;
    let Some(guard) = acquire_with(&a, 0, || lock_a.lock_timeout(lease * 10)).await? else {
        return keys_left(&a, env, &keys, lease).await;
    };
    resource.enter(&a, 0, guard.fencing_token().get());
    rec_belief(&a, &guard);
    let b_run = {
        let (b, lock, resource) = (b.clone(), direct.fair_lock(name)?, Arc::clone(&resource));
        tokio::spawn(async move {
            if let Some(g) = acquire_with(&b, 0, || lock.lock_timeout(lease * 10)).await? {
                critical_section(&b, 0, g, &resource, lease / 4).await;
            }
            anyhow::Ok(())
        })
    };
    queued(env, &direct, name, &keys).await?;
    cut_off_while(&a, env, guard, &resource, lease, b_run).await?;
    keys_left(&a, env, &keys, lease).await
}

/// A's link blackholed for two leases while A watches its guard and `b_run` (the
/// contender) takes over; then healed, and A acts on its stale check: writes with its
/// token and releases.
async fn cut_off_while(
    a: &Recorder,
    env: &Env,
    guard: impl Guard,
    resource: &Resource,
    lease: Duration,
    b_run: tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    env.proxy_a.control().set_blackhole(true);
    watch(a, 0, &guard, lease * 2).await;
    env.proxy_a.control().set_blackhole(false);
    b_run.await??;
    resource.write(a, 0, guard.fencing_token());
    resource.exit(a, 0);
    release(a, 0, guard).await;
    Ok(())
}

/// Every key of the fair lock `name` that may be left behind, from the layout in
/// `fair_lock.rs`: the lock hash, the wait queue and the waiters' keep-alive deadlines.
/// The fencing counter (`:fence`) is meant to outlive the lock, as a `Lock`'s does.
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
async fn queued(env: &Env, direct: &Client, name: &str, keys: &[String]) -> anyhow::Result<()> {
    let lock = direct.fair_lock(name)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while lock.inspect().await?.queue_len() == 0 {
        if tokio::time::Instant::now() >= deadline {
            bail!("B never showed up in the fair lock's queue");
        }
        // Nothing to await: the server publishes no event for a new queue entry.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let found = existing(env, keys)?;
    if found != keys.len() as u64 {
        bail!("{found} of the fair lock keys {keys:?} exist while held and queued, expected all");
    }
    Ok(())
}

/// A writes under the write lock and enters the resource; B waits for the read lock;
/// A's link is blackholed for two leases. B's read grant must come after A's belief
/// ended. Readers have no fencing token, so B then takes the write lock and writes: only
/// that token lets the resource refuse A's late write (docs/SAFETY.md).
async fn rwlock(config: &Config, env: &Env, history: &History, name: &str) -> anyhow::Result<()> {
    let lease = config.lease;
    let (a, b) = (history.recorder(0), history.recorder(1));
    let resource = Arc::new(Resource::default());
    let direct = connect(&env.server.url(), lease).await?;
    let ca = connect_impatient(&env.proxy_a.url(), lease).await?;
    // The read-write lock is one hash (rwlock.rs); its fencing counter outlives it.
    let keys = vec![format!("{}{{{name}}}", direct.namespace())];
    let lock_a = ca.rwlock(name)?;
    let Some(guard) = acquire_with(&a, 0, || lock_a.write_timeout(lease * 10)).await? else {
        return keys_left(&a, env, &keys, lease).await;
    };
    if existing(env, &keys)? != 1 {
        bail!("the read-write lock key {keys:?} does not exist while write-locked");
    }
    resource.enter(&a, 0, guard.fencing_token().get());
    rec_belief(&a, &guard);
    let b_run = {
        let (b, lock, resource) = (b.clone(), direct.rwlock(name)?, Arc::clone(&resource));
        tokio::spawn(async move {
            if let Some(r) = acquire_with(&b, 0, || lock.read_timeout(lease * 10)).await? {
                read_section(&b, 0, r, &resource, lease / 4).await;
            }
            if let Some(w) = acquire_with(&b, 1, || lock.write_timeout(lease * 10)).await? {
                critical_section(&b, 1, w, &resource, lease / 4).await;
            }
            anyhow::Ok(())
        })
    };
    cut_off_while(&a, env, guard, &resource, lease, b_run).await?;
    keys_left(&a, env, &keys, lease).await
}

/// A reader's critical section: it enters the resource (with no token to present), reads
/// while watching its guard, never writes, leaves, releases.
async fn read_section(
    rec: &Recorder,
    grant: usize,
    guard: impl Guard,
    resource: &Resource,
    work: Duration,
) {
    if enter_and_watch(rec, grant, &guard, resource, work).await {
        resource.exit(rec, grant);
    }
    release(rec, grant, guard).await;
}

/// A takes the only permit of an expirable semaphore with a lease of one lease; its link
/// is blackholed and it tries to extend the permit through the cut link; B waits for the
/// permit and must get it only after A's own deadline. Permits carry no fencing token,
/// so no resource is involved: a resource could not tell A's late write from B's.
async fn permit(config: &Config, env: &Env, history: &History, name: &str) -> anyhow::Result<()> {
    let lease = config.lease;
    let (a, b) = (history.recorder(0), history.recorder(1));
    let direct = connect(&env.server.url(), lease).await?;
    let ca = connect_impatient(&env.proxy_a.url(), lease).await?;
    let semaphore = direct.expirable_semaphore(name)?;
    if !semaphore.try_set_permits(1).await? {
        bail!("the semaphore {name} existed before the iteration");
    }
    // The held permits: a sorted set next to the free-permit counter
    // (expirable_semaphore.rs). The counter is the semaphore itself, deleted below.
    let held = vec![format!("{}{{{name}}}:permits", direct.namespace())];
    let semaphore_a = ca.expirable_semaphore(name)?;
    let Some(mut permit) =
        acquire_with(&a, 0, || semaphore_a.acquire_timeout(lease, lease * 10)).await?
    else {
        return keys_left(&a, env, &held, lease).await;
    };
    if existing(env, &held)? != 1 {
        bail!("the held-permit key {held:?} does not exist while a permit is held");
    }
    rec_belief(&a, &permit);
    let b_run = {
        let (b, semaphore) = (b.clone(), semaphore.clone());
        tokio::spawn(async move {
            if let Some(p) =
                acquire_with(&b, 0, || semaphore.acquire_timeout(lease, lease * 10)).await?
            {
                watch(&b, 0, &p, lease / 4).await;
                release(&b, 0, p).await;
            }
            anyhow::Ok(())
        })
    };
    env.proxy_a.control().set_blackhole(true);
    // What a watchdog would do for a lock: extend before the lease runs out. The request
    // is dropped; the permit must keep its old deadline, and a late success would show
    // as a renewal after B's grant.
    let extended = permit.update_lease(lease).await;
    rec_belief(&a, &permit);
    if let Ok(true) = extended {
        bail!("the permit was extended through a blackholed link");
    }
    watch(&a, 0, &permit, lease * 2).await;
    env.proxy_a.control().set_blackhole(false);
    b_run.await??;
    release(&a, 0, permit).await;
    keys_left(&a, env, &held, lease).await?;
    let free = semaphore.available_permits().await?;
    if free != 1 {
        bail!("{free} free permits after both released, expected the one permit back");
    }
    semaphore.delete().await?;
    Ok(())
}

/// How many of `keys` exist on the server, read directly (not through the library, which
/// hides expired entries).
fn existing(env: &Env, keys: &[String]) -> anyhow::Result<u64> {
    let mut args = vec!["EXISTS"];
    args.extend(keys.iter().map(String::as_str));
    let reply = env.server.command(&args)?;
    reply
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("EXISTS answered {reply:?}"))
}

/// After healing: none of `keys` may exist, at the latest one lease later.
async fn keys_left(
    rec: &Recorder,
    env: &Env,
    keys: &[String],
    lease: Duration,
) -> anyhow::Result<()> {
    let mut left = existing(env, keys)?;
    if left > 0 {
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        left = existing(env, keys)?;
    }
    rec.record(0, EventKind::KeysLeft { count: left });
    Ok(())
}
