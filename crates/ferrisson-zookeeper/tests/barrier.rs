//! The double barrier against a real server: nobody gets in before all are there,
//! nobody gets out before all have left, Curator's node layout, timeouts.

use std::time::Duration;

use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::Client;
use ferrisson_zookeeper::zookeeper_client::{self, Acls, CreateMode};

async fn standalone() -> anyhow::Result<(ZooKeeper, Client)> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let client = Client::connect(&zk.url()).await?;
    Ok((zk, client))
}

/// The children of `path`, sorted (none when it does not exist).
async fn children(client: &Client, path: &str) -> anyhow::Result<Vec<String>> {
    match client.zookeeper().list_children(path).await {
        Ok(mut children) => {
            children.sort();
            Ok(children)
        }
        Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Waits (by child watches) until the children of `path` satisfy `done`; returns them.
async fn until_children(
    client: &Client,
    path: &str,
    done: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let zk = client.zookeeper();
    loop {
        let watcher = match zk.get_and_watch_children(path).await {
            Ok((children, _, watcher)) => {
                if done(&children) {
                    return Ok(children);
                }
                watcher
            }
            // Not created yet: wait for it.
            Err(zookeeper_client::Error::NoNode) => match zk.check_and_watch_stat(path).await? {
                (Some(_), _) => continue,
                (None, watcher) => watcher,
            },
            Err(e) => return Err(e.into()),
        };
        tokio::time::timeout(Duration::from_secs(20), watcher.changed()).await?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enter_waits_for_every_member_and_leave_for_every_one_to_leave() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let barrier = client.double_barrier("batch", 3)?;
    // Two members, each on a session of its own, enter and wait for the third.
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let member = Client::connect(&zk.url())
            .await?
            .double_barrier("batch", 3)?;
        waiting.push(tokio::spawn(async move { member.enter().await }));
    }
    // Both are in (their nodes exist) and still waiting: no `ready` node yet.
    let path = barrier.path().to_owned();
    let nodes = until_children(&client, &path, |nodes| nodes.len() >= 2).await?;
    assert!(
        !nodes.contains(&"ready".to_owned()),
        "ready with two of three"
    );
    assert!(waiting.iter().all(|w| !w.is_finished()));
    // The third makes the count: every member gets in.
    let third = barrier.enter().await?;
    let mut members = vec![third];
    for w in waiting {
        members.push(w.await??);
    }
    let nodes = children(&client, &path).await?;
    assert_eq!(nodes.len(), 4, "three members and ready: {nodes:?}");
    assert!(nodes.contains(&"ready".to_owned()));
    // Leaving: the first two to leave wait for the third.
    let third = members.remove(0);
    let mut leaving = Vec::new();
    for member in members {
        leaving.push(tokio::spawn(member.leave()));
    }
    // The waiting leavers keep at most the lowest member's node (Curator's order); they
    // cannot be done while the third is still in.
    until_children(&client, &path, |nodes| {
        nodes.iter().filter(|n| *n != "ready").count() <= 2
    })
    .await?;
    assert!(
        leaving.iter().all(|l| !l.is_finished()),
        "left before all did"
    );
    third.leave().await?;
    for l in leaving {
        l.await??;
    }
    assert!(
        children(&client, &path).await?.is_empty(),
        "everything cleaned up"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_that_does_not_fill_in_time_lets_nobody_in() -> anyhow::Result<()> {
    let (_zk, client) = standalone().await?;
    let barrier = client.double_barrier("/jobs/barrier", 2)?;
    assert!(
        barrier
            .enter_timeout(Duration::from_millis(200))
            .await?
            .is_none()
    );
    // The member that gave up took its node with it.
    assert!(children(&client, "/jobs/barrier").await?.is_empty());
    assert!(client.double_barrier("b", 0).is_err());
    Ok(())
}

/// A member that a Curator `DistributedDoubleBarrier` created (a UUID-named ephemeral
/// node under the same path) counts like one of ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_member_counts() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let java = zookeeper_client::Client::connect(&zk.connect_string()).await?;
    java.mkdir(
        "/curator/barrier",
        &CreateMode::Container.with_acls(Acls::anyone_all()),
    )
    .await?;
    java.create(
        "/curator/barrier/5d0c8f0e-3a7b-4c1e-9f62-0a4b2c7d9e11",
        &[],
        &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
    )
    .await?;
    let member = client
        .double_barrier("/curator/barrier", 2)?
        .enter_timeout(Duration::from_secs(20))
        .await?
        .expect("the Curator member makes two");
    // Curator's members wait for the `ready` node.
    assert!(java.check_stat("/curator/barrier/ready").await?.is_some());
    java.delete(
        "/curator/barrier/5d0c8f0e-3a7b-4c1e-9f62-0a4b2c7d9e11",
        None,
    )
    .await?;
    member.leave().await?;
    assert!(children(&client, "/curator/barrier").await?.is_empty());
    Ok(())
}
