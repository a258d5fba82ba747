//! What every server holds of a Redlock, read without changing it; and the force-unlock.

use std::time::Duration;

use super::Redlock;
use super::fanout::answers;
use crate::api::error::Result;
use crate::backend::ids::OwnerId;
use crate::backend::scripts::simple::{RedlockForceRelease, SimpleInspect};

impl Redlock {
    /// Reads, without changing anything, who holds the lock on each server and for how
    /// long. Every server is asked at once, each bounded by the per-node timeout.
    ///
    /// # Errors
    ///
    /// None so far: an unreachable server shows as `reachable: false`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// let info = redlock.inspect().await?;
    /// assert_eq!(info.holder, Some(guard.owner()));
    /// for node in &info.nodes {
    ///     println!("{}: {:?} for {:?}", node.url, node.holder, node.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<RedlockInfo> {
        let replies = self
            .on_every_node(|node| SimpleInspect {
                key: node.keys.main(),
            })
            .await;
        let nodes: Vec<RedlockNodeInfo> = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| {
                let (holder, ttl, reachable) = match reply {
                    Ok((holder, pttl)) => (
                        holder.and_then(|value| value.parse().ok()),
                        u64::try_from(pttl).ok().map(Duration::from_millis),
                        true,
                    ),
                    Err(_) => (None, None, false),
                };
                RedlockNodeInfo {
                    url: node.client.inner.redacted_url.clone(),
                    key: node.keys.main().to_owned(),
                    reachable,
                    holder,
                    ttl,
                }
            })
            .collect();
        let quorum = self.quorum();
        let holder = nodes
            .iter()
            .filter_map(|n| n.holder)
            .find(|owner| nodes.iter().filter(|n| n.holder == Some(*owner)).count() >= quorum);
        Ok(RedlockInfo {
            name: self.name.to_string(),
            holder,
            nodes,
        })
    }

    /// Deletes the lock's key on every server, whoever holds it. The holder's guard
    /// learns of it at its next extension. Returns whether a key was deleted anywhere.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) or [`RedisStoreError::NoQuorum`](crate::RedisStoreError::NoQuorum) when fewer than a majority of the servers
    /// answered (keys on the others expire after their TTL).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// if redlock.force_unlock().await? {
    ///     eprintln!("removed a stuck lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let replies = self
            .on_every_node(|node| RedlockForceRelease {
                key: node.keys.main(),
                channel: node.keys.channel(),
            })
            .await;
        let (answers, first_error) = answers(replies);
        if answers.len() < self.quorum() {
            return Err(first_error.unwrap_or_else(|| self.no_quorum(answers.len())));
        }
        Ok(answers.contains(&true))
    }
}

/// What [`Redlock::inspect`] found: the lock as every server sees it.
///
/// ```no_run
/// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
/// let info = redlock.inspect().await?;
/// let reachable = info.nodes.iter().filter(|n| n.reachable).count();
/// println!("{}: {reachable} of {} servers answer", info.name, info.nodes.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockInfo {
    /// The lock's name.
    pub name: String,
    /// The owner whose key a majority of the servers hold, if any: the current holder
    /// (see [`RedlockGuard::owner`](super::RedlockGuard::owner)).
    pub holder: Option<OwnerId>,
    /// One entry per server, in the order of the clients given to [`Redlock::new`].
    pub nodes: Vec<RedlockNodeInfo>,
}

/// One server's view of a [`Redlock`], from [`Redlock::inspect`].
///
/// ```no_run
/// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
/// for node in redlock.inspect().await?.nodes {
///     println!("{} {}: {:?} for {:?}", node.url, node.key, node.holder, node.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockNodeInfo {
    /// The server's URL, password redacted.
    pub url: String,
    /// The lock's key on that server (with the client's namespace).
    pub key: String,
    /// False when the server did not answer within the per-node timeout.
    pub reachable: bool,
    /// The owner whose key is stored there, if the key exists (and holds an owner id).
    pub holder: Option<OwnerId>,
    /// The key's remaining time to live, if the key exists.
    pub ttl: Option<Duration>,
}
