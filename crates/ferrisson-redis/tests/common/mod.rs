//! Shared set-up for the integration tests: a private redis-server and clients on it.

#![allow(dead_code)]

use std::time::Duration;

use ferrisson_redis::Client;
use ferrisson_testkit::RedisServer;

/// A fresh redis-server and a client connected to it.
pub async fn server_and_client() -> anyhow::Result<(RedisServer, Client)> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    Ok((server, client))
}

/// A client with a short watchdog lease, so renewals and losses show within a second.
pub async fn client_with_lease(server: &RedisServer, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(&server.url())
        .watchdog_lease(lease)
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await?)
}

/// A plain redis-rs connection for checks from outside the library.
pub async fn raw(server: &RedisServer) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?)
}

/// Polls `check` every 10 ms until it holds or `within` passes; for conditions that are
/// reached by background tasks and have no event to await.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
