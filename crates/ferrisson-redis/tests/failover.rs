//! Failovers while locks are held and waited for: a Sentinel failover, a Sentinel master
//! killed, a Cluster master failed over, a slot migrated under a held lock. Every waiter is
//! eventually granted; no two holders are inside at once unless the first one's `lost()`
//! fired; a holder whose lock is gone learns it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use ferrisson_redis::{Client, FencingToken, Lock, LockGuard};
use ferrisson_testkit::{RedisCluster, SentinelGroup, key_slot};

/// The watchdog lease of the clients: long enough to ride out a coordinated failover,
/// short enough that a killed master's locks end within the test.
const LEASE: Duration = Duration::from_secs(3);
/// How long a waiter may take to be granted once the holder released or lost its lock.
const GRANT_BOUND: Duration = Duration::from_secs(30);

async fn client(url: &str) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(LEASE)
        .response_timeout(Duration::from_millis(800))
        .connect()
        .await?)
}

/// A client whose grants and renewals count only once both replicas have them: whichever
/// the sentinels promote then has every lease a holder believes in. (One of two is not
/// enough: during a failover the other replica still follows the old master and
/// acknowledges writes the new master never gets.)
async fn acked_client(url: &str) -> anyhow::Result<Client> {
    acked_client_with_lease(url, LEASE).await
}

/// As [`acked_client`], with another watchdog lease: a waiting acquire rides out an
/// unreachable master for up to one lease, and a killed master's replacement takes a
/// few seconds to be promoted.
async fn acked_client_with_lease(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(Duration::from_millis(800))
        .replica_acks(2, Duration::from_millis(500))
        .connect()
        .await?)
}

/// Who is inside the critical section. A holder may enter only when every holder still
/// inside has been told it lost its lock: two holders that both believe they hold it
/// inside at once is the failure these tests look for.
#[derive(Clone, Default)]
struct Section {
    inside: Arc<Mutex<Vec<Arc<LockGuard>>>>,
}

impl Section {
    fn enter(&self, guard: &Arc<LockGuard>) -> anyhow::Result<()> {
        let mut inside = self
            .inside
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        for other in inside.iter() {
            anyhow::ensure!(
                !other.is_held(),
                "token {} entered while token {} is still held",
                guard.fencing_token(),
                other.fencing_token()
            );
        }
        inside.push(Arc::clone(guard));
        Ok(())
    }

    /// Leaves and hands the guard back for its release.
    fn leave(&self, guard: Arc<LockGuard>) -> anyhow::Result<LockGuard> {
        self.inside
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .retain(|other| !Arc::ptr_eq(other, &guard));
        Arc::try_unwrap(guard).map_err(|_| anyhow::anyhow!("the guard is still shared"))
    }
}

/// Waiters that each take the lock once, enter, leave and release; returns their tokens.
fn spawn_waiters(
    locks: Vec<Lock>,
    section: &Section,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<FencingToken>>> {
    locks
        .into_iter()
        .map(|lock| {
            let section = section.clone();
            tokio::spawn(async move {
                let guard = tokio::time::timeout(GRANT_BOUND * 2, lock.lock())
                    .await
                    .context("a waiter was never granted")??;
                let guard = Arc::new(guard);
                section.enter(&guard)?;
                let token = guard.fencing_token();
                tokio::task::yield_now().await;
                let guard = section.leave(guard)?;
                if guard.is_held() {
                    guard.unlock().await?;
                }
                Ok(token)
            })
        })
        .collect()
}

/// Takes the lock and enters with it.
async fn hold(lock: &Lock, section: &Section) -> anyhow::Result<Arc<LockGuard>> {
    let guard = Arc::new(lock.lock().await?);
    section.enter(&guard)?;
    Ok(guard)
}

/// Lets the holder go (release if still held; a lost hold is only dropped) and collects
/// the waiters' tokens, each greater than the holder's.
async fn hand_over(
    holder: Arc<LockGuard>,
    section: &Section,
    waiters: Vec<tokio::task::JoinHandle<anyhow::Result<FencingToken>>>,
) -> anyhow::Result<()> {
    let first = holder.fencing_token();
    let holder = section.leave(holder)?;
    if holder.is_held() {
        holder.unlock().await.context("the holder's release")?;
    }
    for waiter in waiters {
        let token = waiter.await??;
        anyhow::ensure!(
            token > first,
            "a waiter's token {token} is not above {first}"
        );
    }
    Ok(())
}

/// Blocking test-kit calls from the test's runtime.
fn blocking<T>(f: impl FnOnce() -> std::io::Result<T>) -> anyhow::Result<T> {
    Ok(tokio::task::block_in_place(f)?)
}

/// A Sentinel failover does not stop writes on the old master first: without replica
/// acknowledgements, renewals that land there in the meantime are lost with it, and the
/// holder may believe in a lease the new master does not have (a fault scenario shows
/// it). With them, a renewal counts only once a replica has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failover_while_held_and_waited() -> anyhow::Result<()> {
    let group = blocking(SentinelGroup::start)?;
    let url = group.url();
    let section = Section::default();
    let holder = hold(&acked_client(&url).await?.lock("sentinel:held")?, &section).await?;
    let mut locks = Vec::new();
    for _ in 0..3 {
        locks.push(acked_client(&url).await?.lock("sentinel:held")?);
    }
    let waiters = spawn_waiters(locks, &section);
    let old = blocking(|| group.master())?;
    let new = blocking(|| group.failover())?;
    anyhow::ensure!(new != old);
    // Renewals follow the master; while they cannot reach a replica the lease is not
    // extended, and a holder whose lease ran out has been told.
    tokio::time::sleep(LEASE).await;
    hand_over(holder, &section, waiters).await
}

