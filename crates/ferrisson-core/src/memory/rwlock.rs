//! The memory store's read-write lock: many readers or one writer; the writer re-enters
//! per task and may read inside its hold (downgrade); a reader asking for the write side
//! is refused (upgrade).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::contract::families::DistributedRwLock;
use crate::contract::lock::{Fenced, Guard};
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::hold::HoldState;
use crate::lease::Lease;
use crate::memory::lock::far_future;
use crate::memory::slots::{Attempt, Table, wait_for};
use crate::memory::{CAPABILITIES, MemoryStore, lock_table, validate_name};
use crate::observe::{Grant, Kind, Probe, observe_acquire};
use crate::task::TaskKey;

/// The read-write locks of one store, by name.
pub(crate) type RwTable = Table<RwState>;

/// Who holds one read-write lock.
#[derive(Default)]
pub(crate) struct RwState {
    writer: Option<Side>,
    readers: Vec<Side>,
}

/// One hold of either side.
struct Side {
    owner: u64,
    task: TaskKey,
    /// Guards alive for this hold (the writer re-enters; each reader is its own hold).
    count: u32,
    /// The write side's token (none for a reader).
    token: FencingToken,
    expires: Option<Instant>,
    state: Arc<HoldState>,
}

impl Side {
    fn lapsed(&self, now: Instant) -> bool {
        self.expires.is_some_and(|at| now >= at) || !self.state.is_held()
    }
}

impl RwState {
    /// Forgets lapsed holds, marking them lost.
    fn sweep(&mut self, now: Instant) {
        if self.writer.as_ref().is_some_and(|w| w.lapsed(now))
            && let Some(writer) = self.writer.take()
        {
            writer.state.mark_lost();
        }
        self.readers.retain(|r| {
            let keep = !r.lapsed(now);
            if !keep {
                r.state.mark_lost();
            }
            keep
        });
    }

    fn is_idle(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    /// The earliest end of a fixed lease among the holds (when to try again).
    fn first_expiry(&self) -> Option<Instant> {
        self.writer
            .iter()
            .chain(&self.readers)
            .filter_map(|s| s.expires)
            .min()
    }
}

/// A read-write lock of a [`MemoryStore`].
///
/// ```
/// use ferrisson_core::{DistributedRwLock, Error};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let lock = store.rwlock("catalogue")?;
/// let reading = lock.read().await?;
/// assert!(matches!(lock.write().await, Err(Error::UpgradeRefused { .. })));
/// drop(reading);
/// let writing = lock.write().await?;
/// let _inside = lock.read().await?; // the writer may read
/// # drop(writing); Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct MemoryRwLock {
    store: MemoryStore,
    name: Arc<str>,
    read_probe: Probe,
    write_probe: Probe,
    lease: Lease,
}

impl fmt::Debug for MemoryRwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRwLock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

impl MemoryRwLock {
    pub(crate) fn new(store: MemoryStore, name: &str) -> Result<Self> {
        validate_name(name)?;
        let name: Arc<str> = Arc::from(name);
        let classes = &store.shared().classes;
        let read_probe = classes.probe(Kind::RwLockRead, &name);
        let write_probe = classes.probe(Kind::RwLockWrite, &name);
        Ok(Self {
            store,
            name,
            read_probe,
            write_probe,
            lease: Lease::Watchdog,
        })
    }

    /// The same lock with another lease for both sides (see
    /// [`MemoryLock::with_lease`](crate::memory::MemoryLock::with_lease)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert!(store.rwlock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(1))).is_ok());
    /// # Ok::<(), ferrisson_core::Error>(())
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    fn with_table<T>(&self, f: impl FnOnce(&mut RwTable) -> T) -> T {
        f(&mut lock_table(&self.store.shared().rwlocks))
    }

