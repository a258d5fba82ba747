//! The reentrant lock against a real redis-server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{client_with_lease, eventually, raw, server_and_client};
use ferrisson_redis::{
    Client, DistributedLock, Error, Guard, Lease, Lock, OwnerId, RedisStoreError, SimpleLock,
};
use redis::AsyncCommands;

/// Non-atomic read-modify-write of a Redis counter: correct only under mutual exclusion.
async fn unsafe_increment(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> anyhow::Result<()> {
    let value: i64 = conn.get::<_, Option<i64>>(key).await?.unwrap_or(0);
    tokio::task::yield_now().await;
    let () = conn.set(key, value + 1).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_exclude_each_other() -> anyhow::Result<()> {
    const TASKS: usize = 32;
    const ROUNDS: usize = 200;
    let (server, client) = server_and_client().await?;
    let lock = client.lock("counter")?;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lock = lock.clone();
        let mut conn = raw(&server).await?;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock().await?;
                unsafe_increment(&mut conn, "count").await?;
                guard.unlock().await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let total: i64 = raw(&server).await?.get("count").await?;
    assert_eq!(total, (TASKS * ROUNDS) as i64);
    assert!(!lock.is_locked().await?);
    assert_eq!(client.stats().holds, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simple_lock_tasks_exclude_each_other() -> anyhow::Result<()> {
    const TASKS: usize = 32;
    const ROUNDS: usize = 200;
    let (server, client) = server_and_client().await?;
    let lock = client.simple_lock("simple-counter")?;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lock = lock.clone();
        let mut conn = raw(&server).await?;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock().await?;
                unsafe_increment(&mut conn, "simple-count").await?;
                guard.unlock().await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let total: i64 = raw(&server).await?.get("simple-count").await?;
    assert_eq!(total, (TASKS * ROUNDS) as i64);
    assert!(lock.try_lock().await?.is_some(), "free at the end");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_in_one_task_counts_holds() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.lock("reentry")?;
    // A method holding the lock calls another that takes it again.
    let outer = lock.lock().await?;
    let inner = lock.try_lock().await?.expect("re-entry never waits");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(inner.owner(), outer.owner());
    assert_eq!(lock.hold_count().await?, 2);

    // Another task is another owner, even while this one holds the lock.
    let other = lock.clone();
    let from_other_task = tokio::spawn(async move {
        let held = other.try_lock().await?.is_some();
        anyhow::Ok((held, other.hold_count().await?))
    })
    .await??;
    assert_eq!(from_other_task, (false, 0));

    inner.unlock().await?;
    assert_eq!(lock.hold_count().await?, 1);
    assert!(lock.is_locked().await?);
    outer.unlock().await?;
    assert_eq!(lock.hold_count().await?, 0);
    assert!(!lock.is_locked().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_outliving_its_task_is_not_reentered_by_new_tasks() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.lock("moved")?;
    let acquirer = lock.clone();
    // The acquiring task ends; its guard lives on elsewhere.
    let guard = tokio::spawn(async move { acquirer.lock().await }).await??;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            lock.try_lock().await.map(|g| g.is_some())
        }));
    }
    for task in tasks {
        assert!(
            !task.await??,
            "a new task re-entered a lock held by a live guard"
        );
    }
    // Released from a task other than the one that acquired it.
    tokio::spawn(async move { guard.unlock().await }).await??;
    assert!(!lock.is_locked().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_owner_shares_one_hold_across_tasks_and_clients() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let second_client = Client::connect(&server.url()).await?;
    let owner = OwnerId::random();
    let first = client.lock("handover")?.with_owner(owner).lock().await?;
    let lock = second_client.lock("handover")?.with_owner(owner);
    let second = tokio::spawn(async move { lock.try_lock().await })
        .await??
        .expect("same owner re-enters");
    assert_eq!(second.fencing_token(), first.fencing_token());
    assert_eq!(
        client
            .lock("handover")?
            .with_owner(owner)
            .hold_count()
            .await?,
        2
    );
    assert!(
        client.lock("handover")?.try_lock().await?.is_none(),
        "a fresh owner must wait"
    );
    first.unlock().await?;
    second.unlock().await?;
    assert!(!client.lock("handover")?.is_locked().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_with_every_new_owner() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.lock("fenced")?;
    let mut previous = None;
    for _ in 0..5 {
        let guard = lock.lock().await?;
        let token = guard.fencing_token();
        if let Some(previous) = previous {
            assert!(token > previous);
        }
        previous = Some(token);
        guard.unlock().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_set_refuses_an_older_token() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client
        .lock("ledger")?
        .with_lease(Lease::Fixed(Duration::from_millis(200)))?;
    let stale = lock.lock().await?;
    let stale_token = stale.fencing_token();
    stale.lost().await; // the fixed lease runs out
    let fresh = lock.lock().await?;
    assert!(
        client
            .fenced_set("balance", b"new", fresh.fencing_token())
            .await?
            .is_accepted()
    );
    let write = client.fenced_set("balance", b"stale", stale_token).await?;
    assert_eq!(
        write,
        ferrisson_redis::FencedWrite::Refused {
            highest: fresh.fencing_token()
        }
    );
    assert_eq!(
        client.fenced_get("balance").await?,
        Some((b"new".to_vec(), fresh.fencing_token()))
    );
    // The same holder may write again.
    assert!(
        client
            .fenced_set("balance", b"newer", fresh.fencing_token())
            .await?
            .is_accepted()
    );
    fresh.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_expires_and_stale_release_leaves_the_new_holder_alone() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client
        .lock("fixed")?
        .with_lease(Lease::Fixed(Duration::from_millis(300)))?;
    let first = lock.lock().await?;
    assert!(first.is_held());
    let ttl = lock.ttl().await?.expect("held");
    assert!(ttl <= Duration::from_millis(300));
    first.lost().await;
    assert!(!first.is_held());
    assert_eq!(first.remaining(), Duration::ZERO);

    let waiter = client.lock("fixed")?;
    let second = tokio::spawn(async move { waiter.lock().await }).await??;
    match first.unlock().await {
        Err(Error::NotOwner { name }) => assert_eq!(name, "fixed"),
        other => panic!("expected NotOwner, got {other:?}"),
    }
    assert!(
        lock.is_locked().await?,
        "the stale release must not free the new holder's lock"
    );
    second.unlock().await?;

    let expired = lock.lock().await?;
    expired.lost().await;
    // The guard's deadline counts from before the acquire was sent, Redis's from when it
    // ran it: the key outlives the guard's belief by up to a round trip.
    let gone = eventually(Duration::from_secs(5), || {
        let lock = lock.clone();
        async move { matches!(lock.is_locked().await, Ok(false)) }
    })
    .await;
    assert!(gone, "the fixed lease expires in Redis too");
    assert!(matches!(
        expired.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    Ok(())
}

/// Redis counts a lease from when it ran the acquire, the guard from before it sent it:
/// the key outlives the guard. Stretching the key's TTL makes that gap last; an unlock
/// after `lost()` must still say the lease expired (and free the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_after_lost_says_expired_while_redis_keeps_the_key() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let fixed = Lease::Fixed(Duration::from_millis(200));
    let lock = client.lock("outlived")?.with_lease(fixed)?;
    let simple = client.simple_lock("outlived-simple")?.with_lease(fixed)?;
    let mut conn = raw(&server).await?;

    let guard = lock.lock().await?;
    let stretched: bool = conn.pexpire("{outlived}", 60_000).await?;
    assert!(stretched, "the lock's key is where the test expects it");
    guard.lost().await;
    assert!(lock.is_locked().await?, "Redis still has the key");
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    assert!(!lock.is_locked().await?, "the key was deleted all the same");

    let guard = simple.lock().await?;
    let stretched: bool = conn.pexpire("{outlived-simple}", 60_000).await?;
    assert!(
        stretched,
        "the simple lock's key is where the test expects it"
    );
    guard.lost().await;
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    let left: bool = conn.exists("{outlived-simple}").await?;
    assert!(!left, "the key was deleted all the same");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_lock_past_three_leases() -> anyhow::Result<()> {
    let lease = Duration::from_millis(900);
    let server = ferrisson_testkit::RedisServer::start()?;
    let client = client_with_lease(&server, lease).await?;
    let lock = client.lock("watched")?;
    let guard = lock.lock().await?;
    let started = tokio::time::Instant::now();
    let mut refreshes = 0;
    let mut last_ttl = lock.ttl().await?.expect("held");
    // Time passing is the point here: sample the TTL until three leases have gone by.
    // Renewals come every 300 ms; under a loaded machine a sample may miss some.
    while started.elapsed() < lease * 3 + lease / 2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ttl = lock.ttl().await?.expect("the watchdog must keep the lock");
        if ttl > last_ttl + Duration::from_millis(100) {
            refreshes += 1; // seen going 900 -> 600 -> 900
        }
        last_ttl = ttl;
    }
    assert!(guard.is_held());
    assert!(
        refreshes >= 3,
        "expected a renewal every lease/3, saw {refreshes}"
    );
    guard.unlock().await?;
    assert!(!lock.is_locked().await?);
    assert_eq!(client.stats().renewing, 0, "renewal stops with the unlock");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_key_is_deleted_under_the_holder() -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    let client = client_with_lease(&server, Duration::from_millis(600)).await?;
    let guard = client.lock("deleted")?.lock().await?;
    assert!(guard.is_held());
    let () = raw(&server).await?.del("{deleted}").await?;
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() must fire after the next renewal");
    assert!(!guard.is_held());
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_and_wakes_a_waiter() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.lock("dropped")?;
    let guard = lock.lock().await?;
    let waiter = lock.clone();
    let waiting = tokio::spawn(async move { waiter.lock_timeout(Duration::from_secs(10)).await });
    drop(guard);
    // Well inside the 30 s lease: the drop released it and the release woke the waiter.
    let next = waiting
        .await??
        .expect("the dropped guard released the lock");
    next.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_timeout_gives_up_with_none() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.lock("busy")?;
    let guard = lock.lock().await?;
    let other = lock.clone();
    let result =
        tokio::spawn(async move { other.lock_timeout(Duration::from_millis(100)).await }).await??;
    assert!(result.is_none());
    assert_eq!(client.stats().waiting_channels, 0);
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_send_no_commands_and_share_one_connection() -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    // Each attempt one script call, so that counting calls counts attempts: coalesced,
    // the waiters' attempts would go in a few batches (tests/coalesce.rs).
    let client = Client::builder(&server.url())
        .coalesce_calls(false)
        .connect()
        .await?;
    let holder = client
        .lock("quiet")?
        .with_lease(Lease::Fixed(Duration::from_secs(20)))?;
    let guard = holder.lock().await?;
    let other = client
        .lock("quiet-too")?
        .with_lease(Lease::Fixed(Duration::from_secs(20)))?;
    // Held from another task before any waiter starts, so the waiters of "quiet-too"
    // really wait (a waiter that got it first would leave nobody waiting there).
    let other_guard = tokio::spawn(async move { other.lock().await }).await??;
    let mut conn = raw(&server).await?;
    let scripts_before = script_calls(&mut conn).await?;
    let mut waiters = Vec::new();
    for i in 0..100 {
        let lock = client.lock(if i % 2 == 0 { "quiet" } else { "quiet-too" })?;
        waiters.push(tokio::spawn(
            async move { lock.lock().await?.unlock().await },
        ));
    }
    // Every waiter sends two attempts (one before joining its channel, one after) and
    // then waits: once all 200 are in, nothing more may come until a release.
    assert!(
        eventually(Duration::from_secs(30), || {
            let mut check = conn.clone();
            async move {
                script_calls(&mut check)
                    .await
                    .is_ok_and(|calls| calls >= scripts_before + 200)
            }
        })
        .await,
        "the waiters did not all make their two attempts"
    );
    assert_eq!(client.stats().waiting_channels, 2);
    let before = commands_processed(&mut conn).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = commands_processed(&mut conn).await?;
    assert!(
        after - before <= 1,
        "waiters sent {} commands while waiting",
        after - before - 1
    );
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await?;
    assert_eq!(
        clients.lines().count(),
        2,
        "one connection for the client, one for this check"
    );

    guard.unlock().await?;
    other_guard.unlock().await?;
    for waiter in waiters {
        waiter.await??;
    }
    Ok(())
}

/// Script calls the server has run so far (`EVALSHA` and `EVAL`).
async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    script_stat(conn, "calls").await
}

/// The sum of `field` (`calls`, `rejected_calls`, ...) over `EVALSHA` and `EVAL` in
/// `INFO commandstats`.
async fn script_stat(
    conn: &mut redis::aio::MultiplexedConnection,
    field: &str,
) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let key = format!("{field}=");
    Ok(info
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split(&[':', ','][..])
                .find_map(|part| part.strip_prefix(key.as_str()))?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

async fn commands_processed(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no total_commands_processed in INFO"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_lock_futures_leave_nothing_behind() -> anyhow::Result<()> {
    dropped_futures_leave_nothing_behind::<Lock>("cancel").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_simple_lock_futures_leave_nothing_behind() -> anyhow::Result<()> {
    dropped_futures_leave_nothing_behind::<SimpleLock>("simple-cancel").await
}

async fn dropped_futures_leave_nothing_behind<L: WakesOne>(
    name: &'static str,
) -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let baseline_tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let lock = L::on(&client, name)?;
    let holder = L::on(&client, name)?;
    let holding = tokio::spawn(async move {
        // Hand the lock in and out so futures are dropped while waiting, while their
        // acquire is in flight, and right after it succeeded.
        for _ in 0..50 {
            let guard = holder.lock().await?;
            tokio::time::sleep(Duration::from_micros(rand_below(2000))).await;
            guard.unlock().await?;
            tokio::time::sleep(Duration::from_micros(rand_below(500))).await;
        }
        anyhow::Ok(())
    });
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_micros(rand_below(20_000)), lock.lock()).await;
        }));
    }
    for task in tasks {
        task.await?;
    }
    holding.await??;

    let key = format!("{{{name}}}");
    let clean = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        let client = client.clone();
        let key = key.clone();
        async move {
            let exists: bool = conn.exists(&key).await.unwrap_or(true);
            let registered = registered_clients(&mut conn, name).await;
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|_| vec!["?".into()]);
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            !exists
                && registered == 0
                && channels.is_empty()
                && client.stats() == idle_stats(&client)
                && tasks <= baseline_tasks
        }
    })
    .await;
    let exists: bool = conn.exists(&key).await?;
    assert!(
        clean,
        "left behind: lock key {exists}, registered clients {}, stats {:?}",
        registered_clients(&mut conn, name).await,
        client.stats()
    );
    Ok(())
}

