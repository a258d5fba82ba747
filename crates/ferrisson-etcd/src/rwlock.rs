//! A read-write lock on etcd: one queue under `NAME/`, readers' keys under `NAME/read/`,
//! writers' under `NAME/write/` (the layout of etcd's `recipes` read-write mutex). A
//! reader goes ahead when no writer's key is older than its own; a writer when no key at
//! all is.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Decided, Grant, Kind, Probe, observe_decision};
use ferrisson_core::{
    Capabilities, DistributedRwLock, Error, Fenced, FencingToken, Guard, Lease, Result, TaskKey,
};
use tokio::time::Instant;

use crate::client::Client;
use crate::contender::{Contender, ride_out};
use crate::held::Held;
use crate::queue::Admission;

/// A read-write lock on etcd: many readers or one writer, served in the order they
/// asked (a writer waits for the readers before it, readers after a waiting writer wait
/// for it). Not reentrant; a task holding the read side that asks for the write side of
/// the same lock on the same client is refused at once ([`Error::UpgradeRefused`]):
/// waiting would wait for itself. The write side's fencing token is its key's create
/// revision.
///
/// ```no_run
/// use ferrisson_core::{DistributedRwLock, Guard};
///
/// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
/// let prices = client.rwlock("prices")?;
/// let reading = prices.read().await?;
/// reading.unlock().await?;
/// let writing = prices.write().await?;
/// writing.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    read_probe: Probe,
    write_probe: Probe,
    queue: Arc<str>,
    readers: Arc<str>,
    writers: Arc<str>,
    lease: Lease,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.read_probe.name)
            .finish_non_exhaustive()
    }
}

impl RwLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        let queue = client.prefix_of(name)?;
        let name: Arc<str> = Arc::from(name);
        Ok(Self {
            read_probe: client.classes().probe(Kind::RwLockRead, &name),
            write_probe: client.classes().probe(Kind::RwLockWrite, &name),
            readers: Arc::from(format!("{queue}read/")),
            writers: Arc::from(format!("{queue}write/")),
            queue,
            client,
            lease: Lease::Watchdog,
        })
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.rwlock("a")?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.read_probe.name
    }

    /// The same lock with another lease (see [`Lock::with_lease`](crate::Lock::with_lease)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.rwlock("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # Ok(()) }
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    async fn take(
        &self,
        write: bool,
        wait: Option<Duration>,
    ) -> Result<Option<(Arc<Held>, TaskKey)>> {
        let started = Instant::now();
        let task = TaskKey::current();
        if write && self.client.reads(&self.readers, task) > 0 {
            return Err(Error::UpgradeRefused {
                name: self.name().into(),
            });
        }
        let (prefix, admission, probe) = if write {
            (
                &self.writers,
                Admission::NoneOlder(Arc::clone(&self.queue)),
                &self.write_probe,
            )
        } else {
            (
                &self.readers,
                Admission::NoneOlder(Arc::clone(&self.writers)),
                &self.read_probe,
            )
        };
        let admission = &admission;
        let acquire = ride_out(&self.client, wait, started, move || async move {
            // Boxed: see `Lock::contend`.
            let contender = Box::pin(Contender::enqueue(
                &self.client,
                prefix,
                admission,
                self.lease,
                b"",
            ))
            .await?;
            let Some(contender) =
                Box::pin(contender.take_turn(probe, wait, started, admission)).await?
            else {
                return Ok(None);
            };
            if !write {
                self.client.count_read(&self.readers, task, true);
            }
            Ok(Some((Held::start(contender, probe.clone()), task)))
        });
        observe_decision(probe, wait, acquire, |taken| match taken {
            Some((held, _)) => Decided::Granted(write.then(|| held.token())),
            None => Decided::Refused,
        })
        .await
    }

    fn read_guard(&self, (held, task): (Arc<Held>, TaskKey)) -> ReadGuard {
        ReadGuard {
            side: Side {
                lock: self.clone(),
                held,
                released: false,
            },
            task,
        }
    }

    fn write_guard(&self, (held, _): (Arc<Held>, TaskKey)) -> WriteGuard {
        WriteGuard {
            side: Side {
                lock: self.clone(),
                held,
                released: false,
            },
        }
    }
}

