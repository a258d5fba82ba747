//! The read-write lock against real redis-server processes: every transition, the
//! refused upgrade, per-holder leases, and holders in another process.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ferrisson_redis::{Client, Error, Lease, RwLock, RwLockMode};
use ferrisson_testkit::RedisServer;
use redis::AsyncCommands;
use tokio::sync::{Barrier, Notify};
use tokio::time::Instant;

/// The environment variable that turns this test binary into a child holder process.
const CHILD_ENV: &str = "FERRISSON_RW_HOLDER_CHILD";

/// A fresh redis-server and a client connected to it.
async fn server_and_client() -> anyhow::Result<(RedisServer, Client)> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    Ok((server, client))
}

/// A client whose watchdog lease is `lease`, renewing every third of it.
async fn client_with_lease(server: &RedisServer, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(&server.url())
        .watchdog_lease(lease)
        .connect()
        .await?)
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

/// A holder in another process: this test binary re-run as `child_rw_holder`.
struct ChildHolder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl ChildHolder {
    /// Starts the child and waits until it reports holding `side` of lock `name`.
    fn hold(server: &RedisServer, name: &str, side: &str, lease: Duration) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                "--exact",
                "child_rw_holder",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!("{} {name} {side} {}", server.url(), lease.as_millis()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no child stdout"))?;
        let mut holder = Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        holder.expect_line("child: held")?;
        Ok(holder)
    }

    /// Reads the child's stdout until a line ending in `expected` (the harness prints
    /// its own text too, on the same line).
    fn expect_line(&mut self, expected: &str) -> anyhow::Result<()> {
        let lines = &mut self.lines;
        tokio::task::block_in_place(|| {
            for line in lines.by_ref() {
                if line?.ends_with(expected) {
                    return Ok(());
                }
            }
            anyhow::bail!("child exited before printing {expected:?}")
        })
    }

    /// Tells the child to unlock and waits until it did.
    fn release(&mut self) -> anyhow::Result<()> {
        let mut stdin = self
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("released twice"))?;
        writeln!(stdin, "release")?;
        drop(stdin);
        self.expect_line("child: released")
    }

    /// SIGKILL: the child runs no cleanup and its watchdog stops.
    fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ChildHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child process of the cross-process tests: takes one side of a lock, prints
