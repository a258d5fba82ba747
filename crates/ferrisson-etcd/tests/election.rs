//! The etcd election: campaign, resign, leader and observe, a token per term; and
//! compatibility with `etcdctl elect` (etcd's `concurrency.Election`) both ways.

use std::process::Stdio;
use std::time::Duration;

use ferrisson_etcd::{Client, DistributedElection, Fenced, Guard};
use ferrisson_testkit::EtcdCluster;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

/// How long anything that should happen soon may take on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_follow_each_other_with_growing_tokens() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let a = Client::connect(&member.url()).await?;
    let b = Client::connect(&member.url()).await?;
    let election_a = a.election("scheduler")?.with_value("a");
    let election_b = b.election("scheduler")?.with_value("b");
    assert_eq!(election_a.leader().await?, None);

    let first = election_a.campaign().await?;
    let leader = election_a.leader().await?.expect("a leads");
    assert_eq!(leader.value, b"a");
    assert_eq!(leader.token, first.fencing_token());
    assert!(election_b.try_campaign().await?.is_none(), "two leaders");

    // b campaigns and waits; an observer sees each change.
    let campaign = tokio::spawn({
        let election_b = election_b.clone();
        async move { election_b.campaign().await }
    });
    first.proclaim("a, again").await?;
    let seen = tokio::time::timeout(SOON, election_b.observe(Some(&leader))).await??;
    let seen = seen.expect("a still leads");
    assert_eq!(seen.value, b"a, again");
    assert_eq!(seen.token, leader.token);

    first.unlock().await?; // resign
    let second = tokio::time::timeout(SOON, campaign).await???;
    assert!(
        second.fencing_token() > leader.token,
        "a new term, a new token"
    );
    let now = tokio::time::timeout(SOON, election_a.observe(Some(&seen))).await??;
    assert_eq!(now.map(|l| l.value), Some(b"b".to_vec()));
    second.unlock().await?;
    assert_eq!(election_a.leader().await?, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_leader_key_ends_the_term() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::connect(&member.url()).await?;
    let election = client.election("ops")?;
    let term = election.campaign().await?;
    let leader = election.leader().await?.expect("leading");
    client.etcd().kv_client().delete(leader.key, None).await?;
    tokio::time::timeout(SOON, term.lost()).await?;
    assert!(!term.is_held());
    assert!(
        term.proclaim("late").await.is_err(),
        "a lost term proclaimed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_sees_ferrisson_lead_and_waits_for_it() -> anyhow::Result<()> {
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::connect(&member.url()).await?;
    let election = client.election("pilot")?.with_value("ferrisson");
    let term = election.campaign().await?;

    // An observer (`etcdctl elect -l`) prints the leader's key and value.
    let mut observer = Command::from(member.etcdctl())
        .args(["elect", "-l", "pilot"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(observer.stdout.take().expect("piped")).lines();
    let key = tokio::time::timeout(SOON, lines.next_line()).await??;
    let value = tokio::time::timeout(SOON, lines.next_line()).await??;
    assert_eq!(
        key.as_deref(),
        election.leader().await?.map(|l| l.key).as_deref()
    );
    assert_eq!(value.as_deref(), Some("ferrisson"));

    // A candidate (`etcdctl elect pilot etcdctl`) waits for ferrisson's term to end.
    let mut candidate = Command::from(member.etcdctl())
        .args(["elect", "pilot", "etcdctl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut elected = BufReader::new(candidate.stdout.take().expect("piped")).lines();
    tokio::time::timeout(SOON, async {
        loop {
            let keys = client
                .etcd()
                .kv_client()
                .get("pilot/", Some(etcd_client::GetOptions::new().with_prefix()))
                .await?;
            if keys.count() == 2 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await??;
    assert_eq!(
        election.leader().await?.map(|l| l.value),
        Some(b"ferrisson".to_vec())
    );
    term.unlock().await?;
    let _key = tokio::time::timeout(SOON, elected.next_line()).await??;
    let value = tokio::time::timeout(SOON, elected.next_line()).await??;
    assert_eq!(value.as_deref(), Some("etcdctl"));
    let leader = election.leader().await?.expect("etcdctl leads");
    assert_eq!(leader.value, b"etcdctl");
    assert!(
        election.try_campaign().await?.is_none(),
        "ferrisson led beside etcdctl"
    );
    candidate.kill().await?;
    observer.kill().await?;
    Ok(())
}

/// A campaign that meets a transient failure (its only member down when it starts, and
/// restarted while it waits for an answer; in a cluster, the member a call went to
/// killed, or a proposal dropped in a leader change) rides it out within its wait with a
/// new candidate, as the lock's acquire does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_rides_out_its_member_restarting() -> anyhow::Result<()> {
    let mut member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    // Failures are ridden out for one watchdog lease: longer than a restart on a busy
    // machine.
    let client = Client::builder(&member.url())
        .watchdog_lease(SOON)
        .connect()
        .await?;
    let election = client.election("ridden")?.with_value("me");
    // A term first: the connection is up, and then refused.
    election.campaign().await?.unlock().await?;
    tokio::task::block_in_place(|| member.kill(0))?;
    let campaign = tokio::spawn({
        let election = election.clone();
        async move { election.campaign_timeout(SOON).await }
    });
    let member = tokio::task::spawn_blocking(move || member.restart(0).map(|()| member)).await??;
    let leadership = campaign
        .await??
        .ok_or_else(|| anyhow::anyhow!("not elected within its wait"))?;
    assert!(leadership.is_held());
    let leader = election.leader().await?.expect("a leader");
    assert_eq!(leader.token, leadership.fencing_token());
    assert_eq!(leader.value, b"me");
    leadership.unlock().await?;
    drop(member);
    Ok(())
}
