//! How long a lock stays held without its holder: renewed, or fixed.

use std::time::Duration;

use crate::api::error::{Error, Result};

/// How a lock's expiry is managed while it is held.
///
/// ```
/// use std::time::Duration;
/// use ferrisson_redis::Lease;
///
/// assert_eq!(Lease::default(), Lease::Watchdog);
/// let fixed = Lease::Fixed(Duration::from_secs(10));
/// assert_ne!(fixed, Lease::Watchdog);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lease {
    /// The client's watchdog renews the lock every lease/3 while the guard lives (the
    /// watchdog lease is set on the client, 30 s by default). When the holder dies the
    /// lock expires at most one watchdog lease later.
    #[default]
    Watchdog,
    /// The lock expires after this long, whatever the holder is doing. No renewal.
    Fixed(Duration),
}

impl Lease {
    /// The lease to write to Redis for this acquisition.
    pub(crate) fn duration(self, watchdog_lease: Duration) -> Duration {
        match self {
            Self::Watchdog => watchdog_lease,
            Self::Fixed(d) => d,
        }
    }

    pub(crate) fn validate(self) -> Result<Self> {
        if let Self::Fixed(d) = self {
            validate_lease(d)?;
        }
        Ok(self)
    }
}

/// A lease must be at least one millisecond (Redis expiry granularity).
pub(crate) fn validate_lease(lease: Duration) -> Result<()> {
    if lease < Duration::from_millis(1) {
        return Err(Error::invalid(format!(
            "lease must be at least 1 ms, got {lease:?}"
        )));
    }
    if lease > Duration::from_secs(365 * 24 * 3600) {
        return Err(Error::invalid(format!(
            "lease must be at most a year, got {lease:?}"
        )));
    }
    Ok(())
}

/// Whole milliseconds for `PEXPIRE` and friends (at least 1).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
