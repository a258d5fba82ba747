//! The session lease across a failover of the member its keep-alive goes to: a held
//! lock is not lost when the members elect a new leader within its TTL, whether that
//! member was killed or cut off from the others (where it stops answering renewals
//! without closing the stream).

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use ferrisson_etcd::{Client, DistributedLock, Fenced, Guard, LockGuard};
use ferrisson_testkit::{EtcdCluster, PeerPartition};
use tokio::time::Instant;

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);
/// The session lease: longer than a failover of the test kit's members (500 ms election
/// timeout: a new leader within about a second).
const TTL: Duration = Duration::from_secs(3);

/// The leader's index, as member `i`'s status says, and `i`'s own id.
async fn status(cluster: &EtcdCluster, i: usize) -> anyhow::Result<(u64, u64)> {
    let endpoint = format!("http://127.0.0.1:{}", cluster.client_port(i));
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(1));
    let mut raw = etcd_client::Client::connect([endpoint], Some(options)).await?;
    let status = raw.status().await?;
    let own = status
        .header()
        .map(etcd_client::ResponseHeader::member_id)
        .context("a status without a header")?;
    Ok((status.leader(), own))
}

/// The member every member agrees leads.
async fn leader(cluster: &EtcdCluster) -> anyhow::Result<usize> {
    tokio::time::timeout(SOON, async {
        loop {
            let mut seen = Vec::new();
            for i in 0..cluster.len() {
                if let Ok(answer) = status(cluster, i).await {
                    seen.push((i, answer));
                }
            }
            if seen.len() == cluster.len()
                && let Some(&(_, (leader, _))) = seen.first()
                && leader != 0
                && seen.iter().all(|(_, (l, _))| *l == leader)
                && let Some(&(i, _)) = seen.iter().find(|(_, (_, own))| *own == leader)
            {
                return i;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .context("no leader agreed on")
}

/// A lock held by a client whose only member is `member`, so that the session lease's
/// keep-alive stream is on it (a renewal answered after the lock was taken proves the
/// stream open); then the client learns the other members, as a client given every
/// member would have them.
async fn hold_through(cluster: &EtcdCluster, member: usize) -> anyhow::Result<(Client, LockGuard)> {
    let url = format!("etcd://127.0.0.1:{}", cluster.client_port(member));
    let client = Client::builder(&url).watchdog_lease(TTL).connect().await?;
    let guard = client.lock("failover")?.lock().await?;
    renewed_after(&guard, Instant::now()).await?;
    for i in (0..cluster.len()).filter(|&i| i != member) {
        client
            .etcd()
            .add_endpoint(format!("http://127.0.0.1:{}", cluster.client_port(i)))
            .await?;
    }
    Ok((client, guard))
}

/// Waits until a renewal sent after `after` was answered (the hold's deadline moved past
/// `after` + TTL), failing if the hold is lost first.
async fn renewed_after(guard: &LockGuard, after: Instant) -> anyhow::Result<()> {
    let renewed = async {
        while Instant::now() + guard.remaining() <= after + TTL {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        () = guard.lost() => anyhow::bail!("the hold was lost"),
        waited = tokio::time::timeout(SOON, renewed) => waited.context("no renewal answered"),
    }
}

/// When member `i` no longer sees a leader (polled).
async fn stepped_down(cluster: &EtcdCluster, i: usize) -> anyhow::Result<Instant> {
    tokio::time::timeout(SOON, async {
        loop {
            if let Ok((leader, own)) = status(cluster, i).await
                && leader != own
            {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .context("the cut-off leader did not step down")
}

/// `call` until it succeeds or fails for good, as a client would: a call that went to
/// the dead member, or met the election, is made again.
async fn until_done<T, F, Fut>(mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ferrisson_etcd::Result<T>>,
{
    tokio::time::timeout(SOON, async {
        loop {
            match call().await {
                Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
                done => return done,
            }
        }
    })
    .await
    .context("no answer")?
    .map_err(Into::into)
}

/// After the fault: the hold is still held, its key still there (a fenced write passes).
async fn still_holds(client: &Client, guard: &LockGuard) -> anyhow::Result<()> {
    assert!(guard.is_held());
    let put = until_done(|| client.fenced_put(guard, "failover-data", "after")).await?;
    assert!(
        put.is_accepted(),
        "{put:?} with token {}",
        guard.fencing_token()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_survives_the_leader_its_keep_alive_goes_to_killed() -> anyhow::Result<()> {
    let mut cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3)).await??;
    let leader = leader(&cluster).await?;
    let (client, guard) = hold_through(&cluster, leader).await?;
    tokio::task::block_in_place(|| cluster.kill(leader))?;
    let killed = Instant::now();
    renewed_after(&guard, killed).await?;
    still_holds(&client, &guard).await?;
    release(guard).await
}

/// Releases `guard`: the release may go to the dead member, or meet an election (a
/// healed member forces one), and then fails as transient (the delete is tried again in
/// the background).
async fn release(guard: LockGuard) -> anyhow::Result<()> {
    let released = guard.unlock().await;
    assert!(
        released
            .as_ref()
            .map_or_else(ferrisson_etcd::Error::is_transient, |()| true),
        "{released:?}"
    );
    Ok(())
}

/// The member the keep-alive goes to (the leader) cut off from the two others: it stops
/// answering renewals once it has stepped down, and keeps the stream open. The keeper
/// gives up on a stream whose answer is late and opens another, which the cut-off member
/// (knowing it has no leader) refuses or a majority member answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_survives_the_leader_its_keep_alive_goes_to_cut_off() -> anyhow::Result<()> {
    let (cluster, partition): (EtcdCluster, PeerPartition) =
        tokio::task::spawn_blocking(|| EtcdCluster::start_partitionable(3)).await??;
    let leader = leader(&cluster).await?;
    let (client, guard) = hold_through(&cluster, leader).await?;
    partition.cut_off(&cluster, leader);
    // The cut-off leader answers renewals itself until it notices it lost its quorum
    // (within an election timeout) and steps down: renewed after that, by a member of
    // the majority.
    let renewed = match stepped_down(&cluster, leader).await {
        Ok(at) => renewed_after(&guard, at).await,
        Err(e) => Err(e),
    };
    partition.heal();
    renewed?;
    still_holds(&client, &guard).await?;
    release(guard).await
}
