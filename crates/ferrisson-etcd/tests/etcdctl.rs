//! Compatibility with etcd's own lock: `etcdctl lock NAME` (etcd's `concurrency.Mutex`,
//! run as a real child process) and ferrisson's lock on NAME exclude each other, both
//! ways, and queue in one order.

use std::process::Stdio;
use std::time::Duration;

use ferrisson_etcd::{Client, DistributedLock, Fenced, Guard};
use ferrisson_testkit::EtcdCluster;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

/// `etcdctl lock NAME` started against `cluster`; its first stdout line is the key it
/// holds, printed once it has the lock.
fn etcdctl_lock(
    cluster: &EtcdCluster,
    name: &str,
) -> anyhow::Result<(Child, Lines<BufReader<ChildStdout>>)> {
    let mut command = Command::from(cluster.etcdctl());
    command
        .args(["lock", name])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    Ok((child, BufReader::new(stdout).lines()))
}

/// Stops etcdctl as a user would (SIGTERM: it unlocks and closes its session).
async fn stop(mut child: Child) -> anyhow::Result<()> {
    let pid = child
        .id()
        .ok_or_else(|| anyhow::anyhow!("etcdctl already ended"))?;
    kill(Pid::from_raw(i32::try_from(pid)?), Signal::SIGTERM)?;
    tokio::time::timeout(SOON, child.wait()).await??;
    Ok(())
}

/// The create revisions of the keys under `prefix`, oldest first.
async fn queue(client: &Client, prefix: &str) -> anyhow::Result<Vec<i64>> {
    let got = client
        .etcd()
        .kv_client()
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    let mut revisions: Vec<i64> = got
        .kvs()
        .iter()
        .map(etcd_client::KeyValue::create_revision)
        .collect();
    revisions.sort_unstable();
    Ok(revisions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_holding_makes_ferrisson_wait() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::connect(&member.url()).await?;
    let lock = client.lock("shared-report")?;

    let (etcdctl, mut lines) = etcdctl_lock(&member, "shared-report")?;
    let key = tokio::time::timeout(SOON, lines.next_line())
        .await??
        .ok_or_else(|| anyhow::anyhow!("etcdctl lock ended without printing its key"))?;
    assert!(key.starts_with("shared-report/"), "etcdctl holds {key:?}");

    assert!(
        lock.try_lock().await?.is_none(),
        "ferrisson took a lock etcdctl holds"
    );
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    // The waiter is queued behind etcdctl's key (its own key is there, younger).
    tokio::time::timeout(SOON, async {
        while queue(&client, "shared-report/").await?.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    })
    .await??;
    assert!(
        !waiter.is_finished(),
        "ferrisson got the lock while etcdctl held it"
    );

    stop(etcdctl).await?;
    let guard = tokio::time::timeout(SOON, waiter).await???;
    assert!(guard.is_held());
    assert_eq!(
        queue(&client, "shared-report/").await?,
        [i64::try_from(guard.fencing_token().get())?]
    );
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrisson_holding_makes_etcdctl_wait() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::connect(&member.url()).await?;
    let guard = client.lock("nightly")?.lock().await?;

    let (etcdctl, mut lines) = etcdctl_lock(&member, "nightly")?;
    // etcdctl's key is queued behind ferrisson's.
    let behind = tokio::time::timeout(SOON, async {
        loop {
            let queue = queue(&client, "nightly/").await?;
            if queue.len() == 2 {
                return anyhow::Ok(queue);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await??;
    assert_eq!(behind[0], i64::try_from(guard.fencing_token().get())?);
    // Queued, etcdctl must not print that it holds; its line comes only after the
    // release below. (A short look: what matters is the order checked after.)
    let early = tokio::time::timeout(Duration::from_millis(500), lines.next_line()).await;
    assert!(
        early.is_err(),
        "etcdctl took the lock ferrisson holds: {early:?}"
    );

    guard.unlock().await?;
    let key = tokio::time::timeout(SOON, lines.next_line())
        .await??
        .ok_or_else(|| anyhow::anyhow!("etcdctl lock ended without printing its key"))?;
    assert!(key.starts_with("nightly/"), "etcdctl holds {key:?}");
    assert!(
        client.lock("nightly")?.try_lock().await?.is_none(),
        "ferrisson took the lock back while etcdctl held it"
    );
    stop(etcdctl).await?;
    let again = client.lock("nightly")?.lock_timeout(SOON).await?;
    assert!(again.is_some(), "etcdctl's release did not free the lock");
    Ok(())
}