fn idle_stats(client: &Client) -> ferrisson_redis::ClientStats {
    let mut stats = client.stats();
    stats.waiting_channels = 0;
    stats.holds = 0;
    stats.renewing = 0;
    stats
}

fn rand_below(max: u64) -> u64 {
    rand::random::<u64>() % max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_script_flush() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.lock("flushed")?;
    let guard = lock.lock().await?;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw(&server).await?)
        .await?;
    guard.unlock().await?;
    let guard = lock.lock().await?;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw(&server).await?)
        .await?;
    assert!(lock.try_lock().await?.is_some(), "re-entry after a flush");
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_a_redis_restart() -> anyhow::Result<()> {
    let mut server = ferrisson_testkit::RedisServer::start()?;
    let client = client_with_lease(&server, Duration::from_millis(900)).await?;
    let lock = client.lock("restarted")?;
    let guard = lock.lock().await?;
    server.restart()?; // no persistence: the lock is gone
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the watchdog notices the lost lock");
    drop(guard);
    let reacquired = eventually(Duration::from_secs(10), || {
        let lock = lock.clone();
        async move { matches!(lock.try_lock().await, Ok(Some(_))) }
    })
    .await;
    assert!(reacquired, "the client reconnects and reloads its scripts");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_typed_errors() -> anyhow::Result<()> {
    let (mut server, client) = server_and_client().await?;
    assert!(matches!(client.lock(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        client.lock(&"x".repeat(1025)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(client.lock(&"x".repeat(1024)).is_ok());
    assert!(matches!(
        client.simple_lock(""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.lock("l")?.with_lease(Lease::Fixed(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client
            .simple_lock("l")?
            .with_lease(Lease::Fixed(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::builder(&server.url())
            .watchdog_lease(Duration::ZERO)
            .connect()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::connect("http://nope").await,
        Err(Error::InvalidArgument(_))
    ));

    // A dead Redis: connect fails with the password redacted, commands fail, nothing hangs.
    let url = format!("redis://:hunter2@127.0.0.1:{}", server.port());
    server.kill()?;
    let error = Client::connect(&url).await.expect_err("nothing listens");
    assert!(matches!(error, Error::Connect { .. }));
    let shown = format!("{error} {error:?}");
    assert!(
        !shown.contains("hunter2") && shown.contains("***"),
        "{shown}"
    );
    let lock = client.lock("down")?;
    // A try fails at once; a waiting acquire rides the outage out until its wait ends,
    // then reports what stopped it (not a timeout).
    let result = tokio::time::timeout(Duration::from_secs(30), lock.try_lock()).await?;
    assert!(
        matches!(
            result
                .as_ref()
                .err()
                .and_then(Error::store_error::<RedisStoreError>),
            Some(RedisStoreError::Command(_))
        ),
        "{result:?}"
    );
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        lock.lock_timeout(Duration::from_secs(1)),
    )
    .await?;
    assert!(
        matches!(
            result
                .as_ref()
                .err()
                .and_then(Error::store_error::<RedisStoreError>),
            Some(RedisStoreError::Command(_))
        ),
        "{result:?}"
    );
    assert!(format!("{client:?}").contains("127.0.0.1"));
    Ok(())
}

#[test]
fn futures_and_guards_are_send_and_sync() {
    fn is_send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Client>();
    send_sync::<ferrisson_redis::Lock>();
    send_sync::<ferrisson_redis::LockGuard>();
    send_sync::<ferrisson_redis::SimpleLock>();
    send_sync::<ferrisson_redis::SimpleLockGuard>();
    send_sync::<Error>();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = ferrisson_testkit::RedisServer::start().expect("redis");
        let client = Client::connect(&server.url()).await.expect("connect");
        let lock = client.lock("bounds").expect("name");
        is_send(&lock.lock());
        is_send(&lock.try_lock());
        is_send(&lock.lock_timeout(Duration::from_secs(1)));
        is_send(&lock.is_locked());
        is_send(&lock.force_unlock());
        let simple = client.simple_lock("bounds-simple").expect("name");
        is_send(&simple.lock());
        is_send(&simple.try_lock());
        let guard = lock.lock().await.expect("lock");
        is_send(&guard.lost());
        is_send(&guard.unlock());
    });
    let _ = Arc::new(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_owner_after_force_unlock_gets_a_new_hold_and_token() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let owner = OwnerId::random();
    let lock = client.lock("forced")?.with_owner(owner);
    let old = lock.lock().await?;
    assert!(lock.force_unlock().await?);
    let new = lock.lock().await?;
    assert!(new.fencing_token() > old.fencing_token());
    assert!(
        !old.is_held(),
        "the old hold was lost when Redis started a new one"
    );
    assert!(new.is_held());
    assert_eq!(lock.hold_count().await?, 1);
    new.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_holder_count_token_and_ttl() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.lock("inspected")?;
    let free = lock.inspect().await?;
    assert_eq!((free.holder, free.hold_count, free.ttl), (None, 0, None));
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    inner.unlock().await?; // leaves a release marker in the hash, which is not a holder
    let info = lock.inspect().await?;
    assert_eq!(info.holder, Some(outer.owner()));
    assert_eq!(info.hold_count, 1);
    assert_eq!(info.fencing_token, Some(outer.fencing_token()));
    assert!(info.ttl.is_some_and(|ttl| ttl <= client.watchdog_lease()));
    outer.unlock().await?;
    assert_eq!(lock.inspect().await?.holder, None);
    Ok(())
}

/// How many clients are registered as waiting for the lock `name` (its `{name}:waiters`
/// sorted set).
async fn registered_clients(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    conn.zcard(format!("{{{name}}}:waiters")).await.unwrap_or(0)
}

/// Shard channels with at least one subscriber.
async fn shard_channels(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async::<Vec<String>>(conn)
        .await
        .map_or(usize::MAX, |c| c.len())
}

/// Waits until `count` clients are registered as waiting for `name`.
async fn until_registered(
    conn: &redis::aio::MultiplexedConnection,
    name: &'static str,
    count: u64,
) -> anyhow::Result<()> {
    let registered = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { registered_clients(&mut conn, name).await == count }
    })
    .await;
    anyhow::ensure!(registered, "{count} clients never registered as waiting");
    Ok(())
}

/// The holder's lease in the wake-up tests: far longer than [`WOKEN_WITHIN`], so only a
/// wake-up explains a grant in time.
const LONG_LEASE: Duration = Duration::from_secs(30);
/// How long a woken waiter may take to hold the lock.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// The locks whose release wakes one waiting client, not every client with a waiter: each
/// wake-up test below runs once for each.
trait WakesOne: DistributedLock + Clone + 'static {
    /// The lock called `name` on `client`, with its default lease.
    fn on(client: &Client, name: &str) -> ferrisson_redis::Result<Self>;

    /// The same lock with a fixed lease (no renewal).
    fn fixed(self, lease: Duration) -> ferrisson_redis::Result<Self>;
}

impl WakesOne for Lock {
    fn on(client: &Client, name: &str) -> ferrisson_redis::Result<Self> {
        client.lock(name)
    }

    fn fixed(self, lease: Duration) -> ferrisson_redis::Result<Self> {
        self.with_lease(Lease::Fixed(lease))
    }
}

impl WakesOne for SimpleLock {
    fn on(client: &Client, name: &str) -> ferrisson_redis::Result<Self> {
        client.simple_lock(name)
    }

    fn fixed(self, lease: Duration) -> ferrisson_redis::Result<Self> {
        self.with_lease(Lease::Fixed(lease))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_one_waiting_client_with_one_request() -> anyhow::Result<()> {
    release_wakes_one_waiting_client::<Lock>("one-client").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_release_wakes_one_waiting_client_with_one_request() -> anyhow::Result<()> {
    release_wakes_one_waiting_client::<SimpleLock>("simple-one-client").await
}

async fn release_wakes_one_waiting_client<L: WakesOne>(name: &'static str) -> anyhow::Result<()> {
    let (server, holder) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let guard = L::on(&holder, name)?.fixed(LONG_LEASE)?.lock().await?;
    let mut waiters = Vec::new();
    for _ in 0..8 {
        let client = Client::connect(&server.url()).await?;
        let lock = L::on(&client, name)?;
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            // Keep the lock (and the client) until the test has counted.
            anyhow::Ok((client, guard))
        }));
    }
    until_registered(&conn, name, 8).await?;
    let before = script_calls(&mut conn).await?;
    guard.unlock().await?;
    // One release, one woken client, whose one waiter takes the lock: two scripts, and
    // seven clients still registered.
    until_registered(&conn, name, 7).await?;
    let key = format!("{{{name}}}");
    let granted = eventually(WOKEN_WITHIN, || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move { conn.exists(&key).await.unwrap_or(false) }
    })
    .await;
    assert!(granted, "no waiting client took the released lock");
    let calls = script_calls(&mut conn).await? - before;
    assert_eq!(calls, 2, "a release and the woken waiter's acquire");
    for waiter in waiters {
        waiter.abort();
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_on_a_vanished_client_does_not_stall_the_others() -> anyhow::Result<()> {
    vanished_client_is_skipped::<Lock>("vanish").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_waiter_on_a_vanished_client_does_not_stall_the_others() -> anyhow::Result<()> {
    vanished_client_is_skipped::<SimpleLock>("simple-vanish").await
}

async fn vanished_client_is_skipped<L: WakesOne>(name: &'static str) -> anyhow::Result<()> {
    let (server, holder) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let guard = L::on(&holder, name)?.fixed(LONG_LEASE)?.lock().await?;
    let channels_before = shard_channels(&mut conn).await;

    // The first client to wait runs on a runtime of its own, as a separate process
    // would: shutting that runtime down ends the client with its connection, and gives
    // its waiter no chance to withdraw (tasks spawned while it shuts down never run).
    let url = server.url();
    let (registered_tx, registered_rx) = tokio::sync::oneshot::channel::<()>();
    let vanishing = std::thread::spawn(move || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let client = Client::connect(&url).await?;
            let lock = L::on(&client, name)?;
            tokio::spawn(async move {
                let _guard = lock.lock().await;
                let _keep = client;
            });
            // Ended by the test once this waiter has registered.
            let _ = registered_rx.await;
            anyhow::Ok(())
        })?;
        runtime.shutdown_background();
        Ok(())
    });
    until_registered(&conn, name, 1).await?;

    let other = Client::connect(&server.url()).await?;
    let lock = L::on(&other, name)?;
    let waiting = tokio::spawn(async move { lock.lock().await });
    until_registered(&conn, name, 2).await?;

    let _ = registered_tx.send(());
    vanishing
        .join()
        .map_err(|_| anyhow::anyhow!("the vanishing client's thread panicked"))??;
    // Its connection is gone (only the other waiter's channel is left), its registration
    // is not: the release has to skip it.
    let gone = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { shard_channels(&mut conn).await == channels_before + 1 }
    })
    .await;
    assert!(gone, "the vanished client's subscription is still there");
    assert_eq!(registered_clients(&mut conn, name).await, 2);

    guard.unlock().await?;
    let next = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .map_err(|_| {
            anyhow::anyhow!("the live waiter was not woken within {WOKEN_WITHIN:?}")
        })???;
    assert!(next.is_held());
    assert_eq!(registered_clients(&mut conn, name).await, 0);
    next.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_that_gives_up_leaves_the_wake_up_to_the_next_client() -> anyhow::Result<()> {
    giving_up_leaves_the_wake_up::<Lock>("give-up").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_waiter_that_gives_up_leaves_the_wake_up_to_the_next_client()
-> anyhow::Result<()> {
    giving_up_leaves_the_wake_up::<SimpleLock>("simple-give-up").await
}

async fn giving_up_leaves_the_wake_up<L: WakesOne>(name: &'static str) -> anyhow::Result<()> {
    let (server, holder) = server_and_client().await?;
    let conn = raw(&server).await?;
    let guard = L::on(&holder, name)?.fixed(LONG_LEASE)?.lock().await?;
    let quitter = Client::connect(&server.url()).await?;
    let quitting = L::on(&quitter, name)?;
    let quit = tokio::spawn(async move { quitting.lock_timeout(Duration::from_secs(1)).await });
    until_registered(&conn, name, 1).await?;
    let other = Client::connect(&server.url()).await?;
    let lock = L::on(&other, name)?;
    let waiting = tokio::spawn(async move { lock.lock().await });
    until_registered(&conn, name, 2).await?;

    // The first client to register gives up and withdraws; its channel stays subscribed
    // for a while, so a release that still picked it would wake nobody.
    assert!(quit.await??.is_none());
    until_registered(&conn, name, 1).await?;
    guard.unlock().await?;
    let next = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .map_err(|_| {
            anyhow::anyhow!("the other waiter was not woken within {WOKEN_WITHIN:?}")
        })???;
    next.unlock().await?;
    drop(quitter);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_waiter_whose_future_is_dropped_leaves_the_wake_up_to_the_next_client()
-> anyhow::Result<()> {
    let name = "simple-dropped-waiter";
    let (server, holder) = server_and_client().await?;
    let conn = raw(&server).await?;
    let guard = holder
        .simple_lock(name)?
        .with_lease(Lease::Fixed(LONG_LEASE))?
        .lock()
        .await?;
    let quitter = Client::connect(&server.url()).await?;
    let quitting = quitter.simple_lock(name)?;
    let dropped = tokio::spawn(async move { quitting.lock().await });
    until_registered(&conn, name, 1).await?;
    let other = Client::connect(&server.url()).await?;
    let lock = other.simple_lock(name)?;
    let waiting = tokio::spawn(async move { lock.lock().await });
    until_registered(&conn, name, 2).await?;

    // Dropping the first client's waiting future withdraws that client.
    dropped.abort();
    assert!(dropped.await.is_err_and(|e| e.is_cancelled()));
    until_registered(&conn, name, 1).await?;
    guard.unlock().await?;
    let next = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .map_err(|_| {
            anyhow::anyhow!("the other waiter was not woken within {WOKEN_WITHIN:?}")
        })???;
    assert_eq!(next.name(), name);
    next.unlock().await?;
    drop(quitter);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_granted_when_the_lease_ran_out_is_no_longer_registered() -> anyhow::Result<()> {
    granted_at_lease_end_is_not_registered::<Lock>("expired").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_waiter_granted_when_the_lease_ran_out_is_no_longer_registered()
-> anyhow::Result<()> {
    granted_at_lease_end_is_not_registered::<SimpleLock>("simple-expired").await
}

async fn granted_at_lease_end_is_not_registered<L: WakesOne>(
    name: &'static str,
) -> anyhow::Result<()> {
    let (server, holder) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    // A fixed lease is not renewed: the key expires with no release and no message.
    let _expiring = L::on(&holder, name)?
        .fixed(Duration::from_millis(800))?
        .lock()
        .await?;
    let waiter = Client::connect(&server.url()).await?;
    let lock = L::on(&waiter, name)?;
    let waiting = tokio::spawn(async move { lock.lock().await });
    until_registered(&conn, name, 1).await?;
    // Woken by the end of its nap (the holder's remaining lease), not by a release.
    let guard = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .map_err(|_| anyhow::anyhow!("the waiter did not retry when the lease ran out"))???;
    assert_eq!(
        registered_clients(&mut conn, name).await,
        0,
        "a client holding the lock is not waiting for it"
    );
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_up_reaching_a_client_with_no_waiter_left_is_passed_on() -> anyhow::Result<()> {
    wake_up_with_no_waiter_is_passed_on::<Lock>("pass-on").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_wake_up_reaching_a_client_with_no_waiter_left_is_passed_on()
-> anyhow::Result<()> {
    wake_up_with_no_waiter_is_passed_on::<SimpleLock>("simple-pass-on").await
}

async fn wake_up_with_no_waiter_is_passed_on<L: WakesOne>(
    name: &'static str,
) -> anyhow::Result<()> {
    let (server, holder) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let guard = L::on(&holder, name)?.fixed(LONG_LEASE)?.lock().await?;
    let waiters_key = format!("{{{name}}}:waiters");
    // A client that waited, registered, and gave up: it withdrew, but its channel stays
    // subscribed for a while.
    let gone = Client::connect(&server.url()).await?;
    let quitting = L::on(&gone, name)?;
    let waiting_gone =
        tokio::spawn(async move { quitting.lock_timeout(Duration::from_millis(300)).await });
    until_registered(&conn, name, 1).await?;
    let stale: Vec<(String, f64)> = conn.zrange_withscores(&waiters_key, 0, 0).await?;
    assert!(waiting_gone.await??.is_none());
    until_registered(&conn, name, 0).await?;

    let other = Client::connect(&server.url()).await?;
    let lock = L::on(&other, name)?;
    let waiting = tokio::spawn(async move { lock.lock().await });
    until_registered(&conn, name, 1).await?;
    // The registration of the client that gave up comes back ahead of the other one, as
    // when it raced the grant that took it off: the release wakes that client first.
    let _: u64 = conn.zadd(&waiters_key, &stale[0].0, 0).await?;
    let lingering: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(format!("{{{name}}}:c:{}", stale[0].0))
        .query_async(&mut conn)
        .await?;
    assert_eq!(
        lingering[0].1, 1,
        "the client that gave up still listens on its channel"
    );
    guard.unlock().await?;
    let next = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .map_err(|_| {
            anyhow::anyhow!("the wake-up was not passed on within {WOKEN_WITHIN:?}")
        })???;
    next.unlock().await?;
    drop(gone);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_force_unlock_wakes_one_waiting_client() -> anyhow::Result<()> {
    let name = "simple-forced";
    let (server, holder) = server_and_client().await?;
    let mut conn = raw(&server).await?;
    let lock = holder
        .simple_lock(name)?
        .with_lease(Lease::Fixed(LONG_LEASE))?;
    let stuck = lock.lock().await?;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = Client::connect(&server.url()).await?;
        let lock = client.simple_lock(name)?;
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            anyhow::Ok((client, guard))
        }));
    }
    until_registered(&conn, name, 3).await?;
    let before = script_calls(&mut conn).await?;
    assert!(lock.force_unlock().await?);
    // One woken client, whose one waiter takes the lock; two clients still registered.
    until_registered(&conn, name, 2).await?;
    let stuck_owner = stuck.owner().to_string();
    let granted = eventually(WOKEN_WITHIN, || {
        let mut conn = conn.clone();
        let stuck_owner = stuck_owner.clone();
        async move {
            let holder: Option<String> = conn.get(format!("{{{name}}}")).await.unwrap_or(None);
            holder.is_some_and(|h| h != stuck_owner)
        }
    })
    .await;
    assert!(granted, "no waiting client took the forced-open lock");
    let calls = script_calls(&mut conn).await? - before;
    assert_eq!(
        calls, 2,
        "the forced release and the woken waiter's acquire"
    );
    // The holder's late release leaves the new holder's lock alone.
    assert!(matches!(stuck.unlock().await, Err(Error::NotOwner { .. })));
    for waiter in waiters {
        waiter.abort();
    }
    Ok(())
}

/// A server that refuses every renewal at once (its user may no longer run scripts) is
/// asked again after the retry delay (a tenth of the lease), not as fast as it refuses:
/// a retry is never pulled forward to share a batch. With a 1 s lease the hold has about
/// 0.67 s of validity left at its first renewal, room for about seven retries; pulled
/// forward, the watchdog asked thousands of times before the lease ran out.
#[tokio::test]
async fn a_refused_renewal_is_retried_after_its_delay() -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    let client = client_with_lease(&server, Duration::from_secs(1)).await?;
    let mut admin = raw(&server).await?;
    let guard = client.lock("refused-renewals")?.lock().await?;
    let before = script_stat(&mut admin, "rejected_calls").await?;
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "-evalsha", "-eval"])
        .query_async(&mut admin)
        .await?;
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .map_err(|_| anyhow::anyhow!("the hold outlived its lease without a renewal"))?;
    let refused = script_stat(&mut admin, "rejected_calls").await? - before;
    assert!(refused >= 1, "no renewal was tried");
    assert!(
        refused <= 20,
        "{refused} renewals tried within one lease: retries are not spaced"
    );
    Ok(())
}
