//! The double barrier: Curator's `DistributedDoubleBarrier` layout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::{Error, Result};
use zookeeper_client::{Acls, CreateMode, Error as ZkE};

use crate::client::{Client, Inner};
use crate::error::{connection_broke, zk};
use crate::path::{BARRIERS_ROOT, path_of};
use crate::queue::new_guid;

/// The node every member's `enter` waits for: created by the member that finds the
/// barrier full (Curator's `ready`).
const READY: &str = "ready";

/// A double barrier for `members` members, laid out as Curator's
/// `DistributedDoubleBarrier` on the same path, so Java and Rust members count
/// together: each member that enters creates an ephemeral node named by a random UUID
/// under the barrier's path; the member whose entry makes the count reach `members`
/// creates the `ready` node, which every member waiting in
/// [`enter`](DoubleBarrier::enter) watches. [`BarrierMember::leave`] deletes the member's
/// node and waits until every member's node is gone (the lowest-named member waits for
/// the others before deleting its own, as Curator's does), and the last one out deletes
/// `ready` again.
///
/// A member's node is ephemeral: a member whose session ends leaves (and is no longer
/// counted by those entering).
///
/// Names that start with `/` are paths; others live under `/ferrisson/barriers/`.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
/// let barrier = client.double_barrier("nightly-batch", 3)?;
/// // In each of the three workers:
/// let member = barrier.enter().await?; // returns once all three are in
/// // ... the work all three start together ...
/// member.leave().await?; // returns once all three are out
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct DoubleBarrier {
    client: Client,
    path: Arc<str>,
    members: u32,
}

impl fmt::Debug for DoubleBarrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DoubleBarrier")
            .field("path", &self.path)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

impl DoubleBarrier {
    pub(crate) fn new(client: Client, name: &str, members: u32) -> Result<Self> {
        if members == 0 {
            return Err(Error::invalid("a double barrier needs at least one member"));
        }
        let path = path_of(BARRIERS_ROOT, name)?;
        Ok(Self {
            client,
            path: Arc::from(path),
            members,
        })
    }

    /// The barrier's ZooKeeper path: the members' nodes and `ready` are its children.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.double_barrier("b", 2)?.path(), "/ferrisson/barriers/b");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many members the barrier waits for.
    pub fn members(&self) -> u32 {
        self.members
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.client.inner
    }

    /// Enters: creates this member's node and waits until `members` members are in.
    ///
    /// # Errors
    ///
    /// A store error (the session expired, the path is refused...).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future deletes this member's node in the background.
    pub async fn enter(&self) -> Result<BarrierMember> {
        let zk = self.inner().live_zk().await;
        let mut entry = Entry::new(Arc::clone(self.inner()), zk, &self.path);
        self.wait_full(&mut entry).await?;
        entry.into_member(self.clone())
    }

    /// As [`enter`](DoubleBarrier::enter), waiting at most `wait`: `None` when the
    /// barrier did not fill in time (this member's node is then deleted: it did not
    /// enter).
    ///
    /// # Errors
    ///
    /// As [`enter`](DoubleBarrier::enter).
    ///
    /// # Cancel safety
    ///
    /// As [`enter`](DoubleBarrier::enter).
    pub async fn enter_timeout(&self, wait: Duration) -> Result<Option<BarrierMember>> {
        let zk = self.inner().live_zk().await;
        let mut entry = Entry::new(Arc::clone(self.inner()), zk, &self.path);
        match tokio::time::timeout(wait, self.wait_full(&mut entry)).await {
            Ok(full) => {
                full?;
                entry.into_member(self.clone()).map(Some)
            }
            Err(_) => {
                entry.leave().await?;
                Ok(None)
            }
        }
    }

    /// Curator's enter: watch `ready` first (so that its creation cannot be missed),
    /// create this member's node, count the members, create `ready` when they are
    /// enough, else wait for it.
    async fn wait_full(&self, entry: &mut Entry) -> Result<()> {
        let ready = format!("{}/{READY}", self.path);
        loop {
            let (stat, watcher) = retry(|| entry.zk.check_and_watch_stat(&ready))
                .await
                .map_err(|e| zk("watch", &ready, e))?;
            if entry.node.is_none() {
                entry.create().await?;
            }
            if stat.is_some() {
                return Ok(());
            }
            let members = retry(|| entry.zk.list_children(&self.path))
                .await
                .map_err(|e| zk("list", &self.path, e))?
                .into_iter()
                .filter(|c| c != READY)
                .count();
            if members >= self.members as usize {
                match retry(|| entry.zk.create(&ready, &[], &persistent())).await {
                    Ok(_) | Err(ZkE::NodeExists) => return Ok(()),
                    Err(e) => return Err(zk("create", &ready, e)),
                }
            }
            let event = watcher.changed().await;
            if event.event_type == zookeeper_client::EventType::Session {
                // The session ended: this member's node went with it.
                return Err(zk("wait", &ready, ZkE::SessionExpired));
            }
        }
    }
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Repeats a read or an idempotent create on a lost connection.
async fn retry<T, F, Fut>(mut call: F) -> std::result::Result<T, ZkE>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, ZkE>>,
{
    loop {
        match call().await {
            Err(e) if connection_broke(&e) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => return other,
        }
    }
}

/// A member's node while it enters; deleted on drop unless it entered.
struct Entry {
    inner: Arc<Inner>,
    zk: zookeeper_client::Client,
    dir: String,
    name: String,
    node: Option<String>,
}

impl Entry {
    fn new(inner: Arc<Inner>, zk: zookeeper_client::Client, dir: &str) -> Self {
        Self {
            inner,
            zk,
            dir: dir.to_owned(),
            name: new_guid(),
            node: None,
        }
    }

