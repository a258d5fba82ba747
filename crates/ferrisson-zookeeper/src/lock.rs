//! The lock: Curator's `InterProcessMutex` recipe, reentrant per task, with a fencing
//! token and a lost signal.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ferrisson_core::hold::HoldState;
use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire};
use ferrisson_core::{
    Capabilities, DistributedLock, Error, Fenced, FencingToken, Guard, Lease, Result, TaskKey,
};
use tokio::time::Instant;
use zookeeper_client::{EventType, OneshotWatcher};

use crate::capabilities::{ELECTION, LOCK, RW_LOCK, SEMAPHORE};
use crate::client::{Client, Holder, Inner};
use crate::error::zk;
use crate::path::{ELECTIONS_ROOT, LOCKS_ROOT, RWLOCKS_ROOT, SEMAPHORES_ROOT, path_of};
use crate::queue::{Contender, Position, Turn};

/// What a queue's hold is: a lock (re-entered per task), a leadership (not), or a side
/// of a read-write lock (re-entered per task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Curator's `InterProcessMutex`.
    Lock,
    /// Curator's `LeaderLatch`.
    Election,
    /// The lock inside a semaphore (Curator's `InterProcessSemaphoreV2`'s `locks`
    /// child): not reentrant, counted as the semaphore.
    SemaphoreMutex,
    /// The read side of Curator's `InterProcessReadWriteLock`.
    Read,
    /// Its write side.
    Write,
}

/// Curator's lock names for the read-write lock's nodes.
const READ_NAME: &str = "__READ__";
const WRITE_NAME: &str = "__WRIT__";

impl Flavor {
    /// Curator's lock name for the flavor's nodes (`lock-` for `InterProcessMutex`,
    /// `latch-` for `LeaderLatch`, `__READ__` and `__WRIT__` for
    /// `InterProcessReadWriteLock`).
    fn node_name(self) -> &'static str {
        match self {
            Self::Lock | Self::SemaphoreMutex => "lock-",
            Self::Election => "latch-",
            Self::Read => READ_NAME,
            Self::Write => WRITE_NAME,
        }
    }

    /// Every lock name in the flavor's queue.
    fn queue_names(self) -> &'static [&'static str] {
        match self {
            Self::Lock | Self::SemaphoreMutex => &["lock-"],
            Self::Election => &["latch-"],
            Self::Read | Self::Write => &[READ_NAME, WRITE_NAME],
        }
    }

    fn turn(self) -> Turn {
        match self {
            Self::Read => Turn::NoWriterAhead {
                writers: WRITE_NAME,
            },
            _ => Turn::First,
        }
    }

    fn root(self) -> &'static str {
        match self {
            Self::Lock => LOCKS_ROOT,
            Self::Election => ELECTIONS_ROOT,
            Self::SemaphoreMutex => SEMAPHORES_ROOT,
            Self::Read | Self::Write => RWLOCKS_ROOT,
        }
    }

    fn kind(self) -> Kind {
        match self {
            Self::Lock => Kind::Lock,
            Self::Election => Kind::Election,
            Self::SemaphoreMutex => Kind::Semaphore,
            Self::Read => Kind::RwLockRead,
            Self::Write => Kind::RwLockWrite,
        }
    }

    fn reenters(self) -> bool {
        !matches!(self, Self::Election | Self::SemaphoreMutex)
    }
}

