//! MultiLock over locks on two independent redis-server processes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_redis::{
    Client, Error, InspectMembers, Lease, Lock, LockGuard, MultiLock, MultiLockGuard,
};
use ferrisson_testkit::RedisServer;
use tokio::time::Instant;

struct Setup {
    servers: Vec<RedisServer>,
}

impl Setup {
    fn start() -> anyhow::Result<Self> {
        Ok(Self {
            servers: vec![RedisServer::start()?, RedisServer::start()?],
        })
    }

    /// One client per server, as a separate process would have.
    async fn clients(&self) -> anyhow::Result<Vec<Client>> {
        let mut clients = Vec::new();
        for server in &self.servers {
            clients.push(
                Client::builder(&server.url())
                    .response_timeout(Duration::from_millis(500))
                    .reconnect_retries(0)
                    .connect()
                    .await?,
            );
        }
        Ok(clients)
    }

    /// Lock "a" on the first server and "b" on the second.
    async fn pair(&self) -> anyhow::Result<(Lock, Lock)> {
        let clients = self.clients().await?;
        Ok((clients[0].lock("a")?, clients[1].lock("b")?))
    }

    fn exists(&self, server: usize, key: &str) -> anyhow::Result<bool> {
        Ok(self.servers[server].command(&["EXISTS", key])? == ":1")
    }
}

/// Polls `check` every 10 ms for at most `within`; for states reached inside another
/// task that offer no event to await.
async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Holds `lock` on a task of its own until `release` fires.
fn hold_elsewhere(
    lock: Lock,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
    tokio::sync::oneshot::Receiver<ferrisson_redis::FencingToken>,
) {
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let guard = lock.lock().await?;
        let _ = held_tx.send(guard.fencing_token());
        let _ = release_rx.await;
        guard.unlock().await?;
        Ok(())
    });
    (release_tx, task, held_rx)
}

#[tokio::test]
async fn bad_input_and_defaults() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let (a, b) = setup.pair().await?;
    assert!(matches!(
        MultiLock::<Lock>::new(Vec::new()),
        Err(Error::InvalidArgument(_))
    ));
    let multi = MultiLock::new(vec![a.clone(), b.clone()])?;
    assert_eq!(multi.len(), 2);
    assert!(!multi.is_empty());
    assert_eq!(multi.wait_budget(), Duration::from_secs(3));
    assert_eq!(
        MultiLock::new(vec![a.clone()])?.wait_budget(),
        Duration::from_millis(1500)
    );
    assert!(matches!(
        multi.clone().with_wait_budget(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        multi
            .with_wait_budget(Duration::from_secs(9))?
            .wait_budget(),
        Duration::from_secs(9)
    );
    Ok(())
}

#[tokio::test]
async fn takes_every_member_and_one_unlock_releases_all() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let (a, b) = setup.pair().await?;
    let multi = MultiLock::new(vec![a.clone(), b.clone()])?;
    let guard = multi.try_lock().await?.expect("both free");
    assert!(guard.is_held());
    assert!(setup.exists(0, "{a}")? && setup.exists(1, "{b}")?);
    let tokens = guard.fencing_tokens();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0], guard.guards()[0].fencing_token());
    assert_eq!(guard.guards()[1].name(), "b");

    let info = multi.inspect().await?;
    assert_eq!(info.members.len(), 2);
    for (member, guard) in info.members.iter().zip(guard.guards()) {
        assert_eq!(member.name, guard.name());
        assert_eq!(member.holder, Some(guard.owner()));
        assert_eq!(member.fencing_token, Some(guard.fencing_token()));
        assert!(member.ttl.is_some());
    }
    assert_eq!(info.members[0].name, "a");
    let shortest = guard
        .guards()
        .iter()
        .map(ferrisson_redis::LockGuard::remaining)
        .min();
    assert!(guard.remaining() > Duration::ZERO);
    assert!(Some(guard.remaining()) <= shortest);

    guard.unlock().await?;
    assert!(!setup.exists(0, "{a}")? && !setup.exists(1, "{b}")?);
    assert!(
        multi
            .inspect()
            .await?
            .members
            .iter()
            .all(|m| m.holder.is_none() && m.ttl.is_none())
    );

    // Every new holder of a member gets a greater token.
    let again = multi.lock().await?;
    let newer = again.fencing_tokens();
    assert!(newer[0] > tokens[0] && newer[1] > tokens[1]);
    drop(again);
    // Drop releases every member on spawned tasks: another process can take them.
    let (a2, b2) = setup.pair().await?;
    let other = MultiLock::new(vec![a2, b2])?;
    let guard = other
        .lock_timeout(Duration::from_secs(5))
        .await?
        .expect("released on drop");
    guard.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn a_lock_named_twice_is_re_entered() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let (a, b) = setup.pair().await?;
    let multi = MultiLock::new(vec![a.clone(), b, a.clone()])?;
    let guard = multi.try_lock().await?.expect("free");
    let tokens = guard.fencing_tokens();
    assert_eq!(tokens[0], tokens[2], "one hold, entered twice");
    assert_eq!(a.hold_count().await?, 2);
    guard.unlock().await?;
    assert!(!setup.exists(0, "{a}")?);
    Ok(())
}

