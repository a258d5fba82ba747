//! The database's own session lock (PostgreSQL advisory lock, MySQL/MariaDB `GET_LOCK`)
//! behind the contract: held by the client's one session, watched by its heartbeat.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_core::cleanup::spawn_cleanup;
use ferrisson_core::hold::HoldState;
use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire, observe_wait};
use ferrisson_core::{Capabilities, DistributedLock, Error, Guard, Lease, Result, TaskKey};
use rand::Rng as _;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::capabilities;
use crate::client::{Client, Shared};
use crate::session::{Key, Session, SessionHold, Tried};
use crate::table_lock::MAX_NAME_LEN;

/// The first pause of a waiter; it doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(5);
/// The longest pause of a waiter between two tries.
const MAX_POLL: Duration = Duration::from_millis(200);

/// A session lock: PostgreSQL's `pg_try_advisory_lock(key)` (the key derived from the
/// name by [`advisory_key`](crate::advisory_key)) or MySQL's `GET_LOCK(name, 0)` (the
/// name mapped by [`mysql_lock_name`](crate::mysql_lock_name)), taken on the client's one
/// session connection, which all its session locks share.
///
/// The database frees the lock when the session ends, so a holder that dies frees it at
/// once (or, over a half-open connection, when the server's TCP keepalive gives up).
/// The client pings the session every heartbeat (5 s by default): when it does not
/// answer, the session is closed and every guard on it fires `lost()`. There is no
/// fencing token. Waiters try again on a back-off (5 to 200 ms, jittered): the blocking
/// forms would pin a connection per waiter and hold the shared session.
///
/// Behind PgBouncer in transaction mode a session lock is not safe (the next statement
/// may reach another server session): use [`TableLock`](crate::TableLock) there.
///
/// ```no_run
/// use ferrisson_core::{DistributedLock, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
/// let guard = client.session_lock("nightly-report")?.lock().await?;
/// guard.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct SessionLock {
    client: Client,
    probe: Probe,
    key: Key,
    lease: Lease,
}

