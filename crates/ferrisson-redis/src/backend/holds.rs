//! The client's record of the locks it holds: who may re-enter, and how the watchdog
//! renews each hold. Whether a hold is still valid (its local deadline, and the lost-lock
//! signal) is the contract's shared [`HoldState`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferrisson_core::hold::{HoldState, Validity};
use tokio::time::Instant;

use crate::api::error::Result;
use crate::api::fencing::FencingToken;
use crate::backend::ids::{OwnerId, TaskKey};
use crate::backend::keys::Keys;
use crate::backend::scripts::{LuaScript, SCRIPTS};
use crate::observe::hold::HoldMeter;
use crate::observe::probe::Probe;

/// How the watchdog renews a hold: the primitives differ in how a holder is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Renewal {
    /// A lock hash `{owner: hold count}` whose TTL is the lease (`lock_renew.lua`).
    Lock,
    /// A read-write lock hash with one lease deadline per owner (`rwlock_renew.lua`).
    ReadWrite,
    /// A string holding its owner id (`simple_renew.lua`).
    Simple,
    /// A permit in an expirable semaphore's held-permit set, its id as the owner
    /// (`xsem_renew.lua`).
    Permit,
}

impl Renewal {
    /// The script that renews holds of this layout, many per call.
    pub(crate) fn script(self) -> &'static LuaScript {
        match self {
            Self::Lock => &SCRIPTS.lock_renew,
            Self::ReadWrite => &SCRIPTS.rwlock_renew,
            Self::Simple => &SCRIPTS.simple_renew,
            Self::Permit => &SCRIPTS.xsem_renew,
        }
    }

    /// How `renew_on_node.lua` names this layout.
    pub(crate) fn layout(self) -> &'static str {
        match self {
            Self::Lock => "l",
            Self::ReadWrite => "r",
            Self::Simple => "s",
            Self::Permit => "p",
        }
    }
}

/// One owner's hold on one lock, shared by every guard of that owner in this client.
pub(crate) struct Hold {
    pub(crate) name: Arc<str>,
    /// The lock's keys; holds are recorded, and renewed, under the main key.
    pub(crate) keys: Keys,
    pub(crate) owner: OwnerId,
    pub(crate) token: FencingToken,
    /// The task that may re-enter without naming the owner (none for explicit owners).
    pub(crate) task: Option<TaskKey>,
    /// Which renewal script knows this hold's layout.
    pub(crate) renewal: Renewal,
    /// Until when the hold is valid, its lost signal and its metrics.
    state: HoldState,
    /// Live guards of this hold in this client.
    guards: AtomicUsize,
    /// True while the watchdog must renew this hold.
    renewing: AtomicBool,
    /// When the watchdog should renew next.
    next_renewal: Mutex<Instant>,
    /// The last renewal failed: the next one waits its retry delay in full, never
    /// pulled forward to fill a batch (which would ask a failing server again at once).
    retrying: AtomicBool,
}

impl Hold {
    pub(crate) fn new(
        probe: &Probe,
        keys: Keys,
        owner: OwnerId,
        token: FencingToken,
        task: Option<TaskKey>,
        deadline: Instant,
    ) -> Self {
        Self {
            name: Arc::clone(&probe.name),
            keys,
            owner,
            token,
            task,
            renewal: Renewal::Lock,
            state: HoldState::new(probe.clone(), deadline),
            guards: AtomicUsize::new(0),
            renewing: AtomicBool::new(false),
            next_renewal: Mutex::new(deadline),
            retrying: AtomicBool::new(false),
        }
    }

    /// The hold's metrics and its release span.
    pub(crate) fn meter(&self) -> &HoldMeter {
        self.state.meter()
    }

