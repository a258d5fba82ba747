//! # ferrisson-etcd
//!
//! ferrisson's locks on etcd: etcd's own lock recipe (the `concurrency` package's
//! `Mutex` and `Election`), written client-side on the `etcd-client` crate, behind
//! ferrisson's store-neutral contract ([`DistributedLock`], [`Guard`], [`Fenced`],
//! [`DistributedElection`]).
//!
//! - **Compatible with `etcdctl lock NAME`** and Go services using `concurrency.Mutex`
//!   on the same name: the same keys (`NAME/<lease id in hex>`), the same queue (by
//!   create revision), the same wait (a watch on the deletion of the key just before the
//!   own). They and ferrisson exclude each other.
//! - **One key per acquisition**: a client's locks share its session lease, as a Go
//!   `Session` does, but two contenders of one client for one name never share a key
//!   (the second gets a lease of its own); unlock deletes only its own key (compared on
//!   its create revision), so a late release never deletes a newer hold.
//! - **Fencing token**: the key's create revision (etcd's cluster-wide revision).
//! - **Lost signal per lock**: a watch on the own key (deleted by hand, by a revoked or
//!   expired lease) and the lease's keep-alive (failing for a whole TTL).
//! - **Fenced writes** to etcd itself: [`Client::fenced_put`], or [`LockGuard::fence`]
//!   in your own transaction.
//!
//! ```no_run
//! use ferrisson_core::{DistributedLock, Fenced, Guard};
//!
//! # async fn run() -> ferrisson_core::Result<()> {
//! let client = ferrisson_etcd::Client::connect("etcd://127.0.0.1:2379").await?;
//! let guard = client.lock("invoices")?.lock().await?;
//! let written = client.fenced_put(&guard, "data/invoices/last", "2026-11").await?;
//! assert!(written.is_accepted());
//! println!("token {}", guard.fencing_token());
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! What etcd cannot promise (Jepsen's analysis of etcd 3.4.3, etcd's issues): a holder
//! paused past its lease acts late (fence its writes); a leader change resets every
//! lease's remaining TTL (lease checkpointing is off by default in 3.4), so a dead
//! holder's lock can outlive a failover by a whole TTL.

mod client;
mod contender;
mod election;
mod error;
mod fence;
mod held;
mod latch;
mod lease;
mod lock;
mod queue;
mod rwlock;
mod semaphore;
mod url;

pub use client::{
    Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_WATCHDOG_LEASE, MAX_NAME_LEN,
};
pub use election::{Election, Leader, Leadership};
pub use error::EtcdError;
pub use fence::FencedPut;
pub use latch::Latch;
pub use lock::{Lock, LockGuard};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};

pub use ferrisson_core::{
    DistributedElection, DistributedLatch, DistributedLock, DistributedRwLock,
    DistributedSemaphore, Error, Fenced, FencingToken, Guard, Lease, Permit, Result,
};

use ferrisson_core::capabilities::{CancelSafety, Capabilities, Fencing, Reentry, Validity, Wait};

/// The store's name in URLs (`etcd://`), metrics and the capability table.
pub const STORE: &str = "etcd";

const VALIDITY: Validity = Validity::Lease(
    "an etcd lease (the client's session lease, TTL = the watchdog lease in whole seconds) \
     kept alive every TTL/6; a fixed lease is a lease of its own, not renewed",
);
const LOST: &str = "at once when the key is deleted or the lease revoked (a watch on the own \
     key, the keep-alive's answer); when the keep-alive fails, at the end of the last TTL etcd \
     granted";
const WAIT: Wait = Wait::EventDriven("a watch on the deletion of the key just before the own");
const CANCEL: CancelSafety =
    CancelSafety::SafeAtCost("a delete of the waiter's key, sent by a background task");

/// What each etcd primitive gives, in the order of the capability table.
pub const CAPABILITIES: &[Capabilities] = &[
    Capabilities::new(
        STORE,
        "Lock",
        Reentry::PerTask,
        true,
        VALIDITY,
        Fencing::Token("the key's create revision (etcd's cluster-wide revision); never goes back"),
        LOST,
        WAIT,
        CANCEL,
    ),
    Capabilities::new(
        STORE,
        "Election",
        Reentry::None,
        true,
        VALIDITY,
        Fencing::Token("the candidate key's create revision: one per term; never goes back"),
        LOST,
        WAIT,
        CANCEL,
    ),
    Capabilities::new(
        STORE,
        "Semaphore",
        Reentry::None,
        true,
        VALIDITY,
        Fencing::None,
        LOST,
        Wait::EventDriven("a watch on the queue: a release anywhere in it counts again"),
        CANCEL,
    ),
    Capabilities::new(
        STORE,
        "RwLock",
        Reentry::None,
        true,
        VALIDITY,
        Fencing::Token("write side: the key's create revision; read side: none"),
        LOST,
        WAIT,
        CANCEL,
    ),
];
