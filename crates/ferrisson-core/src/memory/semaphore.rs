//! The memory store's counting semaphore.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::contract::families::{DistributedSemaphore, Permit};
use crate::error::{Error, Result};
use crate::memory::slots::{Attempt, Table, wait_for};
use crate::memory::{CAPABILITIES, MemoryStore, lock_table, validate_name};
use crate::observe::{Grant, Kind, Probe, observe_acquire};

/// The semaphores of one store, by name.
pub(crate) type SemaphoreTable = Table<Counts>;

/// One semaphore's permits.
#[derive(Default)]
pub(crate) struct Counts {
    permits: u32,
    out: u32,
}

/// A counting semaphore of a [`MemoryStore`].
///
/// ```
/// use ferrisson_core::{DistributedSemaphore, Permit};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let slots = store.semaphore("render-slots", 1)?;
/// let permit = slots.acquire().await?;
/// assert!(slots.try_acquire().await?.is_none());
/// permit.release().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct MemorySemaphore {
    store: MemoryStore,
    probe: Probe,
}

impl fmt::Debug for MemorySemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySemaphore")
            .field("name", &self.probe.name)
            .finish_non_exhaustive()
    }
}

impl MemorySemaphore {
    pub(crate) fn new(store: MemoryStore, name: &str, permits: u32) -> Result<Self> {
        validate_name(name)?;
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        let probe = store
            .shared()
            .classes
            .probe(Kind::Semaphore, &Arc::from(name));
        let semaphore = Self { store, probe };
        semaphore.with_table(|table| table.slot(&semaphore.probe.name).state.permits = permits);
        Ok(semaphore)
    }

    fn with_table<T>(&self, f: impl FnOnce(&mut SemaphoreTable) -> T) -> T {
        f(&mut lock_table(&self.store.shared().semaphores))
    }

    /// Permits free now.
    ///
    /// ```
    /// let store = ferrisson_core::memory::MemoryStore::new();
    /// assert_eq!(store.semaphore("a", 3)?.available_permits(), 3);
    /// # Ok::<(), ferrisson_core::Error>(())
    /// ```
    pub fn available_permits(&self) -> u32 {
        self.with_table(|table| {
            let counts = &table.slot(&self.probe.name).state;
            counts.permits.saturating_sub(counts.out)
        })
    }

    fn attempt(&self) -> Attempt<MemoryPermit> {
        self.with_table(|table| {
            let counts = &mut table.slot(&self.probe.name).state;
            if counts.out < counts.permits {
                counts.out += 1;
                self.probe.instruments.hold_started();
                Attempt::Granted(MemoryPermit {
                    semaphore: self.clone(),
                    released: false,
                    since: std::time::Instant::now(),
                })
            } else {
                Attempt::Blocked(None)
            }
        })
    }

    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<MemoryPermit>> {
        let wake = self.with_table(|table| table.waker(&self.probe.name));
        observe_acquire(
            &self.probe,
            wait,
            wait_for(wake, wait, || Ok(self.attempt())),
        )
        .await
    }

    fn give_back(&self) {
        self.with_table(|table| {
            let slot = table.slot(&self.probe.name);
            slot.state.out = slot.state.out.saturating_sub(1);
            slot.wake_all();
        });
    }
}

impl DistributedSemaphore for MemorySemaphore {
    type Permit = MemoryPermit;

    fn name(&self) -> &str {
        &self.probe.name
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES[2]
    }

    async fn acquire(&self) -> Result<MemoryPermit> {
        self.acquire_within(None)
            .await?
            .ok_or_else(|| Error::wait_ended(&self.probe.name))
    }

    async fn try_acquire(&self) -> Result<Option<MemoryPermit>> {
        self.acquire_within(Some(Duration::ZERO)).await
    }

    async fn acquire_timeout(&self, wait: Duration) -> Result<Option<MemoryPermit>> {
        self.acquire_within(Some(wait)).await
    }
}

/// One permit of a [`MemorySemaphore`]; dropping it gives it back at once.
#[must_use = "dropping the permit gives it back at once"]
pub struct MemoryPermit {
    semaphore: MemorySemaphore,
    released: bool,
    since: std::time::Instant,
}

impl fmt::Debug for MemoryPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPermit")
            .field("name", &self.semaphore.probe.name)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

impl Grant for MemoryPermit {}

impl MemoryPermit {
    fn give_back(&mut self) {
        if !std::mem::replace(&mut self.released, true) {
            self.semaphore.give_back();
            self.semaphore
                .probe
                .instruments
                .hold_ended(self.since.elapsed().as_secs_f64(), false);
        }
    }
}

impl Permit for MemoryPermit {
    fn name(&self) -> &str {
        &self.semaphore.probe.name
    }

    async fn release(mut self) -> Result<()> {
        self.give_back();
        Ok(())
    }
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        self.give_back();
    }
}
