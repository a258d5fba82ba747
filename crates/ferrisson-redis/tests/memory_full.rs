//! A lock server whose memory is full under `maxmemory-policy noeviction`, against real
//! redis-server processes: what a holder has stays renewable and releasable (the scripts
//! flagged `allow-oom`), and every new acquire fails at once with Redis's `OOM` error.

use std::time::Duration;

use anyhow::{Context, bail};
use ferrisson_redis::{Client, Error, Lease, RedisStoreError};
use ferrisson_testkit::{FullMemory, RedisServer};
use sync_support::{HANG, NO_RECHECK, raw, until_calls, within};

mod common;
mod sync_support;

/// Short, so that a lock that is not renewed is lost within the test.
const LEASE: Duration = Duration::from_millis(300);
fn noeviction_server() -> anyhow::Result<RedisServer> {
    Ok(RedisServer::start_with_args(&[
        "--maxmemory-policy",
        "noeviction",
    ])?)
}

/// `result` must be Redis's refusal for want of memory.
fn expect_oom<T>(what: &str, result: Result<T, Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => bail!("{what} succeeded while memory was full"),
        Err(e)
            if matches!(
                e.store_error::<RedisStoreError>(),
                Some(RedisStoreError::Command(e)) if e.code() == Some("OOM")
            ) =>
        {
            Ok(())
        }
        Err(e) => bail!("{what}: expected an OOM refusal, got {e:?}"),
    }
}

/// Whether `key` exists, asked from outside the library.
fn exists(server: &RedisServer, key: &str) -> anyhow::Result<bool> {
    match server.command(&["EXISTS", key])?.as_str() {
        ":1" => Ok(true),
        ":0" => Ok(false),
        other => bail!("EXISTS {key} answered {other:?}"),
    }
}

/// How many holders a read-write lock hash has (one `d:<owner>` deadline each), read
/// from outside the library.
async fn deadlines(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> anyhow::Result<usize> {
    let fields: Vec<String> = redis::cmd("HKEYS").arg(key).query_async(conn).await?;
    Ok(fields.iter().filter(|f| f.starts_with("d:")).count())
}

#[tokio::test]
async fn reentered_lock_releases_both_holds() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let client = common::client_with_lease(&server, LEASE).await?;
    let lock = client.lock("reentered")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    assert_eq!(lock.hold_count().await?, 2);
    let memory = FullMemory::fill(&server)?;

    // A third hold is an acquire: refused, and the two holds are left as they were.
    expect_oom("re-entering", lock.try_lock().await)?;
    assert_eq!(lock.hold_count().await?, 2);
    assert!(outer.is_held() && inner.is_held());

    // The inner release rewrites the hold count (HSET), which a plain script may not do
    // with memory full; before the fix the outer release then failed too.
    inner.unlock().await?;
    assert_eq!(lock.hold_count().await?, 1);
    assert!(outer.is_held(), "the outer hold survives the inner release");
    outer.unlock().await?;
    assert!(!lock.is_locked().await?);
    assert!(!exists(&server, "{reentered}")?);
    Ok(memory.free()?)
}

#[tokio::test]
async fn rwlock_readers_and_writer_keep_renewing_and_release() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let a = common::client_with_lease(&server, LEASE).await?;
    let b = common::client_with_lease(&server, LEASE).await?;
    let read_a = a.rwlock("shared")?.read().await?;
    let read_b = b.rwlock("shared")?.read().await?;
    let write = a.rwlock("exclusive")?.write().await?;
    let memory = FullMemory::fill(&server)?;

    // Each renewal rewrites the holder's deadline in the hash (HSET). Without renewals
    // every hold would be lost within the first lease; watch for four.
    let lost = tokio::time::timeout(LEASE * 4, async {
        tokio::select! {
            () = read_a.lost() => "A's read",
            () = read_b.lost() => "B's read",
            () = write.lost() => "the write",
        }
    })
    .await;
    if let Ok(which) = lost {
        bail!("{which} hold was lost while memory was full");
    }
    assert!(read_a.is_held() && read_b.is_held() && write.is_held());
    let mut conn = raw(&server).await?;
    assert_eq!(deadlines(&mut conn, "{shared}").await?, 2);

    // A reader leaving while another stays remembers its release id (HSET); the last
    // one and the writer delete the hash.
    read_a.unlock().await?;
    assert_eq!(deadlines(&mut conn, "{shared}").await?, 1);
    read_b.unlock().await?;
    write.unlock().await?;
    assert!(!exists(&server, "{shared}")?);
    assert!(!exists(&server, "{exclusive}")?);
    Ok(memory.free()?)
}

