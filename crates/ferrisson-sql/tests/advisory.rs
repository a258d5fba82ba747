//! The database's own locks beyond the exclusive session lock: PostgreSQL's advisory
//! read-write lock, its transaction-scoped lock, raw keys shared with plain SQL, the
//! documented key derivation, deadlocks as a typed error, and what MySQL/MariaDB refuse
//! or hash. On the machine's PostgreSQL and MariaDB (or the ones
//! `FERRISSON_TEST_POSTGRES_URL` / `FERRISSON_TEST_MYSQL_URL` name).

mod support;

use std::time::Duration;

use ferrisson_sql::{
    Client, DistributedLock, DistributedRwLock, Error, Fenced, Guard, SqlError, advisory_key,
    mysql_lock_name,
};
use support::{fresh_table, mysql_url, postgres_url};

/// A generous bound for waits that end as soon as the database answers.
const PATIENCE: Duration = Duration::from_secs(20);

async fn client(url: &str) -> anyhow::Result<Client> {
    Ok(Client::builder(url).max_connections(4).connect().await?)
}

/// Polls `pg_locks` until a session waits for the advisory `key` (an event of the
/// server, not of this process: nothing to await but its state).
async fn until_someone_waits_for(pool: &sqlx::PgPool, key: i64) -> anyhow::Result<()> {
    let bits = key as u64;
    let started = tokio::time::Instant::now();
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
               AND NOT granted AND objsubid = 1 AND classid::bigint = $1 AND objid::bigint = $2)",
        )
        .bind((bits >> 32) as i64)
        .bind((bits & 0xffff_ffff) as i64)
        .fetch_one(pool)
        .await?;
        if waiting {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < PATIENCE, "nobody waited for the key");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_deadlock(e: &Error) -> bool {
    matches!(e.store_error::<SqlError>(), Some(SqlError::Deadlock { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_them() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b, c) = (
        client(&url).await?,
        client(&url).await?,
        client(&url).await?,
    );
    let name = format!("prices-{}", fresh_table());
    let read_a = a.session_rwlock(&name)?.try_read().await?;
    let read_b = b.session_rwlock(&name)?.try_read().await?;
    assert!(
        read_a.is_some() && read_b.is_some(),
        "readers of two clients share"
    );
    assert!(c.session_rwlock(&name)?.try_write().await?.is_none());
    // A writer of another client excludes the readers, and of its own client too.
    drop((read_a, read_b));
    let writer = c
        .session_rwlock(&name)?
        .write_timeout(PATIENCE)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the readers' drop did not free the lock"))?;
    assert!(a.session_rwlock(&name)?.try_read().await?.is_none());
    let same_client = c.session_rwlock(&name)?;
    let other_task = tokio::spawn(async move { same_client.try_read().await.map(|r| r.is_none()) });
    assert!(
        other_task.await??,
        "another task of the writer's client read"
    );
    // The writer's own task may read inside its write.
    let inside = c.session_rwlock(&name)?.try_read().await?;
    assert!(inside.is_some());
    drop(inside);
    writer.unlock().await?;
    assert!(a.session_rwlock(&name)?.try_read().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_asking_to_write_is_refused_at_once() -> anyhow::Result<()> {
    let client = client(&postgres_url()).await?;
    let lock = client.session_rwlock(&format!("upgrade-{}", fresh_table()))?;
    let reading = lock.read().await?;
    assert!(matches!(
        lock.write_timeout(PATIENCE).await,
        Err(Error::UpgradeRefused { .. })
    ));
    reading.unlock().await?;
    assert!(lock.try_write().await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_tokens_grow_across_writers_and_clients() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b) = (client(&url).await?, client(&url).await?);
    let name = format!("tokens-{}", fresh_table());
    let mut last = None;
    for holder in [&a, &b, &a, &b] {
        let writer = holder.session_rwlock(&name)?.write().await?;
        let token = writer.fencing_token();
        assert!(
            last.is_none_or(|last| token > last),
            "{token} after {last:?}"
        );
        // Re-entry by the same task hands out the same token.
        let again = holder.session_rwlock(&name)?.write().await?;
        assert_eq!(again.fencing_token(), token);
        again.unlock().await?;
        writer.unlock().await?;
        last = Some(token);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_and_the_session_lock_of_a_name_are_one_lock() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b) = (client(&url).await?, client(&url).await?);
    let name = format!("one-lock-{}", fresh_table());
    let held = a.session_lock(&name)?.lock().await?;
    let rw = b.session_rwlock(&name)?;
    assert!(rw.try_write().await?.is_none());
    assert!(rw.try_read().await?.is_none());
    // In the holder's client the exclusion is its own record: the database would grant
    // the same session again.
    let same_client = a.session_rwlock(&name)?;
    let other_task =
        tokio::spawn(async move { same_client.try_write().await.map(|w| w.is_none()) });
    assert!(other_task.await??);
    held.unlock().await?;
    assert!(rw.try_write().await?.is_some());
    Ok(())
}

/// A writer waiting behind a reader waits in PostgreSQL's own queue (seen in
/// `pg_locks`) and gets the lock once the reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_queues_in_the_server_and_gets_the_lock() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b) = (client(&url).await?, client(&url).await?);
    let name = format!("queue-{}", fresh_table());
    let reading = a.session_rwlock(&name)?.read().await?;
    let lock = b.session_rwlock(&name)?;
    let writer = tokio::spawn(async move { lock.write_timeout(PATIENCE * 2).await });
    let pool = sqlx::PgPool::connect(&url).await?;
    until_someone_waits_for(&pool, advisory_key(&name)).await?;
    reading.unlock().await?;
    let writing = writer.await??;
    assert!(writing.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_keys_are_the_keys_plain_sql_locks() -> anyhow::Result<()> {
    let url = postgres_url();
    let client = client(&url).await?;
    let key: i64 = rand::random();
    let pool = sqlx::PgPool::connect(&url).await?;
    let mut plain = pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(key)
        .execute(&mut *plain)
        .await?;
    assert!(client.session_lock_by_key(key)?.try_lock().await?.is_none());
    assert!(
        client
            .session_rwlock_by_key(key)?
            .try_read()
            .await?
            .is_none()
    );
    assert!(
        client
            .transaction_lock_by_key(key)?
            .try_lock()
            .await?
            .is_none()
    );
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .execute(&mut *plain)
        .await?;
    let guard = client
        .session_lock_by_key(key)?
        .try_lock()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the raw key stayed taken"))?;
    assert_eq!(guard.name(), format!("advisory key {key}"));
    let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut *plain)
        .await?;
    assert!(!free, "plain SQL took the key ferrisson holds");
    guard.unlock().await?;
    let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut *plain)
        .await?;
    assert!(free);
    Ok(())
}

/// The derivation the docs give in SQL is the one the code uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_sql_derivation_is_the_key() -> anyhow::Result<()> {
    let pool = sqlx::PgPool::connect(&postgres_url()).await?;
    for name in ["orders:42", "a", "Ünïcode ✓", &"x".repeat(255)] {
        let in_sql: i64 = sqlx::query_scalar(
            "SELECT ('x' || substr(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint",
        )
        .bind(name)
        .fetch_one(&pool)
        .await?;
        assert_eq!(in_sql, advisory_key(name), "{name}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_lasts_as_long_as_its_transaction() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b) = (client(&url).await?, client(&url).await?);
    let name = format!("xact-{}", fresh_table());
    let mut held = a.transaction_lock(&name)?.lock().await?;
    assert!(b.transaction_lock(&name)?.try_lock().await?.is_none());
    // The session form of the same name is the same key, and excluded too.
    assert!(b.session_lock(&name)?.try_lock().await?.is_none());
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut **held.transaction())
        .await?;
    assert_eq!(one, 1);
    held.commit().await?;
    let theirs = b
        .transaction_lock(&name)?
        .try_lock()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the commit did not free the lock"))?;
    theirs.rollback().await?;
    let dropped = a
        .transaction_lock(&name)?
        .try_lock()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the rollback did not free the lock"))?;
    drop(dropped);
    // The drop's rollback goes out when its connection returns to the pool.
    assert!(
        b.transaction_lock(&name)?
            .lock_timeout(PATIENCE)
            .await?
            .is_some(),
        "the drop did not free the lock"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_transaction_locks_share_and_a_timed_wait_runs_out() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b) = (client(&url).await?, client(&url).await?);
    let name = format!("xact-shared-{}", fresh_table());
    let first = a.transaction_lock(&name)?.shared().lock().await?;
    let second = b.transaction_lock(&name)?.shared().try_lock().await?;
    assert!(second.is_some());
    let exclusive = a.transaction_lock(&name)?;
    assert!(exclusive.try_lock().await?.is_none());
    // 55P03: the wait ran out, the transaction was rolled back, nothing is held.
    assert!(
        exclusive
            .lock_timeout(Duration::from_millis(30))
            .await?
            .is_none()
    );
    drop(second);
    first.commit().await?;
    assert!(exclusive.lock_timeout(PATIENCE).await?.is_some());
    Ok(())
}

/// The wait's `lock_timeout` and `statement_timeout` are put back before the
/// transaction is handed over: the caller's statements run under their usual limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_limit_does_not_leak_into_the_transaction() -> anyhow::Result<()> {
    let base = postgres_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    // Session settings of the client's connections: 7 s and 9 s.
    let url = format!("{base}{sep}options=-c%20lock_timeout%3D7s%20-c%20statement_timeout%3D9s");
    let client = client(&url).await?;
    let lock = client.transaction_lock(&format!("limits-{}", fresh_table()))?;
    for timed in [true, false] {
        let held = if timed {
            lock.lock_timeout(Duration::from_millis(1500)).await?
        } else {
            Some(lock.lock().await?)
        };
        let mut held = held.ok_or_else(|| anyhow::anyhow!("a free lock was not granted"))?;
        let (lock_timeout, statement_timeout): (String, String) = sqlx::query_as(
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')",
        )
        .fetch_one(&mut **held.transaction())
        .await?;
        assert_eq!(
            (lock_timeout.as_str(), statement_timeout.as_str()),
            ("7s", "9s")
        );
        held.rollback().await?;
    }
    Ok(())
}

/// Two transactions each holding the lock the other waits for: PostgreSQL ends one
/// wait with 40P01, which is the typed deadlock error; the victim's transaction is still
/// usable (the wait ran in a savepoint), and once it ends the other gets its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_transaction_locks_end_in_a_typed_deadlock() -> anyhow::Result<()> {
    let url = postgres_url();
    let client = client(&url).await?;
    let suffix = fresh_table();
    let (one, two) = (
        client.transaction_lock(&format!("dl-1-{suffix}"))?,
        client.transaction_lock(&format!("dl-2-{suffix}"))?,
    );
    let mut a = one.lock().await?;
    let mut b = two.lock().await?;
    let two_for_a = two.clone();
    let mut a_waits = tokio::spawn(async move {
        let waited = two_for_a.lock_in(a.transaction()).await;
        (a, waited)
    });
    let pool = sqlx::PgPool::connect(&url).await?;
    until_someone_waits_for(&pool, two.key()).await?;
    let mut b_waits = tokio::spawn(async move {
        let waited = one.lock_in(b.transaction()).await;
        (b, waited)
    });
    // The victim is whichever wait ran the deadlock check; the other gets its lock
    // once the victim's transaction ends.
    let (mut victim, failed, other) = tokio::select! {
        a_done = &mut a_waits => { let (a, e) = a_done?; (a, e, b_waits) }
        b_done = &mut b_waits => { let (b, e) = b_done?; (b, e, a_waits) }
    };
    let e = failed
        .err()
        .ok_or_else(|| anyhow::anyhow!("a deadlock was granted"))?;
    assert!(is_deadlock(&e), "{e}");
    assert!(e.is_transient());
    let still: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut **victim.transaction())
        .await?;
    assert_eq!(still, 1, "the victim's transaction was left aborted");
    victim.rollback().await?;
    let (winner, waited) = other.await?;
    waited?;
    winner.commit().await?;
    Ok(())
}

