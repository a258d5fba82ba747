//! The ids ferrisson writes to Redis (owner, permit and release ids, each random and sent
//! as hex formatted on the stack), and the task that may re-enter a lock.

use std::fmt;
use std::str::FromStr;

use crate::api::error::Error;

/// The identity under which a lock is held in Redis.
///
/// Every new hold gets a fresh random id; re-entry inside the same tokio task reuses it
/// transparently. Pass an id explicitly (see [`Lock::with_owner`](crate::Lock::with_owner))
/// to share one hold between tasks or processes: whoever presents the same id is the same
/// owner and re-enters. The text form is 32 lowercase hex digits.
///
/// ```
/// use ferrisson_redis::OwnerId;
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

/// Sent as its 32 hex digits, formatted on the stack: an owner id goes with every acquire,
/// release and renewal.
impl redis::ToRedisArgs for OwnerId {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut hex = [0u8; 32];
        write_hex(self.0, &mut hex);
        out.write_arg(&hex);
    }
}

/// Writes the low `out.len()` nibbles of `value` as lowercase hex digits, most
/// significant first (as `{:0Nx}` would).
pub(crate) fn write_hex(value: u128, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut rest = value;
    for byte in out.iter_mut().rev() {
        *byte = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
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

/// The id of one permit of an [`ExpirableSemaphore`](crate::ExpirableSemaphore): 32 lowercase hex digits.
///
/// Hand it to another task or process to let it release the permit or extend its lease.
///
/// ```
/// use ferrisson_redis::PermitId;
///
/// let id: PermitId = "0123456789abcdef0123456789abcdef".parse()?;
/// assert_eq!(id.to_string(), "0123456789abcdef0123456789abcdef");
/// assert!("xyz".parse::<PermitId>().is_err());
/// # Ok::<(), ferrisson_redis::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PermitId(u128);

impl PermitId {
    pub(crate) fn random() -> Self {
        Self(rand::random())
    }

    /// The same 128 bits as an owner id: a held permit is renewed and recorded like a
    /// hold whose owner is the permit (both travel as the same 32 hex digits).
    pub(crate) fn as_owner(self) -> OwnerId {
        OwnerId(self.0)
    }
}

/// Sent as its 32 hex digits, formatted on the stack.
impl redis::ToRedisArgs for PermitId {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut hex = [0u8; 32];
        write_hex(self.0, &mut hex);
        out.write_arg(&hex);
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid(format!(
                "permit id must be 32 hex digits, got {} characters",
                s.len()
            )));
        }
        u128::from_str_radix(s, 16)
            .map(Self)
            .map_err(|e| Error::invalid(format!("permit id: {e}")))
    }
}

/// The id one release carries (random), so that a retry is recognised; sent as 16 hex
/// digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReleaseId(u64);

impl ReleaseId {
    pub(crate) fn random() -> Self {
        Self(rand::random())
    }
}

impl redis::ToRedisArgs for ReleaseId {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut hex = [0u8; 16];
        write_hex(u128::from(self.0), &mut hex);
        out.write_arg(&hex);
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

#[cfg(test)]
mod tests {
    use super::{OwnerId, write_hex};

    #[test]
    fn hex_on_the_stack_matches_display() {
        for _ in 0..100 {
            let owner = OwnerId::random();
            let mut hex = [0u8; 32];
            write_hex(owner.0, &mut hex);
            assert_eq!(
                std::str::from_utf8(&hex).ok(),
                Some(owner.to_string().as_str())
            );
        }
        let mut short = [0u8; 16];
        write_hex(0xab, &mut short);
        assert_eq!(&short, b"00000000000000ab");
    }
}
