//! Redlock over five independent servers: a minority killed, and a node restarted
//! empty at once or after more than the TTL.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use ferrisson::{Client, Redlock, RedlockGuard};
use ferrisson_testkit::{FaultProxy, RedisServer};

use crate::history::{EventKind, History, Recorder, ReleaseOutcome};

/// Five servers, and a proxy in front of each for client A.
pub(crate) struct Nodes {
    servers: Mutex<Vec<RedisServer>>,
    proxies: Vec<FaultProxy>,
}

/// Which Redlock fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedlockFault {
    /// Kill 1 (even iterations) or 2 (odd iterations) of the five servers.
    MinorityKilled,
    /// A holds on nodes 0-2 only; node 2 restarts empty at once; B asks nodes 2-4.
    RestartedAtOnce,
    /// As above, but node 2 stays down for TTL + 200 ms before restarting empty.
    RestartedAfterTtl,
}

const NODES: usize = 5;

impl Nodes {
    pub(crate) async fn start() -> anyhow::Result<Self> {
        let mut servers = Vec::new();
        let mut proxies = Vec::new();
        for _ in 0..NODES {
            let server = RedisServer::start().context("redis-server")?;
            proxies.push(FaultProxy::start(server.port()).await?);
            servers.push(server);
        }
        Ok(Self {
            servers: Mutex::new(servers),
            proxies,
        })
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, Vec<RedisServer>> {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn clients(&self, proxied: bool, ttl: Duration) -> anyhow::Result<Vec<Client>> {
        let urls: Vec<String> = if proxied {
            self.proxies.iter().map(FaultProxy::url).collect()
        } else {
            self.servers().iter().map(RedisServer::url).collect()
        };
        let mut clients = Vec::new();
        for url in urls {
            clients.push(
                Client::builder(&url)
                    .response_timeout(ttl)
                    .connect_timeout(ttl)
                    .connect()
                    .await?,
            );
        }
        Ok(clients)
    }
}

fn granted(rec: &Recorder, guard: &RedlockGuard) {
    let deadline = rec.now() + guard.validity();
    rec.record(0, EventKind::AcquireOk { token: 0, deadline });
    belief(rec, guard);
}

fn belief(rec: &Recorder, guard: &RedlockGuard) {
    rec.belief(0, || guard.is_valid(), || guard.validity());
}

async fn try_lock(rec: &Recorder, redlock: &Redlock) -> Option<RedlockGuard> {
    lock_within(rec, redlock, None).await
}

/// One attempt, or retries (Redlock's own retry delay) for up to `wait`.
async fn lock_within(
    rec: &Recorder,
    redlock: &Redlock,
    wait: Option<Duration>,
) -> Option<RedlockGuard> {
    rec.record(0, EventKind::AcquireInvoked);
    let result = match wait {
        None => redlock.try_lock().await,
        Some(wait) => redlock.lock_timeout(wait).await,
    };
    match result {
        Ok(Some(guard)) => {
            granted(rec, &guard);
            Some(guard)
        }
        Ok(None) => {
            rec.record(
                0,
                EventKind::AcquireFailed {
                    reason: "no majority".into(),
                },
            );
            None
        }
        Err(e) => {
            rec.record(
                0,
                EventKind::AcquireFailed {
                    reason: e.to_string(),
                },
            );
            None
        }
    }
}

async fn unlock(rec: &Recorder, guard: RedlockGuard) {
    belief(rec, &guard);
    rec.record(0, EventKind::ReleaseInvoked);
    let outcome = match guard.unlock().await {
        Ok(()) => ReleaseOutcome::Ok,
        Err(e) => ReleaseOutcome::Error(e.to_string()),
    };
    rec.record(0, EventKind::Released { outcome });
}

pub(crate) async fn run_once(
    fault: RedlockFault,
    nodes: &Nodes,
    history: &History,
    name: &str,
    iteration: u32,
    ttl: Duration,
) -> anyhow::Result<()> {
    let (a, b) = (history.recorder(0), history.recorder(1));
    let lock_a = Redlock::new(&nodes.clients(true, ttl).await?, name)?.with_ttl(ttl)?;
    let lock_b = Redlock::new(&nodes.clients(false, ttl).await?, name)?.with_ttl(ttl)?;
    match fault {
        RedlockFault::MinorityKilled => {
            let killed = if iteration % 2 == 0 { 1 } else { 2 };
            for server in nodes.servers().iter_mut().take(killed) {
                server.kill()?;
            }
            let guard_a = try_lock(&a, &lock_a).await;
            // While A holds a majority, B must not get one.
            if let Some(guard_b) = try_lock(&b, &lock_b).await {
                unlock(&b, guard_b).await;
            }
            if let Some(guard) = guard_a {
                unlock(&a, guard).await;
            }
            if let Some(guard) = try_lock(&b, &lock_b).await {
                unlock(&b, guard).await;
            }
            for server in nodes.servers().iter_mut().take(killed) {
                server.restart()?;
            }
        }
        RedlockFault::RestartedAtOnce | RedlockFault::RestartedAfterTtl => {
            // A reaches nodes 0-2 only: its votes are exactly a majority.
            for proxy in &nodes.proxies[3..] {
                proxy.control().set_blackhole(true);
            }
            let guard_a = try_lock(&a, &lock_a).await;
            if fault == RedlockFault::RestartedAtOnce {
                nodes.servers()[2].restart()?;
            } else {
                nodes.servers()[2].kill()?;
                // The remedy under test: stay down longer than the TTL.
                tokio::time::sleep(ttl + Duration::from_millis(200)).await;
                nodes.servers()[2].restart()?;
            }
            if let Some(guard) = &guard_a {
                belief(&a, guard);
            }
            // The restarted node's first reply may be a broken connection: retry a while.
            let guard_b = lock_within(&b, &lock_b, Some(ttl / 3)).await;
            if let Some(guard) = &guard_a {
                belief(&a, guard);
            }
            for proxy in &nodes.proxies[3..] {
                proxy.control().set_blackhole(false);
            }
            if let Some(guard) = guard_b {
                unlock(&b, guard).await;
            }
            if let Some(guard) = guard_a {
                unlock(&a, guard).await;
            }
        }
    }
    Ok(())
}
