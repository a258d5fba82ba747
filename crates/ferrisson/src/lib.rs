//! # ferrisson
//!
//! Distributed locks and synchronizers for async Rust (tokio).

pub use ferrisson_redis::*;
