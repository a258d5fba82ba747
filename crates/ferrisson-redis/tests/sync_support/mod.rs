//! Helpers shared by the semaphore, expirable-semaphore and latch tests.

#![allow(dead_code)]

use std::time::Duration;

use ferrisson_testkit::RedisServer;

/// Long enough that a waiter that returns was woken by a message or a lease expiry, not
/// by its periodic recheck.
pub const NO_RECHECK: Duration = Duration::from_secs(3600);
/// Upper bound for things that take milliseconds; only there so a bug fails instead of
/// hanging the suite.
pub const HANG: Duration = Duration::from_secs(30);

/// A plain redis-rs connection, for checks from outside the library.
pub async fn raw(server: &RedisServer) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?)
}

/// How many times the server ran `command` (from `INFO commandstats`).
pub async fn calls(
    conn: &mut redis::aio::MultiplexedConnection,
    command: &str,
) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let prefix = format!("cmdstat_{command}:calls=");
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(Ok(0), str::parse)?)
}

/// Waits until the server has run `command` at least `n` times. The condition is reached
/// by other tasks and has no event to await, so this polls (every 2 ms, at most `HANG`).
pub async fn until_calls(
    conn: &mut redis::aio::MultiplexedConnection,
    command: &str,
    n: u64,
) -> anyhow::Result<()> {
    tokio::time::timeout(HANG, async {
        while calls(conn, command).await? < n {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await??;
    Ok(())
}

/// Runs `wait` (an unbounded acquire or wait) to completion, failing after `HANG`. Tests
/// use this rather than the library's own timed waits, which try once more at their
/// deadline and so could hide a wake-up that never came.
pub async fn within<T, E>(wait: impl Future<Output = Result<T, E>>) -> anyhow::Result<T>
where
    E: Into<anyhow::Error>,
{
    match tokio::time::timeout(HANG, wait).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => anyhow::bail!("no wake-up within {HANG:?}"),
    }
}
