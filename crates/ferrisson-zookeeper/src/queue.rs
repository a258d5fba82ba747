//! The queue under every ZooKeeper lock and election: Curator's protected ephemeral
//! sequential nodes `_c_<guid>-<lock name><sequence>` under the lock's path, the lowest
//! sequence first, each contender watching only the node just ahead of its own.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::{Error, Result};
use zookeeper_client::{Acls, CreateMode, Error as ZkE};

use crate::client::Inner;
use crate::error::{connection_broke, zk};

/// Where a contender stands in its queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Position {
    /// Its node has the lowest sequence.
    First,
    /// The node just ahead of its own (a child name).
    Behind(String),
}

/// Curator's protection prefix for a node of the contender `guid`.
fn protected_prefix(guid: &str) -> String {
    format!("_c_{guid}-")
}

/// A random version-4 UUID in its usual text form (Curator's node guid).
pub(crate) fn new_guid() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = bytes.iter().fold(String::with_capacity(32), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The sequence of child `name` of a queue whose nodes are named after one of
/// `lock_names`: the digits after the last lock name in it (how Curator sorts, so that a
/// Java contender and ours agree on the order); `None` for a node that is not a
/// contender.
pub(crate) fn sequence_of(name: &str, lock_names: &[&str]) -> Option<u64> {
    lock_names.iter().find_map(|lock_name| {
        let at = name.rfind(lock_name)?;
        let digits = &name[at + lock_name.len()..];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    })
}

/// The contenders among `children`, lowest sequence first.
pub(crate) fn sorted_contenders(mut children: Vec<String>, lock_names: &[&str]) -> Vec<String> {
    children.retain(|c| sequence_of(c, lock_names).is_some());
    children.sort_by_key(|c| sequence_of(c, lock_names));
    children
}

/// How a contender's turn comes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Turn {
    /// When its node is the first of the queue (a lock, a writer, a candidate).
    First,
    /// When no node named after `writers` is ahead of its own (a reader; Curator's
    /// `InterProcessReadWriteLock`): it then watches the first such node.
    NoWriterAhead { writers: &'static str },
}

/// One contender's node in a queue; deleted on drop unless handed over
/// ([`Contender::into_node`]).
pub(crate) struct Contender {
    inner: Arc<Inner>,
    /// The session of the whole attempt: its node lives and dies with it.
    zk: zookeeper_client::Client,
    dir: String,
    lock_name: &'static str,
    /// Every lock name of the queue's nodes (readers and writers share one).
    lock_names: &'static [&'static str],
    turn: Turn,
    guid: String,
    /// The node's full path and its creation zxid, once created.
    node: Option<(String, i64)>,
    /// Set once a create was sent: a drop then cleans up.
    sent: bool,
}

