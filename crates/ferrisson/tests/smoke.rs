//! Quick end-to-end check of the lock basics.

use std::time::Duration;

use ferrisson::Client;
use ferrisson_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_reenter_and_contend() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let lock = client.lock("smoke")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    assert_eq!(outer.fencing_token(), inner.fencing_token());
    assert_eq!(lock.hold_count().await?, 2);
    let other = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock_timeout(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!other.is_finished());
    inner.unlock().await?;
    assert!(lock.is_locked().await?);
    let token = outer.fencing_token();
    outer.unlock().await?;
    let guard = other.await??.expect("acquired after release");
    assert!(guard.fencing_token() > token);
    guard.unlock().await?;
    assert!(!lock.is_locked().await?);
    Ok(())
}
