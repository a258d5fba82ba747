//! What `seckill serve` is configured with: the flags, where the Redis URL comes from,
//! and the checks that refuse a setting that cannot work before anything connects.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferrisson::redis::Rate;

use crate::http::admin::AdminToken;
use crate::oversell::LabConfig;

/// The database `seckill serve` uses when none is given.
pub const DEFAULT_DATABASE: &str = "sqlite://seckill.db?mode=rwc";
/// The Redis `seckill serve` uses when no flag or environment variable names one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Fewest servers the lab's `redlock` variant runs on: a majority of them must agree,
/// and with three one may fail.
pub const MIN_REDLOCK_SERVERS: usize = 3;
/// Shortest login token lifetime (Redis expires keys in whole milliseconds, and a token
/// must outlive the request that made it).
pub const MIN_TOKEN_TTL: Duration = Duration::from_secs(1);
/// Longest login token lifetime.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Largest database pool.
pub const MAX_DB_CONNECTIONS: u32 = 1000;
/// `--read-timeout` when not given: a client on a slow mobile link sends a small
/// request well within it.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// `--shutdown-timeout` when not given: longer than any request of the service takes
/// (the lab's slowest waits 10 s for a lock), shorter than the usual 30 s before an
/// orchestrator sends SIGKILL.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest `--read-timeout`, `--shutdown-timeout`, `--redis-timeout` and `--db-timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Longest lease (`--watchdog-lease`, `--lab-lease`, `--lab-redlock-ttl`): the
/// library's own bound on a lease.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);
/// One user's buy attempts per second when `--buy-rate` is not given: more than a person
/// clicks, fewer than a script sends.
pub const DEFAULT_BUY_RATE: u32 = 5;

/// How the order flow keeps one order per user and the stock above zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderFlow {
    /// The ferrisson `Lock` on `lock:order:{userId}` around the per-user check, the
    /// conditional decrement and the insert, held until the commit; the insert carries
    /// the lock's fencing token.
    Lock,
    /// The same flow without the lock: only the unique index stops a second order. For
    /// the lab and as the benchmark's floor.
    NoLock,
    /// One Lua script checks and takes the stock and the user's one order in Redis,
    /// then the order is written to the database.
    Lua,
}

impl OrderFlow {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::NoLock => "no-lock",
            Self::Lua => "lua",
        }
    }
}

/// TLS settings for `rediss://` (`rediss+sentinel://`, `rediss+cluster://`) servers (the main one and the redlock servers), with
/// redis-cli's flag names, as the `ferrisson` command has them.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct TlsFiles {
    /// TLS: trust the CA certificates in this PEM file instead of the system's.
    #[arg(long = "cacert", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// TLS: present this client certificate (PEM, with any intermediates), for servers
    /// with tls-auth-clients.
    #[arg(long = "cert", value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// TLS: the private key of --cert (PEM).
    #[arg(long = "key", value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// TLS: accept any server certificate, for any host name (encrypted but not
    /// authenticated: for tests only).
    #[arg(long = "insecure")]
    pub insecure: bool,
}

impl TlsFiles {
    /// Whether any TLS setting was given.
    pub fn is_set(&self) -> bool {
        self.ca_cert.is_some() || self.cert.is_some() || self.key.is_some() || self.insecure
    }
}

/// Everything `seckill serve` is configured with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Redis URL for tokens, locks, ids and the lab's stock.
    pub redis: String,
    /// TLS settings for `rediss://` URLs.
    pub tls: TlsFiles,
    /// How long one Redis call of a request may take before the request answers 503
    /// (also the connect and response timeout of the service's Redis clients).
    pub redis_timeout: Duration,
    /// Database URL (`sqlite://...`, `postgres://...`, `mysql://...`).
    pub database: String,
    /// How long connecting to the database, or waiting for a pooled connection, may take.
    pub db_timeout: Duration,
    /// Database pool size.
    pub db_connections: u32,
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// The independent Redis servers of the lab's `redlock` variant (none, or three or
    /// more).
    pub redlock: Vec<String>,
    /// How orders keep one per user.
    pub order_flow: OrderFlow,
    /// The store of the `lock` order flow's per-user locks, by URL (`postgres://`,
    /// `mysql://`, `zk://`, `etcd://`, another `redis://`, ...); `None`: the service's
    /// Redis. Stock, ids and login tokens stay on the Redis either way.
    pub lock_url: Option<String>,
    /// Login token lifetime, refreshed on each authenticated request.
    pub token_ttl: Duration,
    /// The watchdog lease of ferrisson locks.
    pub watchdog_lease: Duration,
    /// Whether the service's Redis clients send the lock calls that meet one in flight
    /// together, as one batched call (`--coalesce-calls`; see
    /// [`ClientBuilder::coalesce_calls`](ferrisson::redis::ClientBuilder::coalesce_calls)).
    pub coalesce_calls: bool,
    /// How many buy attempts (`POST /vouchers/{id}/seckill`) one user may make per
    /// second, across every instance sharing the Redis, in bursts of as many; 0: no
    /// limit.
    pub buy_rate: u32,
    /// How long a client may take to send a request head, and then its body; a
    /// connection idle that long between requests is closed too.
    pub read_timeout: Duration,
    /// After SIGTERM or SIGINT: how long requests in flight may take to finish before
    /// every connection still open is closed.
    pub shutdown_timeout: Duration,
    /// The admin token that creating vouchers, listing a voucher's orders and the
    /// `/lab/*` routes require; `None`: those routes are off.
    pub admin_token: Option<AdminToken>,
    /// The oversell lab's settings.
    pub lab: LabConfig,
}

