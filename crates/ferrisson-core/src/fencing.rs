//! Fencing tokens, and what a fenced write did.

use std::fmt;

/// A number that grows with every new holder of a lock.
///
/// Each acquisition by a new owner returns a token strictly greater than every earlier one
/// for the same lock name; re-entry returns the same token. Pass it with every write to
/// the protected resource and let the resource refuse a token lower than the highest it
/// has seen: a holder that was paused past its lease then cannot overwrite the work of
/// the next holder. Each store ships such a check for a value it keeps (on Redis,
/// `Client::fenced_set`); in SQL the same check reads
///
/// ```sql
/// UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
/// ```
///
/// and a write that touched no row was refused.
///
/// Where a token comes from depends on the store (the capability table says it per
/// store): on Redis the server's clock with a high-water mark, a sequence in a
/// database, ZooKeeper's transaction id, etcd's create revision. Tokens are not
/// consecutive, and tokens of different locks are not comparable.
///
/// ```
/// use ferrisson_core::FencingToken;
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
