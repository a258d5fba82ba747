//! The lock table's lock: a row per held lock, expiry in database time, a fencing token
//! from a sequence, re-entry per task, a watchdog, and waiters woken by the release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::cleanup::spawn_cleanup;
use ferrisson_core::hold::HoldState;
use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire, observe_wait};
use ferrisson_core::{
    Capabilities, DistributedLock, Error, Fenced, FencingToken, Guard, Lease, Result, TaskKey,
};
use rand::Rng as _;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::capabilities;
use crate::client::{Client, Shared};
use crate::dialect::Dialect;
use crate::hold::{Hold, detach};
use crate::statements::{Attempt, ReleaseOutcome};

/// Longest lock name, in bytes (the MySQL table's key is `VARBINARY(255)`).
pub const MAX_NAME_LEN: usize = 255;

/// The first pause of a polling (MySQL) waiter; it doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(5);
/// The longest pause of a polling waiter between two looks.
const MAX_POLL: Duration = Duration::from_millis(100);
/// Added to a holder's known expiry before looking again, so that the look comes after
/// it in the database's time too.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// A lock in the client's lock table, reentrant inside the task that holds it.
///
/// Acquiring inserts the lock's row, or takes over a row whose expiry (in the database's
/// time) has passed, in one statement; the row's fencing token is drawn from a sequence
/// (PostgreSQL) or a counter row (MySQL) while the row is held, so it is greater than
/// every earlier holder's. With [`Lease::Watchdog`] (the default) the client renews the
/// expiry every third of its watchdog lease; a renewal that finds the row gone or taken
/// fires the guard's `lost()`. Releasing deletes the row by name, owner and token.
///
/// Waiters on PostgreSQL are woken by the release's `NOTIFY`, heard by the one listening
/// connection of their client; on MySQL/MariaDB they poll with back-off (5 to 100 ms,
/// jittered). Either way a release in the same client wakes its waiters at once.
///
/// ```no_run
/// use ferrisson_core::{DistributedLock, Fenced, Guard};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let client = ferrisson_sql::Client::connect("mysql://root@127.0.0.1/test").await?;
/// let lock = client.lock("report")?;
/// if let Some(guard) = lock.try_lock().await? {
///     println!("token {}", guard.fencing_token());
///     guard.unlock().await?;
/// }
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct TableLock {
    client: Client,
    probe: Probe,
    /// The row's name: the lock's name, or `election:` and the election's.
    key: Arc<str>,
    /// Re-entry per task (locks); an election's campaign never re-enters.
    reentrant: bool,
    lease: Lease,
}

/// The prefix of an election's row: elections and locks of one name are apart.
const ELECTION_PREFIX: &str = "election:";
/// The prefix of a semaphore's permit rows (`semaphore:NAME#SLOT`).
pub(crate) const SEMAPHORE_PREFIX: &str = "semaphore:";
/// Room kept for `#SLOT` after a semaphore's name (up to 65 535 permits).
const SLOT_SUFFIX_LEN: usize = 6;

