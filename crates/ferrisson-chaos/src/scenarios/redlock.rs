//! Redlock over five independent servers: a minority killed, and a node restarted
//! empty at once (a documented unsafe case) or after more than the TTL.

use std::time::Duration;

use anyhow::Context;
use ferrisson::redis::{Client, Lease, Redlock};
use ferrisson_testkit::{FaultProxy, RedisServer};

use crate::harness::config::Config;
use crate::harness::hold::TokenlessRedlock;
use crate::harness::record::{acquire_with, belief, release};
use crate::harness::scenario::{FaultScenario, Iteration, Setup};
use crate::history::Recorder;

const NODES: usize = 5;

/// Five servers, and a proxy in front of each for client A.
pub(crate) struct Nodes {
    servers: Vec<RedisServer>,
    proxies: Vec<FaultProxy>,
}

impl Setup for Nodes {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        let mut servers = Vec::new();
        let mut proxies = Vec::new();
        for _ in 0..NODES {
            let server = RedisServer::start().context("redis-server")?;
            proxies.push(FaultProxy::start(server.port()).await?);
            servers.push(server);
        }
        Ok(Self { servers, proxies })
    }
}

impl Nodes {
    /// A Redlock called `name` over every node, through A's proxies or directly.
    async fn redlock(&self, proxied: bool, name: &str, ttl: Duration) -> anyhow::Result<Redlock> {
        let urls: Vec<String> = if proxied {
            self.proxies.iter().map(FaultProxy::url).collect()
        } else {
            self.servers.iter().map(RedisServer::url).collect()
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
        Ok(Redlock::new(&clients, name)?.with_lease(Lease::Fixed(ttl))?)
    }
}

/// The scenarios of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedlockFault {
    /// Kill 1 (even iterations) or 2 (odd iterations) of the five servers.
    MinorityKilled,
    /// A holds on nodes 0-2 only; node 2 restarts empty at once; B asks all five.
    RestartedAtOnce,
    /// As above, but node 2 stays down for TTL + 200 ms before restarting empty.
    RestartedAfterTtl,
}

impl FaultScenario for RedlockFault {
    type Setup = Nodes;

    fn is_documented_unsafe(self) -> bool {
        self == Self::RestartedAtOnce
    }

    async fn run_once(
        self,
        config: &Config,
        nodes: &mut Nodes,
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let (a, b) = (&it.a, &it.b);
        let ttl = config.lease * 3;
        let lock_a = nodes.redlock(true, &it.name, ttl).await?;
        let lock_b = nodes.redlock(false, &it.name, ttl).await?;
        match self {
            Self::MinorityKilled => {
                let killed = if it.number.is_multiple_of(2) { 1 } else { 2 };
                for server in nodes.servers.iter_mut().take(killed) {
                    server.kill()?;
                }
                let guard_a = try_lock(a, &lock_a).await;
                // While A holds a majority, B must not get one.
                if let Some(guard_b) = try_lock(b, &lock_b).await {
                    release(b, 0, guard_b).await;
                }
                if let Some(guard) = guard_a {
                    release(a, 0, guard).await;
                }
                if let Some(guard) = try_lock(b, &lock_b).await {
                    release(b, 0, guard).await;
                }
                for server in nodes.servers.iter_mut().take(killed) {
                    server.restart()?;
                }
            }
            Self::RestartedAtOnce | Self::RestartedAfterTtl => {
                // A reaches nodes 0-2 only: its votes are exactly a majority.
                for proxy in &nodes.proxies[3..] {
                    proxy.control().set_blackhole(true);
                }
                let guard_a = try_lock(a, &lock_a).await;
                if self == Self::RestartedAtOnce {
                    nodes.servers[2].restart()?;
                } else {
                    nodes.servers[2].kill()?;
                    // The remedy under test: stay down longer than the TTL.
                    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
                    nodes.servers[2].restart()?;
                }
                if let Some(guard) = &guard_a {
                    belief(a, 0, guard);
                }
                // The restarted node's first reply may be a broken connection: retry a
                // while (Redlock's own retry delay).
                let guard_b =
                    acquire_with(b, 0, || redlock_hold(lock_b.lock_timeout(ttl / 3))).await;
                if let Some(guard) = &guard_a {
                    belief(a, 0, guard);
                }
                for proxy in &nodes.proxies[3..] {
                    proxy.control().set_blackhole(false);
                }
                if let Some(guard) = guard_b {
                    release(b, 0, guard).await;
                }
                if let Some(guard) = guard_a {
                    release(a, 0, guard).await;
                }
            }
        }
        Ok(())
    }
}

/// One Redlock attempt, recorded.
async fn try_lock(rec: &Recorder, redlock: &Redlock) -> Option<TokenlessRedlock> {
    acquire_with(rec, 0, || redlock_hold(redlock.try_lock())).await
}

/// A Redlock acquire's answer as a hold the recorder takes.
async fn redlock_hold(
    answer: impl Future<Output = ferrisson::redis::Result<Option<ferrisson::redis::RedlockGuard>>>,
) -> ferrisson::redis::Result<Option<TokenlessRedlock>> {
    Ok(answer.await?.map(TokenlessRedlock))
}
