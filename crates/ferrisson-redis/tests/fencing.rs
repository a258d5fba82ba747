//! Fencing tokens of every lock against a real redis-server: the server's clock in
//! microseconds, one floor key per server and namespace, increasing across an empty
//! restart.

mod common;

use common::{raw, server_and_client};
use ferrisson_redis::{Client, FencingToken};
use ferrisson_testkit::RedisServer;
use redis::AsyncCommands;

/// The server's clock in microseconds.
async fn server_micros(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(seconds * 1_000_000 + micros)
}

/// Every fencing floor on the server.
async fn floors(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<Vec<String>> {
    Ok(conn.keys("ferrisson:fence:*").await?)
}

/// One new hold of each lock kind called `name`, released again: their tokens.
async fn one_token_each(client: &Client, name: &str) -> anyhow::Result<Vec<FencingToken>> {
    let lock = client.lock(name)?.lock().await?;
    let lock_token = lock.fencing_token();
    lock.unlock().await?;
    let fair = client.fair_lock(name)?.lock().await?;
    let fair_token = fair.fencing_token();
    fair.unlock().await?;
    let write = client.rwlock(name)?.write().await?;
    let write_token = write.fencing_token();
    write.unlock().await?;
    let simple = client.simple_lock(name)?.lock().await?;
    let simple_token = simple.fencing_token();
    simple.unlock().await?;
    Ok(vec![lock_token, fair_token, write_token, simple_token])
}

#[tokio::test]
async fn tokens_are_the_server_clock_and_grow_across_every_lock_kind() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let before = server_micros(&mut conn).await?;
    let tokens = one_token_each(&client, "stock").await?;
    let after = server_micros(&mut conn).await?;
    for pair in tokens.windows(2) {
        assert!(pair[1] > pair[0], "{tokens:?}");
    }
    for token in &tokens {
        assert!(
            (before..=after).contains(&token.get()),
            "{token} is not the server's clock between {before} and {after}"
        );
    }
    // Every lock of the server shares one floor, which holds the last token.
    let floors = floors(&mut conn).await?;
    assert_eq!(floors.len(), 1, "{floors:?}");
    let floor: u64 = conn.get(&floors[0]).await?;
    assert_eq!(Some(floor), tokens.last().map(|t| t.get()));
    Ok(())
}

#[tokio::test]
async fn a_floor_ahead_of_the_clock_is_counted_up_from() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let first = one_token_each(&client, "ahead").await?[0];
    let floors = floors(&mut conn).await?;
    // As if a server whose clock ran an hour fast had handed out the last token.
    let ahead = server_micros(&mut conn).await? + 3_600_000_000;
    let () = conn.set(&floors[0], ahead).await?;
    let tokens = one_token_each(&client, "ahead").await?;
    let expected: Vec<u64> = (1..=4).map(|i| ahead + i).collect();
    assert_eq!(
        tokens.iter().map(|t| t.get()).collect::<Vec<_>>(),
        expected,
        "one above the floor while the clock is behind it"
    );
    assert!(tokens[0] > first);
    Ok(())
}

#[tokio::test]
async fn tokens_keep_growing_after_the_server_restarts_empty() -> anyhow::Result<()> {
    let mut server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let before = one_token_each(&client, "restart").await?;
    // A restart without persistence: every lock, and every floor, is gone.
    server.restart()?;
    let mut conn = raw(&server).await?;
    assert!(floors(&mut conn).await?.is_empty());
    let client = Client::connect(&server.url()).await?;
    let after = one_token_each(&client, "restart").await?;
    assert!(
        after[0] > before[3],
        "a token after the restart ({}) repeats or precedes one before ({})",
        after[0],
        before[3]
    );
    Ok(())
}

#[tokio::test]
async fn many_lock_names_leave_one_floor_that_keeps_their_tokens_growing() -> anyhow::Result<()> {
    const NAMES: usize = 3000;
    let (server, client) = server_and_client().await?;
    let mut last = FencingToken::new(0);
    for i in 0..NAMES {
        let guard = client.lock(&format!("user:{i}"))?.lock().await?;
        assert!(
            guard.fencing_token() > last,
            "tokens of one server only grow"
        );
        last = guard.fencing_token();
        guard.unlock().await?;
    }
    let mut conn = raw(&server).await?;
    let keys: Vec<String> = conn.keys("*").await?;
    let floors = floors(&mut conn).await?;
    assert_eq!(floors.len(), 1, "one floor for every name: {floors:?}");
    assert_eq!(keys, floors, "only the floor is left");
    let floor: u64 = conn.get(&floors[0]).await?;
    assert_eq!(floor, last.get());
    Ok(())
}
