//! The test bodies: each takes a [`Store`], uses fresh lock names, and panics with what
//! it saw when the store breaks a promise of the contract.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_core::capabilities::{Fencing, Reentry};
use ferrisson_core::{DistributedLock, Error, FencingToken, Guard, Lease, Result};
use tokio::time::Instant;

use crate::{Store, expect_invalid, fresh_name};

/// How many times each contender takes the lock in the exclusion bodies.
const ROUNDS: usize = 10;
/// How long a holder stays inside, so that an overlap would have time to show.
const INSIDE: Duration = Duration::from_millis(2);

/// One critical section under `lock`: nobody else may be inside while this one is.
async fn critical_section<L: DistributedLock>(lock: &L, inside: &AtomicBool) -> Result<()> {
    let guard = lock.lock().await?;
    assert!(
        !inside.swap(true, Ordering::SeqCst),
        "two holders of {:?} at once",
        lock.name()
    );
    tokio::time::sleep(INSIDE).await;
    inside.store(false, Ordering::SeqCst);
    guard.unlock().await
}

/// Eight tasks of one client take the lock in turn; never two at once.
///
/// # Errors
///
/// A store error met on the way.
pub async fn excludes_across_tasks<S: Store>(store: &S) -> Result<()> {
    let lock = store.lock(&fresh_name("tasks"), Lease::Watchdog)?;
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (lock, inside, done) = (lock.clone(), Arc::clone(&inside), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                critical_section(&lock, &inside).await?;
                done.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<(), Error>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| Error::Protocol(format!("a task failed: {e}")))??;
    }
    assert_eq!(done.load(Ordering::SeqCst), 8 * ROUNDS);
    Ok(())
}

/// Four clients, two tasks each, take the lock in turn; never two at once.
///
/// # Errors
///
/// A store error met on the way.
pub async fn excludes_across_clients<S: Store>(store: &S) -> Result<()> {
    let name = fresh_name("clients");
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = store.another_client().await?;
        let lock = client.lock(&name, Lease::Watchdog)?;
        for _ in 0..2 {
            let (lock, inside) = (lock.clone(), Arc::clone(&inside));
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    critical_section(&lock, &inside).await?;
                }
                Ok::<(), Error>(())
            }));
        }
    }
    for task in tasks {
        task.await
            .map_err(|e| Error::Protocol(format!("a task failed: {e}")))??;
    }
    Ok(())
}

/// The holder's own task re-enters when the lock declares it (same token, and each hold
/// released separately), and is refused when it does not; another task is refused
/// either way.
///
/// # Errors
///
/// A store error met on the way.
pub async fn reentry_is_as_declared<S: Store>(store: &S) -> Result<()> {
    let lock = store.lock(&fresh_name("reentry"), Lease::Watchdog)?;
    let declared = lock.capabilities().reentry;
    let outer = lock.lock().await?;
    let inner = lock.try_lock().await?;
    let elsewhere = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.try_lock().await.map(|g| g.is_some()) })
            .await
            .map_err(|e| Error::Protocol(format!("the task failed: {e}")))??
    };
    assert!(!elsewhere, "another task took {:?} while held", lock.name());
    match declared {
        Reentry::PerTask | Reentry::PerSession => {
            let inner = inner.unwrap_or_else(|| {
                panic!("{declared:?} declared, but the holder's task could not re-enter")
            });
            inner.unlock().await?;
            // The outer hold is still there: one release per hold.
            let other = store.another_client().await?;
            let from_outside = other.lock(DistributedLock::name(&lock), Lease::Watchdog)?;
            let taken =
                tokio::spawn(async move { from_outside.try_lock().await.map(|g| g.is_some()) })
                    .await
                    .map_err(|e| Error::Protocol(format!("the task failed: {e}")))??;
            assert!(!taken, "releasing the inner hold released the outer one");
        }
        _ => {
            assert!(
                inner.is_none(),
                "re-entry not declared, but the holder's task took the lock again"
            );
        }
    }
    outer.unlock().await?;
    assert!(
        lock.try_lock().await?.is_some(),
        "still held after the last release"
    );
    Ok(())
}

/// `try_lock` answers `None` at once while another client holds the lock;
/// `lock_timeout` waits its bound (no less) and answers `None`; once released, both get
/// the lock.
///
/// # Errors
///
/// A store error met on the way.
pub async fn try_and_timeout_semantics<S: Store>(store: &S) -> Result<()> {
    let name = fresh_name("try");
    let holder = store.lock(&name, Lease::Watchdog)?;
    let other = store.another_client().await?;
    let waiter = other.lock(&name, Lease::Watchdog)?;
    let guard = holder.lock().await?;
    let tried = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.try_lock().await.map(|g| g.is_some()) }
    });
    assert!(
        !tried.await.map_err(|e| Error::Protocol(e.to_string()))??,
        "try_lock took a held lock"
    );
    let bound = Duration::from_millis(150);
    let started = Instant::now();
    let timed = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock_timeout(bound).await.map(|g| g.is_some()) }
    });
    assert!(
        !timed.await.map_err(|e| Error::Protocol(e.to_string()))??,
        "lock_timeout took a held lock"
    );
    assert!(
        started.elapsed() >= bound,
        "lock_timeout gave up after {:?}, before its bound of {bound:?}",
        started.elapsed()
    );
    guard.unlock().await?;
    let again = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let guard = waiter.lock_timeout(Duration::from_secs(30)).await?;
            match guard {
                Some(guard) => guard.unlock().await.map(|()| true),
                None => Ok(false),
            }
        }
    });
    assert!(
        again.await.map_err(|e| Error::Protocol(e.to_string()))??,
        "the released lock was not granted within 30 s"
    );
    Ok(())
}

