//! What the etcd scenarios start once per run (three etcd members whose peer traffic
//! can be cut, and a fault proxy in front of member 0's client port), and the calls they make to etcd besides the
//! locks: which member leads, the lease a key lives under, a fenced write, the keys
//! left.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferrisson::etcd::{Client, FencedPut, LockGuard};
use ferrisson_testkit::{EtcdCluster, FaultProxy, PeerPartition};

use crate::harness::config::Config;
use crate::harness::record::record_keys_left;
use crate::harness::scenario::Setup;
use crate::history::{EventKind, Recorder};

/// Members of the run's cluster: a leader can die and a majority is left.
const MEMBERS: usize = 3;
/// How long the members may take to be whole again after a fault was healed.
const HEAL_PATIENCE: Duration = Duration::from_secs(20);
/// How long one member may take to answer a status call.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// A stale holder's fenced write (`fenced_put`, guarded by the lock key's create
/// revision) that etcd refused, as it must.
pub(crate) const LATE_FENCED_PUT_REFUSED: &str = "late_fenced_put_refused";
/// A stale holder's fenced write that etcd accepted: a violation.
pub(crate) const LATE_FENCED_PUT_ACCEPTED: &str = "late_fenced_put_accepted";
/// A stale holder's fenced write that failed or could not be made.
pub(crate) const LATE_FENCED_PUT_FAILED: &str = "late_fenced_put_failed";

/// Three etcd members (the test kit's: 50 ms heartbeat, 500 ms election timeout) whose
/// peer traffic goes through relays that can cut one off, and client A's way to member
/// 0 through a fault proxy.
pub(crate) struct EtcdMembers {
    /// The members.
    pub(crate) cluster: EtcdCluster,
    /// The relays between the members.
    pub(crate) partition: PeerPartition,
    /// Client A's way to member 0's client port, to blackhole.
    pub(crate) proxy_a: FaultProxy,
}

impl Setup for EtcdMembers {
    async fn start(_config: &Config) -> anyhow::Result<Self> {
        let (cluster, partition) =
            tokio::task::spawn_blocking(|| EtcdCluster::start_partitionable(MEMBERS))
                .await?
                .context("etcd members")?;
        let proxy_a = FaultProxy::start(cluster.client_port(0)).await?;
        Ok(Self {
            cluster,
            partition,
            proxy_a,
        })
    }
}

impl EtcdMembers {
    /// Every member: the URL a client of the whole cluster connects with.
    pub(crate) fn url(&self) -> String {
        self.cluster.url()
    }