/// `child: held`, unlocks when a line arrives on stdin and prints `child: released`. Does nothing when
/// the harness runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_rw_holder() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [url, name, side, lease] = parts.as_slice() else {
        anyhow::bail!("bad {CHILD_ENV}: {spec}");
    };
    let client = Client::builder(url)
        .watchdog_lease(Duration::from_millis(lease.parse()?))
        .connect()
        .await?;
    let lock = client.rwlock(name)?;
    let release = || {
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)
        })
    };
    if *side == "write" {
        let guard = lock.write().await?;
        println!("child: held");
        release().await??;
        guard.unlock().await?;
    } else {
        let guard = lock.read().await?;
        println!("child: held");
        release().await??;
        guard.unlock().await?;
    }
    println!("child: released");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_share_and_a_writer_excludes_everyone() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let other = Client::connect(&server.url()).await?;
    let lock = client.rwlock("share")?;
    let (r1, r2) = {
        let (a, b) = (lock.clone(), other.rwlock("share")?);
        let r1 = tokio::spawn(async move { a.read().await }).await??;
        let r2 = tokio::spawn(async move { b.read().await }).await??;
        (r1, r2)
    };
    assert_ne!(r1.owner(), r2.owner());
    let info = lock.inspect().await?;
    assert_eq!(
        (info.mode, info.readers.len(), info.writer),
        (Some(RwLockMode::Read), 2, None)
    );
    assert!(other.rwlock("share")?.try_write().await?.is_none());

    let writer = {
        let lock = other.rwlock("share")?;
        tokio::spawn(async move { lock.write().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            other.stats().waiting_channels == 1
        })
        .await
    );
    r1.unlock().await?;
    assert!(!writer.is_finished(), "one reader is left");
    r2.unlock().await?;
    // Woken by the last read release, far sooner than the readers' 30 s leases.
    let write = tokio::time::timeout(Duration::from_secs(5), writer).await???;
    let info = lock.inspect().await?;
    assert_eq!(info.mode, Some(RwLockMode::Write));
    assert_eq!(
        info.writer.map(|w| (w.owner, w.holds)),
        Some((write.owner(), 1))
    );
    assert_eq!(info.fencing_token, Some(write.fencing_token()));
    let blocked = lock.clone();
    assert!(
        tokio::spawn(async move { blocked.try_read().await })
            .await??
            .is_none()
    );
    let blocked = lock.clone();
    assert!(
        tokio::spawn(async move { blocked.try_write().await })
            .await??
            .is_none()
    );
    write.unlock().await?;
    assert_eq!(lock.inspect().await?.mode, None);
    let mut conn = raw(&server).await?;
    let exists: bool = conn.exists("{share}").await?;
    assert!(!exists, "a free lock leaves no hash");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_release_hands_the_lock_to_a_waiting_writer() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let other = Client::connect(&server.url()).await?;
    let lock = client.rwlock("writers")?;
    let first = lock.write().await?;
    let second = {
        let lock = other.rwlock("writers")?;
        tokio::spawn(async move { lock.write().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            other.stats().waiting_channels == 1
        })
        .await
    );
    assert!(!second.is_finished());
    let token = first.fencing_token();
    first.unlock().await?;
    // The first writer's lease is 30 s: only its release message wakes the second.
    let second = tokio::time::timeout(Duration::from_secs(5), second).await???;
    assert!(second.fencing_token() > token);
    assert_eq!(
        lock.inspect().await?.writer.map(|w| w.owner),
        Some(second.owner())
    );
    second.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_writer_holds_new_readers_back() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("starve")?;
    let writers = Client::connect(&server.url()).await?;
    let readers = Client::connect(&server.url()).await?;
    let first = lock.read().await?;
    let writer = {
        let lock = writers.rwlock("starve")?;
        tokio::spawn(async move {
            let guard = lock.write().await?;
            anyhow::Ok((Instant::now(), guard))
        })
    };
    let intent = eventually(Duration::from_secs(5), || async {
        lock.inspect()
            .await
            .is_ok_and(|i| i.waiting_writers.len() == 1)
    })
    .await;
    assert!(intent, "the waiting writer's intent is visible");
    // A new reader queues behind the writer; one that already reads may re-enter.
    let late = readers.rwlock("starve")?;
    assert!(
        tokio::spawn({
            let late = late.clone();
            async move { late.try_read().await }
        })
        .await??
        .is_none()
    );
    let late_reader = tokio::spawn(async move {
        let guard = late.read().await?;
        anyhow::Ok((Instant::now(), guard))
    });
    let again = tokio::time::timeout(Duration::from_secs(5), lock.read()).await??;
    assert_eq!(again.owner(), first.owner());
    again.unlock().await?;
    first.unlock().await?;
    let (written_at, write) = tokio::time::timeout(Duration::from_secs(5), writer).await???;
    assert!(
        !late_reader.is_finished(),
        "the late reader waits for the writer"
    );
    write.unlock().await?;
    let (read_at, read) = tokio::time::timeout(Duration::from_secs(5), late_reader).await???;
    assert!(written_at < read_at);
    assert!(lock.inspect().await?.waiting_writers.is_empty());
    read.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_that_stops_waiting_lets_the_readers_behind_it_in() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("withdrawn")?;
    let others = Client::connect(&server.url()).await?;
    let first = lock.read().await?;
    let writer = others.rwlock("withdrawn")?;
    let gave_up =
        tokio::spawn(async move { writer.write_timeout(Duration::from_millis(500)).await });
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.inspect()
                .await
                .is_ok_and(|i| i.waiting_writers.len() == 1)
        })
        .await
    );
    let late = others.rwlock("withdrawn")?;
    let late_reader = tokio::spawn(async move { late.read().await });
    assert!(
        tokio::time::timeout(Duration::from_secs(5), gave_up)
            .await???
            .is_none()
    );
    // Withdrawing the intent wakes the readers it held back, long before the readers'
    // 30 s leases would.
    let read = tokio::time::timeout(Duration::from_secs(2), late_reader).await???;
    let info = lock.inspect().await?;
    assert_eq!((info.readers.len(), info.waiting_writers.len()), (2, 0));
    read.unlock().await?;
    first.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_writers_intent_lapses_on_its_own() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("ghost")?;
    // The intent of a writer that died while waiting: nobody renews or withdraws it.
    let mut conn = raw(&server).await?;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
    let ghost = ferrisson_redis::OwnerId::random();
    let () = conn
        .hset(
            "{ghost}",
            format!("i:{ghost}"),
            secs * 1000 + micros / 1000 + 400,
        )
        .await?;
    assert_eq!(lock.inspect().await?.waiting_writers, vec![ghost]);
    assert!(
        lock.try_read().await?.is_none(),
        "a new reader queues behind the writer"
    );
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(5), lock.read()).await??;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "let in before the intent lapsed"
    );
    assert!(lock.inspect().await?.waiting_writers.is_empty());
    read.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_are_reentrant_in_one_task() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.rwlock("reenter")?;
    let r1 = lock.read().await?;
    let r2 = lock.read().await?;
    assert_eq!(r1.owner(), r2.owner());
    assert_eq!(lock.inspect().await?.readers[0].holds, 2);
    r1.unlock().await?;
    assert_eq!(lock.inspect().await?.readers[0].holds, 1);
    r2.unlock().await?;

    let w1 = lock.write().await?;
    let w2 = tokio::time::timeout(Duration::from_secs(5), lock.write()).await??;
    assert_eq!(w1.fencing_token(), w2.fencing_token());
    assert_eq!(lock.inspect().await?.writer.map(|w| w.holds), Some(2));
    let other = lock.clone();
    assert!(
        tokio::spawn(async move { other.try_write().await })
            .await??
            .is_none()
    );
    w2.unlock().await?;
    assert_eq!(lock.inspect().await?.mode, Some(RwLockMode::Write));
    let token = w1.fencing_token();
    w1.unlock().await?;
    let w3 = lock.write().await?;
    assert!(
        w3.fencing_token() > token,
        "a new writer gets a newer token"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_may_read_and_write_release_downgrades() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("downgrade")?;
    let other = Client::connect(&server.url()).await?.rwlock("downgrade")?;
    let write = lock.write().await?;
    let read = tokio::time::timeout(Duration::from_secs(5), lock.read()).await??;
    assert_eq!(read.owner(), write.owner());
    assert!(
        other.try_read().await?.is_none(),
        "the writer still excludes others"
    );

    write.unlock().await?;
    let info = lock.inspect().await?;
    assert_eq!(
        (info.mode, info.writer, info.readers.len()),
        (Some(RwLockMode::Read), None, 1)
    );
    assert!(read.is_held());
    // `other` runs in its own tasks: in this one it would re-enter its own read hold.
    let shared = {
        let other = other.clone();
        tokio::spawn(async move { other.try_read().await })
            .await??
            .expect("read mode admits readers")
    };
    let blocked = other.clone();
    assert!(
        tokio::spawn(async move { blocked.try_write().await })
            .await??
            .is_none()
    );
    // The downgraded reader cannot take the write lock back while it reads.
    assert!(matches!(
        lock.write().await,
        Err(Error::UpgradeRefused { .. })
    ));

    read.unlock().await?;
    shared.unlock().await?;
    assert!(other.try_write().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_read_guard_inside_a_write_keeps_the_write() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("nested")?;
    let other = Client::connect(&server.url()).await?.rwlock("nested")?;
    let write = lock.write().await?;
    let read = lock.read().await?;
    read.unlock().await?;
    let info = lock.inspect().await?;
    assert_eq!(
        (info.mode, info.readers.len()),
        (Some(RwLockMode::Write), 0)
    );
    assert!(other.try_read().await?.is_none());
    write.unlock().await?;
    assert!(other.try_read().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_asking_for_the_write_lock_is_refused_at_once() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let lock = client.rwlock("upgrade")?;
    let read = lock.read().await?;
    let refused = tokio::time::timeout(Duration::from_secs(5), lock.write()).await?;
    match refused {
        Err(Error::UpgradeRefused { name }) => assert_eq!(name, "upgrade"),
        other => panic!("expected UpgradeRefused, got {other:?}"),
    }
    assert!(matches!(
        lock.write_timeout(Duration::from_secs(60)).await,
        Err(Error::UpgradeRefused { .. })
    ));
    assert!(matches!(
        lock.try_write().await,
        Err(Error::UpgradeRefused { .. })
    ));
    assert!(
        Error::UpgradeRefused { name: "x".into() }
            .to_string()
            .contains("reader")
    );
    // The refusal took nothing: still one read hold, no write.
    let info = lock.inspect().await?;
    assert_eq!(
        (info.mode, info.readers[0].holds, info.writer),
        (Some(RwLockMode::Read), 1, None)
    );
    read.unlock().await?;
    let write = lock.write().await?;
    write.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_release_wakes_every_waiting_reader() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let second = Client::connect(&server.url()).await?;
    let write = client.rwlock("wake")?.write().await?;
    let readers = 12;
    let all_in = Arc::new(Barrier::new(readers + 1));
    let done = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for i in 0..readers {
        // Most readers share one client: one release message must wake all of them.
        let lock = if i % 4 == 0 { &second } else { &client }.rwlock("wake")?;
        let (all_in, done) = (Arc::clone(&all_in), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let guard = lock.read().await?;
            let notified = done.notified();
            all_in.wait().await;
            notified.await;
            guard.unlock().await?;
            anyhow::Ok(())
        }));
    }
    let waiting = eventually(Duration::from_secs(5), || async {
        client.stats().waiting_channels == 1 && second.stats().waiting_channels == 1
    })
    .await;
    assert!(waiting);
    write.unlock().await?;
    // The writer's lease is 30 s: a reader that missed the wake-up would sleep that long.
    tokio::time::timeout(Duration::from_secs(5), all_in.wait()).await?;
    let info = client.rwlock("wake")?.inspect().await?;
    assert_eq!(
        (info.mode, info.readers.len()),
        (Some(RwLockMode::Read), readers)
    );
    done.notify_waiters();
    for task in tasks {
        task.await??;
    }
    assert_eq!(client.rwlock("wake")?.inspect().await?.mode, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_both_sides_alongside_plain_locks() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let lease = Duration::from_millis(300);
    let client = client_with_lease(&server, lease).await?;
    let lock = client.rwlock("renewed")?;
    let other = Client::connect(&server.url()).await?.rwlock("renewed")?;
    let write = lock.write().await?;
    let read = lock.read().await?;
    // A plain lock in the same client: the watchdog batches both layouts together.
    let plain = client.lock("renewed-plain")?.lock().await?;
    let started = Instant::now();
    while started.elapsed() < lease * 4 {
        tokio::time::sleep(lease / 4).await;
        assert!(write.is_held() && read.is_held() && plain.is_held());
        assert!(
            other.try_read().await?.is_none(),
            "the writer's hold lapsed"
        );
    }
    let info = lock.inspect().await?;
    assert!(info.writer.is_some_and(|w| w.ttl > Duration::ZERO));
    assert_eq!(client.stats().renewing, 2);
    write.unlock().await?;
    read.unlock().await?;
    plain.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_reader_is_evicted_while_another_reader_renews() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("evict")?;
    let short = client
        .rwlock("evict")?
        .with_lease(Lease::Fixed(Duration::from_millis(300)))?;
    let other = Client::connect(&server.url()).await?.rwlock("evict")?;
    let short_read = {
        let short = short.clone();
        tokio::spawn(async move { short.read().await }).await??
    };
    let long_read = lock.read().await?;
    let writer = tokio::spawn(async move {
        let guard = other.write().await?;
        anyhow::Ok((Instant::now(), guard))
    });
    tokio::time::timeout(Duration::from_secs(5), short_read.lost()).await?;
    assert!(!short_read.is_held(), "a fixed lease is not renewed");
    let evicted = eventually(Duration::from_secs(5), || async {
        lock.inspect()
            .await
            .is_ok_and(|info| info.readers.len() == 1)
    })
    .await;
    assert!(
        evicted,
        "only the renewed reader counts: {:?}",
        lock.inspect().await?
    );
    assert!(!writer.is_finished());
    let released_at = Instant::now();
    long_read.unlock().await?;
    // The live reader's release wakes the writer; the lapsed reader no longer blocks it.
    let (granted_at, write) = tokio::time::timeout(Duration::from_secs(5), writer).await???;
    assert!(granted_at >= released_at);
    write.unlock().await?;
    assert!(matches!(
        short_read.unlock().await,
        Err(Error::LeaseExpired { .. } | Error::NotOwner { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_hash_is_deleted_under_a_reader() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = client_with_lease(&server, Duration::from_millis(300)).await?;
    let read = client.rwlock("gone")?.read().await?;
    let mut conn = raw(&server).await?;
    let () = conn.del("{gone}").await?;
    tokio::time::timeout(Duration::from_secs(5), read.lost()).await?;
    assert!(!read.is_held());
    assert_eq!(read.remaining(), Duration::ZERO);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_in_another_process_wakes_a_reader_here() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let mut child = ChildHolder::hold(&server, "xproc-w", "write", Duration::from_secs(30))?;
    let lock = client.rwlock("xproc-w")?;
    assert_eq!(lock.inspect().await?.mode, Some(RwLockMode::Write));
    assert!(lock.try_read().await?.is_none());
    let reader = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.read().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.stats().waiting_channels == 1
        })
        .await
    );
    let released_at = Instant::now();
    child.release()?;
    // The child's lease is 30 s: only its release message can wake the reader this soon.
    let read = tokio::time::timeout(Duration::from_secs(5), reader).await???;
    assert!(released_at.elapsed() < Duration::from_secs(5));
    assert_eq!(lock.inspect().await?.readers[0].owner, read.owner());
    read.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_in_another_process_blocks_a_writer_here_until_released() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let mut child = ChildHolder::hold(&server, "xproc-r", "read", Duration::from_secs(30))?;
    let lock = client.rwlock("xproc-r")?;
    let also_reading = lock
        .try_read()
        .await?
        .expect("readers share across processes");
    also_reading.unlock().await?;
    let writer = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.stats().waiting_channels == 1
        })
        .await
    );
    assert!(!writer.is_finished());
    child.release()?;
    let write = tokio::time::timeout(Duration::from_secs(5), writer).await???;
    assert_eq!(
        lock.inspect().await?.writer.map(|w| w.owner),
        Some(write.owner())
    );
    write.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_reader_process_stops_blocking_after_its_lease() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lease = Duration::from_secs(1);
    let mut child = ChildHolder::hold(&server, "xproc-kill", "read", lease)?;
    let lock = client.rwlock("xproc-kill")?;
    // A live reader here keeps the hash alive the whole time: only per-holder leases
    // can take the dead reader out.
    let live = lock.read().await?;
    let writer = {
        let lock = Client::connect(&server.url()).await?.rwlock("xproc-kill")?;
        tokio::spawn(async move {
            let guard = lock.write().await?;
            anyhow::Ok((Instant::now(), guard))
        })
    };
    child.kill()?;
    let killed_at = Instant::now();
    live.unlock().await?;
    let (granted_at, write) = tokio::time::timeout(Duration::from_secs(10), writer).await???;
    // The child's watchdog renewed at most a lease before the kill.
    let waited = granted_at - killed_at;
    assert!(
        waited <= lease + Duration::from_secs(2),
        "waited {waited:?}"
    );
    let info = lock.inspect().await?;
    assert_eq!(
        (info.readers.len(), info.writer.map(|w| w.owner)),
        (0, Some(write.owner()))
    );
    write.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_writer_process_stops_blocking_readers_after_its_lease() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lease = Duration::from_secs(1);
    let mut child = ChildHolder::hold(&server, "xproc-wkill", "write", lease)?;
    let lock = client.rwlock("xproc-wkill")?;
    let reader = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.read().await?;
            anyhow::Ok((Instant::now(), guard))
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.stats().waiting_channels == 1
        })
        .await
    );
    child.kill()?;
    let killed_at = Instant::now();
    // No release message ever comes: the reader wakes when the writer's lease runs out.
    let (granted_at, read) = tokio::time::timeout(Duration::from_secs(10), reader).await???;
    let waited = granted_at - killed_at;
    assert!(
        waited <= lease + Duration::from_secs(2),
        "waited {waited:?}"
    );
    let info = lock.inspect().await?;
    assert_eq!(info.mode, Some(RwLockMode::Read));
    assert_eq!((info.writer, info.readers[0].owner), (None, read.owner()));
    read.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_futures_leave_nothing_behind() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let others = [
        Client::connect(&server.url()).await?,
        Client::connect(&server.url()).await?,
    ];
    let mut conn = raw(&server).await?;
    let baseline_tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let holder = client.rwlock("cancel")?;
    let holding = tokio::spawn(async move {
        for i in 0..30 {
            if i % 2 == 0 {
                let guard = holder.write().await?;
                tokio::time::sleep(Duration::from_micros(rand_below(3000))).await;
                guard.unlock().await?;
            } else {
                let guard = holder.read().await?;
                tokio::time::sleep(Duration::from_micros(rand_below(3000))).await;
                guard.unlock().await?;
            }
            tokio::time::sleep(Duration::from_micros(rand_below(1000))).await;
        }
        anyhow::Ok(())
    });
    let mut tasks = Vec::new();
    for i in 0..400 {
        let lock = others[i % 2].rwlock("cancel")?;
        tasks.push(tokio::spawn(async move {
            let wait = Duration::from_micros(rand_below(30_000));
            if i % 3 == 0 {
                let _ = tokio::time::timeout(wait, lock.write()).await;
            } else {
                let _ = tokio::time::timeout(wait, lock.read()).await;
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    holding.await??;
    let clean = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        let others = others.clone();
        async move {
            let exists: bool = conn.exists("{cancel}").await.unwrap_or(true);
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|_| vec!["?".into()]);
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            !exists
                && channels.is_empty()
                && others
                    .iter()
                    .all(|c| c.stats().holds == 0 && c.stats().waiting_channels == 0)
                && tasks <= baseline_tasks
        }
    })
    .await;
    let info = client.rwlock("cancel")?.inspect().await?;
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(&mut conn)
        .await?;
    let stats: Vec<_> = others.iter().map(Client::stats).collect();
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(
        clean,
        "left behind: {info:?} {channels:?} {stats:?} tasks {tasks} > {baseline_tasks}"
    );
    let exists: bool = conn.exists("{cancel}").await?;
    assert!(!exists);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_drops_every_holder_and_wakes_a_writer() -> anyhow::Result<()> {
    let (server, client) = server_and_client().await?;
    let lock = client.rwlock("forced")?;
    let other = Client::connect(&server.url()).await?;
    let r1 = lock.read().await?;
    let r2 = {
        let lock = other.rwlock("forced")?;
        tokio::spawn(async move { lock.read().await }).await??
    };
    let writer = {
        let lock = other.rwlock("forced")?;
        tokio::spawn(async move { lock.write().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            other.stats().waiting_channels == 1
        })
        .await
    );
    assert!(lock.force_unlock().await?);
    // The readers' leases are 30 s: only the forced release's message wakes the writer.
    let write = tokio::time::timeout(Duration::from_secs(5), writer).await???;
    assert_eq!(
        lock.inspect().await?.writer.map(|w| w.owner),
        Some(write.owner())
    );
    assert!(matches!(r1.unlock().await, Err(Error::NotOwner { .. })));
    drop(r2);
    write.unlock().await?;
    assert!(!lock.force_unlock().await?, "nothing left to force");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_typed_errors() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    assert!(matches!(client.rwlock(""), Err(Error::InvalidArgument(_))));
    let long = "x".repeat(ferrisson_redis::MAX_NAME_LEN + 1);
    assert!(matches!(
        client.rwlock(&long),
        Err(Error::InvalidArgument(_))
    ));
    let lock = client.rwlock("bad")?;
    assert!(matches!(
        lock.clone().with_lease(Lease::Fixed(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(format!("{lock:?}").contains("bad"));
    let write = lock.write().await?;
    assert!(format!("{write:?}").contains("fencing_token"));
    write.unlock().await?;
    Ok(())
}

#[test]
fn futures_and_guards_are_send_and_sync() {
    fn is_send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RwLock>();
    send_sync::<ferrisson_redis::RwLockReadGuard>();
    send_sync::<ferrisson_redis::RwLockWriteGuard>();
    send_sync::<ferrisson_redis::RwLockInfo>();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = RedisServer::start().expect("redis");
        let client = Client::connect(&server.url()).await.expect("connect");
        let lock = client.rwlock("bounds").expect("name");
        is_send(&lock.read());
        is_send(&lock.write());
        is_send(&lock.try_read());
        is_send(&lock.try_write());
        is_send(&lock.read_timeout(Duration::from_secs(1)));
        is_send(&lock.write_timeout(Duration::from_secs(1)));
        is_send(&lock.inspect());
        let read = lock.read().await.expect("read");
        is_send(&read.lost());
        is_send(&read.unlock());
        let write = client
            .rwlock("bounds-w")
            .expect("name")
            .write()
            .await
            .expect("write");
        is_send(&write.lost());
        is_send(&write.unlock());
    });
}

fn rand_below(max: u64) -> u64 {
    rand::random::<u64>() % max
}