/// A reentrant ZooKeeper lock, compatible with Curator's `InterProcessMutex` on the
/// same path: each contender creates a protected ephemeral sequential node
/// `_c_<guid>-lock-<sequence>` under the lock's path (created as container nodes when
/// missing), the lowest sequence holds, and every other contender watches only the node
/// just ahead of its own (with `getData`, as Curator does). A Java service and a Rust
/// one on the same path exclude each other, and wait for each other in one queue.
///
/// - **Fair**: granted in the order the nodes were created.
/// - **Reentrant per task**: the task holding it takes it again at once (the same
///   token); every hold is released on its own.
/// - **Fencing token**: the `czxid` of the holder's node, the id of the transaction
///   that created it. Each holder's node was created after every earlier holder's (a
///   node ahead in the queue was created first), so the tokens grow with every holder;
///   unlike the sequence number, they keep growing when the lock's container parent is
///   removed while empty and created again (its sequence then restarts at 0).
/// - **Lost**: see [`Client`]: at once when the node is deleted, the session expires or
///   the connection drops; at the latest one session timeout after the last request the
///   server answered.
/// - **Lease**: [`Lease::Watchdog`] (the default) holds while the session lives;
///   [`Lease::Fixed`] also ends the hold at the lease's end (the client deletes its node
///   then; if the client dies first, the session's end deletes it).
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::{DistributedLock, Fenced, Guard};
///
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
/// let lock = client.lock("orders:42")?;
/// let guard = lock.lock().await?;
/// let again = lock.lock().await?; // the same task re-enters
/// assert_eq!(again.fencing_token(), guard.fencing_token());
/// again.unlock().await?;
/// guard.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Client,
    path: Arc<str>,
    probe: Probe,
    lease: Lease,
    flavor: Flavor,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.probe.name)
            .field("path", &self.path)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Self::of_flavor(client, name, Flavor::Lock)
    }

    pub(crate) fn of_flavor(client: Client, name: &str, flavor: Flavor) -> Result<Self> {
        let path = path_of(flavor.root(), name)?;
        let probe = client.inner.classes.probe(flavor.kind(), &Arc::from(name));
        Ok(Self {
            client,
            path: Arc::from(path),
            probe,
            lease: Lease::Watchdog,
            flavor,
        })
    }

    /// The lock's name, as given.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.lock("a")?.name(), "a");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The ZooKeeper path of the lock: its contenders' nodes are its children.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert_eq!(client.lock("a")?.path(), "/ferrisson/locks/a");
    /// assert_eq!(client.lock("/curator/a")?.path(), "/curator/a");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The same lock with another lease (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let lock = client.lock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    pub(crate) fn flavor(&self) -> Flavor {
        self.flavor
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.client.inner
    }

    /// A new guard on this task's hold, if it has one.
    fn reenter(&self) -> Option<LockGuard> {
        if !self.flavor.reenters() {
            return None;
        }
        let task = TaskKey::current();
        let key: Arc<str> = Arc::from(key_of(self.flavor, &self.path, task));
        let mut holds = self.inner().holds();
        let holder = holds.get_mut(&*key)?;
        if holder.task != Some(task) || !holder.state.is_held() {
            return None;
        }
        holder.count += 1;
        Some(self.guard(key.clone(), holder.owner, holder.token, &holder.state))
    }

    /// True when this task holds the other side `flavor` of this read-write lock.
    fn held_here(&self, flavor: Flavor) -> bool {
        let task = TaskKey::current();
        self.inner()
            .holds()
            .get(&key_of(flavor, &self.path, task))
            .is_some_and(|holder| holder.task == Some(task) && holder.state.is_held())
    }

    fn guard(
        &self,
        key: Arc<str>,
        owner: u64,
        token: FencingToken,
        state: &Arc<HoldState>,
    ) -> LockGuard {
        LockGuard {
            lock: self.clone(),
            key,
            owner,
            token,
            state: Arc::clone(state),
            released: false,
        }
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        observe_acquire(&self.probe, wait, self.contend(wait)).await
    }

    /// [`DistributedLock::lock_timeout`] (`Some(ZERO)`: a try; `None`: no bound) without
    /// the metrics of a lock (a semaphore's internal lock is counted as the semaphore).
    pub(crate) async fn contend(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        if let Some(guard) = self.reenter() {
            return Ok(Some(guard));
        }
        // Curator's rules for one task's two sides: a writer may also read (its read is
        // granted at once: a downgrade once it releases the write side); a reader may
        // not write (it would wait for itself).
        let downgrade = match self.flavor {
            Flavor::Read => self.held_here(Flavor::Write),
            Flavor::Write if self.held_here(Flavor::Read) => {
                return Err(Error::UpgradeRefused {
                    name: self.name().to_owned(),
                });
            }
            _ => false,
        };
        let deadline = wait.map(|w| Instant::now() + w);
        let queued = async {
            // A session found expired only now (it was disconnected when asked) is
            // replaced by the client: one more try on the new one.
            let mut retried = false;
            loop {
                let session = self.inner().live_zk().await;
                let mut contender = Contender::new(
                    Arc::clone(self.inner()),
                    session,
                    &self.path,
                    self.flavor.node_name(),
                    self.flavor.queue_names(),
                    self.flavor.turn(),
                );
                match contender.enter(b"ferrisson").await {
                    Ok(()) => return Ok(contender),
                    Err(e) if !retried && session_expired(&e) => retried = true,
                    Err(e) => return Err(e),
                }
            }
        };
        // A bounded wait counts the time to enter the queue too (a server that does not
        // answer); a try gets its one answer.
        let contender = match deadline {
            Some(deadline) if wait != Some(Duration::ZERO) => {
                match tokio::time::timeout_at(deadline, queued).await {
                    Ok(entered) => entered?,
                    Err(_) => return Ok(None),
                }
            }
            _ => queued.await?,
        };
        loop {
            let asked = Instant::now();
            let position = if downgrade {
                Position::First
            } else {
                contender.position().await?
            };
            match position {
                Position::First => return self.granted(contender, asked).await.map(Some),
                Position::Behind(ahead) => {
                    let waited = match deadline {
                        None => contender.wait_behind(&ahead).await.map(|()| true),
                        Some(deadline) if Instant::now() >= deadline => Ok(false),
                        Some(deadline) => {
                            match tokio::time::timeout_at(deadline, contender.wait_behind(&ahead))
                                .await
                            {
                                Ok(result) => result.map(|()| true),
                                Err(_) => Ok(false),
                            }
                        }
                    };
                    if !waited? {
                        contender.leave().await?;
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Turns the first node of the queue into a hold; `asked` is when the request that
    /// found it first was sent (the hold's validity counts from there).
    async fn granted(&self, contender: Contender, asked: Instant) -> Result<LockGuard> {
        let inner = self.inner();
        let (node, czxid, session) = contender.into_node()?;
        // Watching the node ends the hold at once when someone deletes it.
        let watcher = match session.get_and_watch_data(&node).await {
            Ok((_, _, watcher)) => watcher,
            Err(e) => {
                let _ = Inner::delete_node(&session, &node, inner.session_timeout).await;
                return Err(zk("watch", &node, e));
            }
        };
        let token =
            FencingToken::new(u64::try_from(czxid).map_err(|_| {
                Error::Protocol(format!("a lock node with a negative czxid {czxid}"))
            })?);
        let lease_end = match self.lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => asked.checked_add(d),
        };
        let session_end = asked + inner.session_timeout;
        let deadline = lease_end.map_or(session_end, |end| end.min(session_end));
        let state = Arc::new(HoldState::new(self.probe.clone(), deadline));
        state.start();
        let owner = rand::random();
        let watch = tokio::spawn(watch_hold(
            Arc::downgrade(inner),
            node.clone(),
            Arc::clone(&state),
            watcher,
            lease_end,
        ))
        .abort_handle();
        let key: Arc<str> = Arc::from(key_of(self.flavor, &self.path, TaskKey::current()));
        let guard = self.guard(Arc::clone(&key), owner, token, &state);
        inner.holds().insert(
            key.to_string(),
            Holder {
                owner,
                task: self.flavor.reenters().then(TaskKey::current),
                count: 1,
                node,
                token,
                state: Arc::clone(&state),
                lease_end,
                watch: Some(watch),
            },
        );
        // A disconnection between the grant and the registration was not seen by the
        // session monitor.
        if !inner.connected() {
            state.mark_lost();
        }
        Ok(guard)
    }

    /// Takes this guard's share of the hold `owner` off the books. Returns the node to
    /// delete when that ended the hold, and whether the hold was still valid.
    fn detach(&self, key: &str, owner: u64) -> Detached {
        let mut holds = self.inner().holds();
        match holds.get_mut(key) {
            Some(holder) if holder.owner == owner => {
                holder.count -= 1;
                let held = holder.state.is_held();
                if holder.count > 0 {
                    return Detached::Shared { held };
                }
                let Some(holder) = holds.remove(key) else {
                    return Detached::Gone;
                };
                if let Some(watch) = &holder.watch {
                    watch.abort();
                }
                Detached::Last {
                    node: holder.node,
                    held,
                    state: holder.state,
                }
            }
            _ => Detached::Gone,
        }
    }

    /// Deletes a detached hold's node.
    async fn finish(inner: &Inner, name: &str, detached: Detached) -> Result<()> {
        match detached {
            Detached::Shared { held: true } => Ok(()),
            Detached::Shared { held: false } | Detached::Gone => Err(Error::LeaseExpired {
                name: name.to_owned(),
            }),
            Detached::Last { node, held, state } => {
                let deleted =
                    match Inner::delete_node(&inner.zk(), &node, inner.session_timeout).await {
                        Ok(deleted) => deleted,
                        // The session's end took the node (or will): the hold ended before.
                        Err(_) if !held || !inner.session_alive() => false,
                        Err(e) => return Err(e),
                    };
                if deleted && held {
                    state.meter().end(false);
                    Ok(())
                } else {
                    state.mark_lost();
                    Err(Error::LeaseExpired {
                        name: name.to_owned(),
                    })
                }
            }
        }
    }
}

/// A hold's key in its client's books: per path and flavor (a lock and an election on
/// one path differ), and per task for the read side, which several tasks of one client
/// hold at once.
fn key_of(flavor: Flavor, path: &str, task: TaskKey) -> String {
    if flavor == Flavor::Read {
        format!("{flavor:?}:{path}#{task:?}")
    } else {
        format!("{flavor:?}:{path}")
    }
}

/// True when `error` says the session had expired.
pub(crate) fn session_expired(error: &Error) -> bool {
    error
        .store_error::<crate::ZkError>()
        .is_some_and(|e| *e.cause() == zookeeper_client::Error::SessionExpired)
}

/// What releasing one guard leaves to do.
enum Detached {
    /// Other guards of the same hold remain.
    Shared { held: bool },
    /// The hold ended: its node is to be deleted.
    Last {
        node: String,
        held: bool,
        state: Arc<HoldState>,
    },
    /// The hold was not on the books any more.
    Gone,
}

/// Ends the hold when its node is deleted (by an administrator, or by the server when
/// the session expired), or at the end of a fixed lease (deleting the node).
async fn watch_hold(
    inner: Weak<Inner>,
    node: String,
    state: Arc<HoldState>,
    mut watcher: OneshotWatcher,
    lease_end: Option<Instant>,
) {
    loop {
        let event = match lease_end {
            None => watcher.changed().await,
            Some(end) => tokio::select! {
                event = watcher.changed() => event,
                () = tokio::time::sleep_until(end) => {
                    state.mark_lost();
                    if let Some(inner) = inner.upgrade() {
                        let zk = inner.zk();
                        let timeout = inner.session_timeout;
                        drop(inner);
                        let _ = Inner::delete_node(&zk, &node, timeout).await;
                    }
                    return;
                }
            },
        };
        if event.event_type == EventType::NodeDataChanged {
            // Someone wrote to the node: it is still ours; watch again.
            let Some(inner) = inner.upgrade() else {
                return;
            };
            match inner.zk().get_and_watch_data(&node).await {
                Ok((_, _, next)) => {
                    watcher = next;
                    continue;
                }
                Err(_) => {
                    state.mark_lost();
                    return;
                }
            }
        }
        state.mark_lost();
        return;
    }
}

impl DistributedLock for Lock {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        Lock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        match self.flavor {
            Flavor::Lock => LOCK,
            Flavor::Election => ELECTION,
            Flavor::Read | Flavor::Write => RW_LOCK,
            Flavor::SemaphoreMutex => SEMAPHORE,
        }
    }

    /// # Cancel safety
    ///
    /// Dropping the future deletes the contender's node in the background (found by its
    /// guid if its create was still under way).
    async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Duration::ZERO)).await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait)).await
    }
}

