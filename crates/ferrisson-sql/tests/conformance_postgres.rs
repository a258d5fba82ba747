//! The store-neutral conformance suite on the lock table and the session lock, on the machine's PostgreSQL (or the
//! one `FERRISSON_TEST_POSTGRES_URL` names); and contenders in other processes.

mod support;

use ferrisson_conformance::{excludes_across_processes, run_all, serve_child_if_asked};
use support::{SessionUnderTest, SqlUnderTest, postgres_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_table_conforms() -> anyhow::Result<()> {
    let base = postgres_url();
    let store = SqlUnderTest::on_fresh_table(&base).await?;
    run_all(&store).await?;
    store.drop_schema(&base).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other() -> anyhow::Result<()> {
    if serve_child_if_asked(SqlUnderTest::connect).await? {
        return Ok(());
    }
    let base = postgres_url();
    let store = SqlUnderTest::on_fresh_table(&base).await?;
    excludes_across_processes(&store, "processes_exclude_each_other").await?;
    store.drop_schema(&base).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_lock_conforms() -> anyhow::Result<()> {
    run_all(&SessionUnderTest::of(&postgres_url()).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_locks_exclude_processes() -> anyhow::Result<()> {
    if serve_child_if_asked(SessionUnderTest::connect).await? {
        return Ok(());
    }
    let store = SessionUnderTest::of(&postgres_url()).await?;
    excludes_across_processes(&store, "session_locks_exclude_processes").await?;
    Ok(())
}
