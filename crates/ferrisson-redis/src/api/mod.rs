//! What this crate takes from the store-neutral contract (`ferrisson-core`), under the
//! paths the Redis code uses, and the Redis store's own errors.

pub(crate) mod error;

pub(crate) mod fencing {
    pub(crate) use ferrisson_core::{FencedWrite, FencingToken};
}

pub(crate) mod lease {
    use std::time::Duration;

    pub(crate) use ferrisson_core::{Lease, validate_lease};

    /// Whole milliseconds for `PEXPIRE` and friends (at least 1).
    pub(crate) fn millis(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
    }
}
