//! Waiters whose wake-up message never reaches them: Redisson's "missed unlock message,
//! the waiter sleeps 30 s or hangs" (#1763, #5503), for every primitive that waits.
//!
//! Two ways to lose the message:
//!
//! * `*_release_while_subscription_is_down`: the waiter's connection, which carries its
//!   subscription, is killed and the release publishes while no subscription is back.
//!   The holder keeps a 30 s lease (semaphore and latch waiters recheck every 30 s), so
//!   only the wake-up that a lost connection gives every waiter explains a grant within
//!   [`WAKE_BOUND`].
//! * `*_without_any_message`: the holder's key goes away by a raw `DEL` (or a permit comes
//!   back by a raw `INCR`), which publishes nothing, as when a key expires or a message is
//!   lost in transit. The waiter must try again when the holder's 2 s lease would have run
//!   out (semaphore and latch: their default recheck interval), not sleep on.
//!
//! Every wait is the unbounded one (`lock()`, `read()`, `acquire()`, `wait()`) under an
//! outer timeout. The library's own timed waits (`lock_timeout` and the like) try once
//! more at their deadline, so they return the lock even when no wake-up ever came.

mod common;

use std::time::Duration;

use common::{eventually, raw};
use ferrisson_redis::{Client, Lease};
use ferrisson_testkit::{FaultProxy, RedisServer};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

/// The holder's lease (and the recheck interval of semaphore and latch waiters) when only
/// a wake-up may explain a prompt grant.
const LONG_LEASE: Duration = Duration::from_secs(30);
/// The holder's lease when the waiter is expected to wake because it ran out.
const SHORT_LEASE: Duration = Duration::from_secs(2);
/// How long a waiter may take: far more than a wake-up or [`SHORT_LEASE`] needs, and well
/// under [`LONG_LEASE`].
const WAKE_BOUND: Duration = Duration::from_secs(10);
/// How long setting up the waiter may take; only there so a bug fails instead of hanging.
const SETTLE: Duration = Duration::from_secs(10);

/// A waiter's client behind a fault proxy, a holder's client and a raw connection, both
/// straight to the server.
struct Rig {
    _server: RedisServer,
    proxy: FaultProxy,
    waiter: Client,
    holder: Client,
    admin: MultiplexedConnection,
}

impl Rig {
    async fn start() -> anyhow::Result<Self> {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::start(server.port()).await?;
        let waiter = Client::connect(&proxy.url()).await?;
        let holder = Client::connect(&server.url()).await?;
        let admin = raw(&server).await?;
        Ok(Self {
            _server: server,
            proxy,
            waiter,
            holder,
            admin,
        })
    }

    /// Waits until the waiter has subscribed and made its attempt after subscribing: from
    /// then on it sleeps until a message, a lost connection or the end of its nap. Acting
    /// earlier could kill no subscription at all, or catch the attempt in flight.
    async fn until_waiter_parked(&self) -> anyhow::Result<()> {
        let parked = eventually(SETTLE, || {
            let mut admin = self.admin.clone();
            async move { waiter_parked(&mut admin).await.unwrap_or(false) }
        })
        .await;
        anyhow::ensure!(parked, "the waiter never subscribed and parked");
        Ok(())
    }

    /// Kills the waiting client's connection and runs `release` while its channel has no
    /// subscriber, so the release's message reaches nobody.
    ///
    /// The client reconnects and subscribes again on its own at once, so a kill followed
    /// by a release would race the resubscription. The proxy closes that window: it holds
    /// back every reply to the waiter's client from before the kill until after the
    /// release. A new connection subscribes only once the server answered its handshake,
    /// so however fast the reconnect, nothing is subscribed while the release publishes;
    /// `PUBSUB CHANNELS` checks that before and after it.
    async fn release_unheard<T>(
        &mut self,
        release: impl Future<Output = ferrisson_redis::Result<T>>,
    ) -> anyhow::Result<T> {
        self.until_waiter_parked().await?;
        let proxy = self.proxy.control();
        proxy.set_hold_replies(true);
        let killed: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut self.admin)
            .await?;
        assert_eq!(killed, 1, "the waiting client's connection was killed");
        assert_eq!(channels(&mut self.admin).await?, Vec::<String>::new());
        let released = release.await?;
        assert_eq!(
            channels(&mut self.admin).await?,
            Vec::<String>::new(),
            "nobody was subscribed while the release published"
        );
        proxy.set_hold_replies(false);
        Ok(released)
    }
}

/// Whether a client subscribed to a shard channel last sent something other than
/// `SSUBSCRIBE`.
async fn waiter_parked(admin: &mut MultiplexedConnection) -> anyhow::Result<bool> {
    let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(admin).await?;
    Ok(clients.lines().any(|line| {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        };
        field("ssub").is_some_and(|n| n != "0") && field("cmd").is_some_and(|c| c != "ssubscribe")
    }))
}

/// Every shard channel with a subscriber.
async fn channels(admin: &mut MultiplexedConnection) -> anyhow::Result<Vec<String>> {
    Ok(redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(admin)
        .await?)
}