    fn attempt(&self, mode: Mode) -> Result<Attempt<(u64, Arc<HoldState>, FencingToken)>> {
        let task = TaskKey::current();
        let now = Instant::now();
        let expires = match self.lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => now.checked_add(d),
        };
        let probe = match mode {
            Mode::Read => &self.read_probe,
            Mode::Write => &self.write_probe,
        };
        let shared = Arc::clone(self.store.shared());
        self.with_table(|table| {
            let state = &mut table.slot(&self.name).state;
            state.sweep(now);
            match mode {
                Mode::Write => {
                    if state.readers.iter().any(|r| r.task == task) {
                        return Err(Error::UpgradeRefused {
                            name: self.name.to_string(),
                        });
                    }
                    if let Some(writer) = &mut state.writer {
                        if writer.task != task {
                            return Ok(Attempt::Blocked(state.first_expiry()));
                        }
                        writer.count += 1;
                        return Ok(Attempt::Granted((
                            writer.owner,
                            Arc::clone(&writer.state),
                            writer.token,
                        )));
                    }
                    if !state.readers.is_empty() {
                        return Ok(Attempt::Blocked(state.first_expiry()));
                    }
                }
                Mode::Read => {
                    if state.writer.as_ref().is_some_and(|w| w.task != task) {
                        return Ok(Attempt::Blocked(state.first_expiry()));
                    }
                }
            }
            let hold = Arc::new(HoldState::new(
                probe.clone(),
                expires.unwrap_or_else(far_future),
            ));
            hold.start();
            let owner = rand::random();
            let token = match mode {
                Mode::Write => shared.next_token("rwlock", &self.name),
                Mode::Read => FencingToken::new(0),
            };
            let side = Side {
                owner,
                task,
                count: 1,
                token,
                expires,
                state: Arc::clone(&hold),
            };
            match mode {
                Mode::Write => state.writer = Some(side),
                Mode::Read => state.readers.push(side),
            }
            Ok(Attempt::Granted((owner, hold, token)))
        })
    }

    async fn acquire(
        &self,
        mode: Mode,
        wait: Option<Duration>,
    ) -> Result<Option<(u64, Arc<HoldState>, FencingToken)>> {
        let wake = self.with_table(|table| table.waker(&self.name));
        let probe = match mode {
            Mode::Read => &self.read_probe,
            Mode::Write => &self.write_probe,
        };
        observe_acquire(probe, wait, async {
            Ok(wait_for(wake, wait, || self.attempt(mode))
                .await?
                .map(Granted))
        })
        .await
        .map(|granted| granted.map(|Granted(inner)| inner))
    }

    /// Releases one guard of `mode` held as `owner`; `Ok(true)` when the hold ended.
    fn release(&self, mode: Mode, owner: u64) -> Result<bool> {
        let now = Instant::now();
        self.with_table(|table| {
            let Some(slot) = table.get_mut(&self.name) else {
                return Err(Error::LeaseExpired {
                    name: self.name.to_string(),
                });
            };
            let state = &mut slot.state;
            let outcome = match mode {
                Mode::Write => match &mut state.writer {
                    Some(w) if w.owner == owner && !w.lapsed(now) => {
                        w.count -= 1;
                        let ended = w.count == 0;
                        if ended {
                            state.writer = None;
                        }
                        Ok(ended)
                    }
                    Some(w) if w.owner != owner => Err(Error::NotOwner {
                        name: self.name.to_string(),
                    }),
                    _ => Err(Error::LeaseExpired {
                        name: self.name.to_string(),
                    }),
                },
                Mode::Read => match state.readers.iter().position(|r| r.owner == owner) {
                    Some(i) if !state.readers[i].lapsed(now) => {
                        state.readers.remove(i);
                        Ok(true)
                    }
                    _ => Err(Error::LeaseExpired {
                        name: self.name.to_string(),
                    }),
                },
            };
            state.sweep(now);
            slot.wake_all();
            table.tidy(&self.name, RwState::is_idle);
            outcome
        })
    }
}

/// A grant as the acquire span sees it (the token is recorded by the guard).
struct Granted((u64, Arc<HoldState>, FencingToken));

