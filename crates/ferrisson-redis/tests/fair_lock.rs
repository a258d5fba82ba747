//! The fair lock against real redis-server processes: FIFO grants, dead and cancelled
//! waiters, waking only the head.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrisson_redis::{Client, Error, FairLock};
use ferrisson_testkit::RedisServer;
use redis::AsyncCommands;
use tokio::time::Instant;

/// The environment variable that turns this test binary into a child waiter process.
const CHILD_ENV: &str = "FERRISSON_FAIR_WAITER_CHILD";

/// A fresh redis-server and a client connected to it.
async fn server_and_client() -> anyhow::Result<(RedisServer, Client)> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    Ok((server, client))
}

/// A plain redis-rs connection for checks from outside the library.
async fn raw(server: &RedisServer) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?)
}

/// Polls `check` every 10 ms until it holds or `within` passes, for states reached by
/// other clients or background tasks that offer no event to await.
async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the lock's live queue has exactly `len` waiters.
async fn queue_reaches(lock: &FairLock, len: usize) -> bool {
    eventually(Duration::from_secs(20), || async {
        lock.inspect()
            .await
            .is_ok_and(|info| info.queue_len() == len)
    })
    .await
}

/// Every key and channel of the fair lock `name` is gone (its fencing floor is shared by
/// every name of its hash slot, and stays).
async fn nothing_left(server: &RedisServer, name: &str) -> anyhow::Result<bool> {
    let mut conn = raw(server).await?;
    let keys: Vec<String> = conn.keys(format!("{{{name}}}*")).await?;
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(&mut conn)
        .await?;
    Ok(keys.is_empty() && channels.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_contenders_are_granted_in_queue_order() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let holder = client.fair_lock("fifo")?.lock().await?;
    let observer = client.fair_lock("fifo")?;
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut contenders = Vec::new();
    for i in 0..16 {
        // One client per contender: every grant crosses clients, as between processes.
        let lock = Client::connect(&server.url()).await?.fair_lock("fifo")?;
        let grants = Arc::clone(&grants);
        contenders.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            grants
                .lock()
                .expect("grants")
                .push((i, guard.fencing_token()));
            guard.unlock().await?;
            anyhow::Ok(())
        }));
        assert!(
            queue_reaches(&observer, i + 1).await,
            "contender {i} never queued"
        );
    }
    let queued = observer.inspect().await?;
    assert_eq!(queued.holder, Some(holder.owner()));
    holder.unlock().await?;
    for contender in contenders {
        contender.await??;
    }
    let grants = grants.lock().expect("grants").clone();
    let order: Vec<usize> = grants.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        order,
        (0..16).collect::<Vec<_>>(),
        "grant order must be the queue order"
    );
    assert!(
        grants.windows(2).all(|w| w[0].1 < w[1].1),
        "fencing tokens grow: {grants:?}"
    );
    // The contenders' clients are dropped with their tasks; the server forgets their
    // subscriptions when it sees the connections close.
    assert!(
        eventually(Duration::from_secs(10), || async {
            nothing_left(&server, "fifo").await.unwrap_or(false)
        })
        .await
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_only_the_head() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.fair_lock("head")?;
    let holder = lock.lock().await?;
    let mut waiters = Vec::new();
    for i in 0..3 {
        let other = Client::connect(&server.url()).await?.fair_lock("head")?;
        waiters.push(tokio::spawn(async move { other.lock().await }));
        assert!(queue_reaches(&lock, i + 1).await);
    }
    // Each waiter's own wake-up channel, watched from outside.
    let queued: Vec<_> = lock
        .inspect()
        .await?
        .waiters
        .iter()
        .map(|w| w.owner)
        .collect();
    let head = queued[0];
    let (tx, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = redis::Client::open(format!("{}?protocol=resp3", server.url()))?
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_push_sender(tx),
        )
        .await?;
    for owner in &queued {
        let _: redis::Value = redis::cmd("SSUBSCRIBE")
            .arg(format!("{{head}}:w:{owner}"))
            .query_async(&mut watcher)
            .await?;
    }
    holder.unlock().await?;
    let first = loop {
        let push = tokio::time::timeout(Duration::from_secs(5), messages.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("no release message"))?;
        if push.kind == redis::PushKind::SMessage {
            break push;
        }
    };
    assert_eq!(
        first.data.first(),
        Some(&redis::Value::BulkString(
            format!("{{head}}:w:{head}").into_bytes()
        ))
    );
    // The head holds now; the two others were sent nothing.
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.inspect()
                .await
                .is_ok_and(|i| i.holder == Some(head) && i.queue_len() == 2)
        })
        .await
    );
    let more = tokio::time::timeout(Duration::from_millis(200), async {
        loop {
            match messages.recv().await {
                Some(push) if push.kind == redis::PushKind::SMessage => return Some(push),
                Some(_) => {}
                None => return None,
            }
        }
    })
    .await;
    assert!(more.is_err(), "a second wake-up went out: {more:?}");
    for waiter in &waiters {
        waiter.abort();
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_skips_the_queue() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.fair_lock("reenter")?;
    let outer = lock.lock().await?;
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    assert!(queue_reaches(&lock, 1).await);
    // The holder's task goes past the queued waiter: it already holds the lock.
    let inner = tokio::time::timeout(Duration::from_secs(5), lock.lock()).await??;
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let info = lock.inspect().await?;
    assert_eq!(
        (info.holder, info.hold_count, info.queue_len()),
        (Some(outer.owner()), 2, 1)
    );
    assert_eq!(info.fencing_token, Some(outer.fencing_token()));
    assert!(info.ttl.is_some_and(|ttl| ttl > Duration::ZERO));
    inner.unlock().await?;
    assert!(!waiter.is_finished());
    let token = outer.fencing_token();
    outer.unlock().await?;
    let next = waiter.await??;
    assert!(next.fencing_token() > token);
    next.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_never_jumps_a_live_queue_and_stale_entries_are_evicted() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.fair_lock("stale")?;
    // A waiter entry that nobody refreshes: a waiter that died 300 ms into the future.
    let mut conn = raw(&server).await?;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
    let deadline = secs * 1000 + micros / 1000 + 300;
    let ghost = ferrisson_redis::OwnerId::random().to_string();
    let () = redis::pipe()
        .zadd("{stale}:queue", &ghost, 0)
        .ignore()
        .zadd("{stale}:deadlines", &ghost, deadline)
        .ignore()
        .query_async(&mut conn)
        .await?;
    let started = Instant::now();
    assert!(
        lock.try_lock().await?.is_none(),
        "the lock is free but reserved for the head"
    );
    let guard = tokio::time::timeout(Duration::from_secs(5), lock.lock()).await??;
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "granted before the dead head's deadline"
    );
    let ghost_left: Option<f64> = conn.zscore("{stale}:queue", &ghost).await?;
    assert_eq!(ghost_left, None);
    guard.unlock().await?;
    assert!(lock.try_lock().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_waiter_removes_its_entry_before_returning() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    // A long keep-alive: only the waiter's own removal can empty the queue in time.
    let lock = client
        .fair_lock("timeout")?
        .with_waiter_keepalive(Duration::from_secs(60))?;
    let holder = lock.lock().await?;
    let other = Client::connect(&server.url()).await?.fair_lock("timeout")?;
    let started = Instant::now();
    assert!(
        other
            .lock_timeout(Duration::from_millis(200))
            .await?
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(lock.inspect().await?.queue_len(), 0);
    let mut conn = raw(&server).await?;
    let queued: u64 = conn.zcard("{timeout}:queue").await?;
    assert_eq!(queued, 0);
    assert!(other.lock_timeout(Duration::ZERO).await?.is_none());
    holder.unlock().await?;
    assert!(other.lock_timeout(Duration::ZERO).await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_waits_leave_the_queue_empty() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let keepalive = Duration::from_secs(60);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(Client::connect(&server.url()).await?);
    }
    let baseline_tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let holder = client
        .fair_lock("cancel")?
        .with_waiter_keepalive(keepalive)?;
    let holding = tokio::spawn(async move {
        // Pass the lock in and out so waits are dropped before their entry exists, while
        // an acquire is in flight, while queued, and right after being granted.
        for _ in 0..30 {
            let guard = holder.lock().await?;
            tokio::time::sleep(Duration::from_micros(rand_below(3000))).await;
            guard.unlock().await?;
            tokio::time::sleep(Duration::from_micros(rand_below(1000))).await;
        }
        anyhow::Ok(())
    });
    let mut tasks = Vec::new();
    for i in 0..400 {
        let lock = clients[i % clients.len()]
            .fair_lock("cancel")?
            .with_waiter_keepalive(keepalive)?;
        tasks.push(tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_micros(rand_below(30_000)), lock.lock()).await;
        }));
    }
    for task in tasks {
        task.await?;
    }
    holding.await??;
    let clean = eventually(Duration::from_secs(10), || async {
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        nothing_left(&server, "cancel").await.unwrap_or(false)
            && clients
                .iter()
                .all(|c| c.stats().waiting_channels == 0 && c.stats().holds == 0)
            && tasks <= baseline_tasks
    })
    .await;
    let info = client.fair_lock("cancel")?.inspect().await?;
    let mut conn = raw(&server).await?;
    let keys: Vec<String> = conn.keys("*").await?;
    let stats: Vec<_> = clients.iter().map(Client::stats).collect();
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(
        clean,
        "left behind: {info:?}, keys {keys:?}, {stats:?}, tasks {tasks} > {baseline_tasks}"
    );
    // And the lock is usable at once: no phantom head reserves it.
    let lock = client.fair_lock("cancel")?;
    assert!(lock.try_lock().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiter_blocks_the_queue_at_most_its_keepalive() -> anyhow::Result<()> {
    let keepalive = Duration::from_secs(1);
    let (server, client) = server_and_client().await?;
    let lock = client
        .fair_lock("killed")?
        .with_waiter_keepalive(keepalive)?;
    let holder = lock.lock().await?;

    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "child_fair_waiter",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{} killed {}", server.url(), keepalive.as_millis()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let child_queued = queue_reaches(&lock, 1).await;
    if !child_queued {
        child.kill()?;
    }
    assert!(child_queued, "the child process never queued");
    let child_owner = lock.inspect().await?.waiters[0].owner;

    let other = Client::connect(&server.url())
        .await?
        .fair_lock("killed")?
        .with_waiter_keepalive(keepalive)?;
    let behind = tokio::spawn(async move {
        let guard = other.lock().await?;
        anyhow::Ok((Instant::now(), guard))
    });
    assert!(queue_reaches(&lock, 2).await);

    let before_inspect = Instant::now();
    let head = lock.inspect().await?.waiters[0];
    assert_eq!(head.owner, child_owner);
    child.kill()?; // SIGKILL: no cleanup runs in the child
    child.wait()?;
    let killed_at = Instant::now();
    holder.unlock().await?; // wakes the dead head only

    let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(10), behind).await???;
    // Nobody passes a head before its entry's deadline, dead or not...
    assert!(granted_at + Duration::from_millis(5) >= before_inspect + head.ttl);
    // ...and a dead head holds the queue up for at most one keep-alive, plus one refresh
    // interval of the waiter behind it (slack for a loaded machine).
    let bound = keepalive + keepalive / 3 + Duration::from_secs(2);
    assert!(
        granted_at - killed_at <= bound,
        "waited {:?} after the kill",
        granted_at - killed_at
    );
    let info = lock.inspect().await?;
    assert_eq!(info.holder, Some(guard.owner()));
    assert!(info.waiters.iter().all(|w| w.owner != child_owner));
    guard.unlock().await?;
    Ok(())
}

