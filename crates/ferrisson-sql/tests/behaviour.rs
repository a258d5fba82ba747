//! What the lock table and the session lock promise beyond the shared suite, on the
//! machine's PostgreSQL and MariaDB: a dead holder's row is taken over at its expiry, a
//! missing table is a typed error, a dropped acquire leaves no row, a killed session
//! loses every lock on it, MySQL names that differ only by case stay apart, a client
//! with the fewest connections serves every form, a slow acquire is renewed in time.

mod support;

use std::time::Duration;

use ferrisson_conformance::Store as _;
use ferrisson_sql::{
    Client, DistributedLock, Error, Fenced, Guard, Lease, SqlError, mysql_lock_name,
};
use support::{SessionUnderTest, SqlUnderTest, mysql_url, postgres_url};
use tokio::time::Instant;

fn bases() -> [String; 2] {
    [postgres_url(), mysql_url()]
}

/// A holder that vanished without releasing (its process died: no release, no
/// renewal) leaves a row that a waiter takes over once it expires, with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_row_is_taken_over_at_its_expiry() -> anyhow::Result<()> {
    for base in bases() {
        let store = SqlUnderTest::on_fresh_table(&base).await?;
        let lease = Duration::from_millis(800);
        let dead = store.client.lock("job")?.with_lease(Lease::Fixed(lease))?;
        let guard = dead.lock().await?;
        let dead_token = guard.fencing_token();
        let taken_at = Instant::now();
        // As if its process died: the guard never releases.
        std::mem::forget(guard);
        let other = store.another_client().await?;
        let next = other
            .client
            .lock("job")?
            .lock_timeout(Duration::from_secs(20))
            .await?
            .expect("the expired row was not taken over within 20 s");
        assert!(
            taken_at.elapsed() + Duration::from_millis(100) >= lease,
            "{base}: taken over after {:?}, before the lease of {lease:?} ran out",
            taken_at.elapsed()
        );
        assert!(next.fencing_token() > dead_token, "{base}");
        next.unlock().await?;
        store.drop_schema(&base).await?;
    }
    Ok(())
}

/// A table nobody created is the typed error that says how to create it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_a_typed_error() -> anyhow::Result<()> {
    for base in bases() {
        let url = support::with_table(&base, &support::fresh_table());
        let client = Client::connect(&url).await?;
        let error = client
            .lock("x")?
            .try_lock()
            .await
            .expect_err("no table, no lock");
        assert!(
            matches!(
                error.store_error::<SqlError>(),
                Some(SqlError::MissingSchema { .. })
            ),
            "{base}: {error:?}"
        );
        assert!(error.to_string().contains("create_schema"), "{error}");
    }
    Ok(())
}

/// Acquires dropped at every point of their run leave no row: afterwards another client
/// takes the lock well before a leftover row (a 30 s lease) could have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_no_row() -> anyhow::Result<()> {
    for base in bases() {
        let store = SqlUnderTest::on_fresh_table(&base).await?;
        // The default watchdog lease (30 s): only the undo frees the row in time.
        let lock = Client::connect(&store.url).await?.lock("cancelled")?;
        for delay_us in [0, 100, 300, 1000, 3000, 10_000] {
            let attempt = tokio::time::timeout(Duration::from_micros(delay_us), lock.lock()).await;
            if let Ok(guard) = attempt {
                guard?.unlock().await?;
            }
        }
        let other = store.another_client().await?;
        let taken = other
            .client
            .lock("cancelled")?
            .lock_timeout(Duration::from_secs(10))
            .await?;
        assert!(taken.is_some(), "{base}: a dropped acquire left its row");
        store.drop_schema(&base).await?;
    }
    Ok(())
}