#[tokio::test]
async fn fair_lock_releases_and_a_queued_waiter_is_refused() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let a = common::client_with_lease(&server, LEASE).await?;
    let b = common::client_with_lease(&server, LEASE).await?;
    let lock = a.fair_lock("fair")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    // The waiter refreshes its queue entry every third of this keep-alive, with the
    // acquire script.
    let b_lock = b
        .fair_lock("fair")?
        .with_waiter_keepalive(Duration::from_millis(300))?;
    let waiter = tokio::spawn(async move { b_lock.lock().await.map(drop) });
    let queued = common::eventually(HANG, || async {
        server.command(&["ZCARD", "{fair}:queue"]).ok().as_deref() == Some(":1")
    })
    .await;
    assert!(queued, "the waiter never queued");
    let memory = FullMemory::fill(&server)?;

    // A waiter is an acquire in progress: its next refresh (ZADD of its deadline) is
    // refused, and its wait ends with the error instead of hanging on.
    let outcome = tokio::time::timeout(HANG, waiter)
        .await
        .context("the waiter hung while memory was full")??;
    expect_oom("a queued fair waiter", outcome)?;
    let left = common::eventually(HANG, || async {
        server.command(&["EXISTS", "{fair}:queue"]).ok().as_deref() == Some(":0")
    })
    .await;
    assert!(left, "the refused waiter's queue entry stayed");

    inner.unlock().await?;
    assert!(outer.is_held());
    assert!(lock.is_locked().await?);
    outer.unlock().await?;
    assert!(!lock.is_locked().await?);
    Ok(memory.free()?)
}

#[tokio::test]
async fn semaphore_permits_go_back() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client.semaphore("permits")?;
    assert!(semaphore.try_set_permits(3).await?);
    let one = semaphore.acquire().await?;
    let two = semaphore.acquire_many(2).await?;
    assert_eq!(semaphore.available_permits().await?, 0);
    let memory = FullMemory::fill(&server)?;

    one.release().await?;
    expect_oom("taking a permit", semaphore.try_acquire().await)?;
    two.release().await?;
    assert_eq!(semaphore.available_permits().await?, 3);
    Ok(memory.free()?)
}

#[tokio::test]
async fn expirable_permits_update_their_lease_and_go_back() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client
        .expirable_semaphore("leases")?
        .with_lease(Lease::Fixed(Duration::from_secs(10)))?;
    assert!(semaphore.try_set_permits(3).await?);
    let first = semaphore.acquire().await?;
    let second = semaphore.acquire().await?;
    let lease = Duration::from_millis(300);
    let renewing = Client::builder(&server.url())
        .watchdog_lease(lease)
        .connect()
        .await?;
    let watched = renewing.expirable_semaphore("leases")?.acquire().await?;
    let memory = FullMemory::fill(&server)?;

    // The watchdog's ZADD XX renews a permit with memory full.
    tokio::time::sleep(lease * 3).await;
    assert!(watched.is_held());
    watched.release().await?;

    // ZADD XX of the permit's new expiry.
    assert!(first.update_lease(Duration::from_secs(600)).await?);
    assert!(first.remaining() > Duration::from_secs(60));
    let held = semaphore.inspect().await?.held;
    let on_server = held
        .iter()
        .find(|p| p.id == first.id())
        .context("the permit is not held")?;
    assert!(on_server.ttl > Duration::from_secs(60), "{held:?}");

    // The release's INCR of the free count.
    first.release().await?;
    expect_oom("taking an expirable permit", semaphore.try_acquire().await)?;
    semaphore.release(second.forget()).await?;
    assert_eq!(semaphore.available_permits().await?, 3);
    Ok(memory.free()?)
}

