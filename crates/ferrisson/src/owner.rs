//! Who holds a lock: a random 128-bit owner id, and the task that may re-enter.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The identity under which a lock is held in Redis.
///
/// Every new hold gets a fresh random id; re-entry inside the same tokio task reuses it
/// transparently. Pass an id explicitly (see [`Lock::with_owner`](crate::Lock::with_owner))
/// to share one hold between tasks or processes: whoever presents the same id is the same
/// owner and re-enters. The text form is 32 lowercase hex digits.
///
/// ```
/// use ferrisson::OwnerId;
///
/// let owner = OwnerId::random();
/// let parsed: OwnerId = owner.to_string().parse().unwrap();
/// assert_eq!(owner, parsed);
/// assert!("not-hex".parse::<OwnerId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerId(u128);

impl OwnerId {
    /// A fresh random owner id (128 bits from the thread-local CSPRNG).
    pub fn random() -> Self {
        Self(rand::random())
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({self})")
    }
}

impl FromStr for OwnerId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid(format!(
                "owner id must be 32 hex digits, got {} characters",
                s.len()
            )));
        }
        u128::from_str_radix(s, 16)
            .map(Self)
            .map_err(|e| Error::invalid(format!("owner id: {e}")))
    }
}

/// The unit of transparent re-entry: the current tokio task, or the current thread when
/// running outside a task (inside `block_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TaskKey {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl TaskKey {
    pub(crate) fn current() -> Self {
        tokio::task::try_id().map_or_else(|| Self::Thread(std::thread::current().id()), Self::Task)
    }
}
