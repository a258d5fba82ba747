//! The etcd read-write lock: readers share, a writer excludes everyone, a writer waits
//! for the readers before it and readers after a waiting writer wait for it; an upgrade
//! is refused; the write side's token grows.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use ferrisson_etcd::{Client, DistributedRwLock, Error, Fenced, Guard};
use ferrisson_testkit::EtcdCluster;

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

async fn keys(client: &Client, prefix: &str) -> anyhow::Result<i64> {
    let got = client
        .etcd()
        .kv_client()
        .get(
            prefix,
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await?;
    Ok(got.count())
}

async fn until_keys(client: &Client, prefix: &str, count: i64) -> anyhow::Result<()> {
    tokio::time::timeout(SOON, async {
        while keys(client, prefix).await? != count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    })
    .await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_is_served_in_order() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let a = Client::connect(&member.url()).await?;
    let b = Client::connect(&member.url()).await?;
    let lock_a = a.rwlock("prices")?;
    let lock_b = b.rwlock("prices")?;

    let read_a = lock_a.read().await?;
    let read_b = lock_b.try_read().await?.expect("readers share");
    assert!(matches!(
        lock_a.try_write().await,
        Err(Error::UpgradeRefused { .. })
    ));
    assert!(
        lock_b.try_write().await.is_err(),
        "a reader's task took the write side"
    );
    let writer = tokio::spawn({
        let lock_b = lock_b.clone();
        async move { lock_b.write().await }
    });
    until_keys(&a, "prices/write/", 1).await?;
    // A reader after the waiting writer waits for it.
    assert!(
        lock_a.try_read().await?.is_none(),
        "a reader went ahead of a waiting writer"
    );
    let late_reader = tokio::spawn({
        let lock_a = lock_a.clone();
        async move { lock_a.read().await }
    });
    until_keys(&a, "prices/read/", 3).await?;
    read_a.unlock().await?;
    assert!(
        !writer.is_finished(),
        "the writer went ahead of a reader before it"
    );
    read_b.unlock().await?;
    let write = tokio::time::timeout(SOON, writer).await???;
    assert!(write.is_held());
    assert!(
        !late_reader.is_finished(),
        "a reader went ahead of the writer before it"
    );
    let token = write.fencing_token();
    write.unlock().await?;
    let late = tokio::time::timeout(SOON, late_reader).await???;
    late.unlock().await?;
    let again = lock_a.write().await?;
    assert!(again.fencing_token() > token);
    again.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_exclude_readers_and_each_other() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    // Positive: readers inside; -1: a writer inside.
    let inside = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let client = Client::connect(&member.url()).await?;
        let lock = client.rwlock("busy")?;
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                if i % 2 == 0 {
                    let guard = lock.write().await?;
                    assert_eq!(
                        inside.swap(-1, Ordering::SeqCst),
                        0,
                        "a writer beside others"
                    );
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.store(0, Ordering::SeqCst);
                    guard.unlock().await?;
                } else {
                    let guard = lock.read().await?;
                    assert!(
                        inside.fetch_add(1, Ordering::SeqCst) >= 0,
                        "a reader beside a writer"
                    );
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
