//! What the etcd lock promises beyond the shared suite: one key per acquisition on a
//! shared lease, a release that deletes only its own key, a cancelled wait that leaves no
//! key, the lost signal per lock (key deleted, lease revoked, keep-alive failing), and the
//! fenced put.

use std::time::Duration;

use anyhow::Context as _;

use ferrisson_etcd::{Client, DistributedLock, Error, Fenced, FencedPut, Guard};
use ferrisson_testkit::EtcdCluster;

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

async fn keys_under(client: &Client, prefix: &str) -> anyhow::Result<Vec<(String, i64)>> {
    let got = client
        .etcd()
        .kv_client()
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    let mut keys: Vec<(String, i64)> = got
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
            )
        })
        .collect();
    keys.sort_by_key(|(_, revision)| *revision);
    Ok(keys)
}

/// Waits until `prefix` has `count` keys.
async fn until_keys(
    client: &Client,
    prefix: &str,
    count: usize,
) -> anyhow::Result<Vec<(String, i64)>> {
    tokio::time::timeout(SOON, async {
        loop {
            let keys = keys_under(client, prefix).await?;
            if keys.len() == count {
                return anyhow::Ok(keys);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await?
}

async fn start() -> anyhow::Result<(EtcdCluster, Client)> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::builder(&member.url())
        .watchdog_lease(Duration::from_secs(2))
        .connect()
        .await?;
    Ok((member, client))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_of_one_client_queue_on_two_keys() -> anyhow::Result<()> {
    let (_member, client) = start().await?;
    let lock = client.lock("shared")?;
    let guard = lock.lock().await?;
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    let keys = until_keys(&client, "shared/", 2).await?;
    assert_ne!(keys[0].0, keys[1].0);
    for (key, _) in &keys {
        let lease = key.strip_prefix("shared/").expect("under the prefix");
        assert!(
            i64::from_str_radix(lease, 16).is_ok(),
            "{key}: not a lease id in hex"
        );
    }
    assert_eq!(keys[0].0, guard.key());
    assert_eq!(i64::try_from(guard.fencing_token().get())?, keys[0].1);
    guard.unlock().await?;
    let second = tokio::time::timeout(SOON, waiter).await???;
    assert_eq!(second.key(), keys[1].0);
    second.unlock().await?;
    until_keys(&client, "shared/", 0).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_deletes_only_its_own_key() -> anyhow::Result<()> {
    let (member, client) = start().await?;
    let stale = client.lock("ledger")?.lock().await?;
    client.etcd().kv_client().delete(stale.key(), None).await?;
    tokio::time::timeout(SOON, stale.lost()).await?;
    let other = Client::connect(&member.url()).await?;
    let newer = other
        .lock("ledger")?
        .lock_timeout(SOON)
        .await?
        .expect("free after the delete");
    assert!(matches!(
        stale.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    assert!(newer.is_held());
    let keys = keys_under(&client, "ledger/").await?;
    assert_eq!(
        keys,
        [(
            newer.key().to_owned(),
            i64::try_from(newer.fencing_token().get())?
        )]
    );
    newer.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_deletes_its_key() -> anyhow::Result<()> {
    let (member, client) = start().await?;
    let guard = client.lock("queue")?.lock().await?;
    let other = Client::connect(&member.url()).await?;
    let waiting = tokio::spawn({
        let lock = other.lock("queue")?;
        async move { lock.lock().await.map(drop) }
    });
    until_keys(&client, "queue/", 2).await?;
    waiting.abort();
    let left = until_keys(&client, "queue/", 1).await?;
    assert_eq!(left[0].0, guard.key());
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_lease_fires_lost() -> anyhow::Result<()> {
    let (_member, client) = start().await?;
    let guard = client.lock("revoked")?.lock().await?;
    let lease = client
        .etcd()
        .kv_client()
        .get(guard.key(), None)
        .await?
        .kvs()
        .first()
        .map(etcd_client::KeyValue::lease)
        .expect("the key is there");
    client.etcd().lease_client().revoke(lease).await?;
    tokio::time::timeout(SOON, guard.lost()).await?;
    assert!(!guard.is_held());
    // The next acquire takes a new session lease.
    let again = client
        .lock("revoked")?
        .lock_timeout(SOON)
        .await?
        .expect("free");
    assert!(again.is_held());
    again.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_failing_past_the_lease_fires_lost() -> anyhow::Result<()> {
    let (member, client) = start().await?;
    let guard = client.lock("paused")?.lock().await?;
    assert!(guard.remaining() <= Duration::from_secs(2));
    member.pause(0)?;
    let fired = tokio::time::timeout(SOON, guard.lost()).await;
    member.resume(0)?;
    assert!(
        fired.is_ok(),
        "lost() did not fire while no keep-alive was answered"
    );
    assert_eq!(guard.remaining(), Duration::ZERO);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_put_is_refused_once_the_hold_ended() -> anyhow::Result<()> {
    let (member, client) = start().await?;
    let guard = client.lock("balance")?.lock().await?;
    assert!(
        client
            .fenced_put(&guard, "balance-value", "100")
            .await
            .context("first put")?
            .is_accepted()
    );
    // An operator (or the lease's end) removes the key while the holder is "paused".
    client
        .etcd()
        .kv_client()
        .delete(guard.key(), None)
        .await
        .context("delete")?;
    let other = Client::connect(&member.url()).await?;
    let next = other
        .lock("balance")?
        .lock_timeout(SOON)
        .await
        .context("next")?
        .expect("free");
    assert!(
        other
            .fenced_put(&next, "balance-value", "90")
            .await
            .context("second put")?
            .is_accepted()
    );
    let late = client
        .fenced_put(&guard, "balance-value", "110")
        .await
        .context("late put")?;
    assert_eq!(
        late,
        FencedPut::Refused {
            holder: Some(next.fencing_token())
        }
    );
    let refused = client.fenced_put(&next, "balance/inside", "1").await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    let value = client.etcd().kv_client().get("balance-value", None).await?;
    assert_eq!(value.kvs()[0].value(), b"90");
    next.unlock().await?;
    Ok(())
}

/// etcd closes connections that ping more often than every 5 s (its
/// `--grpc-keepalive-min-time`), and every watch on them: a wait and a hold that last
/// well past that window must not notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_and_hold_survive_etcds_ping_policy() -> anyhow::Result<()> {
    let (member, client) = start().await?;
    let guard = client.lock("long")?.lock().await?;
    let other = Client::connect(&member.url()).await?;
    let waiter = tokio::spawn({
        let lock = other.lock("long")?;
        async move { lock.lock().await }
    });
    until_keys(&client, "long/", 2).await?;
    // The scenario itself: a hold of 15 s with a waiter queued behind it.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(guard.is_held(), "the hold ended during a quiet 15 s");
    assert!(
        !waiter.is_finished(),
        "the waiter stopped waiting: {waiter:?}"
    );
    guard.unlock().await?;
    let next = tokio::time::timeout(SOON, waiter).await???;
    assert!(next.is_held());
    next.unlock().await?;
    Ok(())
}

/// An acquire that meets a transient failure (here: its only member down, restarted a
/// moment later; in a cluster, the member a call went to killed, or a proposal dropped by
/// a leader that lost its quorum: "request timed out") rides it out within its wait,
/// rather than failing at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_rides_out_its_member_restarting() -> anyhow::Result<()> {
    let (mut member, _) = start().await?;
    // Failures are ridden out for one watchdog lease: longer than a restart on a busy
    // machine.
    let client = Client::builder(&member.url())
        .watchdog_lease(SOON)
        .connect()
        .await?;
    // A lock taken and released first: the connection is up and then refused.
    client.lock("ridden")?.lock().await?.unlock().await?;
    member.kill(0)?;
    let acquire = tokio::spawn({
        let lock = client.lock("ridden")?;
        async move { lock.lock_timeout(SOON).await }
    });
    // The member is down when the acquire starts: its first calls are refused.
    let member = tokio::task::spawn_blocking(move || member.restart(0).map(|()| member)).await??;
    let guard = acquire
        .await?
        .context("the acquire failed")?
        .context("not granted within its wait")?;
    assert!(guard.is_held());
    guard.unlock().await?;
    drop(member);
    Ok(())
}

/// A try does not retry: with its member down it fails at once, saying the failure is
/// transient.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_fails_at_once_when_its_member_is_down() -> anyhow::Result<()> {
    let (mut member, client) = start().await?;
    client.lock("tried")?.lock().await?.unlock().await?;
    member.kill(0)?;
    let error = client
        .lock("tried")?
        .try_lock()
        .await
        .expect_err("no member to answer");
    assert!(error.is_transient(), "{error}");
    Ok(())
}