impl DistributedRwLock for RwLock {
    type ReadGuard = ReadGuard;
    type WriteGuard = WriteGuard;

    fn name(&self) -> &str {
        RwLock::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        crate::CAPABILITIES[3]
    }

    async fn read(&self) -> Result<ReadGuard> {
        let taken = self.take(false, None).await?;
        taken
            .map(|t| self.read_guard(t))
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_read(&self) -> Result<Option<ReadGuard>> {
        Ok(self
            .take(false, Some(Duration::ZERO))
            .await?
            .map(|t| self.read_guard(t)))
    }

    async fn read_timeout(&self, wait: Duration) -> Result<Option<ReadGuard>> {
        Ok(self
            .take(false, Some(wait))
            .await?
            .map(|t| self.read_guard(t)))
    }

    async fn write(&self) -> Result<WriteGuard> {
        let taken = self.take(true, None).await?;
        taken
            .map(|t| self.write_guard(t))
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_write(&self) -> Result<Option<WriteGuard>> {
        Ok(self
            .take(true, Some(Duration::ZERO))
            .await?
            .map(|t| self.write_guard(t)))
    }

    async fn write_timeout(&self, wait: Duration) -> Result<Option<WriteGuard>> {
        Ok(self
            .take(true, Some(wait))
            .await?
            .map(|t| self.write_guard(t)))
    }
}

/// What both sides' guards share: the hold and its release.
struct Side {
    lock: RwLock,
    held: Arc<Held>,
    released: bool,
}

impl Side {
    async fn release(&mut self, token: Option<FencingToken>) -> Result<()> {
        self.released = true;
        self.held.leave();
        let name = self.lock.name().to_owned();
        self.held
            .state
            .meter()
            .release(token, true, self.held.finish(&name), |()| false)
            .await
    }

    fn drop_release(&mut self) {
        if self.released {
            return;
        }
        self.held.leave();
        let held = Arc::clone(&self.held);
        let name = self.lock.name().to_owned();
        self.lock.client.runtime().spawn(async move {
            let _ = held.finish(&name).await;
            held.state.meter().end(false);
        });
    }
}

/// Proof of holding the read side of an [`RwLock`]; dropping it releases in a
/// background task.
#[must_use = "dropping the guard releases the read lock"]
pub struct ReadGuard {
    side: Side,
    task: TaskKey,
}

/// Proof of holding the write side of an [`RwLock`]; dropping it releases in a
/// background task.
#[must_use = "dropping the guard releases the write lock"]
pub struct WriteGuard {
    side: Side,
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("name", &self.side.lock.name())
            .field("key", &self.side.held.key)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGuard")
            .field("name", &self.side.lock.name())
            .field("key", &self.side.held.key)
            .field("fencing_token", &self.side.held.revision)
            .finish_non_exhaustive()
    }
}

impl Grant for ReadGuard {}

impl Grant for WriteGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.side.held.token())
    }
}

impl Guard for ReadGuard {
    fn name(&self) -> &str {
        self.side.lock.name()
    }

    fn is_held(&self) -> bool {
        self.side.held.state.is_held()
    }

    fn remaining(&self) -> Duration {
        self.side.held.state.remaining()
    }

    async fn lost(&self) {
        self.side.held.state.lost().await;
    }

    async fn unlock(mut self) -> Result<()> {
        let lock = self.side.lock.clone();
        lock.client.count_read(&lock.readers, self.task, false);
        self.side.release(None).await
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        if !self.side.released {
            let lock = &self.side.lock;
            lock.client.count_read(&lock.readers, self.task, false);
        }
        self.side.drop_release();
    }
}

impl Guard for WriteGuard {
    fn name(&self) -> &str {
        self.side.lock.name()
    }

    fn is_held(&self) -> bool {
        self.side.held.state.is_held()
    }

    fn remaining(&self) -> Duration {
        self.side.held.state.remaining()
    }

    async fn lost(&self) {
        self.side.held.state.lost().await;
    }

    async fn unlock(mut self) -> Result<()> {
        let token = self.side.held.token();
        self.side.release(Some(token)).await
    }
}

impl Fenced for WriteGuard {
    fn fencing_token(&self) -> FencingToken {
        self.side.held.token()
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        self.side.drop_release();
    }
}
