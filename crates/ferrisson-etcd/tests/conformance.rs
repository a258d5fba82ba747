//! The store-neutral conformance suite on etcd: one member and a 3-member cluster, each
//! started by the test kit; and contenders in other processes.

use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};
use ferrisson_conformance::{Store, excludes_across_processes, run_all, serve_child_if_asked};
use ferrisson_etcd::{Client, Fenced, FencingToken, Lease, Lock, LockGuard, Result};
use ferrisson_testkit::EtcdCluster;

/// The session lease of the clients under test (etcd counts in whole seconds).
const WATCHDOG_LEASE: Duration = Duration::from_secs(5);

/// An etcd client under test, with the URL another client or process connects to.
#[derive(Clone)]
struct EtcdUnderTest {
    url: String,
    client: Client,
}

impl EtcdUnderTest {
    async fn connect(url: String) -> Result<Self> {
        let client = Client::builder(&url)
            .watchdog_lease(WATCHDOG_LEASE)
            .connect()
            .await?;
        Ok(Self { url, client })
    }
}

impl Store for EtcdUnderTest {
    type Lock = Lock;

    fn lock(&self, name: &str, lease: Lease) -> Result<Lock> {
        self.client.lock(name)?.with_lease(lease)
    }

    async fn another_client(&self) -> Result<Self> {
        Self::connect(self.url.clone()).await
    }

    /// Deletes the holder's key, as an operator would with `etcdctl del`.
    async fn end_hold_behind_the_back(&self, name: &str) -> Result<()> {
        let mut kv = self.client.etcd().kv_client();
        let prefix = format!("{name}/");
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let holder = kv
            .get(prefix, Some(first))
            .await
            .map_err(|e| ferrisson_etcd::Error::store(ferrisson_etcd::EtcdError(e)))?;
        if let Some(kv_) = holder.kvs().first() {
            kv.delete(kv_.key(), None)
                .await
                .map_err(|e| ferrisson_etcd::Error::store(ferrisson_etcd::EtcdError(e)))?;
        }
        Ok(())
    }

    fn token_of(guard: &LockGuard) -> Option<FencingToken> {
        Some(guard.fencing_token())
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// The watch on the own key sees the deletion.
    fn lost_within(&self) -> Duration {
        Duration::from_secs(2)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_conforms() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    run_all(&EtcdUnderTest::connect(member.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_member_cluster_conforms() -> anyhow::Result<()> {
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3)).await??;
    run_all(&EtcdUnderTest::connect(cluster.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other_on_one_member() -> anyhow::Result<()> {
    if serve_child_if_asked(EtcdUnderTest::connect).await? {
        return Ok(());
    }
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let store = EtcdUnderTest::connect(member.url()).await?;
    excludes_across_processes(&store, "processes_exclude_each_other_on_one_member").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other_on_a_cluster() -> anyhow::Result<()> {
    if serve_child_if_asked(EtcdUnderTest::connect).await? {
        return Ok(());
    }
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3)).await??;
    let store = EtcdUnderTest::connect(cluster.url()).await?;
    excludes_across_processes(&store, "processes_exclude_each_other_on_a_cluster").await?;
    Ok(())
}