impl fmt::Debug for TableLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableLock")
            .field("name", &self.probe.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// What one look at the table gave.
pub(crate) enum Step {
    Granted(TableLockGuard),
    Busy(Option<Duration>),
}

impl TableLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Self::of_kind(client, name, Kind::Lock)
    }

    /// Permit `slot` of the semaphore `name`: the row `semaphore:NAME#SLOT`.
    pub(crate) fn permit_slot(client: Client, name: &str, slot: u32) -> Result<Self> {
        let mut lock = Self::of_kind(client, name, Kind::Semaphore)?;
        lock.key = Arc::from(format!("{SEMAPHORE_PREFIX}{name}#{slot}"));
        Ok(lock)
    }

    pub(crate) fn of_kind(client: Client, name: &str, kind: Kind) -> Result<Self> {
        let (key, max) = match kind {
            Kind::Semaphore => (
                format!("{SEMAPHORE_PREFIX}{name}"),
                MAX_NAME_LEN - SEMAPHORE_PREFIX.len() - SLOT_SUFFIX_LEN,
            ),
            Kind::Election => (
                format!("{ELECTION_PREFIX}{name}"),
                MAX_NAME_LEN - ELECTION_PREFIX.len(),
            ),
            _ => (name.to_owned(), MAX_NAME_LEN),
        };
        if name.is_empty() {
            return Err(Error::invalid("name must not be empty"));
        }
        if name.len() > max {
            return Err(Error::invalid(format!(
                "name must be at most {max} bytes, got {}",
                name.len()
            )));
        }
        if name.contains('\0') {
            return Err(Error::invalid("name must not contain a NUL character"));
        }
        let probe = client.shared().classes.probe(kind, &Arc::from(name));
        Ok(Self {
            client,
            probe,
            key: Arc::from(key),
            reentrant: kind == Kind::Lock,
            lease: Lease::Watchdog,
        })
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// assert_eq!(client.lock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The same lock with another lease: [`Lease::Watchdog`] (the default) is renewed
    /// while held, [`Lease::Fixed`] expires after its duration, in the database's time.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let lock = client.lock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # let _ = lock; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// Ends the current hold, whoever has it, as an administrator would: the row is
    /// deleted, waiters are woken, and the holder's `lost()` fires at its next renewal.
    /// Returns whether there was a row.
    ///
    /// # Errors
    ///
    /// When the database cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// The delete may or may not have run when the future is dropped.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_sql::Client::connect("postgres://postgres@127.0.0.1/test").await?;
    /// let was_held = client.lock("stuck-job")?.force_unlock().await?;
    /// # let _ = was_held; Ok::<(), ferrisson_core::Error>(()) }).unwrap();
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let shared = self.shared();
        let gone = shared.db.force_unlock(&shared.tables, &self.key).await?;
        shared.wakers.wake_one(&self.key);
        Ok(gone)
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.client.shared()
    }

    fn lease_duration(&self) -> Duration {
        self.lease.duration(self.shared().watchdog_lease)
    }

    /// Re-enters the hold the asking task has on this lock, if it has a live one.
    async fn reenter(&self) -> Result<Option<TableLockGuard>> {
        let shared = self.shared();
        let hold = {
            let holds = shared.holds();
            match holds.get(&self.key) {
                Some(hold) if hold.task == TaskKey::current() && hold.state.is_held() => {
                    hold.add_guard();
                    Arc::clone(hold)
                }
                _ => return Ok(None),
            }
        };
        // Counted first, so that a release of another guard meanwhile keeps the row.
        let mut guard = self.guard(&hold);
        let sent = Instant::now();
        let lease = self.lease_duration();
        let entered = shared
            .db
            .reenter(&shared.tables, &self.key, &hold.owner, hold.fence, lease)
            .await;
        match entered {
            Ok(true) => {
                // As in the row: a later deadline only.
                if self.lease != Lease::Watchdog && sent + lease > hold.state.validity().deadline {
                    hold.state.extend(sent + lease);
                }
                Ok(Some(guard))
            }
            Ok(false) => {
                // The row is gone or expired: the hold is lost; acquire afresh.
                hold.state.mark_lost();
                guard.forget();
                Ok(None)
            }
            Err(e) => {
                guard.forget();
                Err(e)
            }
        }
    }

    /// One look at the table: re-entry, or an insert or take-over.
    pub(crate) async fn attempt(&self) -> Result<Step> {
        if self.reentrant
            && let Some(guard) = self.reenter().await?
        {
            return Ok(Step::Granted(guard));
        }
        let shared = Arc::clone(self.shared());
        let owner = format!("{:032x}", rand::random::<u128>());
        let lease = self.lease_duration();
        let sent = Instant::now();
        // The statement runs on its own task: dropping this future never cuts it off
        // mid-way, and a grant that arrives with nobody waiting for it is undone there,
        // after the grant (an undo sent on another connection could overtake it).
        let (reply, answer) = oneshot::channel();
        {
            let shared = Arc::clone(&shared);
            let name = Arc::clone(&self.key);
            let owner = owner.clone();
            tokio::spawn(async move {
                let attempt = shared
                    .db
                    .attempt(&shared.tables, &name, &owner, lease)
                    .await;
                if let Err(Ok(Attempt::Won(_))) = reply.send(attempt) {
                    if let Err(e) = shared.db.undo(&shared.tables, &name, &owner).await {
                        tracing::warn!(name = %name, error = %e, "undoing an abandoned acquire failed; the row expires with its lease");
                    }
                    shared.wakers.wake_one(&name);
                }
            });
        }
        let attempt = answer.await.map_err(|_| Error::cancelled(self.name()))??;
        let fence = match attempt {
            Attempt::Won(fence) => fence,
            Attempt::Busy(left) => return Ok(Step::Busy(left)),
        };
        let state = HoldState::new(self.probe.clone(), sent + lease);
        state.start();
        let hold = Arc::new(Hold::new(Arc::clone(&self.key), owner, fence, lease, state));
        hold.add_guard();
        shared
            .holds()
            .insert(Arc::clone(&self.key), Arc::clone(&hold));
        if self.lease == Lease::Watchdog {
            hold.start_watchdog(&shared, sent);
        }
        Ok(Step::Granted(self.guard(&hold)))
    }

    fn guard(&self, hold: &Arc<Hold>) -> TableLockGuard {
        TableLockGuard {
            lock: self.clone(),
            hold: Arc::clone(hold),
            released: false,
        }
    }

    /// How long a waiter waits before looking again without a wake-up: PostgreSQL waits
    /// for the notification, up to the safety poll; MySQL polls with back-off and
    /// jitter. Either way not past the holder's known expiry.
    pub(crate) fn pause(&self, polls: &mut u32, holder_left: Option<Duration>) -> Duration {
        let shared = self.shared();
        let pause = match shared.dialect() {
            Dialect::Postgres => shared.safety_poll,
            Dialect::MySql => {
                let backoff = FIRST_POLL
                    .saturating_mul(1 << (*polls).min(10))
                    .min(MAX_POLL);
                *polls = polls.saturating_add(1);
                // Jitter: contenders that polled together spread out.
                backoff.mul_f64(rand::rng().random_range(0.5..=1.0))
            }
        };
        holder_left.map_or(pause, |left| pause.min(left + EXPIRY_SLACK))
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<TableLockGuard>> {
        let shared = Arc::clone(self.shared());
        let registration = shared.wakers.register(&self.key);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        // Listening before the first look: a release between the look and the wait
        // still wakes it.
        let notified = registration.notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let mut holder_left = match self.attempt().await {
            Ok(Step::Granted(guard)) => return Ok(Some(guard)),
            Ok(Step::Busy(left)) => left,
            // A wait with a deadline rides out a database that is away (a restart) until
            // then; a try, or a wait without a deadline, reports it at once rather than
            // wait on silently.
            Err(e) if crate::wake::rides_out(wait, &e) => None,
            Err(e) => return Err(e),
        };
        if wait == Some(Duration::ZERO) {
            return Ok(None);
        }
        observe_wait(&self.probe, async {
            let mut polls = 0;
            loop {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(None);
                }
                let mut until = now + self.pause(&mut polls, holder_left);
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
                    Ok(Step::Granted(guard)) => return Ok(Some(guard)),
                    Ok(Step::Busy(left)) => holder_left = left,
                    // The database went away while waiting (a restart, the connection
                    // killed): the next look reconnects; the wait's deadline still
                    // bounds it.
                    Err(e) if e.is_connection_error() => {
                        tracing::debug!(name = %self.name(), error = %e, "lock table waiter lost its connection; waiting on");
                        holder_left = None;
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .await
    }
}

impl DistributedLock for TableLock {
    type Guard = TableLockGuard;

    fn name(&self) -> &str {
        TableLock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        if self.reentrant {
            capabilities::table_lock(self.shared().dialect())
        } else {
            capabilities::table_election(self.shared().dialect())
        }
    }

    async fn lock(&self) -> Result<TableLockGuard> {
        observe_acquire(&self.probe, None, self.acquire(None))
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_lock(&self) -> Result<Option<TableLockGuard>> {
        let wait = Some(Duration::ZERO);
        observe_acquire(&self.probe, wait, self.acquire(wait)).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<TableLockGuard>> {
        observe_acquire(&self.probe, Some(wait), self.acquire(Some(wait))).await
    }
}

/// Proof of holding a [`TableLock`]. Dropping it releases on a spawned task; `unlock`
/// is the checked release.
#[must_use = "dropping the guard releases the lock"]
pub struct TableLockGuard {
    lock: TableLock,
    hold: Arc<Hold>,
    released: bool,
}

impl fmt::Debug for TableLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableLockGuard")
            .field("name", &self.lock.name())
            .field("fencing_token", &self.hold.fence)
            .field("held", &self.hold.state.is_held())
            .finish_non_exhaustive()
    }
}

impl Grant for TableLockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.hold.fence)
    }
}

