//! A write to etcd that only a current holder can make: the transaction Jepsen found safe
//! where the lock alone is not.

use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use ferrisson_core::{FencingToken, Result};

use crate::client::Client;
use crate::error::store;
use crate::lock::LockGuard;

/// What a fenced put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum FencedPut {
    /// The value was written at this revision.
    Accepted {
        /// The revision of the write.
        revision: i64,
    },
    /// The value was not written: the guard's hold had ended (its key deleted, or its
    /// lease gone).
    Refused {
        /// The token (create revision) of the lock's holder now, if anyone holds it.
        holder: Option<FencingToken>,
    },
}

impl FencedPut {
    /// True when the value was written.
    ///
    /// ```
    /// assert!(ferrisson_etcd::FencedPut::Accepted { revision: 7 }.is_accepted());
    /// ```
    pub fn is_accepted(self) -> bool {
        matches!(self, Self::Accepted { .. })
    }
}

impl Client {
    /// Writes `value` at `key` only if `guard`'s hold is still the lock's: one
    /// transaction whose condition is the lock key's create revision
    /// ([`LockGuard::fence`]). A holder paused past its lease (a GC pause, a stopped VM)
    /// whose key was deleted, or whose lease expired, is refused: the next holder's
    /// writes stand.
    ///
    /// Locks on etcd are not safe without this: Jepsen's analysis of etcd 3.4.3 lost
    /// lock-protected updates with a 2 s TTL, and found writes guarded by the lock key's
    /// revision safe.
    ///
    /// `key` must not be under the lock's prefix (`NAME/`): a key there would queue as a
    /// contender for the lock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](ferrisson_core::Error::InvalidArgument) for a key under
    /// the lock's prefix; a store error (the write may or may not have been made when
    /// [`Error::maybe_executed`](ferrisson_core::Error::maybe_executed) says so).
    ///
    /// # Cancel safety
    ///
    /// Dropped, the write may or may not have been made.
    ///
    /// ```no_run
    /// use ferrisson_core::DistributedLock;
    ///
    /// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let guard = client.lock("locks/accounts/42")?.lock().await?;
    /// // ... a long pause here could outlive the lease ...
    /// match client.fenced_put(&guard, "accounts/42/balance", "90").await? {
    ///     ferrisson_etcd::FencedPut::Accepted { revision } => println!("written at {revision}"),
    ///     ferrisson_etcd::FencedPut::Refused { holder } => println!("lost the lock to {holder:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_put(
        &self,
        guard: &LockGuard,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<FencedPut> {
        let prefix = guard.key_prefix();
        let key = key.into();
        if key.starts_with(prefix.as_bytes()) {
            return Err(ferrisson_core::Error::invalid(format!(
                "a fenced put's key must not be under the lock's prefix {prefix:?}: it would \
                 queue as a contender for the lock"
            )));
        }
        let txn = Txn::new()
            .when([guard.fence()])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(
                prefix,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                        .with_limit(1),
                ),
            )]);
        let answer = self.etcd().kv_client().txn(txn).await.map_err(store)?;
        if answer.succeeded() {
            let revision = answer
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision);
            return Ok(FencedPut::Accepted { revision });
        }
        let holder = answer.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(got) => got
                .kvs()
                .first()
                .map(|kv| FencingToken::new(u64::try_from(kv.create_revision()).unwrap_or(0))),
            _ => None,
        });
        Ok(FencedPut::Refused { holder })
    }
}
