//! The cases every topology runs: one body each, written once and run against one
//! server, a Sentinel group and a Cluster, plain (`topologies.rs`) or with TLS and ACL
//! users (`topologies_secured.rs`).
//!
//! A case takes a [`ClientBuilder`] (the topology's URL and any TLS or credential
//! settings) and makes its clients from it; all cases of a topology run on one set of
//! servers (distinct names keep them apart), so a cluster forms once per test, not once
//! per case.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use ferrisson_redis::{Client, ClientBuilder, DistributedLock, Fenced, Guard, Lease};

/// A client of `target` with a short watchdog lease, so renewals happen within a case.
async fn client(target: &ClientBuilder) -> anyhow::Result<Client> {
    Ok(target
        .clone()
        .watchdog_lease(Duration::from_millis(900))
        .connect()
        .await?)
}

/// Mutual exclusion and hand-off between clients: 8 tasks on 4 clients each take the lock
/// 10 times and check nobody else is inside; every hand-off is a release message.
async fn lock_excludes_and_hands_off(target: &ClientBuilder) -> anyhow::Result<()> {
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tokens = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..4 {
        let client = client(target).await?;
        for _ in 0..2 {
            let lock = client.lock("topology:counter")?;
            let inside = Arc::clone(&inside);
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..10 {
                    let guard = lock.lock().await?;
                    anyhow::ensure!(inside.fetch_add(1, Ordering::SeqCst) == 0, "two inside");
                    seen.push(guard.fencing_token());
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await?;
                }
                anyhow::Ok(seen)
            }));
        }
        let _ = c;
    }
    for task in tasks {
        tokens.extend(task.await??);
    }
    tokens.sort();
    tokens.dedup();
    anyhow::ensure!(tokens.len() == 80, "tokens not distinct: {}", tokens.len());
    Ok(())
}

/// A release is a message that reaches a waiter in another client at once: with a
/// 60 s lease, only the message can wake it within the 5 s the case allows.
async fn release_wakes_a_waiter_elsewhere(target: &ClientBuilder) -> anyhow::Result<()> {
    let long = Lease::Fixed(Duration::from_secs(60));
    let holder = client(target)
        .await?
        .lock("topology:wake")?
        .with_lease(long)?;
    let guard = holder.lock().await?;
    let waiter_lock = client(target)
        .await?
        .lock("topology:wake")?
        .with_lease(long)?;
    let waiter = tokio::spawn(async move { waiter_lock.lock().await?.unlock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    anyhow::ensure!(!waiter.is_finished());
    guard.unlock().await?;
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .context("the release message did not wake the waiter")???;
    Ok(())
}

/// Re-entry in one task, the watchdog renewing past several leases, and the lost signal
/// when the lock is taken away.
async fn lock_reenters_renews_and_signals_loss(target: &ClientBuilder) -> anyhow::Result<()> {
    let client = client(target).await?;
    let lock = client.lock("topology:renewed")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    anyhow::ensure!(inner.fencing_token() == outer.fencing_token());
    anyhow::ensure!(lock.hold_count().await? == 2);
    inner.unlock().await?;
    // Three leases: held only because the watchdog renews it.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    anyhow::ensure!(outer.is_held(), "the watchdog did not renew");
    anyhow::ensure!(lock.is_locked().await?);
    anyhow::ensure!(lock.force_unlock().await?);
    tokio::time::timeout(Duration::from_secs(5), outer.lost())
        .await
        .context("no lost signal after the lock was taken away")?;
    Ok(())
}

/// A fair lock grants in request order across clients.
///
/// The order is the property here, not the watchdog: every client connects before the
/// lock is taken, and the holds have a fixed lease longer than the case, so a loaded
/// machine (a TLS cluster's handshakes take seconds then) cannot end the holder's lease
/// and let a waiter in before the others queue.
async fn fair_lock_grants_in_order(target: &ClientBuilder) -> anyhow::Result<()> {
    let long = Lease::Fixed(Duration::from_secs(60));
    let lock = client(target)
        .await?
        .fair_lock("topology:fair")?
        .with_lease(long)?;
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(
            client(target)
                .await?
                .fair_lock("topology:fair")?
                .with_lease(long)?,
        );
    }
    let holder = lock.lock().await?;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (i, other) in others.into_iter().enumerate() {
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = other.lock().await?;
            order
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(i);
            anyhow::Ok(guard.unlock().await?)
        }));
        // Queued before the next one asks.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while lock.inspect().await?.queue_len() < i + 1 {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "waiter {i} never queued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    holder.unlock().await?;
    for waiter in waiters {
        waiter.await??;
    }
    let order = order
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    anyhow::ensure!(order == [0, 1, 2], "granted out of order: {order:?}");
    Ok(())
}

