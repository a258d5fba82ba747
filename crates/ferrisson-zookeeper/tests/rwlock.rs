//! The ZooKeeper read-write lock: readers share, a writer excludes and holds back later
//! readers, downgrade works, upgrade is refused, Curator's node names.

use std::time::Duration;

use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::zookeeper_client::{Acls, CreateMode};
use ferrisson_zookeeper::{Client, DistributedRwLock, Error, Guard};

async fn clients(zk: &ZooKeeper, n: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(Client::connect(&zk.url()).await?);
    }
    Ok(clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_waiting_writer_holds_back_later_readers() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let c = clients(&zk, 4).await?;
    let r1 = c[0].rwlock("prices")?.read().await?;
    let r2 = c[1].rwlock("prices")?.read().await?;
    assert!(c[2].rwlock("prices")?.try_write().await?.is_none());
    let writer = tokio::spawn({
        let lock = c[2].rwlock("prices")?;
        async move { lock.write().await }
    });
    let raw = c[3].zookeeper();
    let path = c[3].rwlock("prices")?.path().to_owned();
    let nodes = loop {
        let (children, _, watcher) = raw.get_and_watch_children(&path).await?;
        if children.len() == 3 {
            break children;
        }
        tokio::time::timeout(Duration::from_secs(20), watcher.changed()).await?;
    };
    assert_eq!(
        nodes.iter().filter(|n| n.contains("-__READ__")).count(),
        2,
        "{nodes:?}"
    );
    assert_eq!(
        nodes.iter().filter(|n| n.contains("-__WRIT__")).count(),
        1,
        "{nodes:?}"
    );
    assert!(
        c[3].rwlock("prices")?.try_read().await?.is_none(),
        "a reader passed a waiting writer"
    );
    assert!(!writer.is_finished());
    r1.unlock().await?;
    assert!(!writer.is_finished(), "written while a reader held");
    r2.unlock().await?;
    let write = tokio::time::timeout(Duration::from_secs(20), writer).await???;
    assert!(write.is_held());
    assert!(c[0].rwlock("prices")?.try_read().await?.is_none());
    write.unlock().await?;
    assert!(c[0].rwlock("prices")?.try_read().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades_and_a_reader_cannot_upgrade() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let c = clients(&zk, 2).await?;
    let lock = c[0].rwlock("downgrade")?;
    let write = lock.write().await?;
    let again = lock.write().await?; // re-entry
    let read = lock.read().await?; // the writer reads
    again.unlock().await?;
    write.unlock().await?;
    assert!(read.is_held());
    let other = c[1].rwlock("downgrade")?;
    assert!(other.try_write().await?.is_none(), "written while read");
    let shared = other.try_read().await?;
    assert!(shared.is_some(), "readers share after the downgrade");
    // Holding only the read side, the write side is refused at once.
    assert!(matches!(
        lock.write().await,
        Err(Error::UpgradeRefused { .. })
    ));
    read.unlock().await?;
    drop(shared);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_writer_node_holds_back_our_readers() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let c = clients(&zk, 1).await?;
    let lock = c[0].rwlock("/curator/rw")?;
    let java = ferrisson_zookeeper::zookeeper_client::Client::connect(&zk.connect_string()).await?;
    java.mkdir(
        "/curator/rw",
        &CreateMode::Container.with_acls(Acls::anyone_all()),
    )
    .await?;
    let (_, sequence) = java
        .create(
            "/curator/rw/_c_5f0c2a8e-1d3b-4c6e-8a9f-0b1c2d3e4f50-__WRIT__",
            b"",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await?;
    assert!(
        lock.try_read().await?.is_none(),
        "read while Curator writes"
    );
    java.delete(
        &format!("/curator/rw/_c_5f0c2a8e-1d3b-4c6e-8a9f-0b1c2d3e4f50-__WRIT__{sequence}"),
        None,
    )
    .await?;
    assert!(lock.read_timeout(Duration::from_secs(10)).await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_in_two_tasks_of_one_client_each_release_their_own_node() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let c = clients(&zk, 2).await?;
    let lock = c[0].rwlock("two-readers")?;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let other_task = tokio::spawn({
        let lock = lock.clone();
        async move {
            let read = lock.read().await?;
            let _ = ready_tx.send(());
            let _ = go_rx.await;
            read.unlock().await
        }
    });
    let read = lock.read().await?;
    ready_rx.await?;
    assert_eq!(c[1].zookeeper().list_children(lock.path()).await?.len(), 2);
    read.unlock().await?;
    let _ = go_tx.send(());
    other_task.await??;
    assert!(
        c[1].zookeeper()
            .list_children(lock.path())
            .await?
            .is_empty(),
        "a reader's node was left behind"
    );
    assert!(c[1].rwlock("two-readers")?.try_write().await?.is_some());
    Ok(())
}
