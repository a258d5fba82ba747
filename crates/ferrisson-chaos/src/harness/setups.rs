//! What scenario modules start once per run and hand to every iteration: nothing, one
//! `redis-server` with a fault proxy in front of it for each client, a Redis Cluster or
//! a Sentinel group.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ferrisson::redis::Client;
use ferrisson_testkit::{FaultProxy, RedisCluster, RedisServer, SentinelGroup};

use crate::harness::clients::{connect, connect_impatient};
use crate::harness::config::Config;
use crate::harness::record::keys_left;
use crate::harness::scenario::{Iteration, Setup};
use crate::resource::Resource;

/// Nothing shared: each iteration starts its own servers.
impl Setup for () {
    async fn start(_config: &Config) -> anyhow::Result<()> {
        Ok(())
    }
}

/// One server, and a proxy for client A and one for client B.
pub(crate) struct SingleServer {
    /// The server; clients that must not be faulted connect to it directly.
    pub(crate) server: RedisServer,
    /// Client A's way to the server.
    pub(crate) proxy_a: FaultProxy,
    /// Client B's way to the server.
    pub(crate) proxy_b: FaultProxy,
}

impl Setup for SingleServer {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        let server = RedisServer::start().context("redis-server")?;
        let proxy_a = FaultProxy::start(server.port()).await?;
        let proxy_b = FaultProxy::start(server.port()).await?;
        Ok(Self {
            server,
            proxy_a,
            proxy_b,
        })
    }
}

impl SingleServer {
    /// What an iteration on this server starts with: a client of its own straight to
    /// the server and a fresh resource.
    pub(crate) async fn iteration<'a>(
        &'a self,
        config: &Config,
        it: &'a Iteration,
    ) -> anyhow::Result<ServerIteration<'a>> {
        Ok(ServerIteration {
            resource: Arc::new(Resource::default()),
            direct: connect(&self.server.url(), config.lease).await?,
            lease: config.lease,
            env: self,
            it,
        })
    }
}

/// One iteration on a [`SingleServer`].
pub(crate) struct ServerIteration<'a> {
    /// The server and its proxies.
    pub(crate) env: &'a SingleServer,
    /// The iteration: its lock name and clients A and B.
    pub(crate) it: &'a Iteration,
    /// The clients' watchdog lease.
    pub(crate) lease: Duration,
    /// A client straight to the server, which no fault touches.
    pub(crate) direct: Client,
    /// The resource the iteration's holders work on.
    pub(crate) resource: Arc<Resource>,
}

impl ServerIteration<'_> {
    /// Client A through its proxy, giving up each call after one lease: the holder a
    /// fault on the link cuts off.
    pub(crate) async fn client_a_impatient(&self) -> anyhow::Result<Client> {
        connect_impatient(&self.env.proxy_a.url(), self.lease).await
    }

    /// After healing: the iteration's `Lock` must be free, at the latest one lease later.
    pub(crate) async fn keys_left(&self) -> anyhow::Result<()> {
        keys_left(&self.it.a, &self.direct, &self.it.name, self.lease).await
    }
}

/// How long a cluster node may be silent before the others fail it over: short, so
/// that a paused master is replaced within a few seconds, and long enough that two
/// cores shared with builds do not fail over a node that is only slow.
pub(crate) const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// Three masters with a replica each (`RedisCluster::builder()`, node timeout
/// [`CLUSTER_NODE_TIMEOUT`]); clients connect with `cluster.url()`.
impl Setup for RedisCluster {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        // Creating the cluster takes seconds of blocking process work.
        let builder = RedisCluster::builder().node_timeout(CLUSTER_NODE_TIMEOUT);
        tokio::task::spawn_blocking(move || builder.start())
            .await?
            .context("redis cluster")
    }
}

/// A master, two replicas and three sentinels (`SentinelGroup::start`); clients connect
/// with `group.url()`.
impl Setup for SentinelGroup {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        tokio::task::spawn_blocking(SentinelGroup::start)
            .await?
            .context("sentinel group")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The topologies a scenario module can name as its set-up start whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_and_sentinel_set_ups_start_ready() -> anyhow::Result<()> {
        let config = Config::new(1);
        let cluster = <RedisCluster as Setup>::start(&config).await?;
        cluster.wait_until_ok()?;
        assert!(cluster.url().starts_with("redis+cluster://"));
        let group = <SentinelGroup as Setup>::start(&config).await?;
        group.wait_until_ok()?;
        assert!(group.url().starts_with("redis+sentinel://"));
        Ok(())
    }
}