/// The child process of `killed_waiter_blocks_the_queue_at_most_its_keepalive`: queues
/// for the lock and waits there until killed. Does nothing when the harness runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_fair_waiter() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return Ok(());
    };
    let mut parts = spec.split(' ');
    let (Some(url), Some(name), Some(keepalive)) = (parts.next(), parts.next(), parts.next())
    else {
        anyhow::bail!("bad {CHILD_ENV}: {spec}");
    };
    let client = Client::connect(url).await?;
    let lock = client
        .fair_lock(name)?
        .with_waiter_keepalive(Duration::from_millis(keepalive.parse()?))?;
    let _guard = lock.lock().await?;
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_a_fair_lock_and_lost_fires_when_it_is_taken_away() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    // Long enough that a renewal (every third of it) is not late on a loaded machine
    // running this binary's other tests beside it.
    let lease = Duration::from_millis(1200);
    let client = Client::builder(&server.url())
        .watchdog_lease(lease)
        .connect()
        .await?;
    let lock = client.fair_lock("watched")?;
    let other = Client::connect(&server.url()).await?.fair_lock("watched")?;
    let guard = lock.lock().await?;
    let started = Instant::now();
    // Time passing is the point: three leases go by while the watchdog renews.
    while started.elapsed() < lease * 3 {
        tokio::time::sleep(lease / 4).await;
        assert!(guard.is_held());
        assert!(other.try_lock().await?.is_none(), "the lock lapsed");
    }
    assert_eq!(client.stats().renewing, 1);
    let mut conn = raw(&server).await?;
    let () = conn.del("{watched}").await?;
    tokio::time::timeout(Duration::from_secs(5), guard.lost()).await?;
    assert!(!guard.is_held());
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_frees_the_lock_and_wakes_the_head() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.fair_lock("forced")?;
    let holder = lock.lock().await?;
    // A long keep-alive: the head would not look again for 20 s unless woken.
    let waiter = Client::connect(&server.url())
        .await?
        .fair_lock("forced")?
        .with_waiter_keepalive(Duration::from_secs(60))?;
    let waiting = tokio::spawn(async move { waiter.lock().await });
    assert!(queue_reaches(&lock, 1).await);
    assert!(lock.force_unlock().await?);
    let next = tokio::time::timeout(Duration::from_secs(5), waiting).await???;
    assert_ne!(next.owner(), holder.owner());
    assert!(matches!(holder.unlock().await, Err(Error::NotOwner { .. })));
    next.unlock().await?;
    assert!(!lock.force_unlock().await?, "nothing left to force");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_a_script_flush_and_a_redis_restart() -> anyhow::Result<()> {
    let mut server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let lock = client.fair_lock("restarted")?;
    server.command(&["SCRIPT", "FLUSH"])?;
    let holder = lock.lock().await?; // NOSCRIPT: redis-rs loads the script again
    let waiter = Client::connect(&server.url())
        .await?
        .fair_lock("restarted")?;
    let waiting = tokio::spawn(async move {
        let first = waiter.lock().await;
        (waiter, first)
    });
    assert!(queue_reaches(&lock, 1).await);
    server.restart()?; // no persistence: the lock and the queue are gone
    // A wait that was talking to Redis when it went away ends with a connection error
    // (or, if it reconnected first, with the free lock); asked again, it gets the lock.
    let (waiter, first) = tokio::time::timeout(Duration::from_secs(10), waiting).await??;
    let guard = match first {
        Ok(guard) => guard,
        Err(e) if e.is_connection_error() => {
            tokio::time::timeout(Duration::from_secs(10), waiter.lock()).await??
        }
        Err(e) => return Err(e.into()),
    };
    assert_eq!(lock.inspect().await?.holder, Some(guard.owner()));
    assert!(matches!(holder.unlock().await, Err(Error::NotOwner { .. })));
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_typed_errors() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    assert!(matches!(
        client.fair_lock(""),
        Err(Error::InvalidArgument(_))
    ));
    let lock = client.fair_lock("bad")?;
    assert!(matches!(
        lock.clone().with_waiter_keepalive(Duration::from_millis(5)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.clone()
            .with_lease(ferrisson_redis::Lease::Fixed(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(format!("{lock:?}").contains("bad"));
    Ok(())
}

#[test]
fn futures_and_guards_are_send_and_sync() {
    fn is_send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync>() {}
    send_sync::<FairLock>();
    send_sync::<ferrisson_redis::FairLockGuard>();
    send_sync::<ferrisson_redis::FairLockInfo>();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = RedisServer::start().expect("redis");
        let client = Client::connect(&server.url()).await.expect("connect");
        let lock = client.fair_lock("bounds").expect("name");
        is_send(&lock.lock());
        is_send(&lock.try_lock());
        is_send(&lock.lock_timeout(Duration::from_secs(1)));
        is_send(&lock.inspect());
        let guard = lock.lock().await.expect("lock");
        is_send(&guard.lost());
        is_send(&guard.unlock());
    });
}

fn rand_below(max: u64) -> u64 {
    rand::random::<u64>() % max
}