/// A setting that cannot work, named by its flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for {flag}: {reason}")]
pub struct InvalidSetting {
    /// The flag, e.g. `--token-ttl`.
    pub flag: &'static str,
    /// What is wrong and what would work.
    pub reason: String,
}

fn invalid(flag: &'static str, reason: impl Into<String>) -> InvalidSetting {
    InvalidSetting {
        flag,
        reason: reason.into(),
    }
}

fn at_most(
    flag: &'static str,
    value: Duration,
    max: Duration,
    what: &str,
) -> Result<(), InvalidSetting> {
    if value > max {
        return Err(invalid(
            flag,
            format!(
                "{} is too long: {what} must be at most {}",
                humantime::format_duration(value),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(())
}

/// `value` between `min` and `max`, else the flag's error.
fn within(
    flag: &'static str,
    value: Duration,
    (min, max): (Duration, Duration),
    what: &str,
) -> Result<(), InvalidSetting> {
    at_least(flag, value, min, what)?;
    at_most(flag, value, max, what)
}

fn at_least(
    flag: &'static str,
    value: Duration,
    min: Duration,
    what: &str,
) -> Result<(), InvalidSetting> {
    if value < min {
        return Err(invalid(
            flag,
            format!(
                "{} is too short: {what} must be at least {}",
                humantime::format_duration(value),
                humantime::format_duration(min)
            ),
        ));
    }
    Ok(())
}

impl ServeConfig {
    /// Checks every setting, so that a bad one is refused at start with its flag named,
    /// not met by the first request.
    ///
    /// ```
    /// use std::time::Duration;
    /// use seckill::ServeConfig;
    ///
    /// let mut config = ServeConfig::for_urls("redis://127.0.0.1:6379", "sqlite::memory:");
    /// assert!(config.validate().is_ok());
    /// config.token_ttl = Duration::ZERO;
    /// let error = config.validate().unwrap_err();
    /// assert_eq!(error.flag, "--token-ttl");
    /// ```
    ///
    /// # Errors
    ///
    /// The first setting that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.redis.trim().is_empty() {
            return Err(invalid("--url", "the Redis URL is empty"));
        }
        let tls_url = ["rediss://", "rediss+sentinel://", "rediss+cluster://"]
            .iter()
            .any(|scheme| self.redis.starts_with(scheme));
        if self.tls.is_set() && !tls_url {
            return Err(invalid(
                "--url",
                "TLS settings (--cacert, --cert, --key, --insecure) were given but the URL is not rediss:// (or rediss+sentinel://, rediss+cluster://)",
            ));
        }
        let timeouts = (Duration::from_millis(1), MAX_TIMEOUT);
        within(
            "--redis-timeout",
            self.redis_timeout,
            timeouts,
            "the Redis timeout",
        )?;
        within(
            "--db-timeout",
            self.db_timeout,
            timeouts,
            "the database timeout",
        )?;
        within(
            "--read-timeout",
            self.read_timeout,
            timeouts,
            "the request read timeout",
        )?;
        within(
            "--shutdown-timeout",
            self.shutdown_timeout,
            (Duration::ZERO, MAX_TIMEOUT),
            "the shutdown timeout",
        )?;
        if let Some(url) = &self.lock_url {
            let kind = ferrisson::StoreKind::of_url(url)
                .map_err(|e| invalid("--lock-url", e.to_string()))?;
            if !kind.is_compiled() {
                return Err(invalid(
                    "--lock-url",
                    format!("this build of seckill has no {} store", kind.name()),
                ));
            }
        }
        if !(1..=MAX_DB_CONNECTIONS).contains(&self.db_connections) {
            return Err(invalid(
                "--db-connections",
                format!(
                    "{} is out of range: the pool needs 1 to {MAX_DB_CONNECTIONS} connections",
                    self.db_connections
                ),
            ));
        }
        if !self.redlock.is_empty() && self.redlock.len() < MIN_REDLOCK_SERVERS {
            return Err(invalid(
                "--redlock-redis",
                format!(
                    "{} server(s) given: the redlock variant needs at least {MIN_REDLOCK_SERVERS} independent servers (give the flag once per server), or none to leave it off",
                    self.redlock.len()
                ),
            ));
        }
        at_least(
            "--token-ttl",
            self.token_ttl,
            MIN_TOKEN_TTL,
            "a login token's lifetime",
        )?;
        if self.token_ttl > MAX_TOKEN_TTL {
            return Err(invalid(
                "--token-ttl",
                format!(
                    "{} is too long: a login token's lifetime is at most {}",
                    humantime::format_duration(self.token_ttl),
                    humantime::format_duration(MAX_TOKEN_TTL)
                ),
            ));
        }
        within(
            "--watchdog-lease",
            self.watchdog_lease,
            (Duration::from_millis(10), MAX_LEASE),
            "the watchdog lease",
        )?;
        self.buy_limit()?;
        self.lab.validate()
    }

    /// The rate a user's buy attempts are limited to; `None` for `--buy-rate 0`.
    ///
    /// # Errors
    ///
    /// When the rate is faster than the rate limiter can count.
    pub fn buy_limit(&self) -> Result<Option<Rate>, InvalidSetting> {
        if self.buy_rate == 0 {
            return Ok(None);
        }
        Rate::per_second(self.buy_rate).map(Some).map_err(|e| {
            invalid(
                "--buy-rate",
                format!("{} is out of range: {e}", self.buy_rate),
            )
        })
    }

    /// The defaults of `seckill serve` with these URLs (for tests and embedding).
    pub fn for_urls(redis: &str, database: &str) -> Self {
        Self {
            redis: redis.to_owned(),
            tls: TlsFiles::default(),
            redis_timeout: Duration::from_secs(1),
            database: database.to_owned(),
            db_timeout: Duration::from_secs(5),
            db_connections: 8,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            redlock: Vec::new(),
            order_flow: OrderFlow::Lock,
            lock_url: None,
            token_ttl: Duration::from_secs(30 * 60),
            watchdog_lease: Duration::from_secs(30),
            coalesce_calls: false,
            buy_rate: DEFAULT_BUY_RATE,
            read_timeout: DEFAULT_READ_TIMEOUT,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            admin_token: None,
            lab: LabConfig::default(),
        }
    }
}

impl LabConfig {
    /// Checks the lab's settings.
    ///
    /// # Errors
    ///
    /// The first setting that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        within(
            "--lab-lease",
            self.lease,
            (Duration::from_millis(1), MAX_LEASE),
            "a lock's lease",
        )?;
        within(
            "--lab-lock-wait",
            self.lock_wait,
            (Duration::from_millis(1), MAX_TIMEOUT),
            "the wait for a held lock",
        )?;
        if self.stall_every < 1 {
            return Err(invalid(
                "--lab-stall-every",
                format!("{} is not a positive number of units", self.stall_every),
            ));
        }
        within(
            "--lab-stall",
            self.stall,
            (Duration::ZERO, MAX_TIMEOUT),
            "the watchdog variant's stall",
        )?;
        within(
            "--lab-redlock-ttl",
            self.redlock_ttl,
            (Duration::from_millis(10), MAX_LEASE),
            "the redlock TTL",
        )
    }
}

