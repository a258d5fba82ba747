//! The mechanics every Redis primitive shares, written once: the wait for a release (and
//! for the locks whose release wakes one waiting client, the registration of that
//! client), one attempt of a reentrant lock, the guard over a hold, releasing with
//! retries, undoing what a cancelled acquire left behind, work a `Drop` hands to a
//! spawned task.

pub(crate) mod cleanup;
pub(crate) mod guard;
pub(crate) mod reentrant;
pub(crate) mod release;
pub(crate) mod single;
pub(crate) mod undo;
pub(crate) mod wait;
pub(crate) mod wake;
