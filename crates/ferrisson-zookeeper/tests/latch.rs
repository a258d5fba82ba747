//! The ZooKeeper count-down latch: counted down from several clients at once without a
//! lost decrement, waiters let through at zero and not before.

use std::time::Duration;

use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::{Client, DistributedLatch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_count_downs_open_the_latch_once() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let waiter_client = Client::connect(&zk.url()).await?;
    let latch = waiter_client.count_down_latch("ready", 8)?;
    assert_eq!(latch.count().await?, 8);
    assert!(
        latch
            .wait_timeout(Duration::from_millis(100))
            .await?
            .is_none()
    );
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    let mut workers = Vec::new();
    for _ in 0..4 {
        let client = Client::connect(&zk.url()).await?;
        // A later handle with another count does not reset the existing latch.
        let latch = client.count_down_latch("ready", 100)?;
        workers.push(tokio::spawn(async move {
            let mut left = Vec::new();
            for _ in 0..2 {
                left.push(latch.count_down().await?);
            }
            Ok::<_, ferrisson_zookeeper::Error>(left)
        }));
    }
    let mut seen = Vec::new();
    for worker in workers {
        seen.extend(worker.await??);
    }
    seen.sort_unstable();
    // Every count-down took one step: no two saw the same count.
    assert_eq!(seen, (0..8).collect::<Vec<u64>>());
    tokio::time::timeout(Duration::from_secs(20), waiter).await???;
    assert_eq!(latch.count().await?, 0);
    assert_eq!(
        latch.count_down().await?,
        0,
        "a count-down at zero stays at zero"
    );
    Ok(())
}