/// Readers share, a writer excludes them, and a waiting reader wakes on the write release.
async fn rwlock_shares_and_excludes(target: &ClientBuilder) -> anyhow::Result<()> {
    let a = client(target).await?.rwlock("topology:rw")?;
    let b = client(target).await?.rwlock("topology:rw")?;
    let read_a = a.read().await?;
    let read_b = {
        let b = b.clone();
        tokio::spawn(async move { b.read().await }).await??
    };
    let blocked = {
        let b = b.clone();
        tokio::spawn(async move { b.try_write().await }).await??
    };
    anyhow::ensure!(blocked.is_none(), "a writer got in beside readers");
    read_a.unlock().await?;
    read_b.unlock().await?;
    let write = a.write().await?;
    let reader = tokio::spawn(async move { b.read().await?.unlock().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    anyhow::ensure!(!reader.is_finished(), "a reader got in beside the writer");
    write.unlock().await?;
    tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .context("the reader was not woken")???;
    Ok(())
}

/// The simple lock through the backend-neutral contract, and a release waking a waiter in
/// another client.
async fn simple_lock_through_the_contract(target: &ClientBuilder) -> anyhow::Result<()> {
    let holder = client(target).await?;
    let lock = holder
        .simple_lock("topology:simple")?
        .with_lease(Lease::Fixed(Duration::from_secs(60)))?;
    let guard = DistributedLock::lock(&lock).await?;
    anyhow::ensure!(DistributedLock::try_lock(&lock).await?.is_none());
    let token = Fenced::fencing_token(&guard);
    Guard::unlock(guard).await?;
    let again = DistributedLock::lock(&lock).await?;
    anyhow::ensure!(Fenced::fencing_token(&again) > token);

    // A waiter in another client registers as waiting, and the release wakes it: well
    // before the lease would have run out.
    let waiting = client(target)
        .await?
        .simple_lock("topology:simple")?
        .with_lease(Lease::Fixed(Duration::from_secs(60)))?;
    let waiter = tokio::spawn(async move { waiting.lock().await?.unlock().await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while holder
        .inspect("topology:simple")
        .await?
        .first()
        .and_then(|e| e.waiting_clients)
        != Some(1)
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the waiter never registered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Guard::unlock(again).await?;
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .context("the release did not wake the waiter")???;
    Ok(())
}

/// Permits are counted, and a release wakes a waiter in another client.
async fn semaphores_count_and_wake(target: &ClientBuilder) -> anyhow::Result<()> {
    let client_a = client(target).await?;
    let semaphore = client_a.semaphore("topology:sem")?;
    semaphore.try_set_permits(2).await?;
    let one = semaphore.acquire().await?;
    let two = semaphore.acquire().await?;
    anyhow::ensure!(semaphore.try_acquire().await?.is_none());
    let other = client(target).await?.semaphore("topology:sem")?;
    let waiter = tokio::spawn(async move { other.acquire().await?.release().await });
    one.release().await?;
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .context("the waiter was not woken")???;
    two.release().await?;

    let expirable = client_a
        .expirable_semaphore("topology:xsem")?
        .with_lease(Lease::Fixed(Duration::from_secs(5)))?;
    expirable.try_set_permits(1).await?;
    let permit = expirable.acquire().await?;
    anyhow::ensure!(expirable.try_acquire().await?.is_none());
    permit.release().await?;
    Ok(())
}

/// The last count-down opens the latch for a waiter in another client.
async fn latch_opens(target: &ClientBuilder) -> anyhow::Result<()> {
    let latch = client(target).await?.count_down_latch("topology:latch")?;
    latch.try_set_count(2).await?;
    let other = client(target).await?.count_down_latch("topology:latch")?;
    let waiter = tokio::spawn(async move { other.wait().await });
    latch.count_down().await?;
    latch.count_down().await?;
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .context("the waiter was not woken")???;
    Ok(())
}

/// Ids, fenced writes and the multi-lock.
async fn ids_fences_and_multi_lock(target: &ClientBuilder) -> anyhow::Result<()> {
    let client = client(target).await?;
    let ids = client.id_generator().next_ids("topology", 100).await?;
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    anyhow::ensure!(sorted.len() == 100, "ids repeat");

    let guard = client.lock("topology:ledger")?.lock().await?;
    let token = guard.fencing_token();
    anyhow::ensure!(
        client
            .fenced_set("topology:balance", b"1", token)
            .await?
            .is_accepted()
    );
    guard.unlock().await?;
    let newer = client.lock("topology:ledger")?.lock().await?;
    anyhow::ensure!(
        client
            .fenced_set("topology:balance", b"2", newer.fencing_token())
            .await?
            .is_accepted()
    );
    anyhow::ensure!(
        !client
            .fenced_set("topology:balance", b"stale", token)
            .await?
            .is_accepted(),
        "a stale token was accepted"
    );
    newer.unlock().await?;

    // Members on different slots of a cluster.
    let multi = ferrisson_redis::MultiLock::new(vec![
        client.lock("topology:m1")?,
        client.lock("topology:m2")?,
        client.lock("topology:m3")?,
    ])?;
    let all = multi.lock().await?;
    anyhow::ensure!(client.lock("topology:m2")?.is_locked().await?);
    all.unlock().await?;
    Ok(())
}

/// One leader at a time; a resignation elects the next candidate, with a larger token.
async fn election_hands_leadership_over(target: &ClientBuilder) -> anyhow::Result<()> {
    let first = client(target).await?.election("topology:leader")?;
    let second = client(target).await?.election("topology:leader")?;
    let term = first.campaign().await?;
    anyhow::ensure!(second.try_campaign().await?.is_none(), "two leaders");
    let next = tokio::spawn(async move { second.campaign().await });
    let token = term.fencing_token();
    term.resign().await?;
    let next_term = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .context("the next candidate was not elected")???;
    anyhow::ensure!(next_term.fencing_token() > token);
    next_term.resign().await?;
    Ok(())
}

/// The rate holds across clients: a burst of 5, then denials with a retry time.
async fn rate_limiter_holds_across_clients(target: &ClientBuilder) -> anyhow::Result<()> {
    let rate = ferrisson_redis::Rate::per_minute(5)?;
    let a = client(target).await?.rate_limiter("topology:rate", rate)?;
    let b = client(target).await?.rate_limiter("topology:rate", rate)?;
    let mut allowed = 0;
    for limiter in [&a, &b, &a, &b, &a, &b, &a, &b] {
        if let ferrisson_redis::RateDecision::Allowed { .. } = limiter.try_acquire(1).await? {
            allowed += 1;
        }
    }
    anyhow::ensure!(allowed == 5, "{allowed} permits allowed, the burst is 5");
    Ok(())
}

/// The inspector lists locks on every master and counts a waiting client where the lock's
/// channel lives.
async fn inspector_sees_every_master(target: &ClientBuilder) -> anyhow::Result<()> {
    use ferrisson_redis::inspect::PrimitiveKind;
    // The default (30 s) lease: this case is about what the inspector sees, and with the
    // other cases' 900 ms a renewal starved by a loaded machine could end a hold under
    // inspection, which is not what it tests.
    let holder = target.clone().connect().await?;
    // Twenty names land in slots served by every master of a three-master cluster.
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(holder.lock(&format!("topology:scan:{i}"))?.lock().await?);
    }
    let entries = holder.scan("topology:scan:*").await?;
    let mut names: Vec<&str> = entries
        .iter()
        .filter(|entry| entry.kind == PrimitiveKind::Lock)
        .map(|entry| entry.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    anyhow::ensure!(names.len() == 20, "the scan found {names:?}");

    let waiter = client(target).await?.lock("topology:scan:7")?;
    let waiting = tokio::spawn(async move { waiter.lock().await?.unlock().await });
    let counted = async {
        loop {
            let entries = holder.inspect("topology:scan:7").await?;
            let lock = entries
                .iter()
                .find(|entry| entry.kind == PrimitiveKind::Lock)
                .context("no lock entry")?;
            if lock.waiting_clients == Some(1) {
                return anyhow::Ok(());
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), counted)
        .await
        .context("the waiting client was never counted")??;
    for guard in guards {
        guard.unlock().await?;
    }
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .context("the waiter was not granted")???;
    Ok(())
}

/// Runs every case against `target` (a builder with the topology's URL and any TLS or
/// credential settings), naming the case that failed.
pub async fn every_case(target: &ClientBuilder) -> anyhow::Result<()> {
    macro_rules! cases {
        ($($case:ident),+ $(,)?) => {
            $(
                $case(target).await.context(stringify!($case))?;
            )+
        };
    }
    cases!(
        lock_excludes_and_hands_off,
        release_wakes_a_waiter_elsewhere,
        lock_reenters_renews_and_signals_loss,
        fair_lock_grants_in_order,
        rwlock_shares_and_excludes,
        simple_lock_through_the_contract,
        semaphores_count_and_wake,
        latch_opens,
        ids_fences_and_multi_lock,
        election_hands_leadership_over,
        rate_limiter_holds_across_clients,
        inspector_sees_every_master,
    );
    Ok(())
}