impl Grant for Granted {}

impl DistributedRwLock for MemoryRwLock {
    type ReadGuard = MemoryReadGuard;
    type WriteGuard = MemoryWriteGuard;

    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES[1]
    }

    async fn read(&self) -> Result<MemoryReadGuard> {
        self.read_timeout(Duration::MAX)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    async fn try_read(&self) -> Result<Option<MemoryReadGuard>> {
        self.read_within(Some(Duration::ZERO)).await
    }

    async fn read_timeout(&self, wait: Duration) -> Result<Option<MemoryReadGuard>> {
        self.read_within((wait != Duration::MAX).then_some(wait))
            .await
    }

    async fn write(&self) -> Result<MemoryWriteGuard> {
        self.write_timeout(Duration::MAX)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.name))
    }

    async fn try_write(&self) -> Result<Option<MemoryWriteGuard>> {
        self.write_within(Some(Duration::ZERO)).await
    }

    async fn write_timeout(&self, wait: Duration) -> Result<Option<MemoryWriteGuard>> {
        self.write_within((wait != Duration::MAX).then_some(wait))
            .await
    }
}

impl MemoryRwLock {
    async fn read_within(&self, wait: Option<Duration>) -> Result<Option<MemoryReadGuard>> {
        Ok(self
            .acquire(Mode::Read, wait)
            .await?
            .map(|(owner, state, _)| MemoryReadGuard {
                side: SideGuard {
                    lock: self.clone(),
                    mode: Mode::Read,
                    owner,
                    state,
                    released: false,
                },
            }))
    }

    async fn write_within(&self, wait: Option<Duration>) -> Result<Option<MemoryWriteGuard>> {
        let Some((owner, state, token)) = self.acquire(Mode::Write, wait).await? else {
            return Ok(None);
        };
        Ok(Some(MemoryWriteGuard {
            token,
            side: SideGuard {
                lock: self.clone(),
                mode: Mode::Write,
                owner,
                state,
                released: false,
            },
        }))
    }
}

/// What both guards share: the hold and its release.
struct SideGuard {
    lock: MemoryRwLock,
    mode: Mode,
    owner: u64,
    state: Arc<HoldState>,
    released: bool,
}

impl SideGuard {
    fn release(&mut self) -> Result<()> {
        self.released = true;
        if self.lock.release(self.mode, self.owner)? {
            self.state.meter().end(false);
        }
        Ok(())
    }
}

impl Drop for SideGuard {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.release();
        }
    }
}

/// Proof of holding the read side of a [`MemoryRwLock`]; dropping it releases at once.
#[must_use = "dropping the guard releases the read lock at once"]
pub struct MemoryReadGuard {
    side: SideGuard,
}

/// Proof of holding the write side of a [`MemoryRwLock`]; dropping it releases at once.
#[must_use = "dropping the guard releases the write lock at once"]
pub struct MemoryWriteGuard {
    side: SideGuard,
    token: FencingToken,
}

impl fmt::Debug for MemoryReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryReadGuard")
            .field("name", &self.side.lock.name)
            .finish()
    }
}

impl fmt::Debug for MemoryWriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWriteGuard")
            .field("name", &self.side.lock.name)
            .field("fencing_token", &self.token)
            .finish()
    }
}

macro_rules! side_guard {
    ($guard:ident) => {
        impl Guard for $guard {
            fn name(&self) -> &str {
                &self.side.lock.name
            }

            fn is_held(&self) -> bool {
                self.side.state.is_held()
            }

            fn remaining(&self) -> Duration {
                self.side.state.remaining()
            }

            async fn lost(&self) {
                self.side.state.lost().await;
            }

            async fn unlock(mut self) -> Result<()> {
                self.side.release()
            }
        }
    };
}

side_guard!(MemoryReadGuard);
side_guard!(MemoryWriteGuard);

impl Fenced for MemoryWriteGuard {
    fn fencing_token(&self) -> FencingToken {
        self.token
    }
}
