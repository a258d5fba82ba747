//! Where a bench's Redis runs: one server (the default), a Sentinel group, or a Redis
//! Cluster, chosen with `--topology single|sentinel|cluster` on the bench's command line.
//!
//! - single: one private `redis-server`;
//! - sentinel: a master with 2 replicas and 3 sentinels; ferrisson connects through the
//!   sentinels, the floor through redis-rs's `SentinelClient` (the master connection it
//!   hands out);
//! - cluster: 3 masters with one replica each; ferrisson connects with the seed nodes, the
//!   floor through redis-rs's own cluster client (`cluster_async::ClusterConnection`).
//!
//! Redis's counters (CPU, commands) are read from every master and summed: replicas and
//! sentinels are left out (replication traffic is the same whoever writes).

use std::fmt;

use ferrisson_testkit::{RedisCluster, RedisServer, SentinelGroup, key_slot};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::RAW_RESPONSE_TIMEOUT;
use super::cost::Nodes;

/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16384;

/// The shape of the Redis deployment a bench runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Topology {
    Single,
    Sentinel,
    Cluster,
}

impl Topology {
    /// `--topology X` or `--topology=X` among the process's arguments; single when absent.
    ///
    /// # Errors
    ///
    /// When the value is missing or not `single`, `sentinel` or `cluster`.
    pub fn from_args() -> anyhow::Result<Self> {
        let args: Vec<String> = std::env::args().collect();
        let mut value = None;
        for (i, arg) in args.iter().enumerate() {
            if arg == "--topology" {
                value = Some(args.get(i + 1).cloned().unwrap_or_default());
            } else if let Some(v) = arg.strip_prefix("--topology=") {
                value = Some(v.to_owned());
            }
        }
        match value.as_deref() {
            None | Some("single") => Ok(Self::Single),
            Some("sentinel") => Ok(Self::Sentinel),
            Some("cluster") => Ok(Self::Cluster),
            Some(other) => {
                anyhow::bail!("--topology takes single, sentinel or cluster, not {other:?}")
            }
        }
    }

    pub fn is_single(self) -> bool {
        self == Self::Single
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Single => "single",
            Self::Sentinel => "sentinel",
            Self::Cluster => "cluster",
        })
    }
}

/// The running Redis processes of one topology; all stopped on drop.
pub enum Deployment {
    Single(RedisServer),
    Sentinel(SentinelGroup),
    Cluster(RedisCluster),
}

impl Deployment {
    /// Starts the processes and waits until they are ready (blocking).
    ///
    /// # Errors
    ///
    /// When a process does not start or the group does not settle.
    pub fn start(topology: Topology) -> anyhow::Result<Self> {
        Ok(match topology {
            Topology::Single => Self::Single(RedisServer::start()?),
            Topology::Sentinel => Self::Sentinel(SentinelGroup::builder().start()?),
            Topology::Cluster => Self::Cluster(
                RedisCluster::builder()
                    .masters(3)
                    .replicas_per_master(1)
                    .start()?,
            ),
        })
    }

    pub fn topology(&self) -> Topology {
        match self {
            Self::Single(_) => Topology::Single,
            Self::Sentinel(_) => Topology::Sentinel,
            Self::Cluster(_) => Topology::Cluster,
        }
    }

    /// What ferrisson's `Client` connects to: the server, the sentinels, or the seed nodes.
    pub fn url(&self) -> String {
        match self {
            Self::Single(server) => server.url(),
            Self::Sentinel(group) => group.url(),
            Self::Cluster(cluster) => cluster.url(),
        }
    }

