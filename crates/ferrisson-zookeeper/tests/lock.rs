//! What the ZooKeeper lock does beyond the shared suite: Curator's node layout, both
//! ways; the token across a recreated parent; the session's end as a loss; cancelled
//! waits; typed errors.

use std::time::Duration;

use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::zookeeper_client::{self, Acls, CreateMode};
use ferrisson_zookeeper::{Client, DistributedLock, Error, Fenced, Guard};

async fn standalone() -> anyhow::Result<(ZooKeeper, Client)> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let client = Client::builder(&zk.url())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await?;
    Ok((zk, client))
}

/// A plain client of the server, standing in for a Java service using Curator.
async fn raw(zk: &ZooKeeper) -> anyhow::Result<zookeeper_client::Client> {
    Ok(zookeeper_client::Client::connect(&zk.connect_string()).await?)
}

/// Waits until `path` has `count` children (by child watches, no polling).
async fn until_children(
    zk: &zookeeper_client::Client,
    path: &str,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    loop {
        let (children, _, watcher) = zk.get_and_watch_children(path).await?;
        if children.len() == count {
            return Ok(children);
        }
        tokio::time::timeout(Duration::from_secs(20), watcher.changed()).await?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_node_is_waited_for_like_our_own() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let java = raw(&zk).await?;
    let lock = client.lock("/curator/locks/orders")?;
    // What Curator's InterProcessMutex creates, with `creatingParentContainersIfNeeded`.
    java.mkdir(
        "/curator/locks/orders",
        &CreateMode::Container.with_acls(Acls::anyone_all()),
    )
    .await?;
    let prefix = "/curator/locks/orders/_c_0b1e7f3a-52c4-4d2e-9a51-6a2b1f0c9d7e-lock-";
    let (stat, _) = java
        .create(
            prefix,
            b"10.0.0.7",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await?;
    assert!(
        lock.try_lock().await?.is_none(),
        "taken while Curator's node is first"
    );
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    let children = until_children(&java, lock.path(), 2).await?;
    let ours = children
        .iter()
        .find(|c| !c.starts_with("_c_0b1e7f3a"))
        .expect("the waiter's node");
    // Our node has Curator's shape: _c_<36-character guid>-lock-<10 digits>.
    assert!(ours.starts_with("_c_"), "{ours}");
    let (guid, sequence) = ours[3..].split_once("-lock-").expect("-lock-");
    assert_eq!(guid.len(), 36, "{ours}");
    assert_eq!(sequence.len(), 10, "{ours}");
    assert!(
        !waiter.is_finished(),
        "granted while Curator's node was first"
    );
    let foreign = children
        .iter()
        .find(|c| c.starts_with("_c_0b1e7f3a"))
        .expect("Curator's node");
    java.delete(&format!("{}/{foreign}", lock.path()), None)
        .await?;
    let guard = tokio::time::timeout(Duration::from_secs(20), waiter).await???;
    assert!(guard.is_held());
    assert!(guard.fencing_token().get() > stat.czxid as u64);
    // And a Curator contender arriving now queues behind ours.
    let (_, sequence) = java
        .create(
            prefix,
            b"10.0.0.7",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await?;
    let queue = until_children(&java, lock.path(), 2).await?;
    let mut sequences: Vec<&str> = queue
        .iter()
        .filter_map(|c| c.split("-lock-").nth(1))
        .collect();
    sequences.sort_unstable();
    assert_eq!(
        sequences[1],
        sequence.to_string(),
        "Curator's node is second"
    );
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_grows_when_the_parent_is_removed_and_created_again() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let java = raw(&zk).await?;
    let lock = client.lock("reaped")?;
    let mut last = 0;
    for _ in 0..3 {
        let guard = lock.lock().await?;
        let token = guard.fencing_token().get();
        assert!(token > last, "token {token} after {last}");
        last = token;
        guard.unlock().await?;
        // What the server's container reaper does to an empty lock folder: the next
        // node's sequence starts again from 0, its czxid does not.
        java.delete(lock.path(), None).await?;
    }
    Ok(())
}

/// The holder is cut off (a blackholed link) until the server expires its session. Its
/// `lost()` fires no later than the server deletes its node (the moment another client
/// could be granted); another client then takes the lock; once the link heals, the
/// holder's client opens a new session and serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holder_is_lost_before_its_session_expires_and_recovers() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let proxy = ferrisson_testkit::FaultProxy::start(zk.client_port(0)).await?;
    let client = Client::builder(&format!("zk://127.0.0.1:{}", proxy.port()))
        .session_timeout(Duration::from_secs(2))
        .connect()
        .await?;
    let other = Client::connect(&zk.url()).await?;
    let observer = raw(&zk).await?;
    let lock = client.lock("expiry")?;
    let guard = lock.lock().await?;
    let node = format!(
        "{}/{}",
        lock.path(),
        observer.list_children(lock.path()).await?[0]
    );
    let (_, _, deleted) = observer.get_and_watch_data(&node).await?;
    proxy.control().set_blackhole(true);
    let cut_at = tokio::time::Instant::now();
    let lost_at = tokio::spawn(async move {
        guard.lost().await;
        (tokio::time::Instant::now(), guard)
    });
    let event = tokio::time::timeout(Duration::from_secs(30), deleted.changed()).await?;
    let deleted_at = tokio::time::Instant::now();
    assert_eq!(event.event_type, zookeeper_client::EventType::NodeDeleted);
    let (lost_at, guard) = tokio::time::timeout(Duration::from_secs(1), lost_at).await??;
    assert!(
        lost_at <= deleted_at,
        "lost() fired after the server let the lock go"
    );
    eprintln!(
        "cut off: lost() fired {:?} after the cut, {:?} before the server deleted the node",
        lost_at.duration_since(cut_at),
        deleted_at.duration_since(lost_at)
    );
    assert!(!guard.is_held());
    let taken = other
        .lock("expiry")?
        .lock_timeout(Duration::from_secs(10))
        .await?;
    assert!(
        taken.is_some(),
        "the expired session's node still held the lock"
    );
    drop(taken);
    proxy.control().set_blackhole(false);
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    // The client opened a new session: it serves again.
    let again = lock.lock_timeout(Duration::from_secs(20)).await?;
    assert!(
        again.is_some_and(|g| g.is_held()),
        "the client did not recover"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_timed_out_wait_deletes_its_node() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let java = raw(&zk).await?;
    let waiting = Client::connect(&zk.url()).await?;
    let lock = client.lock("cancel")?;
    let guard = lock.lock().await?;
    let wait = tokio::spawn({
        let lock = waiting.lock("cancel")?;
        async move { lock.lock().await.map(drop) }
    });
    until_children(&java, lock.path(), 2).await?;
    wait.abort();
    until_children(&java, lock.path(), 1).await?;
    let timed_out = waiting
        .lock("cancel")?
        .lock_timeout(Duration::from_millis(200))
        .await?;
    assert!(timed_out.is_none());
    assert_eq!(
        java.list_children(lock.path()).await?.len(),
        1,
        "the timed-out node stayed"
    );
    assert!(waiting.lock("cancel")?.try_lock().await?.is_none());
    assert_eq!(
        java.list_children(lock.path()).await?.len(),
        1,
        "the try's node stayed"
    );
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_releases_and_reentry_counts_holds() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let java = raw(&zk).await?;
    let lock = client.lock("reentry")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(
        java.list_children(lock.path()).await?.len(),
        1,
        "re-entry made a node"
    );
    drop(inner);
    assert!(outer.is_held());
    drop(outer);
    until_children(&java, lock.path(), 0).await?;
    Ok(())
}

#[tokio::test]
async fn bad_urls_and_unreachable_servers_are_typed_errors() {
    for url in ["zk://", "zk://h:0", "redis://h", "zk://h/a//b"] {
        assert!(
            matches!(Client::connect(url).await, Err(Error::InvalidArgument(_))),
            "{url}"
        );
    }
    // A port nobody listens on: the connect gives up and never shows the password.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let error = Client::builder(&format!("zk://app:hunter2@127.0.0.1:{port}"))
        .session_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect_err("nobody listens");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_checked_against_the_hold_is_refused_once_it_ended() -> anyhow::Result<()> {
    let (zk, client) = standalone().await?;
    let java = raw(&zk).await?;
    java.create(
        "/config",
        b"v0",
        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
    )
    .await?;
    let lock = client.lock("config")?;
    let guard = lock.lock().await?;
    assert!(guard.set_data_if_held("/config", b"v1").await?);
    assert_eq!(java.get_data("/config").await?.0, b"v1");
    // An operator (or the session's end) takes the hold away; the late write is refused.
    for child in java.list_children(lock.path()).await? {
        java.delete(&format!("{}/{child}", lock.path()), None)
            .await?;
    }
    assert!(!guard.set_data_if_held("/config", b"late").await?);
    assert_eq!(java.get_data("/config").await?.0, b"v1");
    Ok(())
}
