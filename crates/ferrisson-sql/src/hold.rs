//! One owner's hold on one lock-table row, shared by the guards of its re-entries, and
//! the watchdog that renews it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ferrisson_core::hold::HoldState;
use ferrisson_core::{FencingToken, TaskKey};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::client::Shared;

/// How soon the watchdog tries again after a renewal got no answer, as a share of the
/// renewal interval.
const RETRY_DIVISOR: u32 = 4;

/// One hold: the row `(name, owner, fence)`, who may re-enter it, until when it is
/// valid.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) name: Arc<str>,
    /// A random id per acquisition (32 hex digits).
    pub(crate) owner: String,
    pub(crate) fence: FencingToken,
    /// The task that re-enters it.
    pub(crate) task: TaskKey,
    /// How long one grant or renewal lasts.
    pub(crate) lease: Duration,
    pub(crate) state: HoldState,
    /// Live guards; changed only under the client's holds mutex, so that the last
    /// release and the record's removal are one step.
    pub(crate) guards: AtomicUsize,
    watchdog: Mutex<Option<AbortHandle>>,
}

impl Hold {
    pub(crate) fn new(
        name: Arc<str>,
        owner: String,
        fence: FencingToken,
        lease: Duration,
        state: HoldState,
    ) -> Self {
        Self {
            name,
            owner,
            fence,
            task: TaskKey::current(),
            lease,
            state,
            guards: AtomicUsize::new(0),
            watchdog: Mutex::new(None),
        }
    }

    /// Starts renewing the row every third of the lease until the hold ends, the first
    /// time a third of the lease after `sent`, when the acquire that granted it was
    /// sent.
    pub(crate) fn start_watchdog(self: &Arc<Self>, shared: &Arc<Shared>, sent: Instant) {
        let hold = Arc::downgrade(self);
        let db = shared.db.clone();
        let tables = shared.tables.clone();
        let lease = self.lease;
        let interval = lease / 3;
        let task = tokio::spawn(async move {
            // The row's expiry counts from the acquire's sending, as every renewal's from
            // its own: an acquire that took two thirds of the lease (a lock wait, a new
            // connection on a busy machine) is renewed at once, not a third of the lease
            // after its answer, which would be past the expiry.
            let mut next = sent + interval;
            loop {
                tokio::time::sleep_until(next).await;
                let Some(hold) = hold.upgrade() else {
                    return;
                };
                if !hold.state.is_held() {
                    return;
                }
                let sent = Instant::now();
                let instruments = &hold.state.meter().probe().instruments;
                match db
                    .renew(&tables, &hold.name, &hold.owner, hold.fence, lease)
                    .await
                {
                    Ok(true) => {
                        if !hold.state.extend(sent + lease) {
                            return;
                        }
                        instruments.renewed(1);
                        next = sent + interval;
                    }
                    Ok(false) => {
                        // Gone, taken or expired: lost, whatever a retry would say.
                        hold.state.mark_lost();
                        return;
                    }
                    Err(e) => {
                        // Retried until the local deadline; lost() fires at it.
                        instruments.renewal_failed(1);
                        tracing::debug!(name = %hold.name, error = %e, "lock table renewal failed; retrying");
                        next = Instant::now() + interval / RETRY_DIVISOR;
                    }
                }
            }
        });
        *self.watchdog.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
    }

    /// Stops the watchdog (the last guard is going).
    pub(crate) fn stop_watchdog(&self) {
        if let Some(task) = self
            .watchdog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }

    pub(crate) fn add_guard(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

/// Counts one guard of `hold` gone, under the client's holds mutex. Returns true when it
/// was the last: the record is then removed (a later acquire by the same task takes a
/// new row) and the watchdog stopped.
pub(crate) fn detach(shared: &Shared, hold: &Arc<Hold>) -> bool {
    let mut holds = shared.holds();
    let last = hold.guards.fetch_sub(1, Ordering::AcqRel) == 1;
    if last {
        if holds.get(&hold.name).is_some_and(|h| Arc::ptr_eq(h, hold)) {
            holds.remove(&hold.name);
        }
        hold.stop_watchdog();
    }
    last
}
