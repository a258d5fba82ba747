//! The service's own Redis connection (login tokens, the `lua` order flow, the lab's
//! stock): every command bounded by the service's Redis timeout, and sent again when
//! the server did not run it or running it twice is safe: any command that never left
//! (the connection was refused) or that the server answered it did not execute (a
//! cluster redirection, a cluster or master in transition, a write to a demoted
//! master), and a command that is safe to send twice after a dropped connection.
//!
//! The URL says the topology ([`url`]): one server through redis-rs's
//! `ConnectionManager`; a Redis Cluster through its cluster client, which routes each
//! command by its key (a script's or a pipeline's keys must share a hash slot); or the
//! master a Sentinel group names ([`sentinel`]), looked up again when a call finds it
//! gone or demoted.
//!
//! redis-rs's `ConnectionManager` reconnects after a dropped connection, but the command
//! that found it dropped fails; and while it reconnects, every command waits for the
//! reconnection. The first would fail the first request after Redis came back; the
//! second would hold a request far past its timeout while Redis is hung.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, TlsCertificates, TlsMode, Value,
};
use tokio::time::Instant;

mod sentinel;
pub(crate) mod url;

use sentinel::SentinelMaster;
pub(crate) use url::Topology;

/// How often a call the server did not execute is sent again within its timeout.
const NOT_EXECUTED_ATTEMPTS: u32 = 5;

/// TLS settings of the service's own connections (`rediss://`, `rediss+cluster://`,
/// `rediss+sentinel://`).
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA certificates (PEM) to trust instead of the system's.
    pub ca: Option<Vec<u8>>,
    /// A client certificate and its key (PEM).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept any server certificate (tests only).
    pub insecure: bool,
}

impl RedisTls {
    fn certificates(&self) -> Option<TlsCertificates> {
        if self.ca.is_none() && self.client.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        })
    }

    /// `info` with certificate checks turned off when `--insecure` says so.
    fn apply_insecure(&self, info: ConnectionInfo) -> ConnectionInfo {
        match info.addr().clone() {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } if self.insecure && !insecure => info.set_addr(ConnectionAddr::TcpTls {
                host,
                port,
                insecure: true,
                tls_params: None,
            }),
            _ => info,
        }
    }
}

/// A cheap-to-clone Redis connection whose commands end within `timeout`.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use std::time::Duration;
/// use redis::AsyncCommands as _;
/// use seckill::redis_conn::{RedisConn, RedisTls};
///
/// let url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002";
/// let mut conn = RedisConn::connect(url, &RedisTls::default(), Duration::from_secs(1)).await?;
/// let () = conn.set("{lab}:stock", 200).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisConn {
    route: Route,
    timeout: Duration,
}

/// Where the commands go.
#[derive(Clone)]
enum Route {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelMaster>),
}

/// One server's or the cluster's connection, as one command sees it.
#[derive(Clone)]
enum Target {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects to what `url` names: one server, a Redis Cluster
    /// (`redis+cluster://host:port,...`) or the master of a Sentinel group
    /// (`redis+sentinel://host:port,.../NAME`). Connection attempts and replies are
    /// bounded by `timeout`, and so is every command as a whole.
    ///
    /// # Errors
    ///
    /// When the URL does not parse or the servers cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the connections made so far.
    pub async fn connect(url: &str, tls: &RedisTls, timeout: Duration) -> anyhow::Result<Self> {
        let topology = Topology::parse(url).map_err(anyhow::Error::msg)?;
        let config = manager_config(timeout);
        let route = match topology {
            Topology::Single(info) => {
                let info = tls.apply_insecure(info);
                let client = match tls.certificates() {
                    Some(certificates) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
                        redis::Client::build_with_tls(info, certificates)?
                    }
                    _ => redis::Client::open(info)?,
                };
                Route::Single(ConnectionManager::new_with_config(client, config).await?)
            }
            Topology::Cluster(seeds) => Route::Cluster(connect_cluster(seeds, tls, timeout).await?),
            Topology::Sentinel {
                sentinels,
                master,
                data,
            } => {
                let found = tokio::time::timeout(
                    timeout * 4,
                    SentinelMaster::connect(sentinels, &master, &data, tls, config),
                )
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "the sentinels did not name master {master:?} within {}",
                        humantime::format_duration(timeout * 4)
                    )
                })??;
                Route::Sentinel(Arc::new(found))
            }
        };
        Ok(Self { route, timeout })
    }

    /// The bound on each command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn target(&self) -> Target {
        match &self.route {
            Route::Single(manager) => Target::Single(manager.clone()),
            Route::Cluster(cluster) => Target::Cluster(cluster.clone()),
            Route::Sentinel(master) => Target::Single(master.manager()),
        }
    }

    async fn bounded<T, F, Fut>(&mut self, what: &str, idempotent: bool, send: F) -> RedisResult<T>
    where
        F: Fn(Target) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut not_executed = 0;
        let mut resent_after_cut = false;
        loop {
            let error = match tokio::time::timeout_at(deadline, send(self.target())).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) => error,
                Err(_) => return Err(timed_out(self.timeout)),
            };
            let resend = if was_not_executed(&error) {
                not_executed += 1;
                not_executed <= NOT_EXECUTED_ATTEMPTS
            } else if (never_sent(&error) || (idempotent && is_stale_connection(&error)))
                && !resent_after_cut
            {
                // Once: the manager has started a reconnection; this waits for it.
                resent_after_cut = true;
                true
            } else {
                false
            };
            if !resend {
                return Err(error);
            }
            tracing::debug!(command = what, error = %error, "redis call not run or cut off; sending again");
            if let Route::Sentinel(master) = &self.route
                && (is_stale_connection(&error)
                    || error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly))
            {
                // Boxed: a failover is rare, and asking the sentinels is a deep future.
                let follow = Box::pin(master.follow_failover());
                if tokio::time::timeout_at(deadline, follow).await.is_err() {
                    return Err(timed_out(self.timeout));
                }
            } else if not_executed > 1 {
                // A cluster or master in transition: a short pause before the next try.
                let pause = Duration::from_millis(10 << (not_executed - 2).min(4));
                tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
            }
        }
    }
}

