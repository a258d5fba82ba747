//! The client: one ZooKeeper session, its health as the holds see it, and the holds
//! this process has through it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use ferrisson_core::hold::HoldState;
use ferrisson_core::observe::{ClassFn, Classes};
use ferrisson_core::{Error, FencingToken, Result, TaskKey};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client::{Acls, CreateMode, SessionState};

use crate::STORE;
use crate::endpoint::Endpoint;
use crate::error::{ZkError, connection_broke, zk};
use crate::lock::Lock;

/// The session timeout a client asks for unless told otherwise. The server bounds it
/// (by default to 2 to 20 of its ticks); the client uses what the server granted.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one ZooKeeper ensemble: one session, shared by every primitive it hands
/// out; clones share it.
///
/// Holds are tied to the session: an ephemeral node per hold, deleted by the server when
/// the session ends. The client confirms the session with a request every third of its
/// timeout, and each hold is valid until one session timeout after the last request the
/// server answered, counted from when that request was sent: the server cannot expire
/// the session, and so cannot let another client in, before that. A disconnection or an
/// expired session ends every hold at once (`lost()` fires): after a disconnection
/// nobody can tell whether the session still lives, which is Curator's advice for its
/// SUSPENDED state too.
///
/// When the session expires, the client opens a new one and serves again (as Curator
/// does). A hold of the old session is never carried over: every acquisition creates a
/// node with a fresh guid and looks only for that guid, so a node of the old session
/// that the server is still deleting queues ahead of the new one like any other
/// holder's, and the new one waits until it is gone (CURATOR-604 is a double grant
/// around such a dying node; the fault suite's `zk-new-session-over-old-node` scenario
/// runs that case).
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use ferrisson_core::{DistributedLock, Fenced, Guard};
///
/// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181/app").await?;
/// let guard = client.lock("orders:42")?.lock().await?;
/// println!("token {}", guard.fencing_token());
/// guard.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.inner.endpoint)
            .field("session_timeout", &self.inner.session_timeout)
            .finish_non_exhaustive()
    }
}

/// What the clones of a [`Client`] share.
pub(crate) struct Inner {
    /// The session now; replaced by a new one when it expires.
    session: RwLock<zookeeper_client::Client>,
    /// Woken when a new session replaces an expired one.
    replaced: Notify,
    /// The session timeout asked for, for the next session.
    asked_timeout: Duration,
    endpoint: Endpoint,
    pub(crate) classes: Classes,
    /// The timeout the server granted.
    pub(crate) session_timeout: Duration,
    /// The holds of this client, by the path of what is held (re-entry and session
    /// loss look them up).
    holds: Mutex<HashMap<String, Holder>>,
    /// The session monitor's tasks, stopped with the last clone.
    monitors: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.monitors {
            task.abort();
        }
    }
}

/// One hold of this client.
pub(crate) struct Holder {
    /// Unique per acquisition (re-entries share it).
    pub(crate) owner: u64,
    /// The task that may re-enter; `None` for a hold that does not re-enter.
    pub(crate) task: Option<TaskKey>,
    /// Guards alive for this hold.
    pub(crate) count: u32,
    /// The hold's ephemeral node.
    pub(crate) node: String,
    pub(crate) token: FencingToken,
    pub(crate) state: Arc<HoldState>,
    /// The end of a fixed lease.
    pub(crate) lease_end: Option<Instant>,
    /// The task watching the node.
    pub(crate) watch: Option<AbortHandle>,
}

/// Settings of a [`Client`] before it connects.
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::time::Duration;
///
/// let client = ferrisson_zookeeper::Client::builder("zk://zk1,zk2,zk3/app")
///     .session_timeout(Duration::from_secs(6))
///     .connect()
///     .await?;
/// # Ok::<(), ferrisson_core::Error>(()) });
/// ```
#[must_use = "a builder does nothing until connect()"]
pub struct ClientBuilder {
    url: String,
    session_timeout: Option<Duration>,
    class_of: Option<ClassFn>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field(
                "url",
                &Endpoint::parse(&self.url).map(|e| e.to_string()).ok(),
            )
            .field("session_timeout", &self.session_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The session timeout to ask the server for (default: the URL's
    /// `session_timeout_ms`, else [`DEFAULT_SESSION_TIMEOUT`]). The server may grant
    /// less or more within its bounds.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    /// A `class` label for every metric, computed from each primitive's name.
    pub fn metrics_class(
        mut self,
        class_of: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.class_of = Some(Arc::new(class_of));
        self
    }

    /// Parses the URL, opens the session, creates the URL's chroot if missing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad URL; [`Error::Connect`] (without the
    /// password) when no server could be reached, the credentials were refused or the
    /// chroot could not be created.
    pub async fn connect(self) -> Result<Client> {
        let endpoint = Endpoint::parse(&self.url)?;
        let timeout = self
            .session_timeout
            .or(endpoint.session_timeout())
            .unwrap_or(DEFAULT_SESSION_TIMEOUT);
        let zk = open_session(&endpoint, timeout).await?;
        let session_timeout = zk.session_timeout();
        let state_watcher = zk.state_watcher();
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let monitors = vec![
                tokio::spawn(watch_session(weak.clone(), state_watcher)).abort_handle(),
                tokio::spawn(confirm_session(weak.clone(), session_timeout)).abort_handle(),
            ];
            Inner {
                session: RwLock::new(zk),
                replaced: Notify::new(),
                asked_timeout: timeout,
                endpoint,
                classes: Classes::new(STORE, self.class_of),
                session_timeout,
                holds: Mutex::default(),
                monitors,
            }
        });
        Ok(Client { inner })
    }
}