#[tokio::test]
async fn a_taken_member_fails_try_lock_and_the_rest_is_released() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let (a, b) = setup.pair().await?;
    let (_, b_elsewhere) = setup.pair().await?;
    let (release, holder, held) = hold_elsewhere(b_elsewhere);
    held.await?;

    let multi = MultiLock::new(vec![a.clone(), b.clone()])?;
    assert!(multi.try_lock().await?.is_none());
    assert!(
        !setup.exists(0, "{a}")?,
        "the member taken before the failure was released"
    );

    let started = Instant::now();
    assert!(
        multi
            .lock_timeout(Duration::from_millis(300))
            .await?
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!setup.exists(0, "{a}")?, "nothing is held after a timeout");

    release
        .send(())
        .map_err(|()| anyhow::anyhow!("holder gone"))?;
    holder.await??;
    let guard = multi.try_lock().await?.expect("free now");
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_member_without_holding_the_others() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let clients = setup.clients().await?;
    let multi = MultiLock::new(vec![clients[0].lock("a")?, clients[1].lock("b")?])?;
    let (_, b_elsewhere) = setup.pair().await?;
    let (release, holder, held) = hold_elsewhere(b_elsewhere);
    let holder_token = held.await?;

    let waiter = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.lock_timeout(Duration::from_secs(10)).await })
    };
    // Once the waiter subscribed to b's release channel it waits for b alone.
    assert!(
        eventually(Duration::from_secs(5), || clients[1]
            .stats()
            .waiting_channels
            == 1)
        .await
    );
    assert!(
        !setup.exists(0, "{a}")?,
        "a is not held while waiting for b"
    );
    assert!(!waiter.is_finished());

    release
        .send(())
        .map_err(|()| anyhow::anyhow!("holder gone"))?;
    holder.await??;
    let guard: MultiLockGuard<LockGuard> = waiter.await??.expect("acquired once b was released");
    assert!(guard.fencing_tokens()[1] > holder_token);
    assert!(setup.exists(0, "{a}")? && setup.exists(1, "{b}")?);
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_nothing_behind() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let clients = setup.clients().await?;
    let multi = MultiLock::new(vec![clients[0].lock("a")?, clients[1].lock("b")?])?;
    let (_, b_elsewhere) = setup.pair().await?;
    let (release, holder, held) = hold_elsewhere(b_elsewhere);
    held.await?;

    let waiter = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.lock().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || clients[1]
            .stats()
            .waiting_channels
            == 1)
        .await
    );
    waiter.abort();
    assert!(waiter.await.is_err_and(|e| e.is_cancelled()));
    assert!(
        eventually(Duration::from_secs(5), || clients[1]
            .stats()
            .waiting_channels
            == 0)
        .await
    );
    assert_eq!(clients[0].stats().holds, 0);
    assert_eq!(clients[1].stats().holds, 0);
    assert!(!setup.exists(0, "{a}")?);

    release
        .send(())
        .map_err(|()| anyhow::anyhow!("holder gone"))?;
    holder.await??;
    assert!(
        !setup.exists(1, "{b}")?,
        "the cancelled waiter did not take b later"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_do_not_deadlock() -> anyhow::Result<()> {
    const ROUNDS: u64 = 25;
    let setup = Setup::start()?;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for reversed in [false, true, false, true] {
        let (a, b) = setup.pair().await?;
        let members = if reversed { vec![b, a] } else { vec![a, b] };
        let multi = MultiLock::new(members)?;
        let counter = Arc::clone(&counter);
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = multi.lock().await?;
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                let value = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(value + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await?;
            }
            anyhow::Ok(())
        }));
    }
    // A deadlock would hang here; the bound only turns a hang into a failure.
    tokio::time::timeout(Duration::from_secs(60), async {
        for task in tasks {
            task.await??;
        }
        anyhow::Ok(())
    })
    .await??;
    assert_eq!(counter.load(Ordering::SeqCst), 4 * ROUNDS);
    assert!(!setup.exists(0, "{a}")? && !setup.exists(1, "{b}")?);
    Ok(())
}

