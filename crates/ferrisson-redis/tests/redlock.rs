//! Redlock over independent redis-server processes: quorum, failures, validity, contention.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_redis::{
    Client, DistributedLock, Error, Fenced, Guard, Lease, Redlock, RedlockGuard,
};
use ferrisson_testkit::RedisServer;
use futures_util::FutureExt;
use tokio::time::Instant;

fn servers(n: usize) -> anyhow::Result<Vec<RedisServer>> {
    (0..n).map(|_| Ok(RedisServer::start()?)).collect()
}

async fn clients(servers: &[RedisServer]) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::new();
    for server in servers {
        clients.push(
            Client::builder(&server.url())
                .response_timeout(Duration::from_secs(2))
                .reconnect_retries(0)
                .connect()
                .await?,
        );
    }
    Ok(clients)
}

/// Keys of the server other than fencing floors (which outlive every lock by design).
fn lock_keys(server: &RedisServer) -> anyhow::Result<Vec<String>> {
    let reply = server.query(&["KEYS", "*"])?;
    Ok(reply
        .elements()
        .unwrap_or_default()
        .iter()
        .filter_map(|key| key.text())
        .filter(|key| !key.starts_with("ferrisson:fence:"))
        .map(str::to_owned)
        .collect())
}

/// No lock key left on the server.
fn no_lock_keys(server: &RedisServer) -> bool {
    lock_keys(server).is_ok_and(|keys| keys.is_empty())
}

/// The server's fencing floors: (key, value).
fn floors(server: &RedisServer) -> anyhow::Result<Vec<(String, u64)>> {
    let reply = server.query(&["KEYS", "ferrisson:fence:*"])?;
    let mut floors = Vec::new();
    for key in reply.elements().unwrap_or_default() {
        let key = key.text().unwrap_or_default().to_owned();
        let value = server.query(&["GET", key.as_str()])?;
        floors.push((key, value.text().unwrap_or_default().parse()?));
    }
    Ok(floors)
}

