//! What every memory primitive shares: a table of per-name slots, each with the state of
//! one primitive and the `Notify` its waiters listen on, and the wait loop over them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::Result;

/// The slots of one kind of primitive, by name.
#[derive(Default)]
pub(crate) struct Table<S> {
    slots: HashMap<Arc<str>, Slot<S>>,
}

/// One name's state and its waiters' wake-up.
pub(crate) struct Slot<S> {
    pub(crate) state: S,
    wake: Arc<Notify>,
}

impl<S: Default> Table<S> {
    /// The slot of `name`, made empty when there is none.
    pub(crate) fn slot(&mut self, name: &Arc<str>) -> &mut Slot<S> {
        self.slots.entry(Arc::clone(name)).or_insert_with(|| Slot {
            state: S::default(),
            wake: Arc::new(Notify::new()),
        })
    }

    /// The slot of `name` if there is one.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Slot<S>> {
        self.slots.get_mut(name)
    }

    /// The wake-up of `name`'s waiters.
    pub(crate) fn waker(&mut self, name: &Arc<str>) -> Arc<Notify> {
        Arc::clone(&self.slot(name).wake)
    }

    /// Forgets `name`'s slot when `idle` says its state holds nothing and no waiter
    /// listens on it (a waiter keeps its `Arc` of the wake-up), so that a store used with
    /// many names does not grow without bound.
    pub(crate) fn tidy(&mut self, name: &str, idle: impl FnOnce(&S) -> bool) {
        if let Some(slot) = self.slots.get(name)
            && Arc::strong_count(&slot.wake) == 1
            && idle(&slot.state)
        {
            self.slots.remove(name);
        }
    }
}

impl<S> Slot<S> {
    /// Wakes every waiter of this name to try again.
    pub(crate) fn wake_all(&self) {
        self.wake.notify_waiters();
    }
}

/// What one attempt found.
pub(crate) enum Attempt<T> {
    Granted(T),
    /// Taken; try again when woken, or at this time (a holder's lease ends) if given.
    Blocked(Option<Instant>),
}

/// Runs `attempt` until it grants or `wait` runs out (`None`: no bound), sleeping between
/// attempts until `wake` fires or the time the attempt named.
///
/// # Cancel safety
///
/// Cancel safe: attempts are atomic under the table's mutex, and nothing is registered
/// between them but the wake-up listener, which is dropped with the future.
pub(crate) async fn wait_for<T>(
    wake: Arc<Notify>,
    wait: Option<Duration>,
    mut attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    let deadline = wait.and_then(|w| Instant::now().checked_add(w));
    loop {
        // Listening before trying: a release between the attempt and the wait still wakes.
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let recheck = match attempt()? {
            Attempt::Granted(granted) => return Ok(Some(granted)),
            Attempt::Blocked(recheck) => recheck,
        };
        if wait.is_some_and(|w| w.is_zero()) {
            return Ok(None);
        }
        let until = match (recheck, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match until {
            Some(until) => {
                tokio::select! {
                    () = woken => {}
                    () = tokio::time::sleep_until(until) => {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            // One last attempt: the holder's lease may have ended at
                            // the same moment.
                            return match attempt()? {
                                Attempt::Granted(granted) => Ok(Some(granted)),
                                Attempt::Blocked(_) => Ok(None),
                            };
                        }
                    }
                }
            }
            None => woken.await,
        }
    }
}