/// Runs a waiting task to its end, failing once [`WAKE_BOUND`] has passed.
async fn woken<T>(
    waiter: tokio::task::JoinHandle<ferrisson_redis::Result<T>>,
    what: &str,
) -> anyhow::Result<T> {
    match tokio::time::timeout(WAKE_BOUND, waiter).await {
        Ok(joined) => Ok(joined??),
        Err(_) => anyhow::bail!("{what}: no wake-up within {WAKE_BOUND:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_release_while_subscription_is_down() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let held = rig
        .holder
        .lock("missed")?
        .with_lease(Lease::Fixed(LONG_LEASE))?
        .lock()
        .await?;
    let lock = rig.waiter.lock("missed")?;
    let waiter = tokio::spawn(async move { lock.lock().await });
    rig.release_unheard(held.unlock()).await?;
    let guard = woken(waiter, "lock waiter after its connection was killed").await?;
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_without_any_message() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let _held = rig
        .holder
        .lock("silent")?
        .with_lease(Lease::Fixed(SHORT_LEASE))?
        .lock()
        .await?;
    let lock = rig.waiter.lock("silent")?;
    let waiter = tokio::spawn(async move { lock.lock().await });
    rig.until_waiter_parked().await?;
    let deleted: u64 = rig.admin.del("{silent}").await?;
    assert_eq!(deleted, 1);
    let guard = woken(waiter, "lock waiter after a silent DEL").await?;
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_release_while_subscription_is_down() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let held = rig
        .holder
        .fair_lock("missed")?
        .with_lease(Lease::Fixed(LONG_LEASE))?
        .lock()
        .await?;
    // Queued waiters also wake every third of their keep-alive to refresh their entry:
    // made longer than the bound, so that cannot explain the grant either.
    let lock = rig
        .waiter
        .fair_lock("missed")?
        .with_waiter_keepalive(LONG_LEASE * 2)?;
    let waiter = tokio::spawn(async move { lock.lock().await });
    rig.release_unheard(held.unlock()).await?;
    let guard = woken(waiter, "fair lock waiter after its connection was killed").await?;
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_without_any_message() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let _held = rig
        .holder
        .fair_lock("silent")?
        .with_lease(Lease::Fixed(SHORT_LEASE))?
        .lock()
        .await?;
    let lock = rig
        .waiter
        .fair_lock("silent")?
        .with_waiter_keepalive(LONG_LEASE * 2)?;
    let waiter = tokio::spawn(async move { lock.lock().await });
    rig.until_waiter_parked().await?;
    // The lock hash only: the waiter's queue entry stays, as after an expiry.
    let deleted: u64 = rig.admin.del("{silent}").await?;
    assert_eq!(deleted, 1);
    let guard = woken(waiter, "fair lock waiter after a silent DEL").await?;
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_reader_release_while_subscription_is_down() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let writer = rig
        .holder
        .rwlock("missed")?
        .with_lease(Lease::Fixed(LONG_LEASE))?
        .write()
        .await?;
    let lock = rig.waiter.rwlock("missed")?;
    let reader = tokio::spawn(async move { lock.read().await });
    rig.release_unheard(writer.unlock()).await?;
    let guard = woken(reader, "reader after its connection was killed").await?;
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_reader_without_any_message() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let _writer = rig
        .holder
        .rwlock("silent")?
        .with_lease(Lease::Fixed(SHORT_LEASE))?
        .write()
        .await?;
    let lock = rig.waiter.rwlock("silent")?;
    let reader = tokio::spawn(async move { lock.read().await });
    rig.until_waiter_parked().await?;
    let deleted: u64 = rig.admin.del("{silent}").await?;
    assert_eq!(deleted, 1);
    let guard = woken(reader, "reader after a silent DEL").await?;
    assert!(guard.is_held());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_release_while_subscription_is_down() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let holder = rig.holder.semaphore("missed")?;
    assert!(holder.try_set_permits(1).await?);
    let permit = holder
        .try_acquire()
        .await?
        .expect("the only permit is free");
    let semaphore = rig
        .waiter
        .semaphore("missed")?
        .with_recheck_interval(LONG_LEASE)?;
    let waiter = tokio::spawn(async move { semaphore.acquire().await });
    rig.release_unheard(permit.release()).await?;
    let permit = woken(waiter, "semaphore waiter after its connection was killed").await?;
    assert_eq!(holder.available_permits().await?, 0);
    permit.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_without_any_message() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let holder = rig.holder.semaphore("silent")?;
    assert!(holder.try_set_permits(1).await?);
    let permit = holder
        .try_acquire()
        .await?
        .expect("the only permit is free");
    // Permits have no lease: the default recheck interval (1 s) is what bounds the wait.
    let semaphore = rig.waiter.semaphore("silent")?;
    let waiter = tokio::spawn(async move { semaphore.acquire().await });
    rig.until_waiter_parked().await?;
    let permits: i64 = rig.admin.incr("{silent}", 1).await?;
    assert_eq!(permits, 1);
    let got = woken(waiter, "semaphore waiter after a silent INCR").await?;
    assert_eq!(holder.available_permits().await?, 0);
    // The raw INCR already gave this one back.
    let _ = permit.forget();
    got.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_release_while_subscription_is_down() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let holder = rig.holder.count_down_latch("missed")?;
    assert!(holder.try_set_count(1).await?);
    let latch = rig
        .waiter
        .count_down_latch("missed")?
        .with_recheck_interval(LONG_LEASE)?;
    let waiter = tokio::spawn(async move { latch.wait().await });
    let left = rig.release_unheard(holder.count_down()).await?;
    assert_eq!(left, 0);
    woken(waiter, "latch waiter after its connection was killed").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_without_any_message() -> anyhow::Result<()> {
    let mut rig = Rig::start().await?;
    let holder = rig.holder.count_down_latch("silent")?;
    assert!(holder.try_set_count(1).await?);
    // The default recheck interval (2 s) is what bounds the wait.
    let latch = rig.waiter.count_down_latch("silent")?;
    let waiter = tokio::spawn(async move { latch.wait().await });
    rig.until_waiter_parked().await?;
    let deleted: u64 = rig.admin.del("{silent}").await?;
    assert_eq!(deleted, 1);
    woken(waiter, "latch waiter after a silent DEL").await?;
    assert_eq!(holder.count().await?, 0);
    Ok(())
}
