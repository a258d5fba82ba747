//! `CountDownLatch` against real redis-server processes: counting, 300
//! workers, every waiter woken by the final count-down's one message, `delete`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrisson_redis::{Client, CountDownLatch, Error};
use ferrisson_testkit::RedisServer;
use sync_support::{NO_RECHECK, calls, raw, until_calls, within};
use tokio::time::Instant;

mod sync_support;

#[tokio::test]
async fn counts_down_to_open() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    assert!(matches!(
        client.count_down_latch(""),
        Err(Error::InvalidArgument(_))
    ));
    let latch = client.count_down_latch("counted")?;
    assert!(matches!(
        latch.try_set_count(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        latch.clone().with_recheck_interval(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        latch.count().await?,
        0,
        "a latch that does not exist is open"
    );
    assert_eq!(
        latch.wait_timeout(Duration::ZERO).await?,
        Some(()),
        "an open latch does not wait"
    );

    assert!(latch.try_set_count(2).await?);
    assert!(!latch.try_set_count(5).await?, "a count is running");
    assert_eq!(latch.inspect().await?.count, 2);
    assert_eq!(
        latch.wait_timeout(Duration::from_millis(50)).await?,
        None,
        "closed: the wait runs out"
    );
    assert_eq!(latch.count_down().await?, 1);
    assert_eq!(latch.count_down().await?, 0);
    assert_eq!(latch.count().await?, 0);
    assert_eq!(
        latch.count_down().await?,
        0,
        "counting down an open latch does nothing"
    );
    assert_eq!(latch.wait_timeout(Duration::from_secs(1)).await?, Some(()));
    latch.wait().await?;

    // The key is gone once open, so the latch can be used again.
    let mut conn = raw(&server).await?;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    assert_eq!(keys, 0);
    assert!(latch.try_set_count(1).await?);
    assert!(latch.delete().await?);
    assert!(!latch.delete().await?);
    assert_eq!(latch.count().await?, 0);
    Ok(())
}

/// Start 300 workers, each counts down once, wait for all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_workers_wake_the_waiter() -> anyhow::Result<()> {
    const WORKERS: u32 = 300;
    let server = RedisServer::start()?;
    let waiter_client = Client::connect(&server.url()).await?;
    let worker_client = Client::connect(&server.url()).await?;
    // With an hour between rechecks, only the final count-down's message can wake it.
    let latch = waiter_client
        .count_down_latch("workers")?
        .with_recheck_interval(NO_RECHECK)?;
    assert!(latch.try_set_count(WORKERS).await?);

    let started = Instant::now();
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move {
            within(latch.wait()).await?;
            anyhow::Ok(Instant::now())
        }
    });
    // When the count-down that reached zero was sent.
    let last_sent: Arc<Mutex<Option<Instant>>> = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let latch: CountDownLatch = worker_client
                .count_down_latch("workers")
                .expect("valid name");
            let last_sent = Arc::clone(&last_sent);
            tokio::spawn(async move {
                let sent = Instant::now();
                if latch.count_down().await? == 0 {
                    *last_sent.lock().expect("not poisoned") = Some(sent);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    // Returned at all: the last count-down's message woke it.
    let woke = waiter.await??;
    let last_sent = last_sent
        .lock()
        .expect("not poisoned")
        .expect("one count-down reached zero");
    assert!(
        woke >= last_sent,
        "the waiter did not go before the last count-down"
    );
    assert_eq!(latch.count().await?, 0);
    eprintln!(
        "{WORKERS} workers: all done after {:?}; the waiter woke {:?} after the last count-down was sent",
        woke - started,
        woke - last_sent
    );
    Ok(())
}

// current_thread: each waiter runs before the test resumes after a reply on the same
// connection, so all of them are waiting when the last count-down comes.
#[tokio::test(flavor = "current_thread")]
async fn one_message_wakes_every_waiter() -> anyhow::Result<()> {
    const WAITERS: u64 = 10;
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let other = Client::connect(&server.url()).await?;
    let latch = client
        .count_down_latch("many")?
        .with_recheck_interval(NO_RECHECK)?;
    latch.try_set_count(1).await?;
    let mut waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move { within(latch.wait()).await })
        })
        .collect();
    // ...and one on another client.
    let elsewhere = other
        .count_down_latch("many")?
        .with_recheck_interval(NO_RECHECK)?;
    waiters.push(tokio::spawn(async move { within(elsewhere.wait()).await }));

    let mut conn = raw(&server).await?;
    // Each waiter reads the count before and after joining the channel.
    until_calls(&mut conn, "get", 2 * (WAITERS + 1)).await?;
    assert_eq!(latch.count().await?, 1);
    assert_eq!(other.count_down_latch("many")?.count().await?, 1);
    let reads_before = calls(&mut conn, "get").await?;

    assert_eq!(other.count_down_latch("many")?.count_down().await?, 0);
    for waiter in waiters {
        // Returned at all: woken by the one final message.
        waiter.await??;
    }
    // One re-read per woken waiter, none from rechecks.
    assert_eq!(calls(&mut conn, "get").await?, reads_before + WAITERS + 1);
    assert_eq!(
        client.stats().waiting_channels,
        0,
        "subscription left with the last waiter"
    );
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn delete_opens_the_latch() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let latch = client
        .count_down_latch("deleted")?
        .with_recheck_interval(NO_RECHECK)?;
    latch.try_set_count(5).await?;
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { within(latch.wait()).await }
    });
    let mut conn = raw(&server).await?;
    until_calls(&mut conn, "get", 2).await?;
    assert_eq!(latch.count().await?, 5);
    assert!(latch.delete().await?);
    waiter.await??; // woken by the delete
    Ok(())
}

#[tokio::test]
async fn dropped_wait_leaves_no_subscription() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let latch = client.count_down_latch("dropped")?;
    latch.try_set_count(1).await?;
    let waited = tokio::time::timeout(Duration::from_millis(100), latch.wait()).await;
    assert!(waited.is_err(), "nobody counted down");
    assert_eq!(client.stats().waiting_channels, 0);
    assert_eq!(latch.count().await?, 1, "waiting changes nothing");
    Ok(())
}

#[test]
fn futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    fn send_type<T: Send + Sync>() {}
    send_type::<CountDownLatch>();
    let _ = |latch: CountDownLatch| {
        is_send(&latch.wait());
        is_send(&latch.wait_timeout(Duration::from_secs(1)));
        is_send(&latch.count_down());
    };
}
