//! `Semaphore` against real redis-server processes: counting, the never-initialised
//! error, waking as many waiters as permits came back, cancel safety, and at most N
//! holders among 64 contenders.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_redis::{Client, Error, Semaphore, SemaphorePermit};
use ferrisson_testkit::RedisServer;
use sync_support::{HANG, NO_RECHECK, calls, raw, until_calls, within};

mod sync_support;

#[tokio::test]
async fn bad_arguments_are_rejected() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    assert!(matches!(
        client.semaphore(""),
        Err(Error::InvalidArgument(_))
    ));
    let semaphore = client.semaphore("bad-args")?;
    assert!(semaphore.try_set_permits(2).await?);
    assert!(matches!(
        semaphore.acquire_many(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore.try_acquire_many(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore
            .acquire_many_timeout(0, Duration::from_secs(1))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore.add_permits(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore.clone().with_recheck_interval(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    // Nothing was taken by the refused calls.
    assert_eq!(semaphore.available_permits().await?, 2);
    Ok(())
}

#[tokio::test]
async fn never_initialised_semaphore_fails_at_once() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client.semaphore("never-set")?;
    // A one-hour wait must not be waited out: the error comes from the first attempt.
    let waited =
        tokio::time::timeout(HANG, semaphore.acquire_timeout(Duration::from_secs(3600))).await?;
    match waited {
        Err(Error::NotInitialized { name }) => assert_eq!(name, "never-set"),
        other => panic!("expected NotInitialized, got {other:?}"),
    }
    let waited = tokio::time::timeout(HANG, semaphore.acquire()).await?;
    assert!(matches!(waited, Err(Error::NotInitialized { .. })));
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        semaphore.available_permits().await,
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        semaphore.drain().await,
        Err(Error::NotInitialized { .. })
    ));
    assert_eq!(semaphore.inspect().await?.available_permits, None);
    assert!(!semaphore.delete().await?);
    // Nothing was created by the failed calls.
    let mut conn = raw(&server).await?;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    assert_eq!(keys, 0);
    Ok(())
}

#[tokio::test]
async fn permits_are_counted() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client.semaphore("counted")?;
    assert!(semaphore.try_set_permits(3).await?);
    assert!(!semaphore.try_set_permits(10).await?, "already set");
    assert_eq!(semaphore.available_permits().await?, 3);

    let two = semaphore.try_acquire_many(2).await?.expect("2 of 3 free");
    assert_eq!(two.permits(), 2);
    assert_eq!(semaphore.available_permits().await?, 1);
    assert!(
        semaphore.try_acquire_many(2).await?.is_none(),
        "only 1 free"
    );
    let one = semaphore.try_acquire().await?.expect("1 free");
    assert!(semaphore.try_acquire().await?.is_none());
    assert_eq!(semaphore.inspect().await?.available_permits, Some(0));

    two.release().await?;
    assert_eq!(semaphore.available_permits().await?, 2);
    assert_eq!(one.forget(), 1);
    assert_eq!(
        semaphore.available_permits().await?,
        2,
        "a forgotten permit stays taken"
    );

    // Negative additions can push the count below zero; acquirers then wait.
    semaphore.add_permits(-3).await?;
    assert_eq!(semaphore.available_permits().await?, -1);
    assert!(semaphore.try_acquire().await?.is_none());
    semaphore.add_permits(3).await?;
    assert_eq!(semaphore.available_permits().await?, 2);

    assert_eq!(semaphore.drain().await?, 2);
    assert_eq!(semaphore.available_permits().await?, 0);
    assert_eq!(semaphore.drain().await?, 0);
    assert!(
        semaphore
            .acquire_timeout(Duration::from_millis(50))
            .await?
            .is_none(),
        "drained: the timed acquire gives up"
    );

    assert!(semaphore.delete().await?);
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::NotInitialized { .. })
    ));
    // add_permits initialises, as Redisson's addPermits does.
    semaphore.add_permits(1).await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    Ok(())
}

