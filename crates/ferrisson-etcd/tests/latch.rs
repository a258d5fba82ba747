//! The etcd latch: counted down across clients, never below zero, waiters let through at
//! zero and not before.

use std::time::Duration;

use ferrisson_etcd::{Client, DistributedLatch};
use ferrisson_testkit::EtcdCluster;

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_pass_once_every_count_down_is_in() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let a = Client::connect(&member.url()).await?;
    let b = Client::connect(&member.url()).await?;
    let ready_a = a.count_down_latch("workers-ready", 3)?;
    let ready_b = b.count_down_latch("workers-ready", 3)?;
    assert_eq!(ready_b.count().await?, 3);
    assert_eq!(
        ready_a.wait_timeout(Duration::from_millis(100)).await?,
        None
    );
    let waiter = tokio::spawn({
        let ready_b = ready_b.clone();
        async move { ready_b.wait().await }
    });
    // Count-downs from both clients at once: none is lost.
    let (x, y) = tokio::join!(ready_a.count_down(), ready_b.count_down());
    let mut left = [x?, y?];
    left.sort_unstable();
    assert_eq!(left, [1, 2]);
    assert!(!waiter.is_finished(), "a waiter passed before zero");
    assert_eq!(ready_a.count_down().await?, 0);
    tokio::time::timeout(SOON, waiter).await???;
    assert_eq!(ready_b.count_down().await?, 0, "counted below zero");
    assert_eq!(ready_a.wait_timeout(Duration::ZERO).await?, Some(()));
    Ok(())
}
