//! The ZooKeeper election: one leader at a time, a growing token per term, `lost()` when
//! the term ends behind the leader's back, Curator's `LeaderLatch` node names.

use std::time::Duration;

use ferrisson_core::capabilities::Reentry;
use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::{Client, DistributedElection, Fenced, Guard};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_per_term_and_the_next_takes_over() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let a = Client::connect(&zk.url()).await?.election("billing")?;
    let b = Client::connect(&zk.url()).await?.election("billing")?;
    assert_eq!(a.capabilities().reentry, Reentry::None);
    let first = a.campaign().await?;
    assert!(
        a.try_campaign().await?.is_none(),
        "a second campaign of the leader's task led"
    );
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    let raw = zookeeper_client::Client::connect(&zk.connect_string()).await?;
    let nodes = loop {
        let (children, _, watcher) = raw.get_and_watch_children(a.path()).await?;
        if children.len() == 2 {
            break children;
        }
        tokio::time::timeout(Duration::from_secs(20), watcher.changed()).await?;
    };
    assert!(
        nodes
            .iter()
            .all(|n| n.starts_with("_c_") && n.contains("-latch-")),
        "{nodes:?}"
    );
    assert!(!second.is_finished(), "two leaders at once");
    let token = first.fencing_token();
    first.resign().await?;
    let second = tokio::time::timeout(Duration::from_secs(20), second).await???;
    assert!(second.fencing_token() > token);
    // An operator deleting the leader's node ends the term: lost() fires.
    for child in raw.list_children(b.path()).await? {
        raw.delete(&format!("{}/{child}", b.path()), None).await?;
    }
    tokio::time::timeout(Duration::from_secs(5), second.lost()).await?;
    assert!(!second.is_held());
    Ok(())
}
