//! `ferrisson::connect` picks the store by URL; a store this build lacks is a typed
//! error naming what to do.

use ferrisson::{DistributedElection, DistributedLock, Error, Fenced, Guard, StoreKind};

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
    let mut urls = Vec::new();
    if !cfg!(feature = "zookeeper") {
        urls.push("zk://127.0.0.1:2181/app");
    }
    if !cfg!(feature = "postgres") {
        urls.push("postgres://db/x");
    }
    if !cfg!(feature = "mysql") {
        urls.push("mysql://db/x");
    }
    if !cfg!(feature = "etcd") {
        urls.push("etcd://127.0.0.1:2379");
    }
    for url in urls {
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

/// A database URL connects to its lock table: the machine's PostgreSQL and MariaDB (or
/// those `FERRISSON_TEST_POSTGRES_URL` / `FERRISSON_TEST_MYSQL_URL` name), on a table of
/// the test's own.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn a_database_url_connects_to_its_lock_table(
    base: &str,
    kind: StoreKind,
) -> anyhow::Result<()> {
    let table = format!("ferrisson_facade_{:08x}", std::process::id());
    let client = ferrisson::connect(&format!("{base}?table={table}")).await?;
    assert_eq!(client.store(), kind);
    assert!(client.capabilities().iter().all(|c| c.store == kind.name()));
    let sql = client.as_sql().expect("a database client");
    sql.create_schema().await?;
    let lock = client.lock("facade")?;
    let guard = lock.lock().await?;
    let guard_token = guard.fencing_token();
    assert!(guard_token.is_some());
    assert!(guard.is_held());
    let other = ferrisson::connect(&format!("{base}?table={table}")).await?;
    assert!(
        other.lock("facade")?.try_lock().await?.is_none(),
        "another client took a held lock"
    );
    guard.unlock().await?;
    // Elections live in the same table.
    let term = client.election("facade")?.campaign().await?;
    assert!(Some(term.fencing_token()) > guard_token);
    term.unlock().await?;
    // ?lock=advisory: the database's session lock, without a token.
    let session = ferrisson::connect(&format!("{base}?lock=advisory")).await?;
    let guard = session.lock(&format!("facade-{table}"))?.lock().await?;
    assert!(guard.fencing_token().is_none());
    assert!(guard.is_held());
    guard.unlock().await?;
    drop_tables(base, &table).await
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn drop_tables(base: &str, table: &str) -> anyhow::Result<()> {
    use sqlx::Executor as _;
    let drop_table = format!("DROP TABLE IF EXISTS {table}");
    if base.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(base).await?;
        pool.execute(drop_table.as_str()).await?;
        pool.execute(format!("DROP SEQUENCE IF EXISTS {table}_fence").as_str())
            .await?;
    } else {
        let pool = sqlx::MySqlPool::connect(base).await?;
        pool.execute(drop_table.as_str()).await?;
        pool.execute(format!("DROP TABLE IF EXISTS {table}_fence").as_str())
            .await?;
    }
    Ok(())
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_url_connects_to_its_lock_table() -> anyhow::Result<()> {
    let base = std::env::var("FERRISSON_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    a_database_url_connects_to_its_lock_table(&base, StoreKind::Postgres).await
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn a_mysql_url_connects_to_its_lock_table() -> anyhow::Result<()> {
    let base = std::env::var("FERRISSON_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    a_database_url_connects_to_its_lock_table(&base, StoreKind::MySql).await
}
#[cfg(not(feature = "etcd"))]
#[tokio::test]
async fn an_etcd_url_without_the_feature_names_the_feature() {
    let error = ferrisson::connect("etcd://127.0.0.1:2379")
        .await
        .expect_err("not compiled");
    assert!(StoreKind::Etcd.is_available());
    assert!(
        matches!(
            error,
            Error::StoreNotCompiled {
                feature: "etcd",
                ..
            }
        ),
        "{error:?}"
    );
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_url_connects_to_etcd() -> anyhow::Result<()> {
    use ferrisson::DistributedElection;

    let member = tokio::task::spawn_blocking(ferrisson_testkit::EtcdCluster::single).await??;
    let client = ferrisson::connect(&member.url()).await?;
    assert_eq!(client.store(), StoreKind::Etcd);
    assert!(client.capabilities().iter().all(|c| c.store == "etcd"));
    let lock = client.lock("facade")?;
    let guard = lock.lock().await?;
    let token = guard.fencing_token().expect("etcd locks have tokens");
    assert!(guard.is_held());
    guard.unlock().await?;
    let again = lock.lock().await?;
    assert!(again.fencing_token() > Some(token));
    again.unlock().await?;
    let term = client.election("facade-election")?.campaign().await?;
    assert!(term.is_held());
    term.unlock().await?;
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
