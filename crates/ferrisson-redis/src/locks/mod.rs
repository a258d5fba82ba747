//! The locks: reentrant, simple, fair, read-write, multi-lock and Redlock.

pub(crate) mod fair;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod redlock;
pub(crate) mod rwlock;
pub(crate) mod simple;
