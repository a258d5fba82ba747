//! The store-neutral conformance suite on Redis: one server, a Sentinel group and a
//! Cluster, each started by the test kit; and contenders in other processes.

use std::time::Duration;

use ferrisson_conformance::{Store, excludes_across_processes, run_all, serve_child_if_asked};
use ferrisson_redis::{Client, FencingToken, Lease, Lock, LockGuard, Result};
use ferrisson_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// The watchdog lease of the clients under test: short, so that a hold ended behind the
/// holder's back is noticed at the next renewal (a third of it).
const WATCHDOG_LEASE: Duration = Duration::from_millis(1500);

/// A Redis client under test, with the URL another client or process connects to.
#[derive(Clone)]
struct RedisUnderTest {
    url: String,
    client: Client,
}

impl RedisUnderTest {
    async fn connect(url: String) -> Result<Self> {
        let client = Client::builder(&url)
            .watchdog_lease(WATCHDOG_LEASE)
            .connect()
            .await?;
        Ok(Self { url, client })
    }
}

impl Store for RedisUnderTest {
    type Lock = Lock;

    fn lock(&self, name: &str, lease: Lease) -> Result<Lock> {
        self.client.lock(name)?.with_lease(lease)
    }

    async fn another_client(&self) -> Result<Self> {
        Self::connect(self.url.clone()).await
    }

    async fn end_hold_behind_the_back(&self, name: &str) -> Result<()> {
        self.client.lock(name)?.force_unlock().await.map(drop)
    }

    fn token_of(guard: &LockGuard) -> Option<FencingToken> {
        Some(guard.fencing_token())
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// The watchdog's next renewal finds the key gone.
    fn lost_within(&self) -> Duration {
        WATCHDOG_LEASE * 2
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_conforms() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    run_all(&RedisUnderTest::connect(server.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_group_conforms() -> anyhow::Result<()> {
    let group = tokio::task::spawn_blocking(SentinelGroup::start).await??;
    run_all(&RedisUnderTest::connect(group.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_conforms() -> anyhow::Result<()> {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await??;
    run_all(&RedisUnderTest::connect(cluster.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other() -> anyhow::Result<()> {
    if serve_child_if_asked(RedisUnderTest::connect).await? {
        return Ok(());
    }
    let server = RedisServer::start()?;
    let store = RedisUnderTest::connect(server.url()).await?;
    excludes_across_processes(&store, "processes_exclude_each_other").await?;
    Ok(())
}