#[tokio::test]
async fn members_keep_their_leases() -> anyhow::Result<()> {
    let setup = Setup::start()?;
    let renewing = Client::builder(&setup.servers[0].url())
        .watchdog_lease(Duration::from_millis(600))
        .connect()
        .await?;
    let clients = setup.clients().await?;
    let fixed = clients[1]
        .lock("b")?
        .with_lease(Lease::Fixed(Duration::from_millis(1500)))?;
    let multi = MultiLock::new(vec![renewing.lock("a")?, fixed])?;
    let guard = multi.lock().await?;
    // The fixed member's lease bounds the whole guard's.
    assert!(guard.remaining() <= Duration::from_millis(1500));
    // Outliving the watchdog lease twice over is the point: the watchdog member stays
    // (renewed every 200 ms), the fixed one ends at 1.5 s.
    tokio::time::timeout(Duration::from_secs(5), guard.lost()).await?;
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(
        guard.guards()[0].is_held(),
        "the watchdog member is renewed"
    );
    assert!(!guard.guards()[1].is_held(), "the fixed member expired");
    // The local deadline runs out just before the server's expiry.
    assert!(
        eventually(Duration::from_secs(2), || !setup
            .exists(1, "{b}")
            .unwrap_or(true))
        .await
    );
    assert!(setup.exists(0, "{a}")?);
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    assert!(
        !setup.exists(0, "{a}")?,
        "the other members are released anyway"
    );
    Ok(())
}

#[tokio::test]
async fn an_unreachable_member_is_an_error_and_nothing_stays_held() -> anyhow::Result<()> {
    let mut setup = Setup::start()?;
    let (a, b) = setup.pair().await?;
    setup.servers[1].kill()?;
    let multi = MultiLock::new(vec![a, b])?;
    let error = multi.try_lock().await.expect_err("b's server is down");
    assert!(error.is_connection_error(), "{error:?}");
    assert!(!setup.exists(0, "{a}")?);
    let error = multi
        .lock_timeout(Duration::from_secs(1))
        .await
        .expect_err("still down");
    assert!(error.is_connection_error(), "{error:?}");
    assert!(!setup.exists(0, "{a}")?);
    Ok(())
}

#[test]
fn futures_and_guards_are_send() {
    fn sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    sync::<MultiLock<Lock>>();
    sync::<MultiLockGuard<LockGuard>>();
    let multi: Option<MultiLock<Lock>> = None;
    if let Some(multi) = multi {
        send(&multi.lock());
        send(&multi.try_lock());
        send(&multi.lock_timeout(Duration::ZERO));
        send(&multi.inspect());
    }
}