    /// Only `members` (by index): a client that can reach nothing else.
    pub(crate) fn url_of(&self, members: &[usize]) -> String {
        let hosts: Vec<String> = members
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.cluster.client_port(i)))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// Member 0 through the fault proxy.
    pub(crate) fn proxied_url(&self) -> String {
        format!("etcd://{}", self.proxy_a.addr())
    }

    /// The running members other than `except`.
    fn running(&self, except: Option<usize>) -> Vec<usize> {
        (0..self.cluster.len())
            .filter(|&i| Some(i) != except && self.cluster.pid(i).is_some())
            .collect()
    }

    /// The leader's member id as member `i` sees it, and `i`'s own id.
    async fn status(&self, i: usize) -> anyhow::Result<(u64, u64)> {
        let endpoint = format!("http://127.0.0.1:{}", self.cluster.client_port(i));
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(STATUS_TIMEOUT)
            .with_timeout(STATUS_TIMEOUT);
        let mut raw = etcd_client::Client::connect([endpoint], Some(options)).await?;
        let status = raw.status().await?;
        let own = status
            .header()
            .map(etcd_client::ResponseHeader::member_id)
            .context("a status without a header")?;
        Ok((status.leader(), own))
    }

    /// The index of the member that leads now, as the maintenance status API of every
    /// running member (but `except`) reports it: they must agree on one that is among
    /// them. Waits for that (an election under way) for at most five seconds.
    pub(crate) async fn leader(&self, except: Option<usize>) -> anyhow::Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut ids = Vec::new();
            let mut leaders = Vec::new();
            for i in self.running(except) {
                if let Ok((leader, own)) = self.status(i).await {
                    ids.push((i, own));
                    leaders.push(leader);
                }
            }
            if let Some(&first) = leaders.first()
                && first != 0
                && leaders.len() == self.running(except).len()
                && leaders.iter().all(|&l| l == first)
                && let Some(&(i, _)) = ids.iter().find(|(_, own)| *own == first)
            {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                bail!("the members agreed on no leader within 5 s: {leaders:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until every member is running and healthy (the faults healed).
    pub(crate) fn wait_whole(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + HEAL_PATIENCE;
        tokio::task::block_in_place(|| {
            while !(0..self.cluster.len()).all(|i| self.cluster.is_healthy(i)) {
                if Instant::now() >= deadline {
                    bail!("the etcd members were not healthy again within {HEAL_PATIENCE:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        })
    }

    /// Kills member `i` (SIGKILL).
    pub(crate) fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        tokio::task::block_in_place(|| self.cluster.kill(i)).context("killing a member")
    }

    /// Starts member `i` again after [`EtcdMembers::kill`], and waits until every
    /// member is healthy.
    pub(crate) fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        tokio::task::block_in_place(|| self.cluster.restart(i)).context("restarting a member")
    }
}

/// The etcd lease of a scenario: the run's lease rounded up to whole seconds (etcd's
/// leases have whole-second TTLs) and at least `floor`.
pub(crate) fn etcd_lease(config: &Config, floor: Duration) -> Duration {
    let lease = config.lease;
    let seconds = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    Duration::from_secs(seconds).max(floor)
}

/// A client of `url` with the watchdog lease `lease`, patient enough (ten leases) to
/// connect while a member is down.
pub(crate) async fn connect(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .connect_timeout(lease * 10)
        .connect()
        .await?)
}

/// The id of the lease `key` lives under.
pub(crate) async fn lease_of(client: &Client, key: &str) -> anyhow::Result<i64> {
    let got = client.etcd().kv_client().get(key, None).await?;
    got.kvs()
        .first()
        .map(etcd_client::KeyValue::lease)
        .context("the holder's key is not there")
}

/// A stale holder's fenced write of `key` (etcd's own, through `fenced_put`), counted
/// as refused, accepted or failed.
pub(crate) async fn late_fenced_put(
    rec: &Recorder,
    grant: usize,
    client: &Client,
    guard: &LockGuard,
    key: &str,
) {
    let counted = match client
        .fenced_put(guard, key, "written by a late holder")
        .await
    {
        Ok(FencedPut::Refused { .. }) => LATE_FENCED_PUT_REFUSED,
        Ok(FencedPut::Accepted { .. }) => LATE_FENCED_PUT_ACCEPTED,
        Err(_) => LATE_FENCED_PUT_FAILED,
    };
    count(rec, grant, counted);
}

/// Counts the outcome a holder process printed for its fenced write.
pub(crate) fn count_late_fenced_put(rec: &Recorder, outcome: &str) {
    let counted = match outcome {
        "refused" => LATE_FENCED_PUT_REFUSED,
        "accepted" => LATE_FENCED_PUT_ACCEPTED,
        _ => LATE_FENCED_PUT_FAILED,
    };
    count(rec, 0, counted);
}

/// Counts one `name`.
pub(crate) fn count(rec: &Recorder, grant: usize, name: &str) {
    rec.record(
        grant,
        EventKind::Count {
            name: name.into(),
            count: 1,
        },
    );
}

/// Records a measurement: its largest value (`name`) and the sum over the iterations
/// (`name_total`, for the mean).
pub(crate) fn measure(rec: &Recorder, name: &str, elapsed: Duration) {
    let millis = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    rec.record(
        0,
        EventKind::Measure {
            name: name.into(),
            millis,
        },
    );
    rec.record(
        0,
        EventKind::Count {
            name: format!("{name}_total"),
            count: millis,
        },
    );
}

/// After healing: how many keys are left under the lock `name`'s prefix, at the latest
/// one lease later.
pub(crate) async fn keys_left(
    rec: &Recorder,
    checker: &Client,
    name: &str,
    lease: Duration,
) -> anyhow::Result<()> {
    let prefix = checker.lock(name)?.key_prefix().to_owned();
    record_keys_left(rec, lease, || async {
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let got = checker
            .etcd()
            .kv_client()
            .get(prefix.as_str(), Some(options))
            .await?;
        Ok(u64::try_from(got.count()).unwrap_or(0))
    })
    .await
}

/// The data key a scenario's stale holder writes with its fence: not under the lock's
/// prefix (it would queue there).
pub(crate) fn data_key(name: &str) -> String {
    format!("chaos-data/{name}")
}
