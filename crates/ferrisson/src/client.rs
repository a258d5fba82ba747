//! The client: one reconnecting Redis connection, the shared subscription, the watchdog.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::holds::Holds;
use crate::keys::Keys;
use crate::lease::validate_lease;
use crate::pubsub::Subscriptions;
use crate::scripts;
use crate::watchdog::Watchdog;

/// Default lease of [`Lease::Watchdog`](crate::Lease::Watchdog) locks (Redisson's 30 s).
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_RECONNECT_RETRIES: usize = 2;

/// A handle to one Redis server and everything ferrisson runs against it.
///
/// Cheap to clone (an `Arc`); every clone shares one multiplexed, self-reconnecting
/// connection (RESP3), one subscription that wakes every local waiter, and one watchdog
/// task that renews every held lock. Dropping the last clone (and every guard made from
/// it) stops the watchdog.
///
/// ```no_run
/// # async fn demo() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:42")?;
/// let guard = lock.lock().await?;
/// // ... critical section ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) conn: ConnectionManager,
    pub(crate) namespace: String,
    pub(crate) redacted_url: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) subscriptions: Subscriptions,
    pub(crate) watchdog: Watchdog,
    pub(crate) holds: Holds,
    _shutdown: oneshot::Sender<()>,
}

impl Client {
    /// Connects with default settings. See [`ClientBuilder`] for the options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Connect`] when the server
    /// cannot be reached or refuses the credentials, [`Error::UnsupportedServer`] when it
    /// is older than Redis 7.0.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Starts configuring a client for `url`: `redis://[user:password@]host[:port][/db]`
    /// or `rediss://...` for TLS.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// The key prefix every primitive of this client uses.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// The lease of [`Lease::Watchdog`](crate::Lease::Watchdog) locks.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.watchdog_lease
    }

    /// A clone of the shared connection.
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    /// The keys of the primitive called `name`.
    pub(crate) fn keys(&self, name: &str) -> Result<Keys> {
        Keys::new(&self.inner.namespace, name)
    }

    /// `key` with the client's namespace in front.
    pub(crate) fn namespaced(&self, key: &str) -> String {
        format!("{}{key}", self.inner.namespace)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.redacted_url)
            .field("namespace", &self.inner.namespace)
            .field("watchdog_lease", &self.inner.watchdog_lease)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Client`]; every setting has a default, so `connect()` may follow at once.
///
/// ```no_run
/// # async fn demo() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::builder("redis://:secret@127.0.0.1:6379/2")
///     .namespace("shop:")
///     .response_timeout(Duration::from_secs(2))
///     .watchdog_lease(Duration::from_secs(10))
///     .connect()
///     .await?;
/// assert_eq!(client.namespace(), "shop:");
/// // The password never shows: Debug prints redis://:***@127.0.0.1:6379/2
/// println!("{client:?}");
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    namespace: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    watchdog_lease: Duration,
    reconnect_retries: usize,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &redact_url(&self.url))
            .field("namespace", &self.namespace)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("reconnect_retries", &self.reconnect_retries)
            .finish()
    }
}

impl ClientBuilder {
    fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            namespace: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            reconnect_retries: DEFAULT_RECONNECT_RETRIES,
        }
    }

    /// A prefix put in front of every key and channel (default: none), e.g. `"shop:"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long one connection attempt may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The lease of [`Lease::Watchdog`](crate::Lease::Watchdog) locks, renewed every
    /// third of it (default 30 s).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How many times one reconnection retries before the command fails (default 2).
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// Connects, loads every script and starts the client's background tasks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL or a zero timeout or lease,
    /// [`Error::Connect`] when the server cannot be reached or refuses the credentials,
    /// [`Error::UnsupportedServer`] when it is older than Redis 7.0.
    pub async fn connect(self) -> Result<Client> {
        let redacted_url = redact_url(&self.url);
        validate_lease(self.watchdog_lease)?;
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::invalid("timeouts must be greater than zero"));
        }
        let info = self.url.as_str().into_connection_info().map_err(|e| {
            Error::invalid(format!(
                "cannot parse redis url {redacted_url}: {:?}",
                e.kind()
            ))
        })?;
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let redis_client = redis::Client::open(info).map_err(|e| Error::Connect {
            url: redacted_url.clone(),
            source: e,
        })?;

        let (subscriptions, push_sender) = Subscriptions::new();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(self.reconnect_retries)
            .set_push_sender(push_sender)
            .set_automatic_resubscription();
        let mut conn = ConnectionManager::new_with_config(redis_client, config)
            .await
            .map_err(|e| Error::Connect {
                url: redacted_url.clone(),
                source: e,
            })?;
        // Before the scripts: an old server would fail them with a Lua compile error.
        check_server_version(&mut conn).await?;
        scripts::preload(&mut conn).await.map_err(|e| match e {
            Error::Redis(source) => Error::Connect {
                url: redacted_url.clone(),
                source,
            },
            other => other,
        })?;
        warn_if_keys_may_be_evicted(&mut conn).await;

        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        subscriptions.start(conn.clone());
        let watchdog = Watchdog::start(conn.clone(), self.watchdog_lease, shutdown_rx);
        Ok(Client {
            inner: Arc::new(Inner {
                conn,
                namespace: self.namespace,
                redacted_url,
                watchdog_lease: self.watchdog_lease,
                subscriptions,
                watchdog,
                holds: Holds::default(),
                _shutdown: shutdown_tx,
            }),
        })
    }
}