/// Polls `check` every 10 ms for at most `within`; for effects of background tasks.
async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[tokio::test]
async fn bad_input_is_rejected() -> anyhow::Result<()> {
    let servers = servers(2)?;
    let clients = clients(&servers).await?;
    assert!(matches!(
        Redlock::new(&[], "x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Redlock::new(&clients, ""),
        Err(Error::InvalidArgument(_))
    ));
    let long = "x".repeat(ferrisson_redis::MAX_NAME_LEN + 1);
    assert!(matches!(
        Redlock::new(&clients, &long),
        Err(Error::InvalidArgument(_))
    ));
    let twice = [clients[0].clone(), clients[0].clone()];
    assert!(matches!(
        Redlock::new(&twice, "x"),
        Err(Error::InvalidArgument(_))
    ));
    let same_url = [
        clients[0].clone(),
        Client::connect(&servers[0].url()).await?,
    ];
    assert!(matches!(
        Redlock::new(&same_url, "x"),
        Err(Error::InvalidArgument(_))
    ));

    let redlock = Redlock::new(&clients, "x")?;
    assert_eq!(redlock.quorum(), 2);
    assert_eq!(redlock.ttl(), ferrisson_redis::DEFAULT_REDLOCK_LEASE);
    assert_eq!(
        redlock.lease(),
        Lease::Fixed(ferrisson_redis::DEFAULT_REDLOCK_LEASE)
    );
    assert!(redlock.node_timeout() < redlock.ttl());
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(5),
        Duration::from_secs(400 * 24 * 3600),
    ] {
        assert!(
            matches!(
                redlock.clone().with_lease(Lease::Fixed(ttl)),
                Err(Error::InvalidArgument(_))
            ),
            "{ttl:?}"
        );
    }
    let short = redlock
        .clone()
        .with_lease(Lease::Fixed(Duration::from_millis(100)))?;
    assert!(matches!(
        short.clone().with_node_timeout(Duration::from_millis(100)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        short.clone().with_node_timeout(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    let timed = short.with_node_timeout(Duration::from_millis(50))?;
    assert!(matches!(
        timed.with_lease(Lease::Fixed(Duration::from_millis(50))),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        redlock.clone().with_retry(Duration::ZERO, Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        redlock
            .clone()
            .with_retry(Duration::from_secs(7200), Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));

    let guard = redlock.try_lock().await?.expect("free");
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    guard.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn majority_excludes_and_unlock_clears_every_node() -> anyhow::Result<()> {
    let servers = servers(3)?;
    let mine = Redlock::new(&clients(&servers).await?, "orders")?;
    let theirs = Redlock::new(&clients(&servers).await?, "orders")?;

    let guard = mine.try_lock().await?.expect("free");
    assert!(guard.is_held());
    assert!(guard.remaining() <= Duration::from_millis(10_000 - 102));
    assert!(theirs.try_lock().await?.is_none());
    assert!(
        theirs
            .lock_timeout(Duration::from_millis(150))
            .await?
            .is_none()
    );

    let info = theirs.inspect().await?;
    assert_eq!(info.name, "orders");
    assert_eq!(info.holder, Some(guard.owner()));
    assert_eq!(info.nodes.len(), 3);
    for node in &info.nodes {
        assert!(node.reachable);
        assert_eq!(node.holder, Some(guard.owner()));
        assert!(
            node.ttl
                .is_some_and(|t| t <= mine.ttl() && t > Duration::ZERO)
        );
        assert_eq!(node.key, "{orders}");
    }

    guard.unlock().await?;
    for server in &servers {
        assert!(no_lock_keys(server));
    }
    assert_eq!(theirs.inspect().await?.holder, None);
    let next = theirs.try_lock().await?.expect("free after unlock");
    next.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn failed_attempt_deletes_the_keys_it_set() -> anyhow::Result<()> {
    let servers = servers(3)?;
    let redlock = Redlock::new(&clients(&servers).await?, "split")?;
    // Someone else holds the key on two of three nodes: we can win only one vote.
    for server in &servers[..2] {
        assert_eq!(
            server.command(&["SET", "{split}", "someone", "PX", "60000"])?,
            "+OK"
        );
    }
    assert!(redlock.try_lock().await?.is_none());
    assert!(no_lock_keys(&servers[2]), "the minority key was released");
    for server in &servers[..2] {
        assert_eq!(
            server.command(&["GET", "{split}"])?,
            "someone",
            "others' keys untouched"
        );
    }
    Ok(())
}

#[tokio::test]
async fn works_with_two_of_five_killed() -> anyhow::Result<()> {
    let mut servers = servers(5)?;
    let redlock = Redlock::new(&clients(&servers).await?, "five")?
        .with_lease(Lease::Fixed(Duration::from_secs(5)))?
        .with_node_timeout(Duration::from_millis(200))?;
    servers[0].kill()?;
    servers[3].kill()?;

    let guard = redlock
        .lock_timeout(Duration::from_secs(2))
        .await?
        .expect("3 of 5 suffice");
    assert!(guard.is_held());
    let info = redlock.inspect().await?;
    assert_eq!(info.holder, Some(guard.owner()));
    assert_eq!(info.nodes.iter().filter(|n| !n.reachable).count(), 2);
    assert!(guard.extend(Duration::from_secs(5)).await?);
    guard.unlock().await?;
    for i in [1, 2, 4] {
        assert!(no_lock_keys(&servers[i]));
    }
    Ok(())
}

#[tokio::test]
async fn extend_and_unlock_need_a_majority_to_answer() -> anyhow::Result<()> {
    let mut servers = servers(5)?;
    let redlock = Redlock::new(&clients(&servers).await?, "five")?
        .with_lease(Lease::Fixed(Duration::from_secs(5)))?
        .with_node_timeout(Duration::from_millis(200))?;
    let guard = redlock.try_lock().await?.expect("free");
    let before = guard.remaining();
    for i in [0, 1, 2] {
        servers[i].kill()?;
    }
    let error = guard
        .extend(Duration::from_secs(30))
        .await
        .expect_err("2 of 5 answer");
    assert!(error.is_connection_error(), "{error:?}");
    assert!(
        guard.remaining() <= before,
        "a failed extend never grows the validity"
    );
    let error = guard.unlock().await.expect_err("2 of 5 answer");
    assert!(error.is_connection_error(), "{error:?}");
    // The servers that answered did release.
    for i in [3, 4] {
        assert!(no_lock_keys(&servers[i]));
    }
    Ok(())
}

#[tokio::test]
async fn refuses_with_three_of_five_killed() -> anyhow::Result<()> {
    let mut servers = servers(5)?;
    let redlock = Redlock::new(&clients(&servers).await?, "five")?
        .with_lease(Lease::Fixed(Duration::from_secs(5)))?
        .with_node_timeout(Duration::from_millis(200))?;
    for i in [0, 2, 4] {
        servers[i].kill()?;
    }
    let error = redlock
        .try_lock()
        .await
        .expect_err("2 of 5 cannot make a majority");
    assert!(error.is_connection_error(), "{error:?}");
    let error = redlock
        .lock_timeout(Duration::from_millis(300))
        .await
        .expect_err("waiting does not help");
    assert!(error.is_connection_error(), "{error:?}");
    // The two live nodes said yes each time; both attempts took their keys back.
    for i in [1, 3] {
        assert!(no_lock_keys(&servers[i]));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_node_costs_at_most_the_node_timeout() -> anyhow::Result<()> {
    let servers = servers(5)?;
    let ttl = Duration::from_secs(2);
    let redlock = Redlock::new(&clients(&servers).await?, "paused")?
        .with_lease(Lease::Fixed(ttl))?
        .with_node_timeout(Duration::from_millis(50))?;
    // Warm up every connection so the measured attempt is only the protocol.
    redlock.try_lock().await?.expect("free").unlock().await?;

    servers[2].pause()?;
    let started = Instant::now();
    let guard = redlock.try_lock().await?;
    let elapsed = started.elapsed();
    let guard = guard.expect("4 of 5 answer");
    // Without the per-node timeout the attempt would wait for the 2 s response timeout.
    assert!(elapsed < ttl / 2, "acquire took {elapsed:?}");
    assert!(
        guard.remaining() > ttl / 2,
        "validity {:?}",
        guard.remaining()
    );
    let info = redlock.inspect().await?;
    assert!(!info.nodes[2].reachable);
    assert_eq!(info.holder, Some(guard.owner()));
    guard.unlock().await?;

    // The paused node runs the queued SET and then the queued release, in that order.
    servers[2].resume()?;
    assert!(eventually(Duration::from_secs(5), || no_lock_keys(&servers[2])).await);
    for server in &servers {
        assert!(no_lock_keys(server));
    }
    Ok(())
}

#[tokio::test]
async fn validity_runs_out_and_extend_needs_a_majority_in_time() -> anyhow::Result<()> {
    let servers = servers(3)?;
    let ttl = Duration::from_millis(300);
    let mine = Redlock::new(&clients(&servers).await?, "short")?.with_lease(Lease::Fixed(ttl))?;
    let theirs = Redlock::new(&clients(&servers).await?, "short")?.with_lease(Lease::Fixed(ttl))?;

    let guard = mine.try_lock().await?.expect("free");
    assert!(guard.remaining() <= Duration::from_millis(300 - 5));
    assert!(guard.extend(Duration::from_secs(2)).await?);
    assert!(guard.remaining() > ttl, "validity {:?}", guard.remaining());
    for server in &servers {
        let pttl: u64 = server
            .command(&["PTTL", "{short}"])?
            .trim_start_matches(':')
            .parse()?;
        assert!(pttl > 300, "pttl {pttl}");
    }
    // A shorter extend shortens the validity too.
    assert!(guard.extend(ttl).await?);
    assert!(guard.remaining() <= ttl);

    // Waiting for the TTL is the point here.
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
    let next = theirs.try_lock().await?.expect("expired keys are free");
    assert!(
        !guard.extend(ttl).await?,
        "extend after the validity must fail"
    );
    assert!(next.is_held());
    assert!(matches!(guard.unlock().await, Err(Error::NotOwner { .. })));
    assert_eq!(theirs.inspect().await?.holder, Some(next.owner()));
    next.unlock().await?;

    let guard = mine.try_lock().await?.expect("free");
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn dropping_the_guard_releases_every_node() -> anyhow::Result<()> {
    let servers = servers(3)?;
    let mine = Redlock::new(&clients(&servers).await?, "drop")?;
    let theirs = Redlock::new(&clients(&servers).await?, "drop")?
        .with_retry(Duration::from_millis(5), Duration::from_millis(10))?;
    drop(mine.try_lock().await?.expect("free"));
    let next = theirs
        .lock_timeout(Duration::from_secs(5))
        .await?
        .expect("released on drop");
    next.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_attempts_leave_no_keys() -> anyhow::Result<()> {
    let servers = servers(3)?;
    let redlock = Redlock::new(&clients(&servers).await?, "cancel")?;
    redlock.try_lock().await?.expect("free").unlock().await?;
    let metrics = tokio::runtime::Handle::current().metrics();
    let background = metrics.num_alive_tasks();
    let mut cancelled = 0;
    for _ in 0..20 {
        // Polled once, then dropped while its requests are in flight (on a loaded machine
        // it may rarely finish within that poll; its guard is then dropped here).
        if redlock.try_lock().now_or_never().is_none() {
            cancelled += 1;
        }
    }
    assert!(cancelled > 0, "no attempt was dropped in flight");
    // Every attempt runs on a task of its own; once they are all done, nothing may remain.
    assert!(
        eventually(Duration::from_secs(5), || metrics.num_alive_tasks()
            <= background)
        .await
    );
    for server in &servers {
        assert!(no_lock_keys(server));
    }
    let guard = redlock.try_lock().await?.expect("nothing left behind");
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_contending_clients_make_progress_and_leave_no_keys() -> anyhow::Result<()> {
    const TASKS: usize = 20;
    const ROUNDS: u64 = 5;
    let servers = servers(5)?;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let redlock = Redlock::new(&clients(&servers).await?, "counter")?
            .with_lease(Lease::Fixed(Duration::from_secs(10)))?
            .with_node_timeout(Duration::from_secs(1))?
            .with_retry(Duration::from_millis(2), Duration::from_millis(20))?;
        let counter = Arc::clone(&counter);
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard: RedlockGuard = redlock.lock().await?;
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                // Read, yield, write: lost updates unless the lock excludes.
                let value = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(value + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.is_held());
                guard.unlock().await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    assert_eq!(counter.load(Ordering::SeqCst), TASKS as u64 * ROUNDS);
    for server in &servers {
        assert_eq!(lock_keys(server)?, Vec::<String>::new());
    }
    Ok(())
}

/// Takes any lock through the backend-neutral contract and returns the hold's token.
async fn token_of_one_hold<L: DistributedLock<Guard: Fenced>>(lock: &L) -> anyhow::Result<u64> {
    let guard = lock.lock().await?;
    assert_eq!(Guard::name(&guard), lock.name());
    assert!(Guard::is_held(&guard));
    assert!(Guard::remaining(&guard) > Duration::ZERO);
    let token = Fenced::fencing_token(&guard).get();
    Guard::unlock(guard).await?;
    Ok(token)
}

#[tokio::test]
async fn tokens_grow_with_every_holder_even_when_one_server_clock_is_ahead() -> anyhow::Result<()> {
    let mut servers = servers(3)?;
    let mine = Redlock::new(&clients(&servers).await?, "fenced")?;
    let theirs = Redlock::new(&clients(&servers).await?, "fenced")?;

    let first = token_of_one_hold(&mine).await?;
    let second = token_of_one_hold(&theirs).await?;
    assert!(second > first, "{second} after {first}");
    // The guard's token is the largest of the majority's, written back to every granting
    // server: each has its one floor at exactly that token.
    for server in &servers {
        let floors = floors(server)?;
        assert_eq!(floors.len(), 1, "{floors:?}");
        assert_eq!(floors[0].1, second);
    }

    // Server 0 hands out tokens an hour ahead of the others (its floor says so, as a
    // clock an hour fast would): the majority takes its token and raises the others.
    let (floor, _) = floors(&servers[0])?.remove(0);
    let ahead = (second + 3_600_000_000).to_string();
    servers[0].query(&["SET", floor.as_str(), ahead.as_str()])?;
    let third = token_of_one_hold(&mine).await?;
    assert!(third > second + 3_600_000_000, "{third}");

    // Without server 0, the two others' clocks are an hour behind that token; their
    // raised floors still make the next token larger.
    servers[0].kill()?;
    let fourth = token_of_one_hold(&theirs).await?;
    assert!(fourth > third, "{fourth} after {third}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_lease_is_extended_and_lost_fires_when_a_majority_drops_it() -> anyhow::Result<()>
{
    let mut servers = servers(3)?;
    let lease = Duration::from_millis(300);
    let mut renewed_clients = Vec::new();
    for server in &servers {
        renewed_clients.push(
            Client::builder(&server.url())
                .watchdog_lease(lease)
                .reconnect_retries(0)
                .connect()
                .await?,
        );
    }
    // Each server may take half a lease to answer, not the default tenth (30 ms): on a
    // loaded machine a release once timed out on two servers and reported no majority
    // instead of the expired lease this test expects.
    let mine = Redlock::new(&renewed_clients, "renewed")?
        .with_lease(Lease::Watchdog)?
        .with_node_timeout(lease / 2)?;
    let theirs = Redlock::new(&clients(&servers).await?, "renewed")?;
    assert_eq!(mine.lease(), Lease::Watchdog);
    assert_eq!(mine.ttl(), lease);

    let guard = mine.lock().await?;
    // Outliving the lease several times over is the point here.
    tokio::time::sleep(lease * 4).await;
    assert!(guard.is_held());
    assert!(guard.remaining() > lease / 3, "{:?}", guard.remaining());
    assert!(theirs.try_lock().await?.is_none());
    assert_eq!(theirs.inspect().await?.holder, Some(guard.owner()));

    // Deleted behind the holder's back: the next extension finds a majority without it.
    assert!(theirs.force_unlock().await?);
    assert!(!theirs.force_unlock().await?, "nothing left to delete");
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("lost within a lease");
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));

    // Servers gone: extensions fail, and the hold ends when its validity runs out.
    let guard = mine.lock().await?;
    servers[0].kill()?;
    servers[1].kill()?;
    tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost once the validity ran out");
    assert!(!guard.is_held());
    Ok(())
}

#[test]
fn futures_and_guards_are_send() {
    fn send<T: Send>(_: &T) {}
    fn sync<T: Send + Sync>() {}
    sync::<Redlock>();
    sync::<RedlockGuard>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let _enter = runtime.enter();
    let redlock: Option<Redlock> = None;
    if let Some(redlock) = redlock {
        send(&redlock.lock());
        send(&redlock.try_lock());
        send(&redlock.lock_timeout(Duration::ZERO));
        send(&redlock.inspect());
        send(&redlock.force_unlock());
    }
}