/// Few, short reconnection attempts: a request waits for a reconnection only within its
/// own timeout, and the next request starts a fresh one.
fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(timeout / 4)
}

/// The cluster client through `seeds`. Its own resending is off (`retries(0)`): it would
/// send a call cut off by a dropped connection again whatever the call; the rules above
/// decide instead. It still follows `MOVED` by refreshing its slot map.
async fn connect_cluster(
    seeds: Vec<ConnectionInfo>,
    tls: &RedisTls,
    timeout: Duration,
) -> anyhow::Result<ClusterConnection> {
    let seeds: Vec<ConnectionInfo> = seeds
        .into_iter()
        .map(|info| tls.apply_insecure(info))
        .collect();
    let first = seeds.first().context("a cluster url needs a node")?.clone();
    let mut builder = ClusterClientBuilder::new(seeds)
        .retries(0)
        .connection_timeout(timeout)
        .response_timeout(timeout);
    if let ConnectionAddr::TcpTls { insecure, .. } = first.addr() {
        builder = builder.tls(if *insecure {
            TlsMode::Insecure
        } else {
            TlsMode::Secure
        });
        if let Some(certificates) = tls.certificates() {
            builder = builder.certs(certificates);
        }
    }
    let client = builder.build().context("cluster settings")?;
    Ok(client.get_async_connection().await?)
}

impl ConnectionLike for Target {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(manager) => manager.req_packed_command(cmd),
            Self::Cluster(cluster) => cluster.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(manager) => manager.req_packed_commands(pipeline, offset, count),
            Self::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(manager) => manager.get_db(),
            Self::Cluster(cluster) => cluster.get_db(),
        }
    }
}

/// The server did not run the call: it answered that the key lives elsewhere, or that
/// it cannot serve it right now.
fn was_not_executed(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        )
    )
}

/// A failure that a reconnection cures: the command never reached a live connection,
/// or the connection broke under it.
fn is_stale_connection(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error()
}

/// The command was never sent: the connection it waited for was refused. (The
/// connection manager hands out the last reconnection's failure once, and starts a new
/// one.)
pub(crate) fn never_sent(e: &RedisError) -> bool {
    e.is_connection_refusal()
}

fn timed_out(timeout: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no reply within the service's redis timeout ({})",
            humantime::format_duration(timeout)
        ),
    ))
}

/// Commands whose second delivery changes nothing the first did not (the service sends
/// `SET` only with a value and an expiry: without `NX`, `XX` or `GET` it is one too).
fn is_idempotent(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes.to_ascii_uppercase()),
        _ => None,
    });
    let Some(name) = args.next() else {
        return false;
    };
    match name.as_slice() {
        b"GET" | b"MGET" | b"EXISTS" | b"TTL" | b"PTTL" | b"LRANGE" | b"SISMEMBER" | b"PING"
        | b"EXPIRE" | b"PEXPIRE" | b"DEL" => true,
        b"SET" => args.all(|arg| !matches!(arg.as_slice(), b"NX" | b"XX" | b"GET")),
        _ => false,
    }
}

fn command_name(cmd: &Cmd) -> String {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        _ => String::new(),
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let name = command_name(cmd);
            self.bounded(&name, is_idempotent(cmd), |mut target| async move {
                target.req_packed_command(cmd).await
            })
            .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let idempotent = pipeline.cmd_iter().all(is_idempotent);
            self.bounded("pipeline", idempotent, |mut target| async move {
                target.req_packed_commands(pipeline, offset, count).await
            })
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.target().get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::is_idempotent;

    #[test]
    fn only_commands_safe_to_repeat_are_sent_again() {
        let mut set = redis::cmd("SET");
        set.arg("k").arg("v").arg("PX").arg(100);
        assert!(is_idempotent(&set));
        let mut set_nx = redis::cmd("set");
        set_nx.arg("k").arg("v").arg("nx");
        assert!(!is_idempotent(&set_nx));
        assert!(is_idempotent(redis::cmd("GET").arg("k")));
        assert!(!is_idempotent(redis::cmd("INCR").arg("k")));
        assert!(!is_idempotent(redis::cmd("EVALSHA").arg("abc").arg(0)));
        assert!(!is_idempotent(&redis::cmd("")));
    }
}
