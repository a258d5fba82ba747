//! The traits every store implements: the lock and its guard, and the other families.

pub(crate) mod families;
pub(crate) mod lock;
