//! A database that is down when a wait starts (a restart): a bounded wait rides it out
//! and is granted once the database is back. (A first look whose connection breaks
//! mid-statement, which a bounded wait also rides out, is the fault suite's
//! `*-restarted` scenarios' case.)
//! On a private PostgreSQL server of the test kit, stopped and started again on the same
//! port and data.

use std::time::Duration;

use ferrisson_sql::{Client, DistributedLock as _, Guard as _};
use ferrisson_testkit::PostgresServer;

/// How long the waits may go on: far longer than a restart here.
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_rides_out_a_database_that_is_down() -> anyhow::Result<()> {
    let mut server = tokio::task::spawn_blocking(PostgresServer::start).await??;
    let client = Client::connect(&server.url()).await?;
    client.create_schema().await?;
    let advisory = Client::connect(&format!("{}?lock=advisory", server.url())).await?;
    // Both forms open their connections before the stop.
    client.lock("warm")?.lock().await?.unlock().await?;
    advisory
        .session_lock("warm")?
        .lock()
        .await?
        .unlock()
        .await?;

    tokio::task::block_in_place(|| server.stop())?;
    let table = client.lock("restart")?;
    let session = advisory.session_lock("restart")?;
    let table_wait = tokio::spawn(async move { table.lock_timeout(WAIT).await });
    let session_wait = tokio::spawn(async move { session.lock_timeout(WAIT).await });
    // While the database is down the bounded waits go on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!table_wait.is_finished() && !session_wait.is_finished());
    tokio::task::block_in_place(|| server.relaunch())?;

    let table_guard = table_wait
        .await??
        .expect("the table lock's wait was granted");
    assert!(table_guard.is_held());
    let session_guard = session_wait
        .await??
        .expect("the session lock's wait was granted");
    assert!(session_guard.is_held());
    table_guard.unlock().await?;
    session_guard.unlock().await?;
    Ok(())
}
