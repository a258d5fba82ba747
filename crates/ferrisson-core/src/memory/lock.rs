//! The memory store's lock: reentrant per task, a fencing token per holder, fixed leases
//! that lapse.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::contract::lock::{DistributedLock, Fenced, Guard};
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::hold::HoldState;
use crate::lease::Lease;
use crate::memory::slots::{Attempt, Table, wait_for};
use crate::memory::{CAPABILITIES, MemoryStore, Shared, lock_table, validate_name};
use crate::observe::{Grant, Kind, Probe, observe_acquire};
use crate::task::TaskKey;

/// The locks (or elections) of one store, by name.
pub(crate) type LockTable = Table<Option<Holder>>;

/// Which table a lock lives in: locks re-enter per task, elections do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Lock,
    Election,
}

/// The one holder of a lock.
pub(crate) struct Holder {
    /// Unique per acquisition (not per guard: re-entries share it).
    owner: u64,
    task: TaskKey,
    /// Guards alive for this hold.
    count: u32,
    token: FencingToken,
    /// The end of a fixed lease; `None` for a hold that lasts until released.
    expires: Option<Instant>,
    state: Arc<HoldState>,
}

impl Holder {
    fn lapsed(&self, now: Instant) -> bool {
        self.expires.is_some_and(|at| now >= at) || !self.state.is_held()
    }
}

/// A lock of a [`MemoryStore`], reentrant inside the task that holds it.
///
/// ```
/// use ferrisson_core::{DistributedLock, Guard, Lease};
/// use std::time::Duration;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let lock = store.lock("job")?.with_lease(Lease::Fixed(Duration::from_millis(50)))?;
/// let guard = lock.lock().await?;
/// guard.lost().await; // the fixed lease lapses
/// assert!(!guard.is_held());
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct MemoryLock {
    store: MemoryStore,
    probe: Probe,
    lease: Lease,
    flavor: Flavor,
}

impl fmt::Debug for MemoryLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLock")
            .field("name", &self.probe.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl MemoryLock {
    pub(crate) fn new(store: MemoryStore, name: &str) -> Result<Self> {
        Self::of_flavor(store, name, Flavor::Lock)
    }

    pub(crate) fn of_flavor(store: MemoryStore, name: &str, flavor: Flavor) -> Result<Self> {
        validate_name(name)?;
        let kind = match flavor {
            Flavor::Lock => Kind::Lock,
            Flavor::Election => Kind::Election,
        };
        let probe = store.shared().classes.probe(kind, &Arc::from(name));
        Ok(Self {
            store,
            probe,
            lease: Lease::Watchdog,
            flavor,
        })
    }

    /// The lock's name.
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert_eq!(store.lock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The same lock with another lease: [`Lease::Watchdog`] (the default) lasts until
    /// released, [`Lease::Fixed`] lapses after its duration.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.lock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::ZERO)).is_err());
    /// # Ok::<(), ferrisson_core::Error>(())
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// Ends the current hold, whoever has it, as an administrator would: its guards'
    /// `lost()` fires and the next waiter is granted. Returns whether anything was held.
    ///
    /// ```
    /// use ferrisson_core::{DistributedLock, Guard};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// let lock = store.lock("a")?;
    /// let guard = lock.lock().await?;
    /// assert!(lock.force_unlock());
    /// assert!(!guard.is_held());
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn force_unlock(&self) -> bool {
        let mut table = lock_table(self.table());
        let Some(slot) = table.get_mut(self.name()) else {
            return false;
        };
        let Some(holder) = slot.state.take() else {
            return false;
        };
        holder.state.mark_lost();
        slot.wake_all();
        table.tidy(self.name(), Option::is_none);
        true
    }

    fn table(&self) -> &std::sync::Mutex<LockTable> {
        let shared: &Shared = self.store.shared();
        match self.flavor {
            Flavor::Lock => &shared.locks,
            Flavor::Election => &shared.elections,
        }
    }

    /// One attempt under the table's mutex.
    fn attempt(&self) -> Attempt<MemoryLockGuard> {
        let task = TaskKey::current();
        let now = Instant::now();
        let expires = match self.lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => now.checked_add(d),
        };
        let name: Arc<str> = Arc::clone(&self.probe.name);
        let mut table = lock_table(self.table());
        let slot = table.slot(&name);
        if let Some(holder) = &mut slot.state {
            if holder.lapsed(now) {
                holder.state.mark_lost();
                slot.state = None;
            } else if self.flavor == Flavor::Lock && holder.task == task {
                holder.count += 1;
                if let Some(at) = expires {
                    holder.expires = Some(at);
                    holder.state.extend(at);
                }
                return Attempt::Granted(self.guard(holder.owner, holder.token, &holder.state));
            } else {
                return Attempt::Blocked(holder.expires);
            }
        }
        let token = self.store.shared().next_token(self.table_name(), &name);
        let state = Arc::new(HoldState::new(
            self.probe.clone(),
            expires.unwrap_or_else(far_future),
        ));
        state.start();
        let owner = rand::random();
        let guard = self.guard(owner, token, &state);
        slot.state = Some(Holder {
            owner,
            task,
            count: 1,
            token,
            expires,
            state,
        });
        Attempt::Granted(guard)
    }

    fn table_name(&self) -> &'static str {
        match self.flavor {
            Flavor::Lock => "lock",
            Flavor::Election => "election",
        }
    }

    fn guard(&self, owner: u64, token: FencingToken, state: &Arc<HoldState>) -> MemoryLockGuard {
        MemoryLockGuard {
            lock: self.clone(),
            owner,
            token,
            state: Arc::clone(state),
            released: false,
        }
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<MemoryLockGuard>> {
        let wake = lock_table(self.table()).waker(&self.probe.name);
        observe_acquire(
            &self.probe,
            wait,
            wait_for(wake, wait, || Ok(self.attempt())),
        )
        .await
    }

    /// Releases one guard's share of the hold `owner`; `Ok(true)` when that ended the
    /// hold.
    fn release(&self, owner: u64) -> Result<bool> {
        let name = self.name();
        let mut table = lock_table(self.table());
        let outcome = match table.get_mut(name) {
            Some(slot) => match &mut slot.state {
                Some(holder) if holder.owner == owner => {
                    if holder.lapsed(Instant::now()) {
                        holder.state.mark_lost();
                        slot.state = None;
                        slot.wake_all();
                        Err(Error::LeaseExpired { name: name.into() })
                    } else {
                        holder.count -= 1;
                        let ended = holder.count == 0;
                        if ended {
                            slot.state = None;
                            slot.wake_all();
                        }
                        Ok(ended)
                    }
                }
                Some(_) => Err(Error::NotOwner { name: name.into() }),
                None => Err(Error::LeaseExpired { name: name.into() }),
            },
            None => Err(Error::LeaseExpired { name: name.into() }),
        };
        table.tidy(name, Option::is_none);
        outcome
    }
}

/// An instant past any lease: the deadline of a hold that lasts until released.
pub(crate) fn far_future() -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(CENTURY).unwrap_or(now)
}

