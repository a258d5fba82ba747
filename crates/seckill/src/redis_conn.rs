//! The service's own Redis connection (login tokens, the `lua` order flow, the lab's
//! stock): every command bounded by the service's Redis timeout, and sent again once
//! when the connection had failed and sending it again is safe: any command that never
//! left (the connection was refused), and a command that is safe to send twice after a
//! dropped connection.
//!
//! redis-rs's `ConnectionManager` reconnects after a dropped connection, but the command
//! that found it dropped fails; and while it reconnects, every command waits for the
//! reconnection. The first would fail the first request after Redis came back; the
//! second would hold a request far past its timeout while Redis is hung.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::time::Instant;

/// A cheap-to-clone Redis connection whose commands end within `timeout`.
#[derive(Clone)]
pub struct RedisConn {
    manager: ConnectionManager,
    timeout: Duration,
}

impl RedisConn {
    /// Connects to `client`'s server; connection attempts and replies are bounded by
    /// `timeout`, and so is every command as a whole.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached.
    pub async fn connect(client: redis::Client, timeout: Duration) -> RedisResult<Self> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            // Few, short reconnection attempts: a request waits for a reconnection only
            // within its own timeout, and the next request starts a fresh one.
            .set_number_of_retries(1)
            .set_max_delay(timeout / 4);
        let manager = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { manager, timeout })
    }

    /// The bound on each command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn bounded<T, F, Fut>(&mut self, what: &str, idempotent: bool, send: F) -> RedisResult<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let deadline = Instant::now() + self.timeout;
        let first = tokio::time::timeout_at(deadline, send(self.manager.clone())).await;
        let result = match first {
            Ok(Err(e)) if never_sent(&e) || (idempotent && is_stale_connection(&e)) => {
                // The manager has started a reconnection; this waits for it.
                tracing::debug!(command = what, error = %e, "redis connection dropped; sending again");
                tokio::time::timeout_at(deadline, send(self.manager.clone())).await
            }
            other => other,
        };
        result.unwrap_or_else(|_| Err(timed_out(self.timeout)))
    }
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
            self.bounded(&name, is_idempotent(cmd), |mut manager| async move {
                manager.req_packed_command(cmd).await
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
            self.bounded("pipeline", idempotent, |mut manager| async move {
                manager.req_packed_commands(pipeline, offset, count).await
            })
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
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
