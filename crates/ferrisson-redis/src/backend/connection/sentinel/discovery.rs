//! Which server is the master: asked of every sentinel of the group, as Redis's
//! guidelines for Sentinel clients describe, and checked on the server itself.
//!
//! During a failover the sentinels disagree. The one leading it names the promoted replica
//! in `SENTINEL GET-MASTER-ADDR-BY-NAME` as soon as the replica took the role, together
//! with a new configuration epoch, while its `SENTINEL MASTER(S)` keeps the old address
//! until the failover ends (up to `failover-timeout` later); the others name the new master
//! once they hear of that epoch. The old master meanwhile still answers `ROLE` as a master
//! and takes writes, so neither the first answer nor `ROLE` alone can tell: the answer with
//! the newest configuration epoch does, and `ROLE` then confirms it.

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};

use crate::api::error::{Error, Result, command_error};
use crate::backend::connection::sentinel::SentinelCredentials;
use crate::backend::tls::TlsConfig;

/// The sentinels of a group, and how to reach the master they name.
pub(super) struct Sentinels {
    /// One client per sentinel, in the URL's order, with the sentinels' credentials.
    clients: Vec<redis::Client>,
    /// The master's name as the sentinels know it.
    name: String,
    /// The master's credentials, database and TLS mode (its address is replaced).
    data: ConnectionInfo,
    tls: Option<TlsConfig>,
    /// The connect timeout, for every connection and reply of a lookup.
    timeouts: AsyncConnectionConfig,
}

/// What one sentinel says: the master's address and the configuration epoch it belongs
/// to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    address: (String, u16),
    epoch: u64,
}

/// The master found: a client for it and its `host:port`.
pub(super) struct Found {
    pub(super) client: redis::Client,
    pub(super) address: String,
}

/// How often one sentinel is asked again when its address changed between two questions
/// of the same lookup (a failover moved on meanwhile).
const SETTLE_ATTEMPTS: usize = 3;