    /// Creates this member's ephemeral node (and the barrier's path, as containers).
    async fn create(&mut self) -> Result<()> {
        let node = format!("{}/{}", self.dir, self.name);
        let options = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        loop {
            // Named by its guid, the node is this member's even when a reply was lost.
            match self.zk.create(&node, &[], &options).await {
                Ok(_) | Err(ZkE::NodeExists) => break,
                Err(ZkE::NoNode) => {
                    let containers = CreateMode::Container.with_acls(Acls::anyone_all());
                    match retry(|| self.zk.mkdir(&self.dir, &containers)).await {
                        Ok(()) | Err(ZkE::NodeExists) => {}
                        Err(e) => return Err(zk("create", &self.dir, e)),
                    }
                }
                Err(e) if connection_broke(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(zk("create", &node, e)),
            }
        }
        self.node = Some(node);
        Ok(())
    }

    async fn leave(mut self) -> Result<()> {
        match self.node.take() {
            Some(node) => Inner::delete_node(&self.zk, &node, self.inner.session_timeout)
                .await
                .map(drop),
            None => Ok(()),
        }
    }

    fn into_member(mut self, barrier: DoubleBarrier) -> Result<BarrierMember> {
        let node = self
            .node
            .take()
            .ok_or_else(|| Error::Protocol("a barrier member without a node".into()))?;
        Ok(BarrierMember {
            barrier,
            zk: self.zk.clone(),
            name: std::mem::take(&mut self.name),
            node,
        })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let Some(node) = self.node.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from: the node ends with the session.
            return;
        };
        let (zk, timeout) = (self.zk.clone(), self.inner.session_timeout);
        runtime.spawn(async move {
            if let Err(e) = Inner::delete_node(&zk, &node, timeout).await {
                tracing::debug!(error = %e, "a cancelled barrier entry's node could not be deleted; it ends with the session");
            }
        });
    }
}

/// A member inside a [`DoubleBarrier`]: [`leave`](BarrierMember::leave) takes it out.
/// Dropping it without leaving leaves the node until the session ends.
#[must_use = "a member stays in the barrier until it leaves or its session ends"]
pub struct BarrierMember {
    barrier: DoubleBarrier,
    zk: zookeeper_client::Client,
    /// The node's name under the barrier's path.
    name: String,
    node: String,
}

impl fmt::Debug for BarrierMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierMember")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl BarrierMember {
    /// This member's node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Leaves: deletes this member's node and waits until every member's node is gone.
    /// Curator's order: the member with the lowest node name waits for the others
    /// (watching the highest), every other member deletes its node and waits for the
    /// lowest. The last one out deletes `ready`.
    ///
    /// # Errors
    ///
    /// A store error; [`Error::Protocol`] when this member's node vanished before it
    /// left (its session ended).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave this member's node in place (until the session
    /// ends) or deleted.
    pub async fn leave(self) -> Result<()> {
        let dir = &*self.barrier.path;
        let mut ours_exists = true;
        loop {
            let mut members: Vec<String> = match retry(|| self.zk.list_children(dir)).await {
                Ok(children) => children,
                Err(ZkE::NoNode) => Vec::new(),
                Err(e) => return Err(zk("list", dir, e)),
            };
            members.retain(|c| c != READY);
            members.sort();
            let ours = members.iter().position(|m| *m == self.name);
            if ours.is_none() && ours_exists {
                return Err(Error::Protocol(format!(
                    "barrier member {} vanished before it left (its session ended)",
                    self.node
                )));
            }
            let (Some(lowest), Some(highest)) = (members.first(), members.last()) else {
                break;
            };
            let awaited = if ours == Some(0) {
                if members.len() == 1 {
                    // The last one in: out, and done.
                    self.delete_ours().await?;
                    ours_exists = false;
                    continue;
                }
                format!("{dir}/{highest}")
            } else {
                let lowest = format!("{dir}/{lowest}");
                if ours_exists {
                    self.delete_ours().await?;
                    ours_exists = false;
                }
                lowest
            };
            match retry(|| self.zk.check_and_watch_stat(&awaited)).await {
                Ok((Some(_), watcher)) => {
                    let event = watcher.changed().await;
                    if event.event_type == zookeeper_client::EventType::Session {
                        return Err(zk("wait", &awaited, ZkE::SessionExpired));
                    }
                }
                Ok((None, _)) => {}
                Err(e) => return Err(zk("watch", &awaited, e)),
            }
        }
        let ready = format!("{dir}/{READY}");
        match retry(|| self.zk.delete(&ready, None)).await {
            Ok(()) | Err(ZkE::NoNode) => Ok(()),
            Err(e) => Err(zk("delete", &ready, e)),
        }
    }

    async fn delete_ours(&self) -> Result<()> {
        let timeout = self.barrier.inner().session_timeout;
        Inner::delete_node(&self.zk, &self.node, timeout)
            .await
            .map(drop)
    }
}