impl TableLockGuard {
    /// Drops this guard's count without touching the row (a re-entry that did not
    /// happen).
    fn forget(&mut self) {
        self.released = true;
        let shared = self.lock.shared();
        if detach(shared, &self.hold) {
            // The re-entry found the row gone: nothing left to release.
            self.hold.state.meter().end(true);
        }
    }

    /// Releases this guard's share of the hold: the last one deletes the row.
    async fn release(shared: Arc<Shared>, hold: Arc<Hold>, last: bool) -> Result<()> {
        let name = Arc::clone(&hold.name);
        // Past its local deadline the hold counts as ended (its guards may have acted on
        // that), even if the database's expiry, a little later, has not passed yet: the
        // row is removed all the same, and the release says the lease expired
        // (`HoldState::release`).
        let released = hold
            .state
            .release(Some(hold.fence), last, async {
                let outcome = if last {
                    shared
                        .db
                        .release_last(&shared.tables, &name, &hold.owner, hold.fence)
                        .await?
                } else {
                    shared
                        .db
                        .release_one(&shared.tables, &name, &hold.owner, hold.fence)
                        .await?
                };
                match outcome {
                    ReleaseOutcome::Released => Ok(()),
                    ReleaseOutcome::Expired | ReleaseOutcome::Gone => Err(Error::LeaseExpired {
                        name: name.to_string(),
                    }),
                    ReleaseOutcome::Taken => Err(Error::NotOwner {
                        name: name.to_string(),
                    }),
                }
            })
            .await;
        if matches!(
            released,
            Err(Error::LeaseExpired { .. } | Error::NotOwner { .. })
        ) {
            hold.state.mark_lost();
        }
        if last {
            // The same client's waiters need no round trip through the database.
            shared.wakers.wake_one(&name);
        }
        released
    }
}

impl Guard for TableLockGuard {
    fn name(&self) -> &str {
        self.lock.name()
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
        let shared = Arc::clone(self.lock.shared());
        let last = detach(&shared, &self.hold);
        Self::release(shared, Arc::clone(&self.hold), last).await
    }
}

impl Fenced for TableLockGuard {
    fn fencing_token(&self) -> FencingToken {
        self.hold.fence
    }
}

impl Drop for TableLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let shared = Arc::clone(self.lock.shared());
        let hold = Arc::clone(&self.hold);
        let last = detach(&shared, &hold);
        spawn_cleanup(
            &hold.name.clone(),
            "releasing a dropped guard",
            "the row expires with its lease",
            async move {
                match Self::release(shared, hold, last).await {
                    // A hold already lost has nothing left to release.
                    Err(Error::LeaseExpired { .. } | Error::NotOwner { .. }) | Ok(()) => Ok(()),
                    Err(e) => Err(e),
                }
            },
        );
    }
}
