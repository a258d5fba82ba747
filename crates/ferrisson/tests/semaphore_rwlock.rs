//! `Client::semaphore` and `Client::rwlock` behave alike on every store the URL picks:
//! two clients of one store share the permits and the read-write lock.

use ferrisson::{
    Client, DistributedRwLock, DistributedSemaphore, Error, Fenced, Guard, Permit, StoreKind,
};

/// Two permits shared by two clients: a third acquire finds none until one is given
/// back, and the count stays what the first handle set.
async fn two_permits_between_two_clients(a: &Client, b: &Client) -> anyhow::Result<()> {
    let name = format!("facade-permits-{}", std::process::id());
    let first = a.semaphore(&name, 2)?.acquire().await?;
    let second = b.semaphore(&name, 2)?.acquire().await?;
    assert!(
        b.semaphore(&name, 2)?.try_acquire().await?.is_none(),
        "a third permit of two"
    );
    first.release().await?;
    let third = b.semaphore(&name, 2)?.acquire().await?;
    assert_eq!(third.name(), name);
    assert!(a.semaphore(&name, 2)?.try_acquire().await?.is_none());
    second.release().await?;
    third.release().await?;
    assert!(matches!(
        a.semaphore(&name, 0),
        Err(Error::InvalidArgument(_))
    ));
    Ok(())
}

/// Readers share, a writer waits for them, and each write hold has a greater token. The
/// contenders run in tasks of their own: a task holding a read lock that asks for the
/// write lock is refused as an upgrade, not made to wait.
async fn readers_share_and_writers_are_fenced(a: &Client, b: &Client) -> anyhow::Result<()> {
    let name = format!("facade-rwlock-{}", std::process::id());
    let in_other_task = |client: &Client, write: bool| -> anyhow::Result<_> {
        let lock = client.rwlock(&name)?;
        Ok(tokio::spawn(async move {
            anyhow::Ok(if write {
                lock.try_write().await?.is_some()
            } else {
                lock.try_read().await?.is_some()
            })
        }))
    };
    let reader = a.rwlock(&name)?.read().await?;
    assert!(in_other_task(b, false)?.await??, "readers share");
    assert!(!in_other_task(b, true)?.await??, "a writer beside a reader");
    reader.unlock().await?;
    let writer = a.rwlock(&name)?.write().await?;
    let token = writer.fencing_token();
    assert!(
        !in_other_task(b, false)?.await??,
        "a reader beside the writer"
    );
    assert!(!in_other_task(b, true)?.await??, "two writers");
    writer.unlock().await?;
    let next = b.rwlock(&name)?.write().await?;
    assert!(next.is_held());
    assert!(next.fencing_token() > token);
    next.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn memory() -> anyhow::Result<()> {
    let a = ferrisson::connect("memory://facade-families").await?;
    let b = ferrisson::connect("memory://facade-families").await?;
    two_permits_between_two_clients(&a, &b).await?;
    readers_share_and_writers_are_fenced(&a, &b).await
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis() -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    let a = ferrisson::connect(&server.url()).await?;
    let b = ferrisson::connect(&server.url()).await?;
    two_permits_between_two_clients(&a, &b).await?;
    readers_share_and_writers_are_fenced(&a, &b).await
}

/// The databases have a semaphore in their lock table, and PostgreSQL a read-write lock
/// in its advisory locks.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn database(base: &str) -> anyhow::Result<()> {
    use sqlx::Executor as _;

    let table = format!("ferrisson_families_{:08x}", std::process::id());
    let url = format!("{base}?table={table}");
    let a = ferrisson::connect(&url).await?;
    a.as_sql()
        .expect("a database client")
        .create_schema()
        .await?;
    let b = ferrisson::connect(&url).await?;
    two_permits_between_two_clients(&a, &b).await?;
    let refused = a
        .rwlock("prices")
        .expect_err("no read-write lock in a lock table");
    assert!(matches!(refused, Error::Unsupported { .. }), "{refused:?}");
    // PostgreSQL's advisory locks have a shared mode; MySQL's GET_LOCK has none.
    let advisory = format!("{base}?lock=advisory");
    let (c, d) = (
        ferrisson::connect(&advisory).await?,
        ferrisson::connect(&advisory).await?,
    );
    if a.store() == StoreKind::Postgres {
        readers_share_and_writers_are_fenced(&c, &d).await?;
    } else {
        let refused = c.rwlock("prices").expect_err("GET_LOCK has no shared mode");
        assert!(matches!(refused, Error::Unsupported { .. }), "{refused:?}");
    }
    let drops = [
        format!("DROP TABLE IF EXISTS {table}"),
        if a.store() == StoreKind::Postgres {
            format!("DROP SEQUENCE IF EXISTS {table}_fence")
        } else {
            format!("DROP TABLE IF EXISTS {table}_fence")
        },
    ];
    for drop in drops {
        if a.store() == StoreKind::Postgres {
            sqlx::PgPool::connect(base)
                .await?
                .execute(drop.as_str())
                .await?;
        } else {
            sqlx::MySqlPool::connect(base)
                .await?
                .execute(drop.as_str())
                .await?;
        }
    }
    Ok(())
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres() -> anyhow::Result<()> {
    database(
        &std::env::var("FERRISSON_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
    )
    .await
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql() -> anyhow::Result<()> {
    database(
        &std::env::var("FERRISSON_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned()),
    )
    .await
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(ferrisson_testkit::EtcdCluster::single).await??;
    let a = ferrisson::connect(&member.url()).await?;
    let b = ferrisson::connect(&member.url()).await?;
    two_permits_between_two_clients(&a, &b).await?;
    readers_share_and_writers_are_fenced(&a, &b).await
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() -> anyhow::Result<()> {
    let zk = tokio::task::spawn_blocking(ferrisson_testkit::ZooKeeper::standalone).await??;
    let a = ferrisson::connect(&format!("{}/families", zk.url())).await?;
    let b = ferrisson::connect(&format!("{}/families", zk.url())).await?;
    two_permits_between_two_clients(&a, &b).await?;
    readers_share_and_writers_are_fenced(&a, &b).await
}