/// The master killed: the sentinels promote a replica after `down_after`. With both
/// replicas acknowledging, the promoted one has every lease a holder believes in; a
/// holder whose renewals could not reach it in time is told its lock is lost. Until the
/// killed server is back as a replica, two acknowledgements cannot be had: grants wait
/// (fail closed), then go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_master_killed_while_held_and_waited() -> anyhow::Result<()> {
    let mut group = blocking(|| {
        SentinelGroup::builder()
            .down_after(Duration::from_secs(1))
            .start()
    })?;
    let url = group.url();
    let section = Section::default();
    let holder = hold(
        &acked_client(&url).await?.lock("sentinel:killed")?,
        &section,
    )
    .await?;
    let mut locks = Vec::new();
    for _ in 0..3 {
        let waiter = acked_client_with_lease(&url, GRANT_BOUND).await?;
        locks.push(waiter.lock("sentinel:killed")?);
    }
    let waiters = spawn_waiters(locks, &section);
    let old = blocking(|| group.master())?;
    group.servers_mut()[old].kill()?;
    blocking(|| group.wait_for_new_master(old))?;
    blocking(|| group.restart_server(old))?;
    hand_over(holder, &section, waiters).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_failover_while_held_and_waited() -> anyhow::Result<()> {
    let cluster = blocking(RedisCluster::start)?;
    let url = cluster.url();
    let section = Section::default();
    let holder = hold(&client(&url).await?.lock("cluster:held")?, &section).await?;
    let mut locks = Vec::new();
    for _ in 0..3 {
        locks.push(client(&url).await?.lock("cluster:held")?);
    }
    let waiters = spawn_waiters(locks, &section);
    let master = blocking(|| cluster.master_of_key("{cluster:held}"))?;
    let replica = blocking(|| cluster.replicas_of(master))?
        .first()
        .copied()
        .context("the lock's master has no replica")?;
    blocking(|| cluster.failover(replica))?;
    tokio::time::sleep(LEASE * 2).await;
    anyhow::ensure!(
        holder.is_held(),
        "the holder lost its lock in a coordinated failover"
    );
    hand_over(holder, &section, waiters).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slot_migrated_while_held_and_waited() -> anyhow::Result<()> {
    let cluster = blocking(RedisCluster::start)?;
    let url = cluster.url();
    let section = Section::default();
    let long = ferrisson_redis::Lease::Fixed(Duration::from_secs(60));
    // The watchdog lock: renewed across the move.
    let renewed = client(&url).await?.lock("moving")?.lock().await?;
    // A long fixed lease: its waiter can only be woken in time by the release message,
    // which must reach it on the slot's new node.
    let holder = hold(
        &client(&url).await?.lock("moving:fixed")?.with_lease(long)?,
        &section,
    )
    .await?;
    let waiter_lock = client(&url).await?.lock("moving:fixed")?.with_lease(long)?;
    let waiters = spawn_waiters(vec![waiter_lock], &section);
    tokio::time::sleep(Duration::from_millis(200)).await;

    for key in ["{moving}", "{moving:fixed}"] {
        let slot = key_slot(key);
        let source = blocking(|| cluster.master_of_slot(slot))?;
        let target = blocking(|| cluster.masters())?
            .into_iter()
            .find(|&m| m != source)
            .context("no other master")?;
        blocking(|| cluster.migrate_slot(slot, target))?;
    }
    tokio::time::sleep(LEASE * 2).await;
    anyhow::ensure!(renewed.is_held(), "renewals did not follow the moved slot");
    renewed.unlock().await?;
    let started = tokio::time::Instant::now();
    hand_over(holder, &section, waiters).await?;
    anyhow::ensure!(
        started.elapsed() < Duration::from_secs(10),
        "the waiter was not woken by the release (took {:?})",
        started.elapsed()
    );
    Ok(())
}
