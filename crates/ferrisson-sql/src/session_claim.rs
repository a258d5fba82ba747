//! The one acquire core of the session locks ([`SessionLock`](crate::SessionLock),
//! [`SessionRwLock`](crate::SessionRwLock)'s two sides): this client's own holds first,
//! then the database on the shared session, a wait in short bounded slices, and the held
//! guard's release.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_core::cleanup::spawn_cleanup;
use ferrisson_core::hold::HoldState;
use ferrisson_core::observe::{Probe, observe_wait};
use ferrisson_core::{Error, Lease, Result, TaskKey};
use rand::Rng as _;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::client::{Client, Shared};
use crate::session::{Key, Local, Mode, Session, SessionHold, Tried};

/// The first pause of a waiter; it doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(5);
/// The longest pause of a waiter between two tries.
const MAX_POLL: Duration = Duration::from_millis(200);
/// The longest a waiter waits in PostgreSQL's own queue at a time (`lock_timeout`): the
/// session is shared, and every other statement on it waits behind this one.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(20);

/// What one primitive asks of the session: a key, a mode, a lease, whether a fencing
/// token is drawn.
#[derive(Clone)]
pub(crate) struct Claim {
    pub(crate) client: Client,
    pub(crate) probe: Probe,
    pub(crate) key: Key,
    pub(crate) mode: Mode,
    pub(crate) lease: Lease,
    /// Draw a fencing token at the grant (the read-write lock's write side).
    pub(crate) fenced: bool,
}

