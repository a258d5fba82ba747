//! The state every handler shares: the stores, the locks and the settings.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use ferrisson::redis::{
    Client, ClientBuilder, Commands, IdGenerator, Rate, RateDecision, TlsConfig,
};

use crate::db::Db;
use crate::error::ApiError;
use crate::oversell::Lab;
use crate::settings::{ServeConfig, TlsFiles};

/// The state every handler shares (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) db: Db,
    /// The service's own Redis commands (login tokens, the `lua` order flow, the lab's
    /// stock), through the library's client: its topology handling and resend rules.
    pub(crate) redis: Commands,
    pub(crate) locks: Client,
    /// The store of the `lock` order flow's per-user locks: `--lock-url`'s, or the
    /// Redis client's.
    pub(crate) order_locks: ferrisson::Client,
    pub(crate) ids: IdGenerator,
    pub(crate) config: ServeConfig,
    pub(crate) lab: Lab,
    /// The limit on one user's buy attempts; `None`: no limit.
    pub(crate) buy_limit: Option<Rate>,
}

/// The TLS settings read from their files: PEM bytes.
#[derive(Default)]
struct TlsPems {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
    insecure: bool,
}

fn read_pem(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {flag} {}", path.display()))
}

impl TlsPems {
    fn read(files: &TlsFiles) -> anyhow::Result<Self> {
        let ca = files
            .ca_cert
            .as_deref()
            .map(|p| read_pem(p, "--cacert"))
            .transpose()?;
        let client = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => Some((read_pem(cert, "--cert")?, read_pem(key, "--key")?)),
            (None, None) => None,
            _ => anyhow::bail!("--cert and --key go together"),
        };
        Ok(Self {
            ca,
            client,
            insecure: files.insecure,
        })
    }

    /// The settings for ferrisson clients of `url`; none for a plain `redis://`,
    /// `redis+sentinel://` or `redis+cluster://` URL.
    fn for_ferrisson(&self, url: &str) -> Option<TlsConfig> {
        if !url.starts_with("rediss") {
            return None;
        }
        let mut tls = TlsConfig::new().danger_accept_invalid_certificates(self.insecure);
        if let Some(ca) = &self.ca {
            tls = tls.ca_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.client {
            tls = tls.client_certificate(cert.clone(), key.clone());
        }
        Some(tls)
    }
}

/// The settings of a ferrisson client for `url`: the service's timeouts, watchdog
/// lease, coalescing and TLS settings.
fn ferrisson_builder(url: &str, config: &ServeConfig, tls: &TlsPems) -> ClientBuilder {
    let builder = Client::builder(url)
        .connect_timeout(config.redis_timeout)
        .response_timeout(config.redis_timeout)
        .watchdog_lease(config.watchdog_lease)
        .coalesce_calls(config.coalesce_calls);
    match tls.for_ferrisson(url) {
        Some(tls) => builder.tls(tls),
        None => builder,
    }
}

/// A ferrisson client for `url` with the service's settings ([`ferrisson_builder`]).
async fn ferrisson_client(
    url: &str,
    config: &ServeConfig,
    tls: &TlsPems,
) -> ferrisson::redis::Result<Client> {
    ferrisson_builder(url, config, tls).connect().await
}

impl AppState {
    /// Checks the settings, then connects to Redis (and the redlock servers) and the
    /// database, running migrations and checking the schema.
    ///
    /// # Errors
    ///
    /// When a setting is invalid, a store cannot be reached, or the database's schema
    /// lacks what the service relies on.
    pub async fn connect(config: ServeConfig) -> anyhow::Result<Self> {
        config.validate()?;
        let tls = TlsPems::read(&config.tls)?;
        let locks = ferrisson_client(&config.redis, &config, &tls).await?;
        let redis = locks.commands();
        let order_locks = match &config.lock_url {
            None => ferrisson::Client::from(locks.clone()),
            Some(url) => {
                let coalesce = config.coalesce_calls;
                ferrisson::Client::builder(url)
                    .watchdog_lease(config.watchdog_lease)
                    // Taken only when the URL is a Redis one.
                    .redis(move |redis| redis.coalesce_calls(coalesce))
                    .connect()
                    .await
                    .map_err(|e| anyhow::anyhow!("--lock-url: {e}"))?
            }
        };
        // The service owns its order locks' table, as it owns its database's schema.
        if let Some(sql) = order_locks.as_sql() {
            sql.create_schema()
                .await
                .map_err(|e| anyhow::anyhow!("--lock-url: creating the lock table: {e}"))?;
        }
        let db = Db::connect(&config.database, config.db_connections, config.db_timeout).await?;
        let mut redlock_clients = Vec::new();
        for url in &config.redlock {
            redlock_clients.push(ferrisson_client(url, &config, &tls).await?);
        }
        let lab = Lab::new(&config.lab, &locks, &redlock_clients)?;
        let ids = locks.id_generator();
        let buy_limit = config.buy_limit()?;
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                redis,
                locks,
                order_locks,
                ids,
                config,
                lab,
                buy_limit,
            }),
        })
    }

    /// The database handle.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The service's settings.
    pub fn config(&self) -> &ServeConfig {
        &self.inner.config
    }

    /// Runs `work` (Redis calls through the ferrisson client) within the service's Redis
    /// timeout: a hung or unreachable Redis makes the request answer 503 in time, not
    /// when the client gives up.
    pub(crate) async fn within_redis_timeout<T, E>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, ApiError>
    where
        ApiError: From<E>,
    {
        let timeout = self.inner.config.redis_timeout;
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result.map_err(ApiError::from),
            Err(_) => Err(redis_timed_out(timeout)),
        }
    }
}

impl AppState {
    /// Counts one buy attempt of `user_id` against `--buy-rate`, shared by every
    /// instance on the same Redis.
    ///
    /// # Errors
    ///
    /// [`ApiError::RateLimited`] over the limit, [`ApiError::Unavailable`] when Redis
    /// does not answer in time.
    pub(crate) async fn count_buy_attempt(&self, user_id: i64) -> Result<(), ApiError> {
        let Some(rate) = self.inner.buy_limit else {
            return Ok(());
        };
        let limiter = self
            .inner
            .locks
            .rate_limiter(&format!("seckill:buy:{user_id}"), rate)?;
        match self.within_redis_timeout(limiter.try_acquire(1)).await? {
            RateDecision::Allowed { .. } => Ok(()),
            RateDecision::Denied { retry_after } => Err(ApiError::RateLimited { retry_after }),
        }
    }
}

fn redis_timed_out(timeout: Duration) -> ApiError {
    ApiError::Unavailable(format!(
        "redis: no reply within the service's redis timeout ({})",
        humantime::format_duration(timeout)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--coalesce-calls` reaches the builder of every client the service makes on
    /// Redis; without it, the library's default (off) stays.
    #[test]
    fn coalescing_reaches_the_client_builder() {
        let mut config = ServeConfig::for_urls("redis://127.0.0.1:6379", "sqlite::memory:");
        let tls = TlsPems::default();
        // The builder has no getter: its Debug output is what shows its settings.
        let shown =
            |config: &ServeConfig| format!("{:?}", ferrisson_builder(&config.redis, config, &tls));
        let off = shown(&config);
        assert!(off.contains("coalesce_calls: false"), "{off}");
        config.coalesce_calls = true;
        let on = shown(&config);
        assert!(on.contains("coalesce_calls: true"), "{on}");
    }
}