/// Two session locks of one client share its session: ending that session loses both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_loses_every_lock_on_it() -> anyhow::Result<()> {
    for base in bases() {
        let store = SessionUnderTest::of(&base).await?;
        let suffix = support::fresh_table();
        let a = store
            .client
            .session_lock(&format!("a-{suffix}"))?
            .lock()
            .await?;
        let b = store
            .client
            .session_lock(&format!("b-{suffix}"))?
            .lock()
            .await?;
        assert!(
            store
                .client
                .session_lock(&format!("a-{suffix}"))?
                .force_unlock()
                .await?
        );
        for guard in [&a, &b] {
            tokio::time::timeout(Duration::from_secs(5), guard.lost())
                .await
                .map_err(|_| anyhow::anyhow!("{base}: lost() did not fire"))?;
            assert!(!guard.is_held());
        }
        assert!(matches!(a.unlock().await, Err(Error::LeaseExpired { .. })));
        drop(b);
        // Both are free for another client.
        let other = store.another_client().await?;
        for name in [format!("a-{suffix}"), format!("b-{suffix}")] {
            assert!(
                other
                    .client
                    .session_lock(&name)?
                    .try_lock()
                    .await?
                    .is_some(),
                "{base}: {name}"
            );
        }
    }
    Ok(())
}

/// A waiter whose own session is ended by the server while it waits (a restart, an
/// administrator's kill) keeps waiting on a new session and is granted at the release,
/// instead of failing with the server's "terminating connection" error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_session_is_killed_waits_on() -> anyhow::Result<()> {
    for base in bases() {
        let holder = SessionUnderTest::of(&base).await?;
        let waiter = holder.another_client().await?;
        let suffix = support::fresh_table();
        let (wanted, marker) = (format!("w-{suffix}"), format!("m-{suffix}"));
        let held = holder.client.session_lock(&wanted)?.lock().await?;
        // The marker pins the waiter's session, so that it can be found and ended.
        let pin = waiter.client.session_lock(&marker)?.lock().await?;
        let waiting = {
            let lock = waiter.client.session_lock(&wanted)?;
            tokio::spawn(async move { lock.lock_timeout(Duration::from_secs(20)).await })
        };
        // Let the waiter look at least once on its session.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            holder.client.session_lock(&marker)?.force_unlock().await?,
            "{base}: the waiter's session was not found"
        );
        tokio::time::timeout(Duration::from_secs(5), pin.lost())
            .await
            .map_err(|_| anyhow::anyhow!("{base}: the waiter's session did not end"))?;
        held.unlock().await?;
        let granted = waiting.await??;
        assert!(granted.is_some(), "{base}: the waiter was not granted");
    }
    Ok(())
}

/// MySQL compares lock names without case: ferrisson hashes mixed-case names, so that
/// "Job" and "job" stay two locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_names_differing_by_case_are_two_locks() -> anyhow::Result<()> {
    assert_ne!(mysql_lock_name("Job"), mysql_lock_name("job"));
    let suffix = support::fresh_table();
    let store = SessionUnderTest::of(&mysql_url()).await?;
    let upper = store
        .client
        .session_lock(&format!("Job-{suffix}"))?
        .lock()
        .await?;
    let other = store.another_client().await?;
    let lower = other
        .client
        .session_lock(&format!("job-{suffix}"))?
        .try_lock()
        .await?;
    assert!(lower.is_some(), "one case held the other");
    // And the held one is the hashed name on the server.
    let pool = sqlx::MySqlPool::connect(&mysql_url()).await?;
    let used: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
        .bind(mysql_lock_name(&format!("Job-{suffix}")))
        .fetch_one(&pool)
        .await?;
    assert!(used.is_some());
    upper.unlock().await?;
    Ok(())
}