/// The oldest major version that can load the scripts, which start with a Redis 7
/// shebang (`#!lua flags=allow-oom`, ...).
const MIN_SERVER_MAJOR: u32 = 7;

/// Refuses a server older than Redis 7.0 with [`Error::UnsupportedServer`].
///
/// Reads the version from `HELLO`, not `INFO`: an ACL may forbid `INFO`, but not `HELLO`,
/// which the RESP3 connection itself needed to start. A reply without a readable version
/// does not block the connect (the script load then shows what the server lacks).
async fn check_server_version(conn: &mut ConnectionManager) -> Result<()> {
    // `HELLO 3` on a RESP3 connection switches nothing; `HELLO` without arguments would
    // be simpler but needs 6.2, and a 6.0 server must get the version error too.
    let reply: redis::RedisResult<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("HELLO").arg(3).query_async(conn).await;
    let version = match reply {
        Ok(mut fields) => match fields.remove("version") {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Some(redis::Value::SimpleString(text) | redis::Value::VerbatimString { text, .. }) => {
                text
            }
            other => {
                tracing::debug!(reply = ?other, "HELLO gave no readable server version");
                return Ok(());
            }
        },
        Err(e) => {
            tracing::debug!(error = %e, "HELLO failed; server version not checked");
            return Ok(());
        }
    };
    if version_too_old(&version) {
        return Err(Error::UnsupportedServer { version });
    }
    Ok(())
}

/// True when `version` (`"6.2.14"`) names a major version below [`MIN_SERVER_MAJOR`];
/// false for anything unreadable, which is left to the script load to judge.
fn version_too_old(version: &str) -> bool {
    version
        .split('.')
        .next()
        .and_then(|major| major.trim().parse::<u32>().ok())
        .is_some_and(|major| major < MIN_SERVER_MAJOR)
}

/// Locks are keys with a TTL: a server that evicts such keys under memory pressure can
/// drop a held lock. Only `noeviction` keeps them.
async fn warn_if_keys_may_be_evicted(conn: &mut ConnectionManager) {
    // RESP3 answers CONFIG GET with a map; an ACL may forbid CONFIG (then stay silent).
    let reply: redis::RedisResult<std::collections::HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Ok(config) = reply
        && let Some(policy) = config.get("maxmemory-policy")
        && policy != "noeviction"
    {
        tracing::warn!(
            policy = %policy,
            "redis maxmemory-policy can evict lock keys under memory pressure; set it to noeviction"
        );
    }
}

/// The URL with its password replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let user = userinfo.split(':').next().unwrap_or("");
    let redacted_userinfo = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        // `redis://secret@host` puts the password where the user would be.
        "***".to_owned()
    };
    format!(
        "{}{redacted_userinfo}{}",
        &url[..scheme_end + 3],
        &rest[at..]
    )
}

#[cfg(test)]
mod tests {
    use super::{redact_url, version_too_old};

    #[test]
    fn servers_before_redis_7_are_too_old() {
        assert!(version_too_old("6.2.14"));
        assert!(version_too_old("6.0.9"));
        assert!(version_too_old("5.0.7"));
        assert!(!version_too_old("7.0.15"));
        assert!(!version_too_old("7.2.4"));
        assert!(!version_too_old("8.0.0"));
        // Unstable builds report 255.255.255.
        assert!(!version_too_old("255.255.255"));
        // Unreadable: not refused here.
        assert!(!version_too_old(""));
        assert!(!version_too_old("unknown"));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("rediss://u:pw@h"), "rediss://u:***@h");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(
            redact_url("redis://u:p@ss@h/1?x=@"),
            "redis://u:***@h/1?x=@"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