/// A transaction lock taken in a transaction of the caller's (what a PgBouncer user
/// in transaction mode has) lasts until that transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_can_live_in_the_callers_transaction() -> anyhow::Result<()> {
    let url = postgres_url();
    let client = client(&url).await?;
    let lock = client.transaction_lock(&format!("yours-{}", fresh_table()))?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let mut mine = pool.begin().await?;
    assert!(lock.try_lock_in(&mut mine).await?);
    assert!(lock.try_lock().await?.is_none());
    // Another transaction's timed wait runs out, and leaves that transaction usable.
    let mut theirs = pool.begin().await?;
    assert!(
        !lock
            .lock_timeout_in(&mut theirs, Duration::from_millis(30))
            .await?
    );
    let usable: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *theirs)
        .await?;
    assert_eq!(usable, 1);
    mine.commit().await?;
    assert!(lock.lock_timeout_in(&mut theirs, PATIENCE).await?);
    assert!(lock.try_lock().await?.is_none());
    theirs.rollback().await?;
    assert!(lock.try_lock().await?.is_some());
    Ok(())
}

/// A dropped wait leaves nothing held: its transaction is rolled back, a grant that
/// reached it after the drop included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_lock_wait_leaves_nothing_held() -> anyhow::Result<()> {
    let url = postgres_url();
    let (a, b) = (client(&url).await?, client(&url).await?);
    let name = format!("dropped-wait-{}", fresh_table());
    let held = a.transaction_lock(&name)?.lock().await?;
    let waiter = b.transaction_lock(&name)?;
    let waiting = tokio::spawn(async move { waiter.lock().await });
    let pool = sqlx::PgPool::connect(&url).await?;
    until_someone_waits_for(&pool, advisory_key(&name)).await?;
    waiting.abort();
    assert!(waiting.await.is_err_and(|e| e.is_cancelled()));
    held.commit().await?;
    assert!(
        a.transaction_lock(&name)?
            .lock_timeout(PATIENCE)
            .await?
            .is_some(),
        "the dropped wait kept its grant"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_refuses_what_get_lock_cannot_do() -> anyhow::Result<()> {
    let client = client(&mysql_url()).await?;
    for refused in [
        client.session_rwlock("prices").map(drop),
        client.session_rwlock_by_key(1).map(drop),
        client.transaction_lock("orders").map(drop),
        client.transaction_lock_by_key(1).map(drop),
        client.session_lock_by_key(1).map(drop),
    ] {
        assert!(
            matches!(refused, Err(Error::Unsupported { store: "mysql", .. })),
            "{refused:?}"
        );
    }
    Ok(())
}

/// Names MySQL would fold or refuse go to the server hashed; short lower-case names go
/// as they are, for other programs to share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_names_go_to_the_server_as_documented() -> anyhow::Result<()> {
    let client = client(&mysql_url()).await?;
    let suffix = fresh_table();
    let names = [
        format!("plain-{suffix}"),
        format!("Mixed-{suffix}"),
        format!("{}-{suffix}", "long".repeat(40)),
    ];
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.session_lock(name)?.lock().await?);
    }
    let pool = sqlx::MySqlPool::connect(&mysql_url()).await?;
    for name in &names {
        let sent = mysql_lock_name(name);
        assert!(sent.chars().count() <= 64);
        assert_eq!(sent == *name, name == &names[0], "{name}");
        let used: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
            .bind(&sent)
            .fetch_one(&pool)
            .await?;
        assert!(used.is_some(), "{name} is not held under {sent}");
    }
    for guard in guards {
        guard.unlock().await?;
    }
    Ok(())
}

/// The futures and guards can cross tasks.
#[test]
fn futures_and_guards_are_send() {
    fn send<T: Send>(_: &T) {}
    fn check(rw: &ferrisson_sql::SessionRwLock, xact: &ferrisson_sql::TransactionLock) {
        send(&rw.read());
        send(&rw.write());
        send(&rw.try_read());
        send(&rw.write_timeout(Duration::ZERO));
        send(&xact.lock());
        send(&xact.try_lock());
        send(&xact.lock_timeout(Duration::ZERO));
    }
    fn sync_send<T: Send + Sync>() {}
    sync_send::<ferrisson_sql::SessionReadGuard>();
    sync_send::<ferrisson_sql::SessionWriteGuard>();
    sync_send::<ferrisson_sql::TransactionLockGuard>();
    let _ = check;
}
