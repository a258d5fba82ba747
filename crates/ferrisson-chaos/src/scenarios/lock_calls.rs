//! Faults on the calls of a `Lock` on one server: latency on every call, an acquire's
//! reply held back past the lease, a connection reset after the server ran an acquire or
//! a release and before its reply, and the server's script cache flushed while the lock
//! is held and renewed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::redis::{Client, Lock, LockGuard};
use ferrisson_testkit::Faults;
use tokio::task::JoinHandle;

use crate::harness::clients::connect;
use crate::harness::config::Config;
use crate::harness::poll::poll_until;
use crate::harness::record::{
    acquire, acquire_and_work, answered, belief, critical_section, outcome, release, token,
    try_acquire, watch, write_with_token,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::harness::setups::{ServerIteration, SingleServer};
use crate::history::{EventKind, Recorder};
use crate::resource::Resource;

/// The scenarios of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockCallFault {
    /// Both clients behind proxies adding 15–30 % of the lease each way.
    Latency,
    /// The server runs A's acquire; its reply is held for 1.5 leases.
    AcquireReplyDelayed,
    /// The server runs A's acquire; the connection is reset before the reply.
    ResetDuringAcquire,
    /// The server runs A's release; the connection is reset before the reply.
    ResetDuringRelease,
    /// `SCRIPT FLUSH` while A holds and renews.
    ScriptFlush,
}

impl FaultScenario for LockCallFault {
    type Setup = SingleServer;

    async fn run_once(
        self,
        config: &Config,
        env: &mut SingleServer,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let cx = env.iteration(config, it).await?;
        match self {
            Self::Latency => latency(&cx).await?,
            Self::AcquireReplyDelayed => acquire_reply_delayed(&cx).await?,
            Self::ResetDuringAcquire => reset_during_acquire(&cx).await?,
            Self::ResetDuringRelease => reset_during_release(&cx).await?,
            Self::ScriptFlush => script_flush(&cx).await?,
        }
        cx.keys_left().await
    }
}

/// Both clients behind proxies adding latency to every call; each takes the lock twice
/// and works for one lease, writing only if `is_held()`.
async fn latency(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (env, it, lease) = (cx.env, cx.it, cx.lease);
    let (pa, pb) = (env.proxy_a.control(), env.proxy_b.control());
    pa.set_latency(lease * 3 / 20, lease * 3 / 20);
    pb.set_latency(lease * 3 / 20, lease * 3 / 20);
    let lock_a = connect(&env.proxy_a.url(), lease).await?.lock(&it.name)?;
    let lock_b = connect(&env.proxy_b.url(), lease).await?.lock(&it.name)?;
    tokio::join!(
        take_twice(&it.a, &lock_a, &cx.resource, lease),
        take_twice(&it.b, &lock_b, &cx.resource, lease)
    );
    pa.set(Faults::default());
    pb.set(Faults::default());
    Ok(())
}

/// Takes the lock twice, working for one lease each time.
async fn take_twice(rec: &Recorder, lock: &Lock, resource: &Resource, lease: Duration) {
    for grant in 0..2 {
        acquire_and_work(rec, grant, lock, lease * 10, resource, lease).await;
    }
}

/// The server runs A's acquire and the reply is held; B waits for the lock while A's
/// grant is on the wire, and gets it when A's key expires; A's grant then arrives already
/// expired.
async fn acquire_reply_delayed(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease) = (cx.it, cx.lease);
    let pending = acquire_with_reply_held(cx).await?;
    let b_turn = {
        let (b, lock) = (it.b.clone(), cx.direct.lock(&it.name)?);
        let resource = Arc::clone(&cx.resource);
        tokio::spawn(async move {
            acquire_and_work(&b, 0, &lock, lease * 10, &resource, lease / 2).await;
        })
    };
    tokio::time::sleep(lease * 3 / 2).await;
    cx.env.proxy_a.control().set_hold_replies(false);
    if let Some(guard) = answered(&it.a, 0, pending.await?) {
        critical_section(&it.a, 0, guard, &cx.resource, lease / 4).await;
    }
    b_turn.await?;
    Ok(())
}