    /// Sends one release of this hold under its metrics; a hold that had already ended
    /// here answers `LeaseExpired` whatever Redis said (see [`HoldState::release`]).
    pub(crate) fn release<'a>(
        &'a self,
        token: Option<FencingToken>,
        last: bool,
        release: impl Future<Output = Result<()>> + 'a,
    ) -> impl Future<Output = Result<()>> + 'a {
        self.state.release(token, last, release)
    }

    /// The lock's main key.
    pub(crate) fn key(&self) -> &str {
        self.keys.main()
    }

    /// `name`, `owner`, `fencing_token` and `held` for a guard's `Debug`.
    pub(crate) fn fmt_fields(&self, f: &mut fmt::DebugStruct<'_, '_>) -> fmt::Result {
        f.field("name", &self.name)
            .field("owner", &self.owner)
            .field("fencing_token", &self.token)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }

    /// The same hold, renewed by the script for `renewal`'s layout.
    pub(crate) fn renewed_as(mut self, renewal: Renewal) -> Self {
        self.renewal = renewal;
        self
    }

    /// True while the hold is not lost and its deadline has not passed.
    pub(crate) fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// How long the hold stays valid without another renewal (zero once lost).
    pub(crate) fn remaining(&self) -> Duration {
        self.state.remaining()
    }

    pub(crate) fn validity(&self) -> Validity {
        self.state.validity()
    }

    /// Moves the deadline to `deadline` (a renewal or re-entry succeeded); a hold whose
    /// deadline already passed stays lost and is no longer renewed (see
    /// [`HoldState::extend`]).
    pub(crate) fn extend(&self, deadline: Instant) {
        if !self.state.extend(deadline) {
            self.renewing.store(false, Ordering::SeqCst);
        }
    }

    /// Marks the hold lost: every guard's `lost()` resolves, `is_held()` turns false.
    pub(crate) fn mark_lost(&self) {
        self.renewing.store(false, Ordering::SeqCst);
        self.state.mark_lost();
    }

    /// Resolves once the hold is lost or its deadline passes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub(crate) async fn lost(&self) {
        self.state.lost().await;
    }

    pub(crate) fn add_guard(&self) {
        self.guards.fetch_add(1, Ordering::SeqCst);
    }

    /// Drops one guard; true when it was the last one.
    fn remove_guard(&self) -> bool {
        self.guards.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// First renewal a third of the lease after the acquire was *sent* (its deadline
    /// counts from then too), not after its reply arrived: on a slow link the reply can
    /// take a large part of the lease.
    pub(crate) fn start_renewing(&self, lease: Duration) {
        let deadline = self.validity().deadline;
        let first = deadline
            .checked_sub(lease.saturating_sub(lease / 3))
            .unwrap_or_else(Instant::now);
        *self
            .next_renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = first;
        self.retrying.store(false, Ordering::SeqCst);
        self.renewing.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_renewing(&self) -> bool {
        self.renewing.load(Ordering::SeqCst)
    }

    pub(crate) fn stop_renewing(&self) {
        self.renewing.store(false, Ordering::SeqCst);
    }

    pub(crate) fn next_renewal(&self) -> Instant {
        *self
            .next_renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Schedules the next renewal at `at`, or earlier to share a batch.
    pub(crate) fn set_next_renewal(&self, at: Instant) {
        *self
            .next_renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = at;
        self.retrying.store(false, Ordering::SeqCst);
    }

    /// Schedules a retry of a failed renewal at `at`, not earlier.
    pub(crate) fn set_retry(&self, at: Instant) {
        *self
            .next_renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = at;
        self.retrying.store(true, Ordering::SeqCst);
    }

    /// Whether the next renewal is a retry that must not be pulled forward.
    pub(crate) fn is_retrying(&self) -> bool {
        self.retrying.load(Ordering::SeqCst)
    }
}

/// Every live hold of the client, by lock key.
///
/// Keyed by the holds' own [`Keys`] (a shared name, cloned without allocating) and
/// holding the first hold of a key inline, so that recording a hold and forgetting it
/// allocate nothing once the map has grown to the number of locks held at once.
#[derive(Default)]
pub(crate) struct Holds {
    by_key: Mutex<HashMap<MainKey, KeyHolds>>,
}

/// A lock's [`Keys`] as a map key: hashed and compared by the main key, so that the map
/// can be searched with a `&str`.
struct MainKey(Keys);

impl std::hash::Hash for MainKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.main().hash(state);
    }
}