/// Opens a session with the ensemble `endpoint` names, asking for `timeout`, and creates
/// its chroot if missing.
async fn open_session(endpoint: &Endpoint, timeout: Duration) -> Result<zookeeper_client::Client> {
    let connect_error = |op, path: &str, e| Error::Connect {
        target: endpoint.to_string(),
        cause: Box::new(ZkError::new(op, path, e)),
    };
    let mut connector = zookeeper_client::Client::connector().with_session_timeout(timeout);
    if let Some(digest) = endpoint.digest() {
        connector = connector.with_auth("digest", &digest);
    }
    // Without a bound the library tries the hosts until one answers.
    let hosts = endpoint.connect_string();
    let connecting = connector.connect(&hosts);
    let zk = tokio::time::timeout(timeout.max(Duration::from_secs(5)), connecting)
        .await
        .map_err(|_| connect_error("connect", "/", zookeeper_client::Error::Timeout))?
        .map_err(|e| connect_error("connect", "/", e))?;
    let Some(chroot) = endpoint.chroot() else {
        return Ok(zk);
    };
    match zk
        .mkdir(
            chroot,
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
    {
        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(e) => return Err(connect_error("create chroot", chroot, e)),
    }
    zk.chroot(chroot.to_owned())
        .map_err(|_| Error::invalid("the url's chroot is not a valid path"))
}

/// Ends every hold when the session disconnects, expires or closes; opens a new session
/// when it expired (as Curator does), so that the client serves again.
async fn watch_session(weak: Weak<Inner>, mut watcher: zookeeper_client::StateWatcher) {
    loop {
        let state = watcher.changed().await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if !matches!(
            state,
            SessionState::SyncConnected | SessionState::ConnectedReadOnly
        ) {
            tracing::debug!(
                ?state,
                "zookeeper session not connected: every hold is lost"
            );
            inner.lose_all();
        }
        if state != SessionState::Expired {
            if state.is_terminated() {
                return;
            }
            continue;
        }
        let (endpoint, timeout) = (inner.endpoint.clone(), inner.asked_timeout);
        // Not holding the client while reconnecting: dropping the last clone stops this.
        drop(inner);
        let mut pause = Duration::from_millis(50);
        let zk = loop {
            match open_session(&endpoint, timeout).await {
                Ok(zk) => break zk,
                Err(e) => {
                    tracing::debug!(error = %e, "zookeeper: no new session yet");
                    if weak.strong_count() == 0 {
                        return;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        };
        let Some(inner) = weak.upgrade() else {
            return;
        };
        watcher = zk.state_watcher();
        *inner
            .session
            .write()
            .unwrap_or_else(PoisonError::into_inner) = zk;
        inner.replaced.notify_waiters();
        tracing::debug!("zookeeper: a new session replaced the expired one");
    }
}

/// Confirms the session every third of its timeout; each answer moves the holds'
/// deadline to one timeout after the request was sent.
async fn confirm_session(weak: Weak<Inner>, timeout: Duration) {
    loop {
        tokio::time::sleep(timeout / 3).await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let zk = inner.zk();
        // Not holding the client while waiting: dropping the last clone ends the session.
        drop(inner);
        let sent = Instant::now();
        let answer = tokio::time::timeout(timeout, zk.check_stat("/")).await;
        drop(zk);
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if matches!(answer, Ok(Ok(_))) {
            inner.session_confirmed(sent + timeout);
        }
    }
}

impl Inner {
    /// The session now (a cheap clone): one operation, or one contender's whole
    /// attempt, runs on one session.
    pub(crate) fn zk(&self) -> zookeeper_client::Client {
        self.session
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A session that has not expired: the current one, or, after an expiry, its
    /// replacement once opened (waiting at most one session timeout for it; the expired
    /// session then answers with its error).
    pub(crate) async fn live_zk(&self) -> zookeeper_client::Client {
        let replaced = self.replaced.notified();
        tokio::pin!(replaced);
        replaced.as_mut().enable();
        let zk = self.zk();
        if zk.state() != SessionState::Expired {
            return zk;
        }
        match tokio::time::timeout(self.session_timeout, replaced).await {
            Ok(()) => self.zk(),
            Err(_) => zk,
        }
    }

    pub(crate) fn holds(&self) -> MutexGuard<'_, HashMap<String, Holder>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lose_all(&self) {
        for holder in self.holds().values() {
            holder.state.mark_lost();
        }
    }

    fn session_confirmed(&self, until: Instant) {
        for holder in self.holds().values() {
            holder
                .state
                .extend(holder.lease_end.map_or(until, |end| end.min(until)));
        }
    }

    /// True while the session is connected.
    pub(crate) fn connected(&self) -> bool {
        matches!(
            self.zk().state(),
            SessionState::SyncConnected | SessionState::ConnectedReadOnly
        )
    }

    /// False once the session has expired, been closed or refused.
    pub(crate) fn session_alive(&self) -> bool {
        !self.zk().state().is_terminated()
    }

    /// Deletes `node`, retrying on a lost connection within one session timeout.
    /// `Ok(true)` when this call deleted it, `Ok(false)` when it was gone.
    pub(crate) async fn delete_node(
        zk: &zookeeper_client::Client,
        node: &str,
        timeout: Duration,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            match zk.delete(node, None).await {
                Ok(()) => return Ok(true),
                Err(zookeeper_client::Error::NoNode) => return Ok(false),
                Err(e) if connection_broke(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(zk_error("delete", node, e)),
            }
        }
    }
}

fn zk_error(op: &'static str, path: &str, e: zookeeper_client::Error) -> Error {
    zk(op, path, e)
}

impl Client {
    /// Connects to the ensemble `url` names:
    /// `zk://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/CHROOT][?session_timeout_ms=N]`.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`].
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Settings for a client of `url` (see [`Client::connect`]).
    ///
    /// ```
    /// let builder = ferrisson_zookeeper::Client::builder("zk://127.0.0.1:2181");
    /// # let _ = builder;
    /// ```
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            session_timeout: None,
            class_of: None,
        }
    }

    /// The reentrant lock `name`: a Curator `InterProcessMutex` at the path `name` if it
    /// starts with `/`, else at `/ferrisson/locks/NAME`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, one over 1024 bytes, or one that is
    /// not a valid ZooKeeper path.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// // Shared with a Java service that uses `new InterProcessMutex(curator, "/locks/orders")`.
    /// let lock = client.lock("/locks/orders")?;
    /// assert!(client.lock("").is_err());
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Lock::new(self.clone(), name)
    }

    /// The read-write lock `name`: a Curator `InterProcessReadWriteLock` at the path
    /// `name` if it starts with `/`, else at `/ferrisson/rwlocks/NAME`.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let prices = client.rwlock("prices")?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn rwlock(&self, name: &str) -> Result<crate::RwLock> {
        crate::RwLock::new(self.clone(), name)
    }

    /// The semaphore `name` with `permits` permits: a Curator `InterProcessSemaphoreV2`
    /// at the path `name` if it starts with `/`, else at `/ferrisson/semaphores/NAME`.
    /// Every client of one semaphore must count with the same number of permits.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`], and [`Error::InvalidArgument`] for zero permits.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert!(client.semaphore("pool", 0).is_err());
    /// let pool = client.semaphore("pool", 4)?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<crate::Semaphore> {
        crate::Semaphore::new(self, name, permits)
    }

    /// The count-down latch `name`, created with `count` by the first handle that finds
    /// it missing: a persistent node at the path `name` if it starts with `/`, else at
    /// `/ferrisson/latches/NAME`.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let ready = client.count_down_latch("ready", 3)?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn count_down_latch(&self, name: &str, count: u32) -> Result<crate::Latch> {
        crate::Latch::new(self.clone(), name, count)
    }

    /// The double barrier `name` for `members` members: a Curator
    /// `DistributedDoubleBarrier` at the path `name` if it starts with `/`, else at
    /// `/ferrisson/barriers/NAME`. Every member of one barrier must count with the same
    /// number of members.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`], and [`Error::InvalidArgument`] for zero members.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// assert!(client.double_barrier("batch", 0).is_err());
    /// let batch = client.double_barrier("batch", 3)?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn double_barrier(&self, name: &str, members: u32) -> Result<crate::DoubleBarrier> {
        crate::DoubleBarrier::new(self.clone(), name, members)
    }

    /// The leader election `name`: a Curator `LeaderLatch` at the path `name` if it
    /// starts with `/`, else at `/ferrisson/elections/NAME`.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let election = client.election("nightly")?;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn election(&self, name: &str) -> Result<crate::Election> {
        crate::Election::new(self.clone(), name)
    }

    /// The session timeout the server granted: a hold's validity after the last
    /// confirmed request.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// println!("{:?}", client.session_timeout());
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The client library's session now, for what ferrisson does not wrap (reading
    /// nodes, watches); after an expiry the client opens a new one. Deleting ferrisson's
    /// nodes through it ends their holds.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://127.0.0.1:2181").await?;
    /// let children = client.zookeeper().list_children("/").await;
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn zookeeper(&self) -> zookeeper_client::Client {
        self.inner.zk()
    }

    /// The URL this client connected to, without its password.
    ///
    /// ```no_run
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let client = ferrisson_zookeeper::Client::connect("zk://u:pw@127.0.0.1:2181").await?;
    /// assert_eq!(client.url(), "zk://u:***@127.0.0.1:2181");
    /// # Ok::<(), ferrisson_core::Error>(()) });
    /// ```
    pub fn url(&self) -> String {
        self.inner.endpoint.to_string()
    }
}