/// The server runs A's acquire, the connection is reset before the reply: whatever A
/// learns, nothing may be left behind, so B gets the lock at once, not a lease later.
async fn reset_during_acquire(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease) = (cx.it, cx.lease);
    let pending = acquire_with_reply_held(cx).await?;
    let pa = cx.env.proxy_a.control();
    pa.reset_all();
    pa.set_hold_replies(false);
    if let Some(guard) = answered(&it.a, 0, pending.await?) {
        critical_section(&it.a, 0, guard, &cx.resource, lease / 4).await;
    }
    let started = Instant::now();
    if let Some(guard) = acquire(&it.b, 0, &cx.direct.lock(&it.name)?, lease * 10).await {
        it.b.record(
            0,
            EventKind::Measure {
                name: "next_acquire_after_reset_ms".into(),
                millis: started.elapsed().as_millis() as u64,
            },
        );
        critical_section(&it.b, 0, guard, &cx.resource, lease / 4).await;
    }
    Ok(())
}

/// A's `try_lock`, sent through its proxy with the replies held back: returns once the
/// server ran it, its reply still on the wire (released by the caller).
async fn acquire_with_reply_held(
    cx: &ServerIteration<'_>,
) -> anyhow::Result<JoinHandle<ferrisson::redis::Result<Option<LockGuard>>>> {
    let it = cx.it;
    let lock = connect(&cx.env.proxy_a.url(), cx.lease)
        .await?
        .lock(&it.name)?;
    let pa = cx.env.proxy_a.control();
    pa.set_hold_replies(true);
    it.a.record(0, EventKind::AcquireInvoked);
    let pending = tokio::spawn(async move { lock.try_lock().await });
    pa.held_reply().await;
    server_state(&cx.direct, &it.name, true).await?;
    Ok(pending)
}

/// The server runs A's release, the connection is reset before the reply; B takes the
/// lock as soon as the release ran, and must not lose it to A's retried release.
async fn reset_during_release(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease, resource) = (cx.it, cx.lease, &cx.resource);
    let a = &it.a;
    let lock_a = connect(&cx.env.proxy_a.url(), lease)
        .await?
        .lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await else {
        return Ok(());
    };
    resource.enter(a, 0, token(&guard));
    write_with_token(a, 0, &guard, resource);
    resource.exit(a, 0);
    belief(a, 0, &guard);
    let pa = cx.env.proxy_a.control();
    pa.set_hold_replies(true);
    a.record(0, EventKind::ReleaseInvoked);
    let pending = tokio::spawn(async move { outcome(guard.unlock().await) });
    pa.held_reply().await;
    server_state(&cx.direct, &it.name, false).await?;
    pa.reset_all();
    pa.set_hold_replies(false);
    let b_guard = acquire(&it.b, 0, &cx.direct.lock(&it.name)?, lease * 10).await;
    let outcome = pending.await?;
    a.record(0, EventKind::Released { outcome });
    if let Some(guard) = b_guard {
        critical_section(&it.b, 0, guard, resource, lease / 2).await;
    }
    Ok(())
}

/// `SCRIPT FLUSH` while A holds: A must keep renewing (no loss), B must be refused, then
/// get the lock after A's release.
async fn script_flush(cx: &ServerIteration<'_>) -> anyhow::Result<()> {
    let (it, lease, resource) = (cx.it, cx.lease, &cx.resource);
    let (a, b) = (&it.a, &it.b);
    let lock_a = connect(&cx.env.proxy_a.url(), lease)
        .await?
        .lock(&it.name)?;
    let lock_b = cx.direct.lock(&it.name)?;
    if let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await {
        resource.enter(a, 0, token(&guard));
        cx.env.server.command(&["SCRIPT", "FLUSH"])?;
        // Two renewals must go through after the flush.
        watch(a, 0, &guard, lease).await;
        if let Some(taken) = try_acquire(b, 0, &lock_b).await {
            release(b, 0, taken).await;
        }
        if guard.is_held() {
            write_with_token(a, 0, &guard, resource);
        }
        resource.exit(a, 0);
        release(a, 0, guard).await;
    }
    acquire_and_work(b, 1, &lock_b, lease * 10, resource, lease / 4).await;
    Ok(())
}

/// Waits until the server shows the lock held (`true`) or free (`false`): the request
/// whose reply is being held back has run. Replies on the direct client are not held.
async fn server_state(direct: &Client, name: &str, locked: bool) -> anyhow::Result<()> {
    let lock = direct.lock(name)?;
    let state = if locked {
        "the lock held"
    } else {
        "the lock free"
    };
    poll_until(state, || async { Ok(lock.is_locked().await? == locked) }).await
}