/// An election on the lock table: one leader at a time, apart from the lock of the same
/// name, a larger token every term, and `lost()` when the term is ended behind the
/// leader's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_has_one_leader_and_a_token_per_term() -> anyhow::Result<()> {
    use ferrisson_sql::DistributedElection as _;
    for base in bases() {
        let store = SqlUnderTest::on_fresh_table(&base).await?;
        let other = store.another_client().await?;
        let election = store.client.election("nightly")?;
        let term = election.campaign().await?;
        let rival = other.client.election("nightly")?;
        assert!(rival.try_campaign().await?.is_none(), "{base}: two leaders");
        // The lock of the same name is another row.
        let lock = other.client.lock("nightly")?.try_lock().await?;
        assert!(lock.is_some(), "{base}: the election held the lock");
        let first = term.fencing_token();
        // A campaign does not re-enter, even in the leader's own task.
        assert!(
            election.try_campaign().await?.is_none(),
            "{base}: re-entered"
        );
        election.force_resign().await?;
        tokio::time::timeout(support::WATCHDOG_LEASE * 2, term.lost())
            .await
            .map_err(|_| anyhow::anyhow!("{base}: lost() did not fire"))?;
        let next = rival
            .campaign_timeout(Duration::from_secs(10))
            .await?
            .expect("the rival was not elected");
        assert!(next.fencing_token() > first, "{base}");
        next.unlock().await?;
        drop(term);
        drop(lock);
        store.drop_schema(&base).await?;
    }
    Ok(())
}

/// A re-entry with a short fixed lease never shortens the hold under it: the outer
/// watchdog hold outlives the short lease and the next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_reentry_does_not_shorten_the_hold() -> anyhow::Result<()> {
    for base in bases() {
        let store = SqlUnderTest::on_fresh_table(&base).await?;
        let lock = store.client.lock("nested")?;
        let outer = lock.lock().await?;
        let inner = lock
            .clone()
            .with_lease(Lease::Fixed(Duration::from_millis(50)))?
            .try_lock()
            .await?
            .expect("the holder's task re-enters");
        inner.unlock().await?;
        // Past the short lease and the watchdog's next renewal (a third of 1.5 s).
        tokio::time::sleep(support::WATCHDOG_LEASE / 3 + Duration::from_millis(300)).await;
        assert!(
            outer.is_held(),
            "{base}: the short re-entry cost the outer hold"
        );
        let other = store.another_client().await?;
        assert!(
            other.client.lock("nested")?.try_lock().await?.is_none(),
            "{base}: another client took the held lock"
        );
        outer.unlock().await?;
        store.drop_schema(&base).await?;
    }
    Ok(())
}

/// A semaphore of 3 permits: never more than 3 holders at once across clients and
/// tasks; a fourth is refused while 3 are out and granted when one is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_gives_out_at_most_its_permits() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use ferrisson_sql::{DistributedSemaphore as _, Permit as _};
    for base in bases() {
        let store = SqlUnderTest::on_fresh_table(&base).await?;
        let other = store.another_client().await?;
        let ours = store.client.semaphore("pool", 3)?;
        let theirs = other.client.semaphore("pool", 3)?;
        let a = ours.acquire().await?;
        let b = theirs.acquire().await?;
        let c = ours.acquire().await?;
        assert!(
            theirs.try_acquire().await?.is_none(),
            "{base}: a fourth permit"
        );
        let waiting = tokio::spawn({
            let theirs = theirs.clone();
            async move { theirs.acquire_timeout(Duration::from_secs(10)).await }
        });
        b.release().await?;
        let d = waiting
            .await??
            .expect("the released permit was not granted");
        for permit in [a, c, d] {
            permit.release().await?;
        }
        // Eight tasks over two clients: never more than three inside.
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let semaphore = if i % 2 == 0 {
                ours.clone()
            } else {
                theirs.clone()
            };
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let permit = semaphore.acquire().await?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await?;
                }
                Ok::<(), ferrisson_sql::Error>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        assert!(
            most.load(Ordering::SeqCst) <= 3,
            "{base}: {most:?} inside at once"
        );
        assert!(ours.clone().with_lease(Lease::Watchdog).is_ok());
        assert!(store.client.semaphore("pool", 0).is_err());
        store.drop_schema(&base).await?;
    }
    Ok(())
}

