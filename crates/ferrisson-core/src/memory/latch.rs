//! The memory store's count-down latch.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::families::DistributedLatch;
use crate::error::Result;
use crate::memory::slots::{Attempt, Table, wait_for};
use crate::memory::{MemoryStore, lock_table, validate_name};

/// The latches of one store: each name's count.
pub(crate) type LatchTable = Table<u64>;

/// A count-down latch of a [`MemoryStore`].
///
/// ```
/// use ferrisson_core::DistributedLatch;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let latch = store.count_down_latch("loaded", 1)?;
/// let waiter = tokio::spawn({
///     let latch = latch.clone();
///     async move { latch.wait().await }
/// });
/// latch.count_down().await?;
/// waiter.await.unwrap()?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct MemoryLatch {
    store: MemoryStore,
    name: Arc<str>,
}

impl fmt::Debug for MemoryLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLatch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl MemoryLatch {
    pub(crate) fn new(store: MemoryStore, name: &str, count: u32) -> Result<Self> {
        validate_name(name)?;
        let name: Arc<str> = Arc::from(name);
        let latch = Self { store, name };
        latch.with_table(|table| {
            if table.get_mut(&latch.name).is_none() {
                table.slot(&latch.name).state = u64::from(count);
            }
        });
        Ok(latch)
    }

    fn with_table<T>(&self, f: impl FnOnce(&mut LatchTable) -> T) -> T {
        f(&mut lock_table(&self.store.shared().latches))
    }
}

impl DistributedLatch for MemoryLatch {
    fn name(&self) -> &str {
        &self.name
    }

    async fn count_down(&self) -> Result<u64> {
        Ok(self.with_table(|table| {
            let slot = table.slot(&self.name);
            slot.state = slot.state.saturating_sub(1);
            if slot.state == 0 {
                slot.wake_all();
            }
            slot.state
        }))
    }

    async fn count(&self) -> Result<u64> {
        Ok(self.with_table(|table| table.slot(&self.name).state))
    }

    async fn wait(&self) -> Result<()> {
        self.wait_timeout(Duration::MAX).await.map(|_| ())
    }

    async fn wait_timeout(&self, wait: Duration) -> Result<Option<()>> {
        let wake = self.with_table(|table| table.waker(&self.name));
        let bound = (wait != Duration::MAX).then_some(wait);
        wait_for(wake, bound, || {
            Ok(
                if self.with_table(|table| table.slot(&self.name).state) == 0 {
                    Attempt::Granted(())
                } else {
                    Attempt::Blocked(None)
                },
            )
        })
        .await
    }
}
