//! A holder that checked `is_held()` and then stalls for two leases — its link
//! blackholed, the server frozen or paused, or its own executor blocked — writes with its
//! token anyway, and releases. B takes the lock meanwhile and writes.

use std::sync::Arc;

use ferrisson::redis::Lock;

use crate::harness::clients::{connect, connect_impatient};
use crate::harness::config::Config;
use crate::harness::record::{
    acquire, acquire_and_work, act_on_stale_check, belief, enter_checked, watch,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::harness::setups::{ServerIteration, SingleServer};

/// The scenarios of this module: what stalls the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// A's link blackholed; A gives up each call after one lease.
    HolderBlackholed,
    /// `redis-server` SIGSTOPped, then resumed.
    RedisPaused,
    /// `CLIENT PAUSE <2 leases> ALL` on the server.
    RedisClientPaused,
    /// A's current-thread runtime blocked by `std::thread::sleep`.
    ExecutorStarved,
}

impl FaultScenario for Stall {
    type Setup = SingleServer;

    async fn run_once(
        self,
        config: &Config,
        env: &mut SingleServer,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let cx = env.iteration(config, it).await?;
        let lock_b = cx.direct.lock(&it.name)?;
        if self == Self::ExecutorStarved {
            starved_holder(&cx, lock_b).await?;
        } else {
            self.stalled_holder(&cx, lock_b).await?;
        }
        cx.keys_left().await
    }
}

impl Stall {
    /// A holds through a client that gives up after one lease, checks, and stalls while
    /// B (spawned) takes the lock; the stall ends; A acts on its check.
    async fn stalled_holder(self, cx: &ServerIteration<'_>, lock_b: Lock) -> anyhow::Result<()> {
        let (env, it, lease) = (cx.env, cx.it, cx.lease);
        let stall = lease * 2;
        let a = &it.a;
        let url = if self == Self::HolderBlackholed {
            env.proxy_a.url()
        } else {
            env.server.url()
        };
        let lock_a = connect_impatient(&url, lease).await?.lock(&it.name)?;
        let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await else {
            return Ok(());
        };
        enter_checked(a, 0, &guard, &cx.resource);
        match self {
            Self::HolderBlackholed => env.proxy_a.control().set_blackhole(true),
            Self::RedisClientPaused => {
                // Paused clients include any new connection, so an UNPAUSE could not get
                // through: the pause ends by itself after the stall.
                let millis = stall.as_millis().to_string();
                env.server.command(&["CLIENT", "PAUSE", &millis, "ALL"])?;
            }
            // (A starved executor stalls by itself: `starved_holder`.)
            Self::RedisPaused | Self::ExecutorStarved => env.server.pause()?,
        }
        let b_turn = {
            let (b, resource) = (it.b.clone(), Arc::clone(&cx.resource));
            tokio::spawn(async move {
                acquire_and_work(&b, 0, &lock_b, lease * 10, &resource, lease / 4).await;
            })
        };
        watch(a, 0, &guard, stall).await;
        match self {
            Self::HolderBlackholed => env.proxy_a.control().set_blackhole(false),
            Self::RedisClientPaused => {}
            Self::RedisPaused | Self::ExecutorStarved => env.server.resume()?,
        }
        b_turn.await?;
        act_on_stale_check(a, 0, guard, &cx.resource).await;
        Ok(())
    }
}

/// A lives on its own thread with a current-thread runtime: it holds, checks, and blocks
/// the whole thread — no watchdog, no timers — while B takes the lock; on waking it acts
/// on its check.
async fn starved_holder(cx: &ServerIteration<'_>, lock_b: Lock) -> anyhow::Result<()> {
    let (it, lease) = (cx.it, cx.lease);
    let stall = lease * 2;
    let (url, name, resource, a) = (
        cx.env.server.url(),
        it.name.clone(),
        Arc::clone(&cx.resource),
        it.a.clone(),
    );
    let (checked_tx, checked_rx) = tokio::sync::oneshot::channel();
    let holder = std::thread::spawn(move || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let lock = connect(&url, lease).await?.lock(&name)?;
            let Some(guard) = acquire(&a, 0, &lock, lease * 10).await else {
                let _ = checked_tx.send(());
                return Ok(());
            };
            enter_checked(&a, 0, &guard, &resource);
            let _ = checked_tx.send(());
            // The whole executor stops: no watchdog, no timers, nothing.
            std::thread::sleep(stall);
            belief(&a, 0, &guard);
            act_on_stale_check(&a, 0, guard, &resource).await;
            anyhow::Ok(())
        })
    });
    let _ = checked_rx.await;
    acquire_and_work(&it.b, 0, &lock_b, lease * 10, &cx.resource, lease / 4).await;
    tokio::task::spawn_blocking(move || holder.join())
        .await?
        .map_err(|_| anyhow::anyhow!("holder thread panicked"))??;
    Ok(())
}