impl Sentinels {
    /// The sentinels at `sentinels` watching the master `name`; `data` carries the
    /// master's credentials, database and TLS mode.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for TLS settings with a plain URL or settings redis-rs
    /// refuses.
    pub(super) fn new(
        sentinels: &[ConnectionInfo],
        name: &str,
        data: &ConnectionInfo,
        tls: Option<&TlsConfig>,
        credentials: &SentinelCredentials,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let is_tls = matches!(data.addr(), ConnectionAddr::TcpTls { .. });
        if tls.is_some() && !is_tls {
            return Err(Error::invalid(
                "tls settings need a rediss+sentinel:// url (the url asks for plain connections)",
            ));
        }
        if is_tls {
            crate::backend::tls::install_crypto_provider();
        }
        let clients = sentinels
            .iter()
            .map(|info| {
                let mut settings = info.redis_settings().clone();
                if let Some(username) = &credentials.username {
                    settings = settings.set_username(username);
                }
                if let Some(password) = &credentials.password {
                    settings = settings.set_password(password);
                }
                open(info.clone().set_redis_settings(settings), tls)
            })
            .collect::<Result<Vec<_>>>()?;
        let settings = data
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        Ok(Self {
            clients,
            name: name.to_owned(),
            data: data.clone().set_redis_settings(settings),
            tls: tls.cloned(),
            timeouts: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(connect_timeout)),
        })
    }

    /// Clients for each sentinel (for their event channels).
    pub(super) fn clients(&self) -> &[redis::Client] {
        &self.clients
    }

    /// The master's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Asks every sentinel at once; takes the address named with the newest configuration
    /// epoch (the one most sentinels name among equals) and returns it once `ROLE` there
    /// says `master`.
    ///
    /// Boxed, its type erased: the lookup is a deep future (redis-rs's connections, TLS
    /// streams included), and every future that awaits it would carry it into the
    /// compiler's `Send` checks, deep enough to overflow them in a caller's crate.
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::Command`](crate::RedisStoreError::Command) with the reason: no
    /// sentinel answered (the most telling of their errors: a refused login is said to
    /// be the sentinels'), none knows the master, or the newest address is not a master
    /// (yet), or refuses the login (said to be the master's).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads, on connections of its own.
    pub(super) fn find_master(&self) -> BoxFuture<'_, Result<Found>> {
        Box::pin(self.find_master_unboxed())
    }

    async fn find_master_unboxed(&self) -> Result<Found> {
        let asked =
            futures_util::future::join_all(self.clients.iter().map(|sentinel| self.ask(sentinel)))
                .await;
        let mut answers = Vec::new();
        let mut failure: Option<RedisError> = None;
        for outcome in asked {
            match outcome {
                Ok(Some(answer)) => answers.push(answer),
                Ok(None) => {}
                Err(e) => {
                    if failure
                        .as_ref()
                        .is_none_or(|known| !is_login_refused(known))
                    {
                        failure = Some(e);
                    }
                }
            }
        }
        let candidates = newest(&answers);
        if candidates.is_empty() {
            return Err(command_error(match failure {
                Some(e) if is_login_refused(&e) => refused_by(Side::Sentinels, &e),
                Some(e) => e,
                None => RedisError::from((
                    redis::ErrorKind::Client,
                    "no sentinel knows the master",
                    self.name.clone(),
                )),
            }));
        }
        let mut last = None;
        for (host, port) in candidates {
            match self.confirm(&host, port).await {
                Ok(client) => {
                    return Ok(Found {
                        client,
                        address: format!("{host}:{port}"),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol("no master to confirm".to_owned())))
    }

    /// One sentinel's answer: `None` when it does not know the master. The address is
    /// asked before and after the epoch, and the pair kept only when both agree: the
    /// epoch then belongs to that address.
    async fn ask(&self, sentinel: &redis::Client) -> RedisResult<Option<Answer>> {
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&self.timeouts)
            .await?;
        for _ in 0..SETTLE_ATTEMPTS {
            let Some(before) = self.named_address(&mut conn).await? else {
                return Ok(None);
            };
            let (master, after): (
                std::collections::HashMap<String, String>,
                Option<(String, u16)>,
            ) = redis::pipe()
                .cmd("SENTINEL")
                .arg("MASTER")
                .arg(&self.name)
                .cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.name)
                .query_async(&mut conn)
                .await?;
            if after.as_ref() != Some(&before) {
                continue;
            }
            let epoch = master
                .get("config-epoch")
                .and_then(|epoch| epoch.parse().ok())
                .unwrap_or(0);
            return Ok(Some(Answer {
                address: before,
                epoch,
            }));
        }
        Ok(None)
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    async fn named_address(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> RedisResult<Option<(String, u16)>> {
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.name)
            .query_async(conn)
            .await
    }

    /// A client for `host:port` once `ROLE` there says `master`.
    async fn confirm(&self, host: &str, port: u16) -> Result<redis::Client> {
        let addr = match self.data.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let client = open(self.data.clone().set_addr(addr), self.tls.as_ref())?;
        let role = async {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&self.timeouts)
                .await?;
            redis::cmd("ROLE")
                .query_async::<redis::Value>(&mut conn)
                .await
        };
        let role = match role.await {
            Ok(role) => role,
            Err(e) if is_login_refused(&e) => {
                return Err(command_error(refused_by(Side::Master, &e)));
            }
            Err(e) => return Err(command_error(e)),
        };
        let is_master = matches!(&role, redis::Value::Array(fields)
            if fields.first().is_some_and(|kind| is_text(kind, "master")));
        if is_master {
            Ok(client)
        } else {
            Err(command_error(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown),
                "the server the sentinels name is not a master (yet)",
                format!("{host}:{port}"),
            ))))
        }
    }
}

/// A redis-rs client for `info`, with the TLS settings when there are some.
fn open(info: ConnectionInfo, tls: Option<&TlsConfig>) -> Result<redis::Client> {
    match tls {
        Some(tls) => tls.apply(info),
        None => redis::Client::open(info).map_err(|e| {
            Error::invalid(format!(
                "sentinel settings: {}",
                crate::api::error::redis_reason(&e)
            ))
        }),
    }
}

fn is_text(value: &redis::Value, text: &str) -> bool {
    match value {
        redis::Value::BulkString(bytes) => bytes == text.as_bytes(),
        redis::Value::SimpleString(s) => s == text,
        _ => false,
    }
}

/// The addresses named with the newest epoch, the one most sentinels name first (then in
/// the order of the sentinels in the URL).
fn newest(answers: &[Answer]) -> Vec<(String, u16)> {
    let Some(epoch) = answers.iter().map(|answer| answer.epoch).max() else {
        return Vec::new();
    };
    let mut counted: Vec<((String, u16), usize)> = Vec::new();
    for answer in answers.iter().filter(|answer| answer.epoch == epoch) {
        match counted
            .iter_mut()
            .find(|(address, _)| *address == answer.address)
        {
            Some((_, count)) => *count += 1,
            None => counted.push((answer.address.clone(), 1)),
        }
    }
    // Stable: equals keep the sentinels' order.
    counted.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    counted.into_iter().map(|(address, _)| address).collect()
}

/// Whether a server refused the client's login (wrong or missing credentials).
fn is_login_refused(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// Which side of the group refused a login: the fix is in different credentials.
#[derive(Clone, Copy)]
enum Side {
    Sentinels,
    Master,
}

/// `cause` (a refused login), saying whether the sentinels or the master refused it, and
/// so which credentials to fix.
fn refused_by(side: Side, cause: &RedisError) -> RedisError {
    let (who, whose, reason) = match side {
        Side::Sentinels => (
            "the sentinels refused the login",
            "their credentials are ClientBuilder::sentinel_credentials",
            // The server's own words: the fix the plain sentence names (the url) is not
            // theirs.
            match (cause.code(), cause.detail()) {
                (Some(code), Some(detail)) => format!("{code} {detail}"),
                _ => crate::api::error::redis_reason(cause),
            },
        ),
        Side::Master => (
            "the master refused the login",
            "its credentials are the url's",
            crate::api::error::redis_reason(cause),
        ),
    };
    RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        who,
        format!("{reason} ({whose})"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(port: u16, epoch: u64) -> Answer {
        Answer {
            address: ("127.0.0.1".to_owned(), port),
            epoch,
        }
    }

    #[test]
    fn the_newest_epoch_wins_over_the_majority() {
        let answers = [answer(1, 0), answer(2, 1), answer(1, 0)];
        assert_eq!(newest(&answers), [("127.0.0.1".to_owned(), 2)]);
    }

    #[test]
    fn among_equals_the_most_named_comes_first() {
        let answers = [answer(1, 3), answer(2, 3), answer(2, 3)];
        let ports: Vec<u16> = newest(&answers).into_iter().map(|(_, p)| p).collect();
        assert_eq!(ports, [2, 1]);
        assert!(newest(&[]).is_empty());
    }
}
