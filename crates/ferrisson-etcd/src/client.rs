//! The etcd client: the connection to the members, the session lease its locks share,
//! and the holds it has (for re-entry per task).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::ConnectOptions;
use ferrisson_core::observe::{ClassFn, Classes};
use ferrisson_core::{Error, Lease, Result, TaskKey};

use crate::error::EtcdError;
use crate::held::Held;
use crate::lease::{LeaseHandle, revoke};
use crate::url::EtcdUrl;
use crate::{Election, Latch, Lock, RwLock, Semaphore};

/// The session lease's TTL when the builder sets none: etcd's `concurrency` package uses
/// 60 s; ferrisson's watchdog leases are 30 s on every store.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// How long connecting (and the first call that proves it) may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the connection is pinged while a stream is open (etcd's default
/// `--grpc-keepalive-min-time` is 5 s: pinging more often gets the connection closed).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a ping may go unanswered before the connection is dropped.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// A client of an etcd cluster; clones share its connection, session lease and holds.
///
/// Locks of one client share its session lease (kept alive every TTL/6 while the client
/// lives): the first contender for a name uses the key `NAME/<session lease id in hex>`,
/// exactly as etcd's `concurrency.Mutex` names it. A second contender of the same client
/// for the same name at the same time (another task) gets a lease of its own, so that
/// its key (`NAME/<its lease id>`) is its own too: one key per acquisition, every key
/// still in the layout `etcdctl lock` and Go services read.
///
/// ```no_run
/// use ferrisson_core::{DistributedLock, Guard};
///
/// # async fn run() -> ferrisson_core::Result<()> {
/// let client = ferrisson_etcd::Client::connect("etcd://127.0.0.1:2379").await?;
/// let guard = client.lock("reports")?.lock().await?; // excludes `etcdctl lock reports`
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    etcd: etcd_client::Client,
    target: String,
    namespace: String,
    watchdog_lease: Duration,
    classes: Classes,
    runtime: tokio::runtime::Handle,
    session: tokio::sync::Mutex<Option<Arc<LeaseHandle>>>,
    /// The prefixes with a contender on the session lease, by lease id: its key under
    /// that prefix is taken.
    on_session: Mutex<HashSet<(i64, Arc<str>)>>,
    /// The holds of this client by prefix (one at most per prefix: they exclude each
    /// other), for re-entry.
    holds: Mutex<HashMap<Arc<str>, Arc<Held>>>,
    /// Read holds by readers' prefix and task: a task holding a read side is refused
    /// that lock's write side.
    reads: Mutex<HashMap<(Arc<str>, TaskKey), u32>>,
}

pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.inner.target)
            .field("namespace", &self.inner.namespace)
            .field("watchdog_lease", &self.inner.watchdog_lease)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Like closing a `concurrency.Session`: the lease goes at once rather than after
        // its TTL (nothing is held on it any more: holds keep the client alive).
        if let Some(lease) = self.session.get_mut().take() {
            lease.stop();
            let etcd = self.etcd.clone();
            self.runtime
                .spawn(async move { revoke(&etcd, &lease).await });
        }
    }
}