/// Where the Redis URL came from (logged at start, so a default is never silent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlSource {
    /// `--url` (or its alias `--redis`).
    Flag,
    /// The `FERRISSON_URL` environment variable.
    FerrissonUrl,
    /// The `REDIS_URL` environment variable.
    RedisUrl,
    /// None of them: [`DEFAULT_REDIS_URL`].
    Default,
}

impl fmt::Display for UrlSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Flag => "--url",
            Self::FerrissonUrl => "FERRISSON_URL",
            Self::RedisUrl => "REDIS_URL",
            Self::Default => "the default (no --url, FERRISSON_URL or REDIS_URL)",
        })
    }
}

/// The Redis URL: `flag`, else `FERRISSON_URL`, else `REDIS_URL`, else the default. An
/// environment variable set to the empty string counts as unset.
pub fn redis_url(flag: Option<String>) -> (String, UrlSource) {
    redis_url_from(flag, |name| std::env::var(name).ok())
}

fn redis_url_from(
    flag: Option<String>,
    env: impl Fn(&str) -> Option<String>,
) -> (String, UrlSource) {
    if let Some(url) = flag {
        return (url, UrlSource::Flag);
    }
    for (name, source) in [
        ("FERRISSON_URL", UrlSource::FerrissonUrl),
        ("REDIS_URL", UrlSource::RedisUrl),
    ] {
        if let Some(url) = env(name).filter(|url| !url.is_empty()) {
            return (url, source);
        }
    }
    (DEFAULT_REDIS_URL.to_owned(), UrlSource::Default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn url_precedence() {
        let both = [
            ("FERRISSON_URL", "redis://f:1"),
            ("REDIS_URL", "redis://r:2"),
        ];
        assert_eq!(
            redis_url_from(Some("redis://flag:3".into()), env(&both)),
            ("redis://flag:3".into(), UrlSource::Flag)
        );
        assert_eq!(
            redis_url_from(None, env(&both)),
            ("redis://f:1".into(), UrlSource::FerrissonUrl)
        );
        assert_eq!(
            redis_url_from(
                None,
                env(&[("FERRISSON_URL", ""), ("REDIS_URL", "redis://r:2")])
            ),
            ("redis://r:2".into(), UrlSource::RedisUrl)
        );
        assert_eq!(
            redis_url_from(None, env(&[])),
            (DEFAULT_REDIS_URL.into(), UrlSource::Default)
        );
    }

    type Change = fn(&mut ServeConfig);

    #[test]
    fn refused_settings_name_their_flag() {
        let ok = ServeConfig::for_urls("redis://127.0.0.1:6379", "sqlite::memory:");
        assert_eq!(ok.validate(), Ok(()));
        let cases: Vec<(&str, Change)> = vec![
            ("--token-ttl", |c| c.token_ttl = Duration::ZERO),
            ("--token-ttl", |c| c.token_ttl = Duration::from_millis(999)),
            ("--token-ttl", |c| {
                c.token_ttl = MAX_TOKEN_TTL + Duration::from_secs(1);
            }),
            ("--db-connections", |c| c.db_connections = 0),
            ("--redlock-redis", |c| c.redlock = vec!["redis://a".into()]),
            ("--redlock-redis", |c| {
                c.redlock = vec!["redis://a".into(), "redis://b".into()];
            }),
            ("--redis-timeout", |c| c.redis_timeout = Duration::ZERO),
            ("--db-timeout", |c| c.db_timeout = Duration::ZERO),
            ("--watchdog-lease", |c| c.watchdog_lease = Duration::ZERO),
            ("--watchdog-lease", |c| {
                c.watchdog_lease = Duration::from_secs(100 * 365 * 24 * 3600);
            }),
            ("--read-timeout", |c| c.read_timeout = Duration::ZERO),
            ("--read-timeout", |c| c.read_timeout = MAX_TIMEOUT * 2),
            ("--shutdown-timeout", |c| {
                c.shutdown_timeout = MAX_TIMEOUT * 2;
            }),
            ("--redis-timeout", |c| c.redis_timeout = MAX_TIMEOUT * 2),
            ("--lab-lease", |c| c.lab.lease = MAX_LEASE * 2),
            ("--lab-stall", |c| c.lab.stall = MAX_TIMEOUT * 2),
            ("--buy-rate", |c| c.buy_rate = 1_000_001),
            ("--url", |c| c.redis = String::new()),
            ("--url", |c| c.tls.insecure = true),
            ("--lab-lease", |c| c.lab.lease = Duration::ZERO),
            ("--lab-lock-wait", |c| c.lab.lock_wait = Duration::ZERO),
            ("--lab-stall-every", |c| c.lab.stall_every = 0),
            ("--lab-redlock-ttl", |c| c.lab.redlock_ttl = Duration::ZERO),
        ];
        for (flag, change) in cases {
            let mut config = ok.clone();
            change(&mut config);
            let error = config.validate().expect_err(flag);
            assert_eq!(error.flag, flag, "{error}");
        }
        let mut three = ok.clone();
        three.redlock = vec!["redis://a".into(), "redis://b".into(), "redis://c".into()];
        assert_eq!(three.validate(), Ok(()));
    }
}
