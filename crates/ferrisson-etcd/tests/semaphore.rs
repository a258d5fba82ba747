//! The etcd semaphore: at most N holders, served in order, a waiter admitted by a
//! release, nothing left by a cancelled wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_etcd::{Client, DistributedSemaphore, Error, Permit};
use ferrisson_testkit::EtcdCluster;

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_permits_and_a_release_admits_the_next() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let a = Client::connect(&member.url()).await?;
    let b = Client::connect(&member.url()).await?;
    assert!(matches!(
        a.semaphore("pool", 0),
        Err(Error::InvalidArgument(_))
    ));
    let pool_a = a.semaphore("pool", 3)?;
    let pool_b = b.semaphore("pool", 3)?;
    let one = pool_a.try_acquire().await?.expect("1 of 3");
    let two = pool_b.try_acquire().await?.expect("2 of 3");
    let three = tokio::spawn({
        let pool_a = pool_a.clone();
        async move { pool_a.try_acquire().await }
    })
    .await??
    .expect("3 of 3");
    assert!(pool_b.try_acquire().await?.is_none(), "a 4th permit of 3");
    let waiter = tokio::spawn({
        let pool_b = pool_b.clone();
        async move { pool_b.acquire().await }
    });
    let cancelled = tokio::spawn({
        let pool_a = pool_a.clone();
        async move { pool_a.acquire().await.map(drop) }
    });
    // Both waiters are queued (5 keys), then the later one gives up.
    tokio::time::timeout(SOON, async {
        loop {
            let keys = a
                .etcd()
                .kv_client()
                .get(
                    "pool/",
                    Some(
                        etcd_client::GetOptions::new()
                            .with_prefix()
                            .with_count_only(),
                    ),
                )
                .await?;
            if keys.count() == 5 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await??;
    cancelled.abort();
    two.release().await?;
    let fourth = tokio::time::timeout(SOON, waiter).await???;
    assert!(fourth.is_held());
    assert!(
        pool_a.try_acquire().await?.is_none(),
        "the cancelled waiter's key counted as released"
    );
    for permit in [one, three, fourth] {
        permit.release().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_never_exceed_the_permits() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = Client::connect(&member.url()).await?;
        let pool = client.semaphore("busy", 2)?;
        for _ in 0..2 {
            let (pool, inside, most) = (pool.clone(), Arc::clone(&inside), Arc::clone(&most));
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let permit = pool.acquire().await?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await?;
                }
                anyhow::Ok(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} permits of 2 at once",
        most.load(Ordering::SeqCst)
    );
    Ok(())
}

/// An acquire that meets a transient failure (its only member down when it starts,
/// restarted while it waits for an answer) rides it out within its wait, as the lock's
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_rides_out_its_member_restarting() -> anyhow::Result<()> {
    let mut member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::builder(&member.url())
        .watchdog_lease(SOON)
        .connect()
        .await?;
    let pool = client.semaphore("ridden", 2)?;
    pool.acquire().await?.release().await?;
    tokio::task::block_in_place(|| member.kill(0))?;
    let acquire = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire_timeout(SOON).await }
    });
    let member = tokio::task::spawn_blocking(move || member.restart(0).map(|()| member)).await??;
    let permit = acquire
        .await??
        .ok_or_else(|| anyhow::anyhow!("no permit within its wait"))?;
    assert!(permit.is_held());
    permit.release().await?;
    drop(member);
    Ok(())
}