#[tokio::test]
async fn latch_counts_down_and_opens() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let client = Client::connect(&server.url()).await?;
    let waiter_client = Client::connect(&server.url()).await?;
    let latch = client.count_down_latch("workers")?;
    assert!(latch.try_set_count(2).await?);
    let waiting = waiter_client
        .count_down_latch("workers")?
        .with_recheck_interval(NO_RECHECK)?;
    let mut conn = raw(&server).await?;
    let waiter = tokio::spawn(async move { waiting.wait().await });
    until_calls(&mut conn, "ssubscribe", 1).await?;
    let memory = FullMemory::fill(&server)?;

    // DECR of the count; the last one deletes it and wakes the waiter.
    assert_eq!(latch.count_down().await?, 1);
    assert_eq!(latch.count_down().await?, 0);
    within(async { anyhow::Ok(waiter.await??) }).await?;
    assert!(!exists(&server, "{workers}")?);
    Ok(memory.free()?)
}

#[tokio::test]
async fn new_acquires_fail_with_oom_until_memory_is_freed() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let client = Client::connect(&server.url()).await?;
    let memory = FullMemory::fill(&server)?;
    let keys_when_full = server.command(&["DBSIZE"])?;
    // Connecting loads the scripts: SCRIPT LOAD is not refused with memory full.
    let late = Client::connect(&server.url()).await?;

    for client in [&client, &late] {
        let lock = client.lock("fresh")?;
        expect_oom("Lock::try_lock", lock.try_lock().await)?;
        // A waiting acquire on a free lock fails too, rather than waiting for memory.
        let waited = tokio::time::timeout(HANG, lock.lock())
            .await
            .context("Lock::lock hung")?;
        expect_oom("Lock::lock", waited)?;
        let rwlock = client.rwlock("fresh-rw")?;
        expect_oom("RwLock::try_read", rwlock.try_read().await)?;
        expect_oom("RwLock::try_write", rwlock.try_write().await)?;
        expect_oom(
            "FairLock::try_lock",
            client.fair_lock("fresh-fair")?.try_lock().await,
        )?;
        expect_oom(
            "SimpleLock::try_lock",
            client.simple_lock("fresh-simple")?.try_lock().await,
        )?;
    }
    assert_eq!(
        server.command(&["DBSIZE"])?,
        keys_when_full,
        "a refused acquire left keys"
    );

    memory.free()?;
    let guard = client
        .lock("fresh")?
        .try_lock()
        .await?
        .context("the lock is free and memory is too")?;
    guard.unlock().await?;
    // Only the lock's fencing counter, which never expires, is left.
    assert_eq!(server.command(&["DBSIZE"])?, ":1");
    Ok(())
}

/// `inspect()` reads with a `no-writes` script: a `MULTI` of the same reads is refused
/// while memory is full (`EXECABORT`), which made every `inspect()` fail.
#[tokio::test]
async fn inspect_reads_every_lock_while_memory_is_full() -> anyhow::Result<()> {
    let server = noeviction_server()?;
    let client = common::client_with_lease(&server, LEASE).await?;
    let lock = client.lock("seen")?;
    let held = lock.lock().await?;
    let fair = client.fair_lock("seen-fair")?;
    let fair_held = fair.lock().await?;
    let rwlock = client.rwlock("seen-rw")?;
    let read = rwlock.read().await?;
    let redlock = ferrisson_redis::Redlock::new(std::slice::from_ref(&client), "seen-red")?;
    let red_held = redlock.lock().await?;
    let memory = FullMemory::fill(&server)?;

    let info = lock.inspect().await?;
    assert_eq!(info.holder, Some(held.owner()));
    assert_eq!(info.fencing_token, Some(held.fencing_token()));
    assert!(info.ttl.is_some());
    assert_eq!(fair.inspect().await?.holder, Some(fair_held.owner()));
    let rw = rwlock.inspect().await?;
    assert_eq!(rw.readers.len(), 1, "{rw:?}");
    let state = redlock.inspect().await?;
    assert_eq!(state.holder, Some(red_held.owner()));

    held.unlock().await?;
    fair_held.unlock().await?;
    read.unlock().await?;
    red_held.unlock().await?;
    Ok(memory.free()?)
}