impl Claim {
    pub(crate) fn name(&self) -> &str {
        &self.probe.name
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.client.shared()
    }

    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.shared().session
    }

    /// One try, waiting at most `wait` in the database's queue: re-entry by the holding
    /// task, a refusal while another task of this client holds it, else the database on
    /// the shared session.
    async fn attempt(&self, wait: Duration) -> Result<Option<Arc<SessionHold>>> {
        let task = TaskKey::current();
        match self.session().local(&self.key, self.mode, task) {
            Local::Reenter(hold) => {
                if self.fenced && hold.token.get().is_none() {
                    // Held by a primitive without a token (a SessionLock of the same
                    // name in this task): draw one now, while it is held.
                    match self.session().draw_token(hold.generation).await {
                        Ok(token) => {
                            let _ = hold.token.set(token);
                        }
                        Err(e) => {
                            detach_and_release(self, &hold);
                            return Err(e);
                        }
                    }
                }
                return Ok(Some(hold));
            }
            Local::Busy => return Ok(None),
            Local::Upgrade => {
                return Err(Error::UpgradeRefused {
                    name: self.name().to_owned(),
                });
            }
            Local::Free { .. } => {}
        }
        let lease = match self.lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => Some(d),
        };
        let (reply, answer) = oneshot::channel();
        let this = self.clone();
        // On its own task: a try cut off mid-way could leave the session holding a lock
        // nobody knows of; one that arrives with nobody waiting is released there.
        tokio::spawn(async move {
            let session = Arc::clone(this.session());
            // One try at a time per client: two tasks trying at once on one session
            // would both be granted (the database's locks stack per session).
            let _serial = session.acquiring.lock().await;
            let tried = match session.local(&this.key, this.mode, task) {
                Local::Reenter(hold) => {
                    // The same task cannot be here twice; undo the count.
                    detach(&session, &hold);
                    Ok(None)
                }
                Local::Busy | Local::Upgrade => Ok(None),
                // Waiting is only sound when the session holds nothing else on the key:
                // then a `pg_locks` row after a timeout can only be this wait's grant.
                Local::Free { first } => {
                    let wait = if first { wait } else { Duration::ZERO };
                    this.try_on_session(&session, task, lease, wait).await
                }
            };
            if let Err(Ok(Some(hold))) = reply.send(tried)
                && detach(&session, &hold)
            {
                let _ = session.unlock(&hold.key, hold.mode, hold.generation).await;
            }
        });
        answer.await.map_err(|_| Error::cancelled(self.name()))?
    }

    async fn try_on_session(
        &self,
        session: &Arc<Session>,
        task: TaskKey,
        lease: Option<Duration>,
        wait: Duration,
    ) -> Result<Option<Arc<SessionHold>>> {
        let sent = Instant::now();
        let Tried::Granted(generation) = session.try_lock(&self.key, self.mode, wait).await? else {
            return Ok(None);
        };
        let token = std::sync::OnceLock::new();
        if self.fenced {
            match session.draw_token(generation).await {
                Ok(drawn) => {
                    let _ = token.set(drawn);
                }
                Err(e) => {
                    let _ = session.unlock(&self.key, self.mode, generation).await;
                    return Err(e);
                }
            }
        }
        let deadline = sent + lease.unwrap_or_else(|| session.validity());
        let state = HoldState::new(self.probe.clone(), deadline);
        state.start();
        let hold = Arc::new(SessionHold {
            name: Arc::clone(&self.probe.name),
            key: self.key.clone(),
            mode: self.mode,
            task,
            generation,
            fixed: lease.is_some(),
            state,
            guards: AtomicUsize::new(1),
            token,
        });
        session
            .holds()
            .entry(self.key.clone())
            .or_default()
            .push(Arc::clone(&hold));
        if let Some(lease) = lease {
            // A fixed lease: the client lets go at its end.
            let (session, weak_hold) = (Arc::downgrade(session), Arc::downgrade(&hold));
            tokio::spawn(async move {
                tokio::time::sleep_until(sent + lease).await;
                let (Some(session), Some(hold)) = (session.upgrade(), weak_hold.upgrade()) else {
                    return;
                };
                hold.state.mark_lost();
                if remove(&session, &hold) {
                    let _ = session.unlock(&hold.key, hold.mode, hold.generation).await;
                }
            });
        }
        Ok(Some(hold))
    }

    /// Takes the lock, waiting at most `wait` (`None`: as long as it takes). The first
    /// try never waits; each later one waits in the database's queue for at most
    /// [`WAIT_SLICE`] (PostgreSQL) between back-off pauses, and a release in this client
    /// wakes its waiters at once.
    pub(crate) async fn acquire(&self, wait: Option<Duration>) -> Result<Option<Arc<SessionHold>>> {
        let shared = Arc::clone(self.shared());
        let registration = shared.wakers.register(&self.probe.name);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let notified = registration.notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match self.attempt(Duration::ZERO).await {
            Ok(Some(hold)) => return Ok(Some(hold)),
            Ok(None) => {}
            // As the lock table's wait: a bounded wait rides out a lost session.
            Err(e) if crate::wake::rides_out(wait, &e) => {}
            Err(e) => return Err(e),
        }
        if wait == Some(Duration::ZERO) {
            return Ok(None);
        }
        observe_wait(&self.probe, async {
            let mut polls: u32 = 0;
            loop {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(None);
                }
                let backoff = FIRST_POLL.saturating_mul(1 << polls.min(10)).min(MAX_POLL);
                polls = polls.saturating_add(1);
                let mut until = now + backoff.mul_f64(rand::rng().random_range(0.5..=1.0));
                if let Some(deadline) = deadline {
                    until = until.min(deadline);
                }
                tokio::select! {
                    () = notified.as_mut() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
                notified.set(registration.notify().notified());
                notified.as_mut().enable();
                let slice = deadline.map_or(WAIT_SLICE, |d| {
                    d.saturating_duration_since(Instant::now()).min(WAIT_SLICE)
                });
                match self.attempt(slice).await {
                    Ok(Some(hold)) => return Ok(Some(hold)),
                    Ok(None) => {}
                    // The session went away while waiting (the database restarted, the
                    // session was killed): the next try opens a new one; the wait's
                    // deadline still bounds it.
                    Err(e) if e.is_connection_error() => {
                        tracing::debug!(name = %self.probe.name, error = %e, "session lock waiter lost its session; waiting on");
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .await
    }
}

/// Takes `hold` out of the session's record; true when it was there.
fn remove(session: &Session, hold: &Arc<SessionHold>) -> bool {
    remove_from(&mut session.holds(), hold)
}

fn remove_from(holds: &mut HashMap<Key, Vec<Arc<SessionHold>>>, hold: &Arc<SessionHold>) -> bool {
    let Some(list) = holds.get_mut(&hold.key) else {
        return false;
    };
    let before = list.len();
    list.retain(|h| !Arc::ptr_eq(h, hold));
    let removed = list.len() != before;
    if list.is_empty() {
        holds.remove(&hold.key);
    }
    removed
}

/// Counts one guard of `hold` gone; true when it was the last (the record is removed,
/// under the same lock as the count, so that no re-entry can pick it up in between).
pub(crate) fn detach(session: &Session, hold: &Arc<SessionHold>) -> bool {
    let mut holds = session.holds();
    let last = hold.guards.fetch_sub(1, Ordering::AcqRel) == 1;
    if last {
        remove_from(&mut holds, hold);
    }
    last
}

/// Drops one guard of a re-entered hold that could not be handed out.
fn detach_and_release(claim: &Claim, hold: &Arc<SessionHold>) {
    let session = Arc::clone(claim.session());
    if detach(&session, hold) {
        let hold = Arc::clone(hold);
        tokio::spawn(async move {
            let _ = session.unlock(&hold.key, hold.mode, hold.generation).await;
        });
    }
}

/// A hold handed out: the body every session guard wraps. Dropping it releases on a
/// spawned task.
pub(crate) struct Held {
    claim: Claim,
    hold: Arc<SessionHold>,
    released: bool,
}

impl Held {
    pub(crate) fn new(claim: Claim, hold: Arc<SessionHold>) -> Self {
        Self {
            claim,
            hold,
            released: false,
        }
    }

    pub(crate) fn hold(&self) -> &Arc<SessionHold> {
        &self.hold
    }

    pub(crate) fn name(&self) -> &str {
        &self.hold.name
    }

    pub(crate) fn is_held(&self) -> bool {
        self.hold.state.is_held()
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.hold.state.remaining()
    }

    pub(crate) async fn lost(&self) {
        self.hold.state.lost().await;
    }

    pub(crate) async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let session = Arc::clone(self.claim.session());
        let last = detach(&session, &self.hold);
        release(
            session,
            Arc::clone(self.claim.shared()),
            Arc::clone(&self.hold),
            last,
        )
        .await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let session = Arc::clone(self.claim.session());
        let shared = Arc::clone(self.claim.shared());
        let hold = Arc::clone(&self.hold);
        let last = detach(&session, &hold);
        spawn_cleanup(
            &hold.name.clone(),
            "releasing a dropped session lock guard",
            "the lock is freed when the session ends",
            async move {
                match release(session, shared, hold, last).await {
                    Err(Error::LeaseExpired { .. }) | Ok(()) => Ok(()),
                    Err(e) => Err(e),
                }
            },
        );
    }
}

/// Releases one guard of `hold`: the database's unlock when it was the last.
async fn release(
    session: Arc<Session>,
    shared: Arc<Shared>,
    hold: Arc<SessionHold>,
    last: bool,
) -> Result<()> {
    let name = Arc::clone(&hold.name);
    // A hold that had ended here answers LeaseExpired whatever the database says (see
    // `HoldState::release`).
    let released = hold
        .state
        .release(None, last, async {
            if !last {
                return Ok(());
            }
            let unlocked = session
                .unlock(&hold.key, hold.mode, hold.generation)
                .await?;
            if unlocked {
                Ok(())
            } else {
                Err(Error::LeaseExpired {
                    name: name.to_string(),
                })
            }
        })
        .await;
    if matches!(released, Err(Error::LeaseExpired { .. })) {
        hold.state.mark_lost();
    }
    if last {
        shared.wakers.wake(&name);
    }
    released
}
