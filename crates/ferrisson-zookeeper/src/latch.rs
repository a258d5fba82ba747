//! The count-down latch: a persistent node holding the count.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Kind, Probe, observe_acquire};
use ferrisson_core::{DistributedLatch, Error, Result};
use zookeeper_client::{Acls, CreateMode, Error as ZkE};

use crate::client::{Client, Inner};
use crate::error::{connection_broke, zk};
use crate::path::{LATCHES_ROOT, path_of};

/// A count-down latch: a persistent node whose data is the count left, in decimal. A
/// count-down is a compare-and-set on the node's version (retried when another client
/// counted down first); a waiter watches the node and is let through once the count is
/// zero. The node is created with the count given to the first handle that finds it
/// missing, and stays (it does not end with a session) until someone deletes it.
///
/// Names that start with `/` are paths; others live under `/ferrisson/latches/`.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::DistributedLatch;
///
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
/// let ready = client.count_down_latch("workers-ready", 2)?;
/// ready.count_down().await?;
/// assert_eq!(ready.count().await?, 1);
/// ready.count_down().await?;
/// ready.wait().await?; // open
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct Latch {
    client: Client,
    path: Arc<str>,
    initial: u32,
    probe: Probe,
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latch")
            .field("name", &self.probe.name)
            .field("path", &self.path)
            .field("initial", &self.initial)
            .finish_non_exhaustive()
    }
}

impl Latch {
    pub(crate) fn new(client: Client, name: &str, initial: u32) -> Result<Self> {
        let path = path_of(LATCHES_ROOT, name)?;
        let probe = client.inner.classes.probe(Kind::Latch, &Arc::from(name));
        Ok(Self {
            client,
            path: Arc::from(path),
            initial,
            probe,
        })
    }

    /// The latch's ZooKeeper path.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.count_down_latch("a", 1)?.path(), "/ferrisson/latches/a");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.client.inner
    }

    /// Creates the node with the initial count if it is missing.
    async fn create(&self, zk: &zookeeper_client::Client) -> Result<()> {
        let data = self.initial.to_string();
        loop {
            match zk
                .create(
                    &self.path,
                    data.as_bytes(),
                    &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                )
                .await
            {
                Ok(_) | Err(ZkE::NodeExists) => return Ok(()),
                Err(ZkE::NoNode) => {
                    let parent = self.path.rsplit_once('/').map_or("/", |(p, _)| p);
                    match zk
                        .mkdir(parent, &CreateMode::Container.with_acls(Acls::anyone_all()))
                        .await
                    {
                        Ok(()) | Err(ZkE::NodeExists) => {}
                        Err(e) => return Err(zk_err("create", parent, e)),
                    }
                }
                Err(e) if connection_broke(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(zk_err("create", &self.path, e)),
            }
        }
    }

    /// The count and the node's version, creating the node if missing.
    async fn read(&self, zk: &zookeeper_client::Client) -> Result<(u64, i32)> {
        loop {
            match zk.get_data(&self.path).await {
                Ok((data, stat)) => return Ok((parse_count(&self.path, &data)?, stat.version)),
                Err(ZkE::NoNode) => self.create(zk).await?,
                Err(e) if connection_broke(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(zk_err("read", &self.path, e)),
            }
        }
    }

    async fn wait_open(&self, zk: &zookeeper_client::Client) -> Result<Option<()>> {
        loop {
            match zk.get_and_watch_data(&self.path).await {
                Ok((data, _, watcher)) => {
                    if parse_count(&self.path, &data)? == 0 {
                        return Ok(Some(()));
                    }
                    watcher.changed().await;
                }
                Err(ZkE::NoNode) => self.create(zk).await?,
                Err(e) if connection_broke(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(zk_err("watch", &self.path, e)),
            }
        }
    }
}

fn zk_err(op: &'static str, path: &str, e: ZkE) -> Error {
    zk(op, path, e)
}

/// The count a latch node holds.
fn parse_count(path: &str, data: &[u8]) -> Result<u64> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| {
            Error::Protocol(format!(
                "latch node {:?} does not hold a count",
                path.escape_debug().to_string()
            ))
        })
}

impl DistributedLatch for Latch {
    fn name(&self) -> &str {
        &self.probe.name
    }

    async fn count_down(&self) -> Result<u64> {
        let zk = self.inner().live_zk().await;
        loop {
            let (count, version) = self.read(&zk).await?;
            if count == 0 {
                return Ok(0);
            }
            let left = count - 1;
            match zk
                .set_data(&self.path, left.to_string().as_bytes(), Some(version))
                .await
            {
                Ok(_) => return Ok(left),
                // Another client counted down first (or the node was recreated).
                Err(ZkE::BadVersion | ZkE::NoNode) => {}
                Err(e) => return Err(zk_err("count down", &self.path, e)),
            }
        }
    }

    async fn count(&self) -> Result<u64> {
        let zk = self.inner().live_zk().await;
        self.read(&zk).await.map(|(count, _)| count)
    }

    async fn wait(&self) -> Result<()> {
        let zk = self.inner().live_zk().await;
        observe_acquire(&self.probe, None, self.wait_open(&zk))
            .await?
            .ok_or_else(|| Error::wait_ended(&self.probe.name))
    }

    async fn wait_timeout(&self, wait: Duration) -> Result<Option<()>> {
        let zk = self.inner().live_zk().await;
        let bounded = async {
            match tokio::time::timeout(wait, self.wait_open(&zk)).await {
                Ok(open) => open,
                Err(_) => Ok(None),
            }
        };
        observe_acquire(&self.probe, Some(wait), bounded).await
    }
}