/// Proof of holding a [`Lock`]. Dropping it releases in the background (the node is
/// deleted by a spawned task); [`Guard::unlock`] is the checked release.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    lock: Lock,
    /// The hold's key in the client's books.
    key: Arc<str>,
    owner: u64,
    token: FencingToken,
    state: Arc<HoldState>,
    released: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lock.name())
            .field("fencing_token", &self.token)
            .field("held", &self.state.is_held())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// Writes `data` to the node `path` in one transaction with a check that this hold's
    /// own node still exists: once the hold has ended behind the holder's back (its node
    /// deleted, its session expired), the write is refused, however late it arrives. This
    /// is the ZooKeeper way to fence a resource kept in ZooKeeper itself (the fencing
    /// token is for resources elsewhere). Returns whether the write was applied.
    ///
    /// # Errors
    ///
    /// A store error for the write itself (`path` missing, a bad path, no connection).
    ///
    /// # Cancel safety
    ///
    /// The write may or may not have been applied when the future is dropped.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use ferrisson_core::DistributedLock;
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let guard = client.lock("config")?.lock().await?;
    /// let written = guard.set_data_if_held("/app/config", b"v2").await?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub async fn set_data_if_held(&self, path: &str, data: &[u8]) -> Result<bool> {
        let inner = self.lock.inner();
        let node = match inner.holds().get(&*self.key) {
            Some(holder) if holder.owner == self.owner => holder.node.clone(),
            _ => return Ok(false),
        };
        let session = inner.zk();
        let mut writer = session
            .new_check_writer(&node, None)
            .map_err(|e| zk("write", path, e))?;
        writer
            .add_set_data(path, data, None)
            .map_err(|e| zk("write", path, e))?;
        match writer.commit().await {
            Ok(_) => Ok(true),
            Err(zookeeper_client::CheckWriteError::CheckFailed { .. }) => {
                self.state.mark_lost();
                Ok(false)
            }
            Err(
                zookeeper_client::CheckWriteError::OperationFailed { source, .. }
                | zookeeper_client::CheckWriteError::RequestFailed { source },
            ) => {
                if source == zookeeper_client::Error::SessionExpired {
                    self.state.mark_lost();
                    return Ok(false);
                }
                Err(zk("write", path, source))
            }
        }
    }
}

impl Grant for LockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.token)
    }
}

impl Guard for LockGuard {
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
        self.released = true;
        let detached = self.lock.detach(&self.key, self.owner);
        Lock::finish(self.lock.inner(), self.lock.name(), detached).await
    }
}

impl Fenced for LockGuard {
    fn fencing_token(&self) -> FencingToken {
        self.token
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let detached = self.lock.detach(&self.key, self.owner);
        if matches!(detached, Detached::Last { .. }) {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                // No runtime to send from: the node ends with the session.
                return;
            };
            let inner = Arc::clone(self.lock.inner());
            let name = self.lock.name().to_owned();
            runtime.spawn(async move {
                let _ = Lock::finish(&inner, &name, detached).await;
            });
        }
    }
}
