//! The ZooKeeper semaphore: at most `permits` holders, a released permit lets a waiter
//! in, nothing left behind by a wait that runs out, Curator's node layout.

use std::time::Duration;

use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::Permit;
use ferrisson_zookeeper::{Client, DistributedSemaphore, Error};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_the_permits_and_a_release_lets_one_in() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::connect(&zk.url()).await?);
    }
    let pools: Vec<_> = clients
        .iter()
        .map(|c| c.semaphore("pool", 2))
        .collect::<Result<_, _>>()?;
    let first = pools[0].acquire().await?;
    let second = pools[1].acquire().await?;
    assert!(
        pools[2].try_acquire().await?.is_none(),
        "a third permit of two"
    );
    assert!(
        pools[2]
            .acquire_timeout(Duration::from_millis(200))
            .await?
            .is_none()
    );
    let raw = clients[0].zookeeper();
    let leases = raw
        .list_children("/ferrisson/semaphores/pool/leases")
        .await?;
    assert_eq!(
        leases.len(),
        2,
        "a wait that ran out left its lease: {leases:?}"
    );
    assert!(
        leases
            .iter()
            .all(|l| l.starts_with("_c_") && l.contains("-lease-")),
        "{leases:?}"
    );
    let waiter = tokio::spawn({
        let pool = pools[2].clone();
        async move { pool.acquire().await }
    });
    first.release().await?;
    let third = tokio::time::timeout(Duration::from_secs(20), waiter).await???;
    assert!(
        pools[0].try_acquire().await?.is_none(),
        "a third permit of two"
    );
    second.release().await?;
    third.release().await?;
    assert!(matches!(
        clients[0].semaphore("pool", 0),
        Err(Error::InvalidArgument(_))
    ));
    Ok(())
}