/// Settings of a [`Client`] before it connects.
///
/// ```
/// use std::time::Duration;
///
/// let builder = ferrisson_etcd::Client::builder("etcd://127.0.0.1:2379,127.0.0.1:22379")
///     .watchdog_lease(Duration::from_secs(10))
///     .namespace("app/");
/// # let _ = builder;
/// ```
#[must_use = "a builder does nothing until connect"]
pub struct ClientBuilder {
    url: String,
    watchdog_lease: Duration,
    namespace: String,
    connect_timeout: Duration,
    class_of: Option<ClassFn>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &EtcdUrl::parse(&self.url).map(|u| u.redacted()).ok())
            .field("watchdog_lease", &self.watchdog_lease)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The TTL of the client's session lease (rounded up to whole seconds; etcd raises
    /// it to its minimum, `1.5 × election timeout`, 2 s by default). A dead holder's lock
    /// is freed at most this long after its last renewal (plus a whole TTL when the
    /// cluster's leader changes in between: etcd 3.4 resets lease TTLs on a new leader).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// A prefix put before every lock name's key (empty by default, so that a lock
    /// `NAME` queues with `etcdctl lock NAME`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long connecting may take (5 s by default).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Metrics carry a `class` label computed by `class_of` from each primitive's name.
    pub fn metrics_class(
        mut self,
        class_of: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.class_of = Some(Arc::new(class_of));
        self
    }

    /// Connects, and proves it with one read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad URL or a watchdog lease under 1 ms or over a
    /// year; [`Error::Connect`] when no member answered in time.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is held before it returns.
    pub async fn connect(self) -> Result<Client> {
        let url = EtcdUrl::parse(&self.url)?;
        ferrisson_core::validate_lease(self.watchdog_lease)?;
        let target = url.redacted();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            // A dead or blackholed member is noticed within seconds, not at TCP's pace.
            // Not more often than every 5 s, and not without a stream open: etcd's
            // servers (`--grpc-keepalive-min-time`, no pings without streams) close a
            // connection that pings more, and every watch and keep-alive on it with it.
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            // etcd's `WithRequireLeader` (what its Go client puts on keep-alive streams):
            // a member that knows it has no leader (an election under way, or cut off
            // from the others) refuses a call or a stream at once, and ends the streams
            // it has after three election timeouts without one, instead of holding them
            // silent; the call is then made again, and may go to another member.
            .with_require_leader(true);
        if let Some((user, password)) = &url.credentials {
            options = options.with_user(user, password);
        }
        let connect_error = |e: etcd_client::Error| Error::Connect {
            target: target.clone(),
            cause: Box::new(EtcdError(e)),
        };
        let timed_out = || {
            etcd_client::Error::IoError(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?}", self.connect_timeout),
            ))
        };
        let etcd = tokio::time::timeout(
            self.connect_timeout,
            etcd_client::Client::connect(&url.endpoints, Some(options)),
        )
        .await
        .map_err(|_| connect_error(timed_out()))?
        .map_err(connect_error)?;
        let probe = etcd_client::GetOptions::new().with_count_only();
        tokio::time::timeout(
            self.connect_timeout,
            etcd.kv_client().get("ferrisson/probe", Some(probe)),
        )
        .await
        .map_err(|_| connect_error(timed_out()))?
        .map_err(connect_error)?;
        Ok(Client {
            inner: Arc::new(Inner {
                etcd,
                target,
                namespace: self.namespace,
                watchdog_lease: self.watchdog_lease,
                classes: Classes::new(crate::STORE, self.class_of),
                runtime: tokio::runtime::Handle::current(),
                session: tokio::sync::Mutex::new(None),
                on_session: Mutex::default(),
                holds: Mutex::default(),
                reads: Mutex::default(),
            }),
        })
    }
}