/// A waiter dropped mid-wait leaves nothing behind: after the holder releases, a third
/// client takes the lock at once (no queue entry, no hold of the cancelled waiter's).
///
/// # Errors
///
/// A store error met on the way.
pub async fn cancelled_wait_leaves_nothing_behind<S: Store>(store: &S) -> Result<()> {
    let name = fresh_name("cancel");
    let holder = store.lock(&name, Lease::Watchdog)?;
    let guard = holder.lock().await?;
    let waiting_client = store.another_client().await?;
    let waiting = waiting_client.lock(&name, Lease::Watchdog)?;
    let wait = tokio::spawn(async move { waiting.lock().await.map(drop) });
    // Let the wait reach the store and settle into waiting, then cancel it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    wait.abort();
    assert!(
        wait.await.is_err_and(|e| e.is_cancelled()),
        "the wait ended by itself while the lock was held"
    );
    guard.unlock().await?;
    let third = store.another_client().await?;
    let lock = third.lock(&name, Lease::Watchdog)?;
    let taken = lock.lock_timeout(Duration::from_secs(10)).await?;
    assert!(
        taken.is_some(),
        "a cancelled waiter left something behind: the lock stayed taken"
    );
    Ok(())
}

/// When an administrator ends the hold, the holder's `lost()` resolves (within the
/// store's stated delay) and `is_held()` turns false.
///
/// # Errors
///
/// A store error met on the way.
pub async fn lost_fires_when_ended_behind_the_back<S: Store>(store: &S) -> Result<()> {
    let name = fresh_name("lost");
    let lock = store.lock(&name, Lease::Watchdog)?;
    let guard = lock.lock().await?;
    assert!(guard.is_held());
    store.end_hold_behind_the_back(&name).await?;
    let bound = store.lost_within();
    assert!(
        tokio::time::timeout(bound, guard.lost()).await.is_ok(),
        "lost() did not fire within {bound:?} after the hold was ended"
    );
    assert!(!guard.is_held(), "is_held() after lost()");
    assert_eq!(guard.remaining(), Duration::ZERO);
    // Its release then reports the loss, or finds nothing to do; never someone else's.
    let _ = guard.unlock().await;
    Ok(())
}

/// Where the lock declares a token: every new holder's is larger than every earlier
/// one's, across holders of one client, other clients and a fresh client (a restart);
/// a re-entry keeps its token.
///
/// # Errors
///
/// A store error met on the way.
pub async fn tokens_increase_across_holders_clients_and_restarts<S: Store>(
    store: &S,
) -> Result<()> {
    let name = fresh_name("tokens");
    let probe = store.lock(&name, Lease::Watchdog)?;
    if probe.capabilities().fencing == Fencing::None {
        let guard = probe.lock().await?;
        assert!(
            S::token_of(&guard).is_none(),
            "no token declared, but the guard has one"
        );
        return guard.unlock().await;
    }
    let mut last: Option<FencingToken> = None;
    for round in 0..6 {
        let client = if round % 2 == 0 {
            store.another_client().await?
        } else {
            store.another_client().await?.another_client().await?
        };
        let lock = client.lock(&name, Lease::Watchdog)?;
        let token = held_token::<S>(&lock).await?;
        if let Some(last) = last {
            assert!(
                token > last,
                "token {token} after {last}: tokens must grow with every holder"
            );
        }
        last = Some(token);
    }
    Ok(())
}

/// The token of one hold of `lock`, released after; with re-entry declared, a re-entry
/// shows the same token.
async fn held_token<S: Store>(lock: &S::Lock) -> Result<FencingToken> {
    let guard = lock.lock().await?;
    let token = S::token_of(&guard).unwrap_or_else(|| {
        panic!(
            "{:?} declares a fencing token, but its guard has none",
            lock.name()
        )
    });
    if matches!(
        lock.capabilities().reentry,
        Reentry::PerTask | Reentry::PerSession
    ) {
        let again = lock.try_lock().await?.expect("re-entry declared");
        assert_eq!(
            S::token_of(&again),
            Some(token),
            "a re-entry changed the token"
        );
        again.unlock().await?;
    }
    guard.unlock().await?;
    Ok(token)
}

/// A fixed lease runs out while the holder sleeps: `lost()` fires, and `unlock` then
/// reports [`Error::LeaseExpired`] (or [`Error::NotOwner`] when another holder has it).
///
/// # Errors
///
/// A store error met on the way.
pub async fn unlocking_an_expired_hold_is_the_typed_error<S: Store>(store: &S) -> Result<()> {
    let lease = store.short_lease();
    let lock = store.lock(&fresh_name("expired"), Lease::Fixed(lease))?;
    let guard = lock.lock().await?;
    assert!(
        tokio::time::timeout(lease * 20, guard.lost()).await.is_ok(),
        "a fixed lease of {lease:?} did not end within {:?}",
        lease * 20
    );
    match guard.unlock().await {
        Err(Error::LeaseExpired { .. } | Error::NotOwner { .. }) => Ok(()),
        other => panic!("unlocking an expired hold: expected LeaseExpired, got {other:?}"),
    }
}

/// An empty name and a zero lease are refused with [`Error::InvalidArgument`].
///
/// # Errors
///
/// Never: refusals are the expected outcome.
pub async fn bad_names_and_leases_are_refused<S: Store>(store: &S) -> Result<()> {
    expect_invalid("an empty name", &store.lock("", Lease::Watchdog));
    expect_invalid(
        "a zero lease",
        &store.lock(&fresh_name("lease"), Lease::Fixed(Duration::ZERO)),
    );
    expect_invalid(
        "a lease of ten years",
        &store.lock(
            &fresh_name("lease"),
            Lease::Fixed(Duration::from_secs(10 * 365 * 24 * 3600)),
        ),
    );
    Ok(())
}
