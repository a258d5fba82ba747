//! How long a lock stays held without its holder: renewed, or fixed.

use std::time::Duration;

use crate::error::{Error, Result};

/// How a lock's expiry is managed while it is held.
///
/// ```
/// use std::time::Duration;
/// use ferrisson_core::Lease;
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
    /// How long one grant or renewal lasts: `watchdog_lease` (the client's setting) for
    /// [`Lease::Watchdog`], the fixed duration otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrisson_core::Lease;
    ///
    /// let watchdog = Duration::from_secs(30);
    /// assert_eq!(Lease::Watchdog.duration(watchdog), watchdog);
    /// assert_eq!(Lease::Fixed(Duration::from_secs(5)).duration(watchdog), Duration::from_secs(5));
    /// ```
    pub fn duration(self, watchdog_lease: Duration) -> Duration {
        match self {
            Self::Watchdog => watchdog_lease,
            Self::Fixed(d) => d,
        }
    }

    /// The lease itself when a store can keep it: a fixed lease from 1 ms to a year.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease outside that range.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrisson_core::Lease;
    ///
    /// assert!(Lease::Fixed(Duration::ZERO).validate().is_err());
    /// assert!(Lease::Watchdog.validate().is_ok());
    /// ```
    pub fn validate(self) -> Result<Self> {
        if let Self::Fixed(d) = self {
            validate_lease(d)?;
        }
        Ok(self)
    }
}

/// Checks a lease duration: at least one millisecond (the finest expiry any store keeps)
/// and at most a year.
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the rule.
///
/// ```
/// use std::time::Duration;
///
/// assert!(ferrisson_core::validate_lease(Duration::from_millis(1)).is_ok());
/// assert!(ferrisson_core::validate_lease(Duration::from_micros(999)).is_err());
/// ```
pub fn validate_lease(lease: Duration) -> Result<()> {
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