/// A client with the fewest connections it may have (PostgreSQL: the listener and one
/// for statements; MySQL: one) serves every form at once: a table lock renewed by its
/// watchdog, a session lock on its session, and a waiter granted after another
/// client's release; a pool smaller than that is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fewest_connections_serve_every_form() -> anyhow::Result<()> {
    for base in bases() {
        let store = SqlUnderTest::on_fresh_table(&base).await?;
        let least = if base.starts_with("postgres") { 2 } else { 1 };
        let builder = |max| {
            Client::builder(&store.url)
                .watchdog_lease(Duration::from_millis(600))
                .max_connections(max)
        };
        let refused = builder(least - 1).connect().await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{base}: {refused:?}"
        );
        let small = builder(least).connect().await?;
        let suffix = support::fresh_table();
        let table = small.lock(&format!("t-{suffix}"))?.lock().await?;
        let session = small.session_lock(&format!("s-{suffix}"))?.lock().await?;
        let wanted = format!("w-{suffix}");
        let other = store.another_client().await?;
        let held = other.client.lock(&wanted)?.lock().await?;
        let waiting = {
            let lock = small.lock(&wanted)?;
            tokio::spawn(async move { lock.lock_timeout(Duration::from_secs(20)).await })
        };
        // Three leases of the table lock: its renewals share the one statement
        // connection with the waiter's looks.
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert!(!waiting.is_finished(), "{base}: granted while held");
        held.unlock().await?;
        let granted = waiting
            .await??
            .unwrap_or_else(|| panic!("{base}: the waiter was not granted"));
        assert!(table.is_held() && session.is_held(), "{base}");
        granted.unlock().await?;
        table.unlock().await?;
        session.unlock().await?;
        store.drop_schema(&base).await?;
    }
    Ok(())
}

/// An acquire that took two thirds of its lease (here a lock wait behind another
/// transaction; on a busy machine, a new connection) is renewed at once: its row's
/// expiry counts from the acquire's sending, so a first renewal a third of the lease
/// after the answer would come too late and the hold would be lost. On PostgreSQL, where
/// the acquire's lock wait shows in `pg_stat_activity`; the watchdog is the same code
/// for both databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_acquire_is_renewed_before_its_expiry() -> anyhow::Result<()> {
    use sqlx::{Connection as _, Executor as _};
    // Long enough that the rest of the acquire and the renewal fit in its last third on
    // a busy machine.
    let lease = Duration::from_secs(3);
    let base = postgres_url();
    let store = SqlUnderTest::on_fresh_table(&base).await?;
    let table = store.client.table().to_owned();
    let name = "slow";
    // An expired row, so that the acquire is a take-over that waits on its row lock.
    let expired = store
        .client
        .lock(name)?
        .with_lease(Lease::Fixed(Duration::from_millis(1)))?
        .lock()
        .await?;
    std::mem::forget(expired);
    let client = Client::builder(&store.url)
        .watchdog_lease(lease)
        .max_connections(4)
        .connect()
        .await?;
    let lock = client.lock(name)?;
    // The blocker: the row locked by an open transaction.
    let mut blocker = sqlx::PgConnection::connect(&base).await?;
    let mut watcher = sqlx::PgConnection::connect(&base).await?;
    blocker.execute("BEGIN").await?;
    blocker
        .execute(format!("SELECT name FROM {table} WHERE name = '{name}' FOR UPDATE").as_str())
        .await?;
    let acquire = tokio::spawn(async move { lock.lock().await });
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE wait_event_type = 'Lock' AND query LIKE '%{table}%' \
           AND query NOT LIKE '%pg_stat_activity%'"
    );
    while sqlx::query_scalar::<_, i64>(&waiting)
        .fetch_one(&mut watcher)
        .await?
        == 0
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The acquire waits: hold it back for two thirds of its lease.
    tokio::time::sleep(lease * 2 / 3).await;
    blocker.execute("ROLLBACK").await?;
    let acquired = acquire.await??;
    // A lease: a hold whose first renewal came after its expiry is lost by then.
    let lost = tokio::time::timeout(lease, acquired.lost()).await.is_ok();
    assert!(!lost, "the slow acquire's hold was lost");
    assert!(acquired.is_held());
    acquired.unlock().await?;
    store.drop_schema(&base).await?;
    Ok(())
}
