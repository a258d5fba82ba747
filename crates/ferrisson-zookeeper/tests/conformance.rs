//! The store-neutral conformance suite on ZooKeeper: a standalone server and a
//! three-member ensemble, each started by the test kit; and contenders in other
//! processes.

use std::time::Duration;

use ferrisson_conformance::{Store, excludes_across_processes, run_all, serve_child_if_asked};
use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::{Client, FencingToken, Lease, Lock, LockGuard, Result};

/// The session timeout of the clients under test: within the kit's server bounds.
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// A ZooKeeper client under test, with the URL another client or process connects to.
#[derive(Clone)]
struct ZooKeeperUnderTest {
    url: String,
    client: Client,
}

impl ZooKeeperUnderTest {
    async fn connect(url: String) -> Result<Self> {
        let client = Client::builder(&url)
            .session_timeout(SESSION_TIMEOUT)
            .connect()
            .await?;
        Ok(Self { url, client })
    }
}

impl Store for ZooKeeperUnderTest {
    type Lock = Lock;

    fn lock(&self, name: &str, lease: Lease) -> Result<Lock> {
        self.client.lock(name)?.with_lease(lease)
    }

    async fn another_client(&self) -> Result<Self> {
        Self::connect(self.url.clone()).await
    }

    /// Deletes every contender's node under the lock's path, as an operator with
    /// `zkCli.sh deleteall` would.
    async fn end_hold_behind_the_back(&self, name: &str) -> Result<()> {
        let lock = self.client.lock(name)?;
        let zk = self.client.zookeeper();
        let children = zk
            .list_children(lock.path())
            .await
            .map_err(|e| ferrisson_core::Error::Protocol(format!("list: {e}")))?;
        for child in children {
            let _ = zk.delete(&format!("{}/{child}", lock.path()), None).await;
        }
        Ok(())
    }

    fn token_of(guard: &LockGuard) -> Option<FencingToken> {
        Some(ferrisson_zookeeper::Fenced::fencing_token(guard))
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// The node watch fires as soon as the server deletes the node.
    fn lost_within(&self) -> Duration {
        Duration::from_secs(2)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_server_conforms() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    run_all(&ZooKeeperUnderTest::connect(zk.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_conforms() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::ensemble).await??;
    run_all(&ZooKeeperUnderTest::connect(zk.url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other() -> anyhow::Result<()> {
    if serve_child_if_asked(ZooKeeperUnderTest::connect).await? {
        return Ok(());
    }
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let store = ZooKeeperUnderTest::connect(zk.url()).await?;
    excludes_across_processes(&store, "processes_exclude_each_other").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other_on_an_ensemble() -> anyhow::Result<()> {
    if serve_child_if_asked(ZooKeeperUnderTest::connect).await? {
        return Ok(());
    }
    let zk = tokio::task::spawn_blocking(ZooKeeper::ensemble).await??;
    let store = ZooKeeperUnderTest::connect(zk.url()).await?;
    excludes_across_processes(&store, "processes_exclude_each_other_on_an_ensemble").await?;
    Ok(())
}
