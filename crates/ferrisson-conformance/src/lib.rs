//! # ferrisson-conformance
//!
//! The behaviour every ferrisson store's lock must show, as test bodies generic over the
//! store: a store crate implements [`Store`] for its locks and runs [`run_all`] (or each
//! body) from its own tests, unchanged, against a real server.
//!
//! The suite reads each lock's [`Capabilities`](ferrisson_core::Capabilities) and tests
//! what it declares: re-entry where declared and refusal where not, tokens that grow
//! where the store has them. What it checks:
//!
//! - mutual exclusion across tasks, across clients and across processes;
//! - re-entry as declared;
//! - `try_lock` and `lock_timeout` semantics (contention is `Ok(None)`, a timeout waits
//!   its bound and no less);
//! - a cancelled wait leaves nothing behind;
//! - `lost()` fires when the hold ends behind the holder's back;
//! - fencing tokens strictly increase per lock across holders, clients and client
//!   restarts;
//! - unlocking a hold whose fixed lease ran out is the typed error;
//! - bad names and leases are refused with typed errors.
//!
//! # Panics
//!
//! Every body panics, with what it saw, when the store breaks a promise: that is how the
//! test running it fails. Store errors met on the way are returned instead.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ferrisson_conformance::{MemoryUnderTest, run_all};
//!
//! run_all(&MemoryUnderTest::default()).await?;
//! # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
//! ```

// Panicking with what was seen is how a body fails its test; the crate docs say so once.
#![allow(clippy::missing_panics_doc)]

mod bodies;
mod processes;

use std::future::Future;
use std::time::Duration;

use ferrisson_core::memory::{MemoryLock, MemoryStore};
use ferrisson_core::{DistributedLock, Error, Fenced, FencingToken, Lease, Result};

pub use crate::bodies::{
    bad_names_and_leases_are_refused, cancelled_wait_leaves_nothing_behind,
    excludes_across_clients, excludes_across_tasks, lost_fires_when_ended_behind_the_back,
    reentry_is_as_declared, tokens_increase_across_holders_clients_and_restarts,
    try_and_timeout_semantics, unlocking_an_expired_hold_is_the_typed_error,
};
pub use crate::processes::{CHILD_ENV, excludes_across_processes, serve_child_if_asked};

/// A store under test: how the suite gets locks, independent clients, and an
/// administrator's hand to end a hold behind its holder's back.
pub trait Store: Send + Sync + Sized + 'static {
    /// The store's lock.
    type Lock: DistributedLock + Clone + std::fmt::Debug + Send + Sync + 'static;

    /// The lock `name` on this client, with `lease`.
    ///
    /// # Errors
    ///
    /// What the store's lock constructor refuses ([`Error::InvalidArgument`] for a bad
    /// name or lease).
    fn lock(&self, name: &str, lease: Lease) -> Result<Self::Lock>;

    /// Another client of the same store: its own connection or session, its own
    /// re-entry records (a new process would look the same to the store).
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    fn another_client(&self) -> impl Future<Output = Result<Self>> + Send;

    /// Ends whatever hold `name` has, as an administrator would (a force-unlock, a
    /// killed session, a deleted key); the holder is not told.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    fn end_hold_behind_the_back(&self, name: &str) -> impl Future<Output = Result<()>> + Send;

    /// The fencing token of a hold, `None` when the store's guard has none.
    fn token_of(guard: &<Self::Lock as DistributedLock>::Guard) -> Option<FencingToken>;

    /// A URL a child process can connect to, or `None` for an in-process store.
    fn url(&self) -> Option<String>;

    /// The longest a hold ended behind its holder's back may take to fire `lost()` in
    /// this setup (for a leased store, about one renewal interval plus a round trip).
    fn lost_within(&self) -> Duration;

    /// A shortest fixed lease the store keeps reliably in this setup (for the expired
    /// hold test).
    fn short_lease(&self) -> Duration {
        Duration::from_millis(200)
    }
}

/// The memory store under test: [`MemoryStore`] with its force-unlock as the
/// administrator's hand. Each [`Store::another_client`] shares the store (a memory store
/// has no clients of its own).
#[derive(Debug, Clone, Default)]
pub struct MemoryUnderTest {
    store: MemoryStore,
}

impl Store for MemoryUnderTest {
    type Lock = MemoryLock;

    fn lock(&self, name: &str, lease: Lease) -> Result<MemoryLock> {
        self.store.lock(name)?.with_lease(lease)
    }

    async fn another_client(&self) -> Result<Self> {
        Ok(self.clone())
    }

    async fn end_hold_behind_the_back(&self, name: &str) -> Result<()> {
        self.store.lock(name)?.force_unlock();
        Ok(())
    }

    fn token_of(guard: &ferrisson_core::memory::MemoryLockGuard) -> Option<FencingToken> {
        Some(guard.fencing_token())
    }

    fn url(&self) -> Option<String> {
        None
    }

    fn lost_within(&self) -> Duration {
        Duration::from_millis(100)
    }
}

/// Runs every body of the suite on `store`, each on its own lock names (prefixed
/// `conformance:`), in turn.
///
/// # Errors
///
/// The first store error a body met; a broken promise panics with what was seen.
pub async fn run_all<S: Store>(store: &S) -> Result<()> {
    excludes_across_tasks(store).await?;
    excludes_across_clients(store).await?;
    reentry_is_as_declared(store).await?;
    try_and_timeout_semantics(store).await?;
    cancelled_wait_leaves_nothing_behind(store).await?;
    lost_fires_when_ended_behind_the_back(store).await?;
    tokens_increase_across_holders_clients_and_restarts(store).await?;
    unlocking_an_expired_hold_is_the_typed_error(store).await?;
    bad_names_and_leases_are_refused(store).await?;
    Ok(())
}

/// A unique lock name for one body's run, so that runs never share state.
pub(crate) fn fresh_name(body: &str) -> String {
    format!("conformance:{body}:{:016x}", rand::random::<u64>())
}

/// Panics unless `result` is the typed refusal of a bad argument.
pub(crate) fn expect_invalid<T: std::fmt::Debug>(what: &str, result: &Result<T>) {
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{what}: expected InvalidArgument, got {result:?}"
    );
}