    /// One line for the top of a bench's output.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Single(_) => "one redis-server",
            Self::Sentinel(_) => {
                "Sentinel group: a master, 2 replicas, 3 sentinels; ferrisson through the sentinels, the floor through redis-rs's SentinelClient master connection"
            }
            Self::Cluster(_) => {
                "Redis Cluster: 3 masters + 3 replicas; ferrisson with the seed nodes, the floor through redis-rs's ClusterConnection; Redis CPU and calls summed over the masters"
            }
        }
    }

    /// The masters' addresses (`redis://...`), in a fixed order, and which of them serves
    /// each hash slot.
    async fn master_urls(&self) -> anyhow::Result<(Vec<String>, Vec<u8>)> {
        match self {
            Self::Single(server) => Ok((vec![server.url()], vec![0; SLOTS])),
            Self::Sentinel(group) => {
                let master = tokio::task::block_in_place(|| group.master())?;
                Ok((vec![group.servers()[master].url()], vec![0; SLOTS]))
            }
            Self::Cluster(cluster) => {
                let mut any = super::raw_connection(&cluster.node_urls()[0]).await?;
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut any)
                    .await?;
                slot_map(&nodes)
            }
        }
    }

    /// A connection to every master, for Redis's counters (and a per-node floor).
    ///
    /// # Errors
    ///
    /// When a master cannot be found or reached.
    pub async fn masters(&self) -> anyhow::Result<Masters> {
        let (urls, slot_owner) = self.master_urls().await?;
        let mut conns = Vec::with_capacity(urls.len());
        for url in &urls {
            conns.push(super::raw_connection(url).await?);
        }
        Ok(Masters {
            conns,
            urls,
            slot_owner,
        })
    }

    /// A floor's connection: redis-rs's own client for the topology (a multiplexed
    /// connection to the server, the master connection a `SentinelClient` hands out, a
    /// `ClusterConnection`).
    ///
    /// # Errors
    ///
    /// When it cannot connect.
    pub async fn floor_connection(&self) -> anyhow::Result<Raw> {
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(RAW_RESPONSE_TIMEOUT));
        Ok(match self {
            Self::Single(server) => Raw::Node(super::raw_connection(&server.url()).await?),
            Self::Sentinel(group) => {
                let mut client = SentinelClient::build(
                    group.sentinel_urls(),
                    group.master_name(),
                    None,
                    SentinelServerType::Master,
                )?;
                Raw::Node(client.get_async_connection_with_config(&config).await?)
            }
            Self::Cluster(cluster) => Raw::Cluster(
                redis::cluster::ClusterClient::builder(cluster.node_urls())
                    .response_timeout(RAW_RESPONSE_TIMEOUT)
                    .build()?
                    .get_async_connection()
                    .await?,
            ),
        })
    }

    /// One floor connection per master, in [`Masters`]' order (through the sentinels'
    /// master connection on a Sentinel group).
    ///
    /// # Errors
    ///
    /// When it cannot connect.
    pub async fn floor_node_connections(
        &self,
        masters: &Masters,
    ) -> anyhow::Result<Vec<MultiplexedConnection>> {
        if let Self::Cluster(_) = self {
            let mut conns = Vec::with_capacity(masters.urls.len());
            for url in &masters.urls {
                conns.push(super::raw_connection(url).await?);
            }
            return Ok(conns);
        }
        match self.floor_connection().await? {
            Raw::Node(conn) => Ok(vec![conn]),
            Raw::Cluster(_) => anyhow::bail!("a cluster connection off a cluster"),
        }
    }
}

/// From `CLUSTER NODES`: the masters' URLs (by port) and, per slot, the index of its
/// master among them.
fn slot_map(nodes: &str) -> anyhow::Result<(Vec<String>, Vec<u8>)> {
    let mut masters: Vec<(u16, Vec<(usize, usize)>)> = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        let flags = fields[2];
        if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
            continue;
        }
        let port = fields[1]
            .split('@')
            .next()
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| anyhow::anyhow!("no port in CLUSTER NODES line {line:?}"))?;
        let mut ranges = Vec::new();
        for range in &fields[8..] {
            if range.starts_with('[') {
                continue; // a slot being migrated
            }
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            ranges.push((start.parse()?, end.parse()?));
        }
        if !ranges.is_empty() {
            masters.push((port, ranges));
        }
    }
    masters.sort_by_key(|(port, _)| *port);
    let mut owner = vec![u8::MAX; SLOTS];
    for (index, (_, ranges)) in masters.iter().enumerate() {
        for &(start, end) in ranges {
            for slot in &mut owner[start..=end] {
                *slot = u8::try_from(index)?;
            }
        }
    }
    anyhow::ensure!(
        !owner.contains(&u8::MAX),
        "CLUSTER NODES left a slot without a master"
    );
    let urls = masters
        .iter()
        .map(|(port, _)| format!("redis://127.0.0.1:{port}"))
        .collect();
    Ok((urls, owner))
}

/// A connection to every master (the server, for one server), and the slot map.
pub struct Masters {
    pub conns: Vec<MultiplexedConnection>,
    pub urls: Vec<String>,
    slot_owner: Vec<u8>,
}

impl Masters {
    /// The index of the master serving `key` (always 0 off a cluster).
    pub fn of_key(&self, key: &str) -> usize {
        usize::from(self.slot_owner[usize::from(key_slot(key))])
    }

    /// The connection to the master serving `key`.
    pub fn conn_of_key(&mut self, key: &str) -> &mut MultiplexedConnection {
        let index = self.of_key(key);
        &mut self.conns[index]
    }

    /// Runs `cmd` on every master.
    ///
    /// # Errors
    ///
    /// The first master's error.
    pub async fn on_all(&mut self, cmd: &Cmd) -> anyhow::Result<()> {
        for conn in &mut self.conns {
            cmd.query_async::<()>(conn).await?;
        }
        Ok(())
    }
}

impl Nodes for Masters {
    fn nodes(&mut self) -> &mut [MultiplexedConnection] {
        &mut self.conns
    }
}

/// A floor's connection: one node's, or redis-rs's cluster connection.
#[derive(Clone)]
pub enum Raw {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Raw {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}
