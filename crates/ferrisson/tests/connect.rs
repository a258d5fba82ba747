//! `ferrisson::connect` picks the store by URL; a store this build lacks is a typed
//! error naming what to do.

use ferrisson::{DistributedLock, Error, Guard, StoreKind};

#[tokio::test]
async fn a_memory_url_names_one_store_per_process() -> anyhow::Result<()> {
    let a = ferrisson::connect("memory://connect-test").await?;
    let b = ferrisson::connect("memory://connect-test").await?;
    let other = ferrisson::connect("memory://another").await?;
    let held = a.lock("x")?.lock().await?;
    let same = tokio::spawn({
        let b = b.lock("x")?;
        async move { b.try_lock().await.map(|g| g.is_some()) }
    });
    assert!(!same.await??, "one name, one store: the lock is taken");
    assert!(other.lock("x")?.try_lock().await?.is_some());
    held.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn unknown_and_missing_schemes_are_invalid_arguments() {
    for url in ["ftp://x", "127.0.0.1:6379", ""] {
        let error = ferrisson::connect(url).await.expect_err(url);
        assert!(
            matches!(error, Error::InvalidArgument(_)),
            "{url}: {error:?}"
        );
    }
}

#[tokio::test]
async fn a_store_without_its_code_says_so() {
    for url in [
        #[cfg(not(feature = "zookeeper"))]
        "zk://127.0.0.1:2181/app",
        "etcd://127.0.0.1:2379",
        "postgres://db/x",
        "mysql://db/x",
    ] {
        let kind = StoreKind::of_url(url).expect("known scheme");
        assert!(!kind.is_compiled());
        let error = ferrisson::connect(url).await.expect_err(url);
        let message = error.to_string();
        assert!(message.contains(kind.name()), "{message}");
        assert!(
            matches!(
                error,
                Error::StoreNotCompiled { .. } | Error::Unsupported { .. }
            ),
            "{error:?}"
        );
    }
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_url_connects_to_redis() -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    let client = ferrisson::connect(&server.url()).await?;
    assert_eq!(client.store(), StoreKind::Redis);
    let lock = client.lock("facade")?;
    let guard = lock.lock().await?;
    assert!(guard.fencing_token().is_some());
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zk_url_connects_to_zookeeper() -> anyhow::Result<()> {
    use ferrisson::DistributedElection;

    let zk = tokio::task::spawn_blocking(ferrisson_testkit::ZooKeeper::standalone).await??;
    let client = ferrisson::connect(&format!("{}/facade", zk.url())).await?;
    assert_eq!(client.store(), StoreKind::ZooKeeper);
    assert!(client.capabilities().iter().all(|c| c.store == "zookeeper"));
    let lock = client.lock("facade")?;
    let guard = lock.lock().await?;
    assert!(guard.fencing_token().is_some());
    assert!(guard.is_held());
    guard.unlock().await?;
    let term = client.election("facade")?.campaign().await?;
    assert!(term.is_held());
    term.unlock().await?;
    Ok(())
}
