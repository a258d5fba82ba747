//! The master a Sentinel group names, followed across failovers.
//!
//! redis-rs resolves the master once and its connection manager then stays with that
//! address: after a failover it reconnects to the old master (now a replica, answering
//! writes with `READONLY`) or to nothing at all. So this keeps the sentinels at hand and,
//! when a call finds its server gone or demoted, asks them for the master again; if it
//! moved, a new connection to it replaces the old one, every waiter is woken (messages
//! may have been missed) and the client's shard channels are subscribed there.

use std::sync::{PoisonError, RwLock};

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ConnectionInfo, TlsMode};
use tokio::sync::Mutex;

use crate::api::error::{Error, Result};
use crate::api::error::{RedisResultExt as _, command_error, failed_command};
use crate::backend::connection::push::PushHandler;
use crate::backend::tls::TlsConfig;

/// Credentials for the sentinels themselves (the URL's are the data servers').
#[derive(Clone, Default)]
pub(crate) struct SentinelCredentials {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// Asks the sentinels for the master. A trait object on purpose: redis-rs's
/// `SentinelClient` is a deep type (it caches connections, TLS streams included), and
/// every future that touches the client's connection would carry it into the compiler's
/// `Send` checks, deep enough to overflow them in a caller's crate.
trait FindMaster: Send {
    fn find(&mut self) -> BoxFuture<'_, redis::RedisResult<redis::Client>>;

    /// Logs in to a sentinel and asks its `ROLE`, nothing more: tells whether the
    /// sentinels take the client's credentials.
    fn probe_sentinels(&mut self) -> BoxFuture<'_, redis::RedisResult<()>>;
}

impl FindMaster for SentinelClient {
    fn find(&mut self) -> BoxFuture<'_, redis::RedisResult<redis::Client>> {
        Box::pin(self.async_get_client())
    }

    fn probe_sentinels(&mut self) -> BoxFuture<'_, redis::RedisResult<()>> {
        Box::pin(async move { self.async_get_sentinel_client().await.map(drop) })
    }
}

/// The connection to the current master, and how to find the next one.
pub(crate) struct SentinelMaster {
    sentinels: Mutex<Box<dyn FindMaster>>,
    current: RwLock<Current>,
    config: ConnectionManagerConfig,
    push: PushHandler,
}

struct Current {
    manager: ConnectionManager,
    address: String,
}

impl SentinelMaster {
    /// Asks the sentinels for `master` and connects to it.
    pub(crate) async fn connect(
        sentinels: &[ConnectionInfo],
        master: &str,
        data: &ConnectionInfo,
        tls: Option<&TlsConfig>,
        sentinel_credentials: &SentinelCredentials,
        config: ConnectionManagerConfig,
        push: PushHandler,
    ) -> Result<Self> {
        let addresses = sentinels.iter().map(|info| info.addr().clone());
        let mut builder = SentinelClientBuilder::new(addresses, master, SentinelServerType::Master)
            .map_err(|e| Error::invalid(format!("sentinel settings: {e}")))?
            .set_client_to_redis_protocol(redis::ProtocolVersion::RESP3)
            .set_client_to_redis_db(data.redis_settings().db());
        if let Some(username) = data.redis_settings().username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = data.redis_settings().password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &sentinel_credentials.username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &sentinel_credentials.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let ConnectionAddr::TcpTls { insecure, .. } = data.addr() {
            crate::backend::tls::install_crypto_provider();
            let insecure = *insecure || tls.is_some_and(TlsConfig::accepts_invalid_certificates);
            let mode = if insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            };
            builder = builder
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_sentinel_tls_mode(mode);
            if let Some(tls) = tls {
                let certificates = tls.certificates()?;
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        } else if tls.is_some() {
            return Err(Error::invalid(
                "tls settings need a rediss+sentinel:// url (the url asks for plain connections)",
            ));
        }
        let mut sentinel = builder
            .build()
            .map_err(|e| Error::invalid(format!("sentinel settings: {e}")))?;
        let (manager, address) = match resolve(&mut sentinel, &config, &push).await {
            Ok(found) => found,
            Err(e) if failed_command(&e).is_some_and(is_login_refused) => {
                let cause = failed_command(&e).cloned().unwrap_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Io, "login refused"))
                });
                return Err(command_error(name_who_refused(&mut sentinel, &cause).await));
            }
            Err(e) => return Err(e),
        };
        Ok(Self {
            sentinels: Mutex::new(Box::new(sentinel)),
            current: RwLock::new(Current { manager, address }),
            config,
            push,
        })
    }

    /// The connection to the master as last known.
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .manager
            .clone()
    }

    /// Asks the sentinels where the master is; moves to it if it changed. Calls that
    /// fail together wait for one lookup.
    pub(crate) async fn follow_failover(&self) {
        let known = self.address();
        let mut sentinels = self.sentinels.lock().await;
        if self.address() != known {
            // Another call moved while this one waited for the lock.
            return;
        }
        match resolve(&mut **sentinels, &self.config, &self.push).await {
            Ok((manager, address)) if address != known => {
                tracing::warn!(old = %known, new = %address, "redis master moved; following it");
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    Current { manager, address };
                self.push.connection_replaced();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "asking the sentinels for the master failed");
            }
        }
    }

    fn address(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .address
            .clone()
    }
}

/// Whether a server refused the client's login (wrong or missing credentials).
fn is_login_refused(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// `cause` (a refused login), saying whether the sentinels or the master refused it, and
/// so which credentials to fix: redis-rs reports both the same way.
async fn name_who_refused(
    sentinel: &mut dyn FindMaster,
    cause: &redis::RedisError,
) -> redis::RedisError {
    let reason = crate::api::error::redis_reason(cause);
    let (who, whose, reason) = match sentinel.probe_sentinels().await {
        Err(e) if is_login_refused(&e) => (
            "the sentinels refused the login",
            "their credentials are ClientBuilder::sentinel_credentials",
            // The server's own words: the fix the plain sentence names (the url) is not
            // theirs.
            match (cause.code(), cause.detail()) {
                (Some(code), Some(detail)) => format!("{code} {detail}"),
                _ => reason,
            },
        ),
        Ok(()) => (
            "the master refused the login",
            "its credentials are the url's",
            reason,
        ),
        // Unknown: the cause as it was.
        Err(_) => return redis::RedisError::from((cause.kind(), "login refused", reason)),
    };
    redis::RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        who,
        format!("{reason} ({whose})"),
    ))
}

/// The master's address from the sentinels, and a connection to it.
async fn resolve(
    sentinel: &mut dyn FindMaster,
    config: &ConnectionManagerConfig,
    push: &PushHandler,
) -> Result<(ConnectionManager, String)> {
    let client = sentinel.find().await.or_command_error()?;
    let address = match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => format!("{other:?}"),
    };
    let manager =
        ConnectionManager::new_with_config(client, config.clone().set_push_sender(push.clone()))
            .await
            .or_command_error()?;
    Ok((manager, address))
}
