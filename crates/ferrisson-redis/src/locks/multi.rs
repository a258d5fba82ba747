//! A [`MultiLock`] of Redis [`Lock`]s, inspected: each member's state at once.

use std::future::Future;

use futures_util::future::join_all;

use crate::api::error::Result;
use crate::locks::lock::{Lock, LockInfo};
use ferrisson_core::MultiLock;

/// Reads the members of a multi-lock of Redis [`Lock`]s without changing anything.
///
/// ```no_run
/// use ferrisson_redis::InspectMembers;
///
/// # async fn demo(multi: ferrisson_redis::MultiLock<ferrisson_redis::Lock>) -> ferrisson_redis::Result<()> {
/// for member in multi.inspect().await?.members {
///     println!("{}: held by {:?}, ttl {:?}", member.name, member.holder, member.ttl);
/// }
/// # Ok(()) }
/// ```
pub trait InspectMembers {
    /// Each member's [`LockInfo`], in member order; every member is read at once (one
    /// round trip per server).
    ///
    /// # Errors
    ///
    /// A store error when a member's server cannot be reached,
    /// [`Error::Protocol`](crate::Error::Protocol) when a member's key holds something
    /// other than a ferrisson lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn inspect(&self) -> impl Future<Output = Result<MultiLockInfo>> + Send;
}

impl InspectMembers for MultiLock<Lock> {
    async fn inspect(&self) -> Result<MultiLockInfo> {
        let members = join_all(self.locks().iter().map(Lock::inspect)).await;
        Ok(MultiLockInfo {
            members: members.into_iter().collect::<Result<_>>()?,
        })
    }
}

/// A snapshot of a [`MultiLock`] of Redis locks, from [`InspectMembers::inspect`]: each
/// member's [`LockInfo`] (its name included), in member order.
///
/// ```no_run
/// use ferrisson_redis::InspectMembers;
///
/// # async fn demo(multi: ferrisson_redis::MultiLock<ferrisson_redis::Lock>) -> ferrisson_redis::Result<()> {
/// let info = multi.inspect().await?;
/// let free = info.members.iter().filter(|member| member.holder.is_none()).count();
/// println!("{free} of {} members are free", info.members.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MultiLockInfo {
    /// Each member's state, in the order given to [`MultiLock::new`].
    pub members: Vec<LockInfo>,
}