// current_thread: a waiter's task runs before the test task resumes after a reply on the
// same connection, so "all waiters are waiting" can be established without sleeping.
#[tokio::test(flavor = "current_thread")]
async fn dropped_permit_wakes_a_waiter() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client
        .semaphore("drop")?
        .with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(1).await?;
    let held = semaphore.acquire().await?;
    let waiter = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { within(semaphore.acquire()).await }
    });
    let mut conn = raw(&server).await?;
    // 1 acquire by the holder, 2 by the waiter (before and after joining the channel).
    until_calls(&mut conn, "evalsha", 3).await?;
    assert_eq!(semaphore.available_permits().await?, 0);
    drop(held);
    // Returned at all: woken by the drop's release (the recheck interval is an hour).
    let permit = waiter.await??;
    assert_eq!(semaphore.available_permits().await?, 0);
    permit.release().await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn release_wakes_as_many_waiters_as_permits() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    // Each attempt one script call, so that counting calls counts attempts: coalesced,
    // the three waiters' attempts would go together (tests/coalesce.rs).
    let client = Client::builder(&server.url())
        .coalesce_calls(false)
        .connect()
        .await?;
    let semaphore = client
        .semaphore("wake-n")?
        .with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(3).await?;
    let all = semaphore.acquire_many(3).await?;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move { within(semaphore.acquire()).await })
        })
        .collect();
    let mut conn = raw(&server).await?;
    until_calls(&mut conn, "evalsha", 1 + 3 * 2).await?;
    // A reply on the waiters' connection: they have all gone back to waiting before it.
    assert_eq!(semaphore.available_permits().await?, 0);
    assert_eq!(
        client.stats().waiting_channels,
        1,
        "one subscription for three waiters"
    );

    // One release of three permits, one message: all three waiters must get a permit
    // without a recheck (the recheck interval is an hour).
    all.release().await?;
    let mut permits = Vec::new();
    for waiter in waiters {
        // Returned at all: woken by the one release.
        permits.push(waiter.await??);
    }
    assert_eq!(semaphore.available_permits().await?, 0);
    // 1 + 6 before, 1 release, and exactly one more attempt per woken waiter.
    assert_eq!(calls(&mut conn, "evalsha").await?, 1 + 6 + 1 + 3);
    drop(permits);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn added_permits_wake_as_many_waiters() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client
        .semaphore("gate")?
        .with_recheck_interval(NO_RECHECK)?;
    assert!(semaphore.try_set_permits(0).await?, "a closed gate");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move { within(semaphore.acquire()).await })
        })
        .collect();
    let mut conn = raw(&server).await?;
    until_calls(&mut conn, "evalsha", 2 * 2).await?;
    assert_eq!(semaphore.available_permits().await?, 0);
    semaphore.add_permits(2).await?;
    for waiter in waiters {
        // Returned at all: woken by the one addition.
        waiter.await??.forget();
    }
    assert_eq!(semaphore.available_permits().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn set_permits_forces_the_count_and_wakes_waiters_when_it_grew() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client
        .semaphore("forced")?
        .with_recheck_interval(NO_RECHECK)?;
    // Creates the semaphore when missing, and overrides whatever was set.
    semaphore.set_permits(3).await?;
    assert_eq!(semaphore.available_permits().await?, 3);
    let held = semaphore.acquire().await?;
    semaphore.set_permits(0).await?;
    assert_eq!(semaphore.available_permits().await?, 0);
    semaphore.add_permits(-2).await?;
    semaphore.set_permits(0).await?;
    assert_eq!(semaphore.available_permits().await?, 0, "from -2");

    let mut conn = raw(&server).await?;
    let before = calls(&mut conn, "evalsha").await?;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move { within(semaphore.acquire()).await })
        })
        .collect();
    until_calls(&mut conn, "evalsha", before + 2 * 2).await?;
    semaphore.set_permits(2).await?;
    for waiter in waiters {
        // Returned at all: woken by the one change.
        waiter.await??.forget();
    }
    assert_eq!(semaphore.available_permits().await?, 0);
    // A permit out during the change still comes back on top of the count set.
    held.release().await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn delete_wakes_waiters_with_an_error() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client
        .semaphore("deleted")?
        .with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(1).await?;
    let held = semaphore.acquire().await?;
    let waiter = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { within(semaphore.acquire()).await }
    });
    let mut conn = raw(&server).await?;
    until_calls(&mut conn, "evalsha", 3).await?;
    assert_eq!(semaphore.available_permits().await?, 0);
    assert!(semaphore.delete().await?);
    let woken = waiter.await?.expect_err("the semaphore is gone");
    assert!(
        matches!(
            woken.downcast_ref::<Error>(),
            Some(Error::NotInitialized { .. })
        ),
        "{woken:?}"
    );
    // Releasing into a deleted semaphore does not recreate it.
    assert!(matches!(
        held.release().await,
        Err(Error::NotInitialized { .. })
    ));
    assert_eq!(semaphore.inspect().await?.available_permits, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_gives_its_permit_back() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client.semaphore("cancelled")?;
    semaphore.try_set_permits(1).await?;
    let mut conn = raw(&server).await?;
    let before = calls(&mut conn, "evalsha").await?;

    // The acquire is sent to a frozen server, then its caller goes away; the server
    // grants it after waking up, and the reply finds nobody to take the permit.
    server.pause()?;
    let gave_up = tokio::time::timeout(Duration::from_millis(100), semaphore.acquire()).await;
    assert!(
        gave_up.is_err(),
        "the acquire cannot finish while the server is frozen"
    );
    server.resume()?;

    // The grant (1 call) and its undo (1 call) happen on a background task.
    until_calls(&mut conn, "evalsha", before + 2).await?;
    assert_eq!(
        semaphore.available_permits().await?,
        1,
        "the orphaned permit came back"
    );
    let permit = semaphore.try_acquire().await?.expect("free again");
    permit.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_holders_among_64_contenders() -> anyhow::Result<()> {
    const PERMITS: usize = 5;
    const CONTENDERS: usize = 64;
    const ROUNDS: usize = 4;
    let server = RedisServer::start()?;
    // Two clients: wake-ups cross connections as well as local waiters.
    let clients = [
        Client::connect(&server.url()).await?,
        Client::connect(&server.url()).await?,
    ];
    clients[0]
        .semaphore("contended")?
        .try_set_permits(PERMITS as u32)
        .await?;

    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..CONTENDERS {
        let semaphore: Semaphore = clients[i % 2].semaphore("contended")?;
        let (holding, most, done) = (Arc::clone(&holding), Arc::clone(&most), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permit: SemaphorePermit = semaphore.acquire().await?;
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Hold it a little, so contenders overlap.
                tokio::time::sleep(Duration::from_millis(2)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
                done.fetch_add(1, Ordering::SeqCst);
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task).await???;
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS,
        "{most} holders at once with {PERMITS} permits"
    );
    assert!(most > 1, "contenders never overlapped ({most})");
    assert_eq!(done.load(Ordering::SeqCst), CONTENDERS * ROUNDS);
    let semaphore = clients[0].semaphore("contended")?;
    assert_eq!(
        semaphore.available_permits().await?,
        PERMITS as i64,
        "every permit came back"
    );
    assert_eq!(
        clients[0].stats().waiting_channels,
        0,
        "no subscription left behind"
    );
    assert_eq!(
        clients[1].stats().waiting_channels,
        0,
        "no subscription left behind"
    );
    Ok(())
}

#[test]
fn futures_and_guards_are_send() {
    fn is_send<T: Send>(_: &T) {}
    fn send_type<T: Send + Sync>() {}
    send_type::<Semaphore>();
    send_type::<SemaphorePermit>();
    let _ = |semaphore: Semaphore| {
        is_send(&semaphore.acquire());
        is_send(&semaphore.acquire_many_timeout(2, Duration::from_secs(1)));
        is_send(&semaphore.try_acquire());
    };
}
