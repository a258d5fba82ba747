//! Fencing tokens and the storage-side check that makes them useful.

use std::fmt;

/// A number that grows with every new holder of a lock.
///
/// Each acquisition by a new owner returns a token strictly greater than every earlier one
/// for the same lock name; re-entry returns the same token. Pass it with every write to
/// the protected resource and let the resource refuse a token lower than the highest it
/// has seen: a holder that was paused past its lease then cannot overwrite the work of
/// the next holder. [`Client::fenced_set`](crate::Client::fenced_set) is such a check
/// for a value in Redis; in SQL the same check reads
///
/// ```sql
/// UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
/// ```
///
/// and a write that touched no row was refused.
///
/// Tokens come from a counter on the lock's Redis node. They stay monotonic as long as
/// that counter survives: a failover to a replica that had not received the latest
/// increments, or a restart without persistence, can hand out a token again.
///
/// ```
/// use ferrisson::FencingToken;
///
/// let older = FencingToken::new(7);
/// let newer = FencingToken::new(8);
/// assert!(newer > older);
/// assert_eq!(newer.get(), 8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a token value (for tokens that travelled through a database or a message).
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum FencedWrite {
    /// The write was stored with this token.
    Accepted,
    /// The write was refused: a writer with a newer token has written before.
    Refused {
        /// The highest token the resource has accepted.
        highest: FencingToken,
    },
}

impl FencedWrite {
    /// True when the write was stored.
    pub fn is_accepted(self) -> bool {
        matches!(self, Self::Accepted)
    }
}

impl crate::Client {
    /// Stores `value` under `resource` unless a writer with a newer fencing token has
    /// stored before (equal tokens are accepted: the same holder writing again).
    ///
    /// The resource is a hash `{value, fence}` under the namespaced key `resource`.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let guard = client.lock("ledger")?.lock().await?;
    /// let write = client.fenced_set("ledger:balance", b"100", guard.fencing_token()).await?;
    /// assert!(write.is_accepted());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid resource
    /// name, [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn fenced_set(
        &self,
        resource: &str,
        value: &[u8],
        token: FencingToken,
    ) -> crate::Result<FencedWrite> {
        crate::keys::validate_name(resource)?;
        let mut conn = self.conn();
        let reply: Vec<u64> = crate::scripts::SCRIPTS
            .fenced_set
            .key(self.namespaced(resource))
            .arg(value)
            .arg(token.get())
            .invoke_async(&mut conn)
            .await?;
        match reply.as_slice() {
            [1, _] => Ok(FencedWrite::Accepted),
            [0, highest] => Ok(FencedWrite::Refused {
                highest: FencingToken::new(*highest),
            }),
            other => Err(crate::Error::Protocol(format!(
                "fenced_set returned {other:?}"
            ))),
        }
    }

    /// Reads a value stored by [`Client::fenced_set`](crate::Client::fenced_set) and the
    /// token that wrote it; `None` if nothing was stored.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid resource
    /// name, [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn fenced_get(
        &self,
        resource: &str,
    ) -> crate::Result<Option<(Vec<u8>, FencingToken)>> {
        use redis::AsyncCommands;
        crate::keys::validate_name(resource)?;
        let mut conn = self.conn();
        let (value, fence): (Option<Vec<u8>>, Option<u64>) = conn
            .hmget(self.namespaced(resource), &["value", "fence"])
            .await?;
        Ok(value.zip(fence.map(FencingToken::new)))
    }
}