impl Client {
    /// Connects to the members `url` names: `etcd://HOST:PORT[,HOST:PORT...]`, with
    /// `USER:PASSWORD@` before the hosts when etcd's authentication is on.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is held before it returns.
    ///
    /// ```no_run
    /// # async fn run() -> ferrisson_core::Result<()> {
    /// let client = ferrisson_etcd::Client::connect("etcd://10.0.0.1:2379,10.0.0.2:2379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Settings for a client of `url` (see [`Client::connect`]).
    ///
    /// ```
    /// let builder = ferrisson_etcd::Client::builder("etcd://127.0.0.1:2379");
    /// # let _ = builder;
    /// ```
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            namespace: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            class_of: None,
        }
    }

    /// The lock `name`: its contenders' keys are `NAME/<lease id in hex>`, as
    /// `etcdctl lock NAME` makes them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name or one over [`MAX_NAME_LEN`] bytes.
    ///
    /// ```no_run
    /// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let lock = client.lock("reports")?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Lock::new(self.clone(), name)
    }

    /// The leader election `name`, compatible with etcd's `concurrency.Election` (and
    /// `etcdctl elect NAME`).
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// ```no_run
    /// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let election = client.election("scheduler")?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Result<Election> {
        Election::new(self.clone(), name)
    }

    /// A counting semaphore `name` with `permits` permits, on the lock's queue (the first
    /// `permits` keys under `NAME/` by create revision hold).
    ///
    /// # Errors
    ///
    /// As [`Client::lock`], and [`Error::InvalidArgument`] for zero permits.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let pool = client.semaphore("exports", 3)?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name, permits)
    }

    /// A read-write lock `name` (keys under `NAME/read/` and `NAME/write/`, one queue
    /// under `NAME/`).
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let prices = client.rwlock("prices")?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        RwLock::new(self.clone(), name)
    }

    /// A count-down latch `name` (the key `NAME`), set to `count` by the first call that
    /// finds it absent.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let ready = client.count_down_latch("workers-ready", 3)?;
    /// # Ok(()) }
    /// ```
    pub fn count_down_latch(&self, name: &str, count: u32) -> Result<Latch> {
        Latch::new(self.clone(), name, count)
    }

    /// The session lease's TTL (see [`ClientBuilder::watchdog_lease`]).
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) {
    /// println!("{:?}", client.watchdog_lease());
    /// # }
    /// ```
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.watchdog_lease
    }

    /// The `etcd-client` client underneath, for calls ferrisson does not make (a
    /// transaction guarded by [`LockGuard::fence`](crate::LockGuard::fence), ...).
    ///
    /// ```no_run
    /// # async fn run(client: ferrisson_etcd::Client) -> Result<(), etcd_client::Error> {
    /// client.etcd().kv_client().put("greeting", "hello", None).await?;
    /// # Ok(()) }
    /// ```
    pub fn etcd(&self) -> &etcd_client::Client {
        &self.inner.etcd
    }

    pub(crate) fn classes(&self) -> &Classes {
        &self.inner.classes
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.inner.runtime
    }

    /// The key prefix of the primitive `name`: `NAMESPACE` + `NAME` + `/`.
    pub(crate) fn prefix_of(&self, name: &str) -> Result<Arc<str>> {
        if name.is_empty() {
            return Err(Error::invalid("name must not be empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "name must be at most {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        Ok(Arc::from(format!("{}{name}/", self.inner.namespace)))
    }

    /// A lease for one contender under `prefix`: the session lease when this client has
    /// no contender under `prefix` on it yet (`true`), else a lease of its own (`false`),
    /// kept alive; for a fixed lease, a lease of its own that is not renewed.
    pub(crate) async fn lease_for(
        &self,
        prefix: &Arc<str>,
        lease: Lease,
    ) -> Result<(Arc<LeaseHandle>, bool)> {
        let etcd = &self.inner.etcd;
        if let Lease::Fixed(d) = lease {
            return Ok((LeaseHandle::grant(etcd, d, false).await?, false));
        }
        {
            let mut session = self.inner.session.lock().await;
            let current = match &*session {
                Some(lease) if !lease.is_ended() => Arc::clone(lease),
                _ => {
                    let lease = LeaseHandle::grant(etcd, self.inner.watchdog_lease, true).await?;
                    if let Some(old) = session.replace(Arc::clone(&lease)) {
                        old.stop();
                    }
                    lease
                }
            };
            if locked(&self.inner.on_session).insert((current.id, Arc::clone(prefix))) {
                return Ok((current, true));
            }
        }
        Ok((
            LeaseHandle::grant(etcd, self.inner.watchdog_lease, true).await?,
            false,
        ))
    }

    /// Gives back a lease from [`Client::lease_for`] once its contender's key is gone.
    pub(crate) async fn free_lease(
        &self,
        prefix: &Arc<str>,
        lease: &Arc<LeaseHandle>,
        shared: bool,
    ) {
        if shared {
            locked(&self.inner.on_session).remove(&(lease.id, Arc::clone(prefix)));
            return;
        }
        lease.stop();
        // Revoking also deletes any key left under it: one try here, the others in the
        // background (the members may have no leader for a while).
        let etcd = &self.inner.etcd;
        if let Err(e) = etcd.lease_client().revoke(lease.id).await
            && crate::error::is_retryable(&e)
        {
            let (etcd, lease) = (etcd.clone(), Arc::clone(lease));
            self.runtime()
                .spawn(async move { revoke(&etcd, &lease).await });
        }
    }

    /// This client's hold under `prefix`, if any.
    pub(crate) fn held(&self, prefix: &str) -> Option<Arc<Held>> {
        locked(&self.inner.holds).get(prefix).cloned()
    }

    pub(crate) fn add_hold(&self, held: &Arc<Held>) {
        locked(&self.inner.holds).insert(Arc::clone(&held.prefix), Arc::clone(held));
    }

    /// How many read holds `task` has under the readers' prefix `readers`.
    pub(crate) fn reads(&self, readers: &Arc<str>, task: TaskKey) -> u32 {
        locked(&self.inner.reads)
            .get(&(Arc::clone(readers), task))
            .copied()
            .unwrap_or(0)
    }

    /// Counts a read hold of `task` taken (`true`) or released.
    pub(crate) fn count_read(&self, readers: &Arc<str>, task: TaskKey, taken: bool) {
        let mut reads = locked(&self.inner.reads);
        let key = (Arc::clone(readers), task);
        let count = reads.entry(key.clone()).or_insert(0);
        if taken {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
            if *count == 0 {
                reads.remove(&key);
            }
        }
    }

    /// Forgets `held` (not a newer hold under the same prefix).
    pub(crate) fn remove_hold(&self, held: &Arc<Held>) {
        let mut holds = locked(&self.inner.holds);
        if holds
            .get(&held.prefix)
            .is_some_and(|h| Arc::ptr_eq(h, held))
        {
            holds.remove(&held.prefix);
        }
    }
}