impl Contender {
    pub(crate) fn new(
        inner: Arc<Inner>,
        zk: zookeeper_client::Client,
        dir: &str,
        lock_name: &'static str,
        lock_names: &'static [&'static str],
        turn: Turn,
    ) -> Self {
        Self {
            zk,
            inner,
            dir: dir.to_owned(),
            lock_name,
            lock_names,
            turn,
            guid: new_guid(),
            node: None,
            sent: false,
        }
    }

    /// Creates this contender's node, creating the lock's path (as container nodes)
    /// when missing, and finding its node by guid when a create's reply was lost.
    pub(crate) async fn enter(&mut self, data: &[u8]) -> Result<()> {
        let prefix = format!(
            "{}/{}{}",
            self.dir,
            protected_prefix(&self.guid),
            self.lock_name
        );
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        loop {
            self.sent = true;
            match self.zk.create(&prefix, data, &options).await {
                Ok((stat, sequence)) => {
                    self.node = Some((format!("{prefix}{sequence}"), stat.czxid));
                    return Ok(());
                }
                Err(ZkE::NoNode) => self.create_parents().await?,
                Err(e) if connection_broke(&e) => {
                    if let Some(found) = self.find_own().await? {
                        self.node = Some(found);
                        return Ok(());
                    }
                }
                Err(e) => return Err(zk("create", &prefix, e)),
            }
        }
    }

    /// Creates the lock's path and its missing ancestors as container nodes (the server
    /// removes them once empty, Curator's `creatingParentContainersIfNeeded`).
    async fn create_parents(&self) -> Result<()> {
        let options = CreateMode::Container.with_acls(Acls::anyone_all());
        let mut end = 0;
        while end < self.dir.len() {
            end = self.dir[end + 1..]
                .find('/')
                .map_or(self.dir.len(), |i| end + 1 + i);
            let path = &self.dir[..end];
            loop {
                match self.zk.create(path, &[], &options).await {
                    Ok(_) | Err(ZkE::NodeExists) => break,
                    Err(e) if connection_broke(&e) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => return Err(zk("create", path, e)),
                }
            }
        }
        Ok(())
    }

    /// This contender's node, looked up by its guid (after a lost reply).
    async fn find_own(&self) -> Result<Option<(String, i64)>> {
        let prefix = protected_prefix(&self.guid);
        let children = match list(&self.zk, &self.dir).await {
            Ok(children) => children,
            Err(ZkE::NoNode) => return Ok(None),
            Err(e) => return Err(zk("list", &self.dir, e)),
        };
        let Some(name) = children.into_iter().find(|c| c.starts_with(&prefix)) else {
            return Ok(None);
        };
        let path = format!("{}/{name}", self.dir);
        match self.zk.get_data(&path).await {
            Ok((_, stat)) => Ok(Some((path, stat.czxid))),
            Err(ZkE::NoNode) => Ok(None),
            Err(e) => Err(zk("read", &path, e)),
        }
    }

    fn node_name(&self) -> Result<&str> {
        let (path, _) = self
            .node
            .as_ref()
            .ok_or_else(|| Error::Protocol("a contender without a node".into()))?;
        Ok(path.rsplit('/').next().unwrap_or(path))
    }

    /// Where this contender stands now.
    ///
    /// # Errors
    ///
    /// A store error, `NoNode` when the node is no longer there (its session ended, or
    /// someone deleted it).
    pub(crate) async fn position(&self) -> Result<Position> {
        let own = self.node_name()?;
        let children = list(&self.zk, &self.dir)
            .await
            .map_err(|e| zk("list", &self.dir, e))?;
        let queue = sorted_contenders(children, self.lock_names);
        let at = queue.iter().position(|c| c == own);
        match (at, self.turn) {
            (Some(0), _) => Ok(Position::First),
            (Some(i), Turn::First) => Ok(Position::Behind(queue[i - 1].clone())),
            (Some(i), Turn::NoWriterAhead { writers }) => {
                match queue[..i].iter().find(|c| c.contains(writers)) {
                    None => Ok(Position::First),
                    Some(writer) => Ok(Position::Behind(writer.clone())),
                }
            }
            (None, _) => Err(zk(
                "wait in queue",
                &format!("{}/{own}", self.dir),
                ZkE::NoNode,
            )),
        }
    }

    /// Waits until the node `ahead` (a child name) is deleted or changed, or is gone.
    pub(crate) async fn wait_behind(&self, ahead: &str) -> Result<()> {
        let path = format!("{}/{ahead}", self.dir);
        loop {
            match self.zk.get_and_watch_data(&path).await {
                Ok((_, _, watcher)) => {
                    watcher.changed().await;
                    return Ok(());
                }
                Err(ZkE::NoNode) => return Ok(()),
                Err(e) if connection_broke(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(zk("watch", &path, e)),
            }
        }
    }

    /// The session this contender's node lives in.
    pub(crate) fn session(&self) -> zookeeper_client::Client {
        self.zk.clone()
    }

    /// Deletes this contender's node now.
    pub(crate) async fn leave(mut self) -> Result<()> {
        self.sent = false;
        match self.node.take() {
            Some((path, _)) => Inner::delete_node(&self.zk, &path, self.inner.session_timeout)
                .await
                .map(drop),
            None => Ok(()),
        }
    }

    /// The node's path, its creation zxid and its session, handed to a hold: no longer
    /// deleted on drop.
    pub(crate) fn into_node(mut self) -> Result<(String, i64, zookeeper_client::Client)> {
        self.sent = false;
        let (node, czxid) = self
            .node
            .take()
            .ok_or_else(|| Error::Protocol("a contender without a node".into()))?;
        Ok((node, czxid, self.zk.clone()))
    }
}

/// Lists `dir`'s children, retrying on a lost connection (reads are safe to repeat).
async fn list(zk: &zookeeper_client::Client, dir: &str) -> Result<Vec<String>, ZkE> {
    loop {
        match zk.list_children(dir).await {
            Err(e) if connection_broke(&e) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => return other,
        }
    }
}

impl Drop for Contender {
    /// A wait dropped mid-way (cancelled, timed out) deletes its node in the background:
    /// by path once known, else by its guid (the create may be in flight; the session
    /// orders the lookup after it).
    fn drop(&mut self) {
        if !self.sent {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from: the node ends with the session.
            return;
        };
        let zk = self.zk.clone();
        let timeout = self.inner.session_timeout;
        let node = self.node.take().map(|(path, _)| path);
        let dir = std::mem::take(&mut self.dir);
        let prefix = protected_prefix(&self.guid);
        runtime.spawn(async move {
            let node = match node {
                Some(node) => Some(node),
                None => list(&zk, &dir).await.ok().and_then(|children| {
                    children
                        .into_iter()
                        .find(|c| c.starts_with(&prefix))
                        .map(|c| format!("{dir}/{c}"))
                }),
            };
            if let Some(node) = node
                && let Err(e) = Inner::delete_node(&zk, &node, timeout).await
            {
                tracing::debug!(error = %e, "a cancelled waiter's node could not be deleted; it ends with the session");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contenders_sort_by_the_sequence_after_the_lock_name() {
        let children = vec![
            "_c_b-lock-0000000003".to_owned(),
            "_c_a-lock-0000000010".to_owned(),
            "lock-0000000001".to_owned(),
            "leases".to_owned(),
            "_c_c-lock-".to_owned(),
        ];
        assert_eq!(
            sorted_contenders(children, &["lock-"]),
            [
                "lock-0000000001",
                "_c_b-lock-0000000003",
                "_c_a-lock-0000000010"
            ]
        );
    }

    #[test]
    fn guids_look_like_curators() {
        let guid = new_guid();
        assert_eq!(guid.len(), 36);
        assert_eq!(guid.matches('-').count(), 4);
        assert_eq!(&guid[14..15], "4");
        assert_ne!(guid, new_guid());
    }
}
