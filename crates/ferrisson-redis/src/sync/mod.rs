//! The synchronizers: semaphores, the countdown latch, leader election and the rate
//! limiter.

pub(crate) mod election;
pub(crate) mod expirable_semaphore;
pub(crate) mod latch;
pub(crate) mod rate_limiter;
pub(crate) mod semaphore;
