//! The master a Sentinel group names, followed across failovers.
//!
//! The master is looked up as Redis's guidelines for Sentinel clients say ([`discovery`]):
//! `SENTINEL GET-MASTER-ADDR-BY-NAME` asked of every sentinel, the answer with the newest
//! configuration epoch taken, `ROLE` checked there. It is looked up again when a call finds
//! its server gone or demoted, and when any sentinel of the group announces a new master
//! ([`switch_watch`]); if it moved, a new connection to it replaces the old one, every
//! waiter is woken (messages may have been missed) and the client's shard channels are
//! subscribed there.

mod discovery;
mod switch_watch;

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::ConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex;
use tokio::task::AbortHandle;

use crate::api::error::{RedisResultExt as _, Result};
use crate::backend::connection::push::PushHandler;
use crate::backend::tls::TlsConfig;
use discovery::Sentinels;

/// Credentials for the sentinels themselves (the URL's are the data servers').
#[derive(Clone, Default)]
pub(crate) struct SentinelCredentials {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// The connection to the current master, and the sentinels' announcements followed.
pub(crate) struct SentinelMaster {
    followed: Arc<Followed>,
    /// The tasks listening to each sentinel's announcements: stopped with the client.
    watchers: Vec<AbortHandle>,
}

/// The master as last looked up, and how to look it up again.
pub(crate) struct Followed {
    /// Held for the whole of a lookup: calls that fail together wait for one lookup.
    sentinels: Mutex<Sentinels>,
    current: RwLock<Current>,
    config: ConnectionManagerConfig,
    push: PushHandler,
}

struct Current {
    manager: ConnectionManager,
    address: String,
}

/// Where the master is to be found, and how to connect to it.
pub(crate) struct SentinelSettings<'a> {
    pub(crate) sentinels: &'a [ConnectionInfo],
    pub(crate) master: &'a str,
    /// The master's credentials, database and TLS mode.
    pub(crate) data: &'a ConnectionInfo,
    pub(crate) tls: Option<&'a TlsConfig>,
    pub(crate) credentials: &'a SentinelCredentials,
    /// Bounds each connection of a lookup and each of its replies: a lookup is part of
    /// connecting.
    pub(crate) connect_timeout: Duration,
}

impl SentinelMaster {
    /// Asks the sentinels for the master, connects to it and starts following their
    /// announcements.
    pub(crate) async fn connect(
        settings: &SentinelSettings<'_>,
        config: ConnectionManagerConfig,
        push: PushHandler,
    ) -> Result<Self> {
        let sentinels = Sentinels::new(
            settings.sentinels,
            settings.master,
            settings.data,
            settings.tls,
            settings.credentials,
            settings.connect_timeout,
        )?;
        let (manager, address) = resolve(&sentinels, &config, &push).await?;
        let followed = Arc::new(Followed {
            current: RwLock::new(Current { manager, address }),
            config,
            push,
            sentinels: Mutex::new(sentinels),
        });
        let watchers = {
            let sentinels = followed.sentinels.lock().await;
            switch_watch::watch(
                sentinels.clients(),
                sentinels.name(),
                settings.connect_timeout,
                &Arc::downgrade(&followed),
            )
        };
        Ok(Self { followed, watchers })
    }

    /// The connection to the master as last known.
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.followed.manager()
    }

    /// Asks the sentinels where the master is; moves to it if it changed. Calls that
    /// fail together wait for one lookup.
    pub(crate) async fn follow_failover(&self) {
        self.followed.follow_failover().await;
    }
}

impl Drop for SentinelMaster {
    fn drop(&mut self) {
        for watcher in &self.watchers {
            watcher.abort();
        }
    }
}

impl Followed {
    fn manager(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .manager
            .clone()
    }

    /// See [`SentinelMaster::follow_failover`].
    pub(crate) async fn follow_failover(&self) {
        let known = self.address();
        let sentinels = self.sentinels.lock().await;
        if self.address() != known {
            // Another call moved while this one waited for the lock.
            return;
        }
        match resolve(&sentinels, &self.config, &self.push).await {
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

/// The master's address from the sentinels, and a connection to it.
async fn resolve(
    sentinels: &Sentinels,
    config: &ConnectionManagerConfig,
    push: &PushHandler,
) -> Result<(ConnectionManager, String)> {
    let found = sentinels.find_master().await?;
    let manager = ConnectionManager::new_with_config(
        found.client,
        config.clone().set_push_sender(push.clone()),
    )
    .await
    .or_command_error()?;
    Ok((manager, found.address))
}
