//! Work a `Drop` needs but cannot await, from the contract's shared pieces.

pub(crate) use ferrisson_core::cleanup::spawn_cleanup;
