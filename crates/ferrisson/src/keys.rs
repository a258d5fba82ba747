//! Key and channel names of every primitive.
//!
//! All keys of one primitive share one hash tag (`{name}`), so one script may touch them
//! all and the same layout runs on Redis Cluster.

use crate::error::{Error, Result};

/// Longest accepted primitive name, in bytes (1 KiB).
pub const MAX_NAME_LEN: usize = 1024;

/// The Redis names that belong to one primitive called `name` in one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    base: String,
}

impl Keys {
    /// Checks `name` and builds the `{namespace}{name}` base.
    pub(crate) fn new(namespace: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        Ok(Self {
            base: format!("{namespace}{{{name}}}"),
        })
    }

    /// The primitive's main key (the lock hash, the semaphore counter, ...).
    pub(crate) fn main(&self) -> &str {
        &self.base
    }

    /// A companion key in the same hash slot: `{name}:suffix`.
    pub(crate) fn with_suffix(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.base)
    }

    /// The fencing counter of a lock: never expires, so tokens never go back.
    pub(crate) fn fence(&self) -> String {
        self.with_suffix("fence")
    }

    /// The channel on which releases are published.
    pub(crate) fn channel(&self) -> String {
        self.with_suffix("released")
    }
}

/// Rejects names that are empty or longer than [`MAX_NAME_LEN`] bytes.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "name is {} bytes long, the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Keys::new("app:", "orders:42").expect("valid");
        assert_eq!(keys.main(), "app:{orders:42}");
        assert_eq!(keys.fence(), "app:{orders:42}:fence");
        assert_eq!(keys.channel(), "app:{orders:42}:released");
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(matches!(Keys::new("", ""), Err(Error::InvalidArgument(_))));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            Keys::new("", &long),
            Err(Error::InvalidArgument(_))
        ));
        assert!(Keys::new("", &"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