impl fmt::Debug for SessionLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLock")
            .field("name", &self.probe.name)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl SessionLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::invalid("name must not be empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "name must be at most {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        let probe = client.shared().classes.probe(Kind::Lock, &Arc::from(name));
        let key = Key::of(client.dialect(), name);
        Ok(Self {
            client,
            probe,
            key,
            lease: Lease::Watchdog,
        })
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// assert_eq!(client.session_lock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The same lock with another lease: [`Lease::Watchdog`] (the default) lasts while
    /// the session does; [`Lease::Fixed`] is released by the client after its duration.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// let lock = client.session_lock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = lock; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// Ends the hold, whoever has it, as an administrator would: the holder's session is
    /// terminated (`pg_terminate_backend`, `KILL`), which frees every lock it held; its
    /// guards' `lost()` fires at their next heartbeat. Returns whether anyone held it.
    ///
    /// # Errors
    ///
    /// When the database cannot be reached or refuses (the right to end other sessions
    /// is needed).
    ///
    /// # Cancel safety
    ///
    /// The termination may or may not have run when the future is dropped.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
    /// let ended = client.session_lock("stuck")?.force_unlock().await?;
    /// # let _ = ended; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let shared = self.client.shared();
        shared
            .db
            .end_session_holding(&shared.tables, &self.key)
            .await
    }

    fn shared(&self) -> &Arc<Shared> {
        self.client.shared()
    }

    fn session(&self) -> &Arc<Session> {
        &self.shared().session
    }

    /// One try: re-entry by the holding task, a refusal while another task of this
    /// client holds it, else the database's try form on the shared session.
    async fn attempt(&self) -> Result<Option<SessionLockGuard>> {
        let session = Arc::clone(self.session());
        {
            let holds = session.holds();
            if let Some(hold) = holds.get(self.name())
                && hold.state.is_held()
            {
                if hold.task != TaskKey::current() {
                    return Ok(None);
                }
                hold.guards.fetch_add(1, Ordering::AcqRel);
                return Ok(Some(self.guard(hold)));
            }
        }
        let lease = match self.lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => Some(d),
        };
        let task = TaskKey::current();
        let (reply, answer) = oneshot::channel();
        let this = self.clone();
        // On its own task: a try cut off mid-way could leave the session holding a lock
        // nobody knows of; one that arrives with nobody waiting is released there.
        tokio::spawn(async move {
            let session = Arc::clone(this.session());
            // One try at a time per client: two tasks trying at once on one session
            // would both be granted (the database's locks stack per session).
            let _serial = session.acquiring.lock().await;
            let busy = session
                .holds()
                .get(this.name())
                .is_some_and(|h| h.state.is_held());
            let tried = if busy {
                Ok(None)
            } else {
                this.try_on_session(&session, task, lease).await
            };
            if let Err(Ok(Some(hold))) = reply.send(tried) {
                let last = detach(&session, &hold);
                if last {
                    let _ = session.unlock(&hold.key, hold.generation).await;
                }
            }
        });
        let hold = answer.await.map_err(|_| Error::cancelled(self.name()))??;
        Ok(hold.map(|hold| self.guard(&hold)))
    }

    async fn try_on_session(
        &self,
        session: &Arc<Session>,
        task: TaskKey,
        lease: Option<Duration>,
    ) -> Result<Option<Arc<SessionHold>>> {
        let sent = Instant::now();
        let Tried::Granted(generation) = session.try_lock(&self.key).await? else {
            return Ok(None);
        };
        let deadline = sent + lease.unwrap_or_else(|| session.validity());
        let state = HoldState::new(self.probe.clone(), deadline);
        state.start();
        let hold = Arc::new(SessionHold {
            name: Arc::clone(&self.probe.name),
            key: self.key.clone(),
            task,
            generation,
            fixed: lease.is_some(),
            state,
            guards: AtomicUsize::new(1),
        });
        session
            .holds()
            .insert(Arc::clone(&hold.name), Arc::clone(&hold));
        if let Some(lease) = lease {
            // A fixed lease: the client lets go at its end.
            let (session, weak_hold) = (Arc::downgrade(session), Arc::downgrade(&hold));
            tokio::spawn(async move {
                tokio::time::sleep_until(sent + lease).await;
                let (Some(session), Some(hold)) = (session.upgrade(), weak_hold.upgrade()) else {
                    return;
                };
                hold.state.mark_lost();
                let mine = {
                    let mut holds = session.holds();
                    let mine = holds.get(&hold.name).is_some_and(|h| Arc::ptr_eq(h, &hold));
                    if mine {
                        holds.remove(&hold.name);
                    }
                    mine
                };
                if mine {
                    let _ = session.unlock(&hold.key, hold.generation).await;
                }
            });
        }
        Ok(Some(hold))
    }

    fn guard(&self, hold: &Arc<SessionHold>) -> SessionLockGuard {
        SessionLockGuard {
            lock: self.clone(),
            hold: Arc::clone(hold),
            released: false,
        }
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<SessionLockGuard>> {
        let shared = Arc::clone(self.shared());
        let registration = shared.wakers.register(&self.probe.name);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let notified = registration.notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(guard) = self.attempt().await? {
            return Ok(Some(guard));
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
                match self.attempt().await {
                    Ok(Some(guard)) => return Ok(Some(guard)),
                    Ok(None) => {}
                    // The session went away while waiting (the database restarted, the
                    // session was killed): the next try opens a new one; the wait's
                    // deadline still bounds it.
                    Err(e) if e.is_connection_error() => {
                        tracing::debug!(name = %self.name(), error = %e, "session lock waiter lost its session; waiting on");
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .await
    }
}

impl DistributedLock for SessionLock {
    type Guard = SessionLockGuard;

    fn name(&self) -> &str {
        SessionLock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        capabilities::session_lock(self.client.dialect())
    }

    async fn lock(&self) -> Result<SessionLockGuard> {
        observe_acquire(&self.probe, None, self.acquire(None))
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_lock(&self) -> Result<Option<SessionLockGuard>> {
        let wait = Some(Duration::ZERO);
        observe_acquire(&self.probe, wait, self.acquire(wait)).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<SessionLockGuard>> {
        observe_acquire(&self.probe, Some(wait), self.acquire(Some(wait))).await
    }
}

/// Counts one guard of `hold` gone; true when it was the last (the record is removed).
fn detach(session: &Session, hold: &Arc<SessionHold>) -> bool {
    let mut holds = session.holds();
    let last = hold.guards.fetch_sub(1, Ordering::AcqRel) == 1;
    if last && holds.get(&hold.name).is_some_and(|h| Arc::ptr_eq(h, hold)) {
        holds.remove(&hold.name);
    }
    last
}

/// Proof of holding a [`SessionLock`]; no fencing token. Dropping it releases on a
/// spawned task.
#[must_use = "dropping the guard releases the lock"]
pub struct SessionLockGuard {
    lock: SessionLock,
    hold: Arc<SessionHold>,
    released: bool,
}

impl fmt::Debug for SessionLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLockGuard")
            .field("name", &self.hold.name)
            .field("held", &self.hold.state.is_held())
            .finish_non_exhaustive()
    }
}

/// No fencing token: the default `Grant`.
impl Grant for SessionLockGuard {}

impl SessionLockGuard {
    async fn release(
        session: Arc<Session>,
        shared: Arc<Shared>,
        hold: Arc<SessionHold>,
        last: bool,
    ) -> Result<()> {
        let ended = !hold.state.is_held();
        let name = Arc::clone(&hold.name);
        let released = hold
            .state
            .meter()
            .release(
                None,
                last,
                async {
                    if !last {
                        return if ended {
                            Err(Error::LeaseExpired {
                                name: name.to_string(),
                            })
                        } else {
                            Ok(())
                        };
                    }
                    let unlocked = session.unlock(&hold.key, hold.generation).await?;
                    if unlocked && !ended {
                        Ok(())
                    } else {
                        Err(Error::LeaseExpired {
                            name: name.to_string(),
                        })
                    }
                },
                |()| false,
            )
            .await;
        if matches!(released, Err(Error::LeaseExpired { .. })) {
            hold.state.mark_lost();
        }
        if last {
            shared.wakers.wake(&name);
        }
        released
    }
}

impl Guard for SessionLockGuard {
    fn name(&self) -> &str {
        &self.hold.name
    }

    fn is_held(&self) -> bool {
        self.hold.state.is_held()
    }

    fn remaining(&self) -> Duration {
        self.hold.state.remaining()
    }

    async fn lost(&self) {
        self.hold.state.lost().await;
    }

    async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let session = Arc::clone(self.lock.session());
        let last = detach(&session, &self.hold);
        Self::release(
            session,
            Arc::clone(self.lock.shared()),
            Arc::clone(&self.hold),
            last,
        )
        .await
    }
}

impl Drop for SessionLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let session = Arc::clone(self.lock.session());
        let shared = Arc::clone(self.lock.shared());
        let hold = Arc::clone(&self.hold);
        let last = detach(&session, &hold);
        spawn_cleanup(
            &hold.name.clone(),
            "releasing a dropped session lock guard",
            "the lock is freed when the session ends",
            async move {
                match Self::release(session, shared, hold, last).await {
                    Err(Error::LeaseExpired { .. }) | Ok(()) => Ok(()),
                    Err(e) => Err(e),
                }
            },
        );
    }
}
