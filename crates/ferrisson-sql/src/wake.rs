//! Waking a client's waiters: one slot per lock name that has local waiters, woken by a
//! local release and, on PostgreSQL, by the one `LISTEN` connection the client keeps for
//! all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::Notify;

/// The wake-up slots of one client, by lock name.
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    slots: Mutex<HashMap<Arc<str>, Slot>>,
}

#[derive(Debug)]
struct Slot {
    notify: Arc<Notify>,
    waiters: usize,
}

impl Wakers {
    fn slots(&self) -> MutexGuard<'_, HashMap<Arc<str>, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a waiter for `name` until the returned registration drops.
    pub(crate) fn register(self: &Arc<Self>, name: &Arc<str>) -> Registration {
        let mut slots = self.slots();
        let slot = slots.entry(Arc::clone(name)).or_insert_with(|| Slot {
            notify: Arc::new(Notify::new()),
            waiters: 0,
        });
        slot.waiters += 1;
        Registration {
            wakers: Arc::clone(self),
            name: Arc::clone(name),
            notify: Arc::clone(&slot.notify),
        }
    }

    /// Wakes every waiter of `name` in this client (for a semaphore's permit row
    /// `semaphore:NAME#SLOT`, the waiters of `semaphore:NAME`): for holds that several
    /// waiters may take at once (the readers of a read-write lock).
    pub(crate) fn wake(&self, name: &str) {
        self.signal(name, Notify::notify_waiters);
    }

    /// Wakes one waiter of `name` in this client (as [`Wakers::wake`] finds it): a
    /// released row, or permit, can go to one of them only, and waking them all had
    /// every waiter of every client run its insert at each release. A woken waiter that
    /// is dropped before it looked passes the wake-up on (tokio's `Notify`); one that
    /// looks and loses to another client waits for that client's release.
    pub(crate) fn wake_one(&self, name: &str) {
        self.signal(name, Notify::notify_one);
    }

    fn signal(&self, name: &str, signal: fn(&Notify)) {
        let slots = self.slots();
        if let Some(slot) = slots.get(name) {
            signal(&slot.notify);
        }
        let semaphore = name
            .strip_prefix(crate::table_lock::SEMAPHORE_PREFIX)
            .and_then(|rest| rest.rsplit_once('#'))
            .map(|(base, _)| &name[..crate::table_lock::SEMAPHORE_PREFIX.len() + base.len()]);
        if let Some(slot) = semaphore.and_then(|key| slots.get(key)) {
            signal(&slot.notify);
        }
    }

    /// Wakes every waiter: after the listener missed notifications, each re-checks.
    pub(crate) fn wake_all(&self) {
        for slot in self.slots().values() {
            slot.notify.notify_waiters();
        }
    }
}

/// One waiter's registration: its slot is removed with its last waiter.
#[derive(Debug)]
pub(crate) struct Registration {
    wakers: Arc<Wakers>,
    name: Arc<str>,
    notify: Arc<Notify>,
}

impl Registration {
    /// The slot's signal: create the `Notified` and `enable` it before the attempt it
    /// follows, so that a wake between the attempt and the wait is not lost.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut slots = self.wakers.slots();
        if let Some(slot) = slots.get_mut(&self.name) {
            slot.waiters -= 1;
            if slot.waiters == 0 {
                slots.remove(&self.name);
            }
        }
    }
}

/// How long the listener waits before trying again after it could not reconnect.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// Connects the client's one listening connection and listens on `channel`.
pub(crate) async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// The listener's loop: each notification wakes a waiter of the row it names; a
/// reconnect (notifications may have been missed meanwhile) wakes them all. Ends when
/// the client is gone.
pub(crate) async fn run_listener(mut listener: PgListener, channel: String, wakers: Weak<Wakers>) {
    loop {
        let received = listener.try_recv().await;
        let Some(local) = wakers.upgrade() else {
            return;
        };
        match received {
            Ok(Some(notification)) => local.wake_one(notification.payload()),
            // Lost and (eagerly) reconnected, listening again: re-check everything.
            Ok(None) => local.wake_all(),
            Err(e) => {
                tracing::warn!(error = %e, "the lock table's listener lost its connection; reconnecting");
                drop(local);
                // Reconnect explicitly (listen() reconnects and listens again), then
                // re-check everything: releases in the gap were not heard. Until then
                // the waiters' safety poll covers them.
                loop {
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    if listener.listen(&channel).await.is_ok() {
                        break;
                    }
                    if wakers.strong_count() == 0 {
                        return;
                    }
                }
                if let Some(local) = wakers.upgrade() {
                    local.wake_all();
                }
            }
        }
    }
}

/// Whether a wait of `wait` goes on through `error` on its first look: only a bounded
/// wait, through a lost connection.
pub(crate) fn rides_out(wait: Option<Duration>, error: &ferrisson_core::Error) -> bool {
    wait.is_some_and(|w| !w.is_zero()) && error.is_connection_error()
}
