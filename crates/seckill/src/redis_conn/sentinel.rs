//! The master a Sentinel group names, followed across failovers.
//!
//! redis-rs resolves the master once, and its connection manager then stays with that
//! address: after a failover it reconnects to the old master (now a replica that
//! answers writes with `READONLY`) or to nothing. So the sentinels are kept at hand and,
//! when a call finds its server gone or demoted, asked for the master again; if it moved,
//! a connection to the new one replaces the old.

use std::sync::{PoisonError, RwLock};

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ConnectionInfo, TlsMode};
use tokio::sync::Mutex;

use super::RedisTls;

/// Asks the sentinels for the master. A trait object: redis-rs's `SentinelClient` is a
/// deep type, and every future that touches the connection would carry it into the
/// compiler's `Send` checks.
trait FindMaster: Send {
    fn find(&mut self) -> BoxFuture<'_, redis::RedisResult<redis::Client>>;
}

impl FindMaster for SentinelClient {
    fn find(&mut self) -> BoxFuture<'_, redis::RedisResult<redis::Client>> {
        Box::pin(self.async_get_client())
    }
}

/// The connection to the current master, and how to find the next one.
pub(super) struct SentinelMaster {
    sentinels: Mutex<Box<dyn FindMaster>>,
    current: RwLock<Current>,
    config: ConnectionManagerConfig,
}

struct Current {
    manager: ConnectionManager,
    address: String,
}

impl SentinelMaster {
    /// Asks `sentinels` for `master` and connects to it with `data`'s credentials,
    /// database and TLS mode.
    pub(super) async fn connect(
        sentinels: Vec<ConnectionAddr>,
        master: &str,
        data: &ConnectionInfo,
        tls: &RedisTls,
        config: ConnectionManagerConfig,
    ) -> anyhow::Result<Self> {
        let settings = data.redis_settings();
        let mut builder =
            SentinelClientBuilder::new(sentinels, master, SentinelServerType::Master)?
                .set_client_to_redis_db(settings.db());
        if let Some(username) = settings.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = settings.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let ConnectionAddr::TcpTls { insecure, .. } = data.addr() {
            let mode = if *insecure || tls.insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            };
            builder = builder
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_sentinel_tls_mode(mode);
            if let Some(certificates) = tls.certificates() {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        let mut sentinel = builder.build()?;
        let (client, address) = find_master(&mut sentinel).await?;
        let manager = ConnectionManager::new_with_config(client, config.clone()).await?;
        Ok(Self {
            sentinels: Mutex::new(Box::new(sentinel)),
            current: RwLock::new(Current { manager, address }),
            config,
        })
    }

    /// The connection to the master as last known.
    pub(super) fn manager(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .manager
            .clone()
    }

    /// Asks the sentinels where the master is, and moves there if it changed. Calls
    /// that fail together wait for one lookup.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the connection is replaced only once the new one is made.
    pub(super) async fn follow_failover(&self) {
        let known = self.address();
        let mut sentinels = self.sentinels.lock().await;
        if self.address() != known {
            // Another call moved while this one waited for the lookup.
            return;
        }
        let moved = match find_master(&mut **sentinels).await {
            Ok((client, address)) if address != known => {
                ConnectionManager::new_with_config(client, self.config.clone())
                    .await
                    .map(|manager| Some((manager, address)))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        match moved {
            Ok(Some((manager, address))) => {
                tracing::warn!(old = %known, new = %address, "redis master moved; following it");
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    Current { manager, address };
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "asking the sentinels for the master failed"),
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

/// A client of the master the sentinels name, and its address.
async fn find_master(sentinel: &mut dyn FindMaster) -> redis::RedisResult<(redis::Client, String)> {
    let client = sentinel.find().await?;
    let address = match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => format!("{other:?}"),
    };
    Ok((client, address))
}