impl DistributedLock for MemoryLock {
    type Guard = MemoryLockGuard;

    fn name(&self) -> &str {
        MemoryLock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        match self.flavor {
            Flavor::Lock => CAPABILITIES[0],
            Flavor::Election => CAPABILITIES[3],
        }
    }

    async fn lock(&self) -> Result<MemoryLockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_lock(&self) -> Result<Option<MemoryLockGuard>> {
        self.acquire(Some(Duration::ZERO)).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<MemoryLockGuard>> {
        self.acquire(Some(wait)).await
    }
}

/// Proof of holding a [`MemoryLock`]; dropping it releases (at once: nothing to send).
#[must_use = "dropping the guard releases the lock at once"]
pub struct MemoryLockGuard {
    lock: MemoryLock,
    owner: u64,
    token: FencingToken,
    state: Arc<HoldState>,
    released: bool,
}

impl fmt::Debug for MemoryLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLockGuard")
            .field("name", &self.lock.name())
            .field("fencing_token", &self.token)
            .field("held", &self.state.is_held())
            .finish_non_exhaustive()
    }
}

impl Grant for MemoryLockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.token)
    }
}

impl MemoryLockGuard {
    fn release(&mut self) -> Result<()> {
        self.released = true;
        // A lapsed or taken hold was counted as lost when it was found so.
        if self.lock.release(self.owner)? {
            self.state.meter().end(false);
        }
        Ok(())
    }
}

impl Guard for MemoryLockGuard {
    fn name(&self) -> &str {
        self.lock.name()
    }

    fn is_held(&self) -> bool {
        self.state.is_held()
    }

    fn remaining(&self) -> Duration {
        self.state.remaining()
    }

    async fn lost(&self) {
        self.state.lost().await;
    }

    async fn unlock(mut self) -> Result<()> {
        self.release()
    }
}

impl Fenced for MemoryLockGuard {
    fn fencing_token(&self) -> FencingToken {
        self.token
    }
}

impl Drop for MemoryLockGuard {
    fn drop(&mut self) {
        if !self.released {
            // A drop after the hold lapsed has nothing to say to anyone.
            let _ = self.release();
        }
    }
}
