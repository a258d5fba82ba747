//! Metrics and spans, from the contract's shared pieces (`ferrisson_core::observe`),
//! under the paths the Redis code uses.

pub use ferrisson_core::observe::metrics;
pub(crate) use ferrisson_core::observe::{acquire, hold, probe};