impl PartialEq for MainKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.main() == other.0.main()
    }
}

impl Eq for MainKey {}

impl std::borrow::Borrow<str> for MainKey {
    fn borrow(&self) -> &str {
        self.0.main()
    }
}

/// The holds of one key: almost always one (one owner per lock), more only for explicit
/// owners sharing a lock or a read-write lock's readers.
struct KeyHolds {
    first: Arc<Hold>,
    more: Vec<Arc<Hold>>,
}

impl KeyHolds {
    fn iter(&self) -> impl Iterator<Item = &Arc<Hold>> {
        std::iter::once(&self.first).chain(&self.more)
    }

    /// Forgets `hold`, keeping the others in the order they came; false when none is left.
    fn remove(&mut self, hold: &Arc<Hold>) -> bool {
        if Arc::ptr_eq(&self.first, hold) {
            if self.more.is_empty() {
                return false;
            }
            self.first = self.more.remove(0);
        } else {
            self.more.retain(|h| !Arc::ptr_eq(h, hold));
        }
        true
    }

    fn len(&self) -> usize {
        1 + self.more.len()
    }
}

impl Holds {
    fn map(&self) -> MutexGuard<'_, HashMap<MainKey, KeyHolds>> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live hold of `key` that `owner` has, or that `task` may re-enter.
    pub(crate) fn find(
        &self,
        key: &str,
        owner: Option<OwnerId>,
        task: TaskKey,
    ) -> Option<Arc<Hold>> {
        let map = self.map();
        map.get(key)?
            .iter()
            .find(|h| match owner {
                Some(owner) => h.owner == owner,
                None => h.task == Some(task),
            })
            .cloned()
    }

    /// Registers a guard of `hold`: the existing hold of the same key and owner if there is
    /// one (re-entry), else `hold` itself. Returns the hold the guard belongs to.
    pub(crate) fn attach(&self, hold: Hold) -> Arc<Hold> {
        let mut map = self.map();
        let hold = match map.get_mut(hold.key()) {
            Some(holds) => {
                let existing = holds
                    .iter()
                    .find(|h| h.owner == hold.owner && h.is_held())
                    .cloned();
                existing.unwrap_or_else(|| {
                    let hold = Arc::new(hold);
                    hold.meter().start();
                    holds.more.push(Arc::clone(&hold));
                    hold
                })
            }
            None => {
                let hold = Arc::new(hold);
                hold.meter().start();
                map.insert(
                    MainKey(hold.keys.clone()),
                    KeyHolds {
                        first: Arc::clone(&hold),
                        more: Vec::new(),
                    },
                );
                hold
            }
        };
        hold.add_guard();
        hold
    }

    /// Adds a guard to a hold found by [`Holds::find`] (re-entry).
    pub(crate) fn reattach(&self, hold: &Arc<Hold>) -> bool {
        let map = self.map();
        let present = map
            .get(hold.key())
            .is_some_and(|holds| holds.iter().any(|h| Arc::ptr_eq(h, hold)));
        if present {
            hold.add_guard();
        }
        present
    }

    /// Drops one guard of `hold`; when it was the last, forgets the hold and stops its
    /// renewal before returning. Returns true when it was the last guard.
    pub(crate) fn detach(&self, hold: &Arc<Hold>) -> bool {
        let mut map = self.map();
        if !hold.remove_guard() {
            return false;
        }
        hold.stop_renewing();
        if let Some(holds) = map.get_mut(hold.key())
            && !holds.remove(hold)
        {
            map.remove(hold.key());
        }
        true
    }

    /// Number of live holds (for tests and inspection).
    pub(crate) fn len(&self) -> usize {
        self.map().values().map(KeyHolds::len).sum()
    }
}
