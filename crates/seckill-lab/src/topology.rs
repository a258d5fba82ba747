//! The Redis the lab runs on: one server, a Sentinel group or a Redis Cluster, started
//! on free ports and stopped when the run ends.

use std::fmt;

use anyhow::Context as _;
use ferrisson_testkit::{RedisCluster, RedisServer, SentinelGroup};
use serde::Serialize;

/// The master's name in the Sentinel group the lab starts.
const SENTINEL_MASTER: &str = "seckill";

/// What kind of Redis the lab starts and every `seckill serve` instance uses.
///
/// ```
/// use seckill_lab::Topology;
///
/// assert_eq!(Topology::of_url("redis+cluster://127.0.0.1:7000"), Topology::Cluster);
/// assert_eq!(Topology::of_url("rediss+sentinel://127.0.0.1:26379/shop"), Topology::Sentinel);
/// assert_eq!(Topology::of_url("redis://127.0.0.1:6379"), Topology::Single);
/// assert_eq!(Topology::Cluster.to_string(), "cluster");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// One Redis server.
    #[default]
    Single,
    /// A master with two replicas and three sentinels watching them; the instances ask
    /// the sentinels where the master is.
    Sentinel,
    /// A Redis Cluster: three masters with one replica each, the keys spread over the
    /// masters by hash slot.
    Cluster,
}

impl Topology {
    /// The topology a Redis URL names (`redis+sentinel://`, `redis+cluster://`, or
    /// anything else: one server).
    pub fn of_url(url: &str) -> Self {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme {
            "redis+sentinel" | "rediss+sentinel" => Self::Sentinel,
            "redis+cluster" | "rediss+cluster" => Self::Cluster,
            _ => Self::Single,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Sentinel => "sentinel",
            Self::Cluster => "cluster",
        }
    }

    /// What the lab starts for this topology, in words.
    pub fn started(self) -> &'static str {
        match self {
            Self::Single => "one Redis server",
            Self::Sentinel => "Redis Sentinel (1 master, 2 replicas, 3 sentinels)",
            Self::Cluster => "Redis Cluster (3 masters, 3 replicas)",
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Redis processes the lab started itself (killed when dropped).
#[derive(Debug)]
pub(crate) enum OwnRedis {
    Single(RedisServer),
    Sentinel(SentinelGroup),
    Cluster(RedisCluster),
}

impl OwnRedis {
    /// Starts `topology` on free ports and waits until it is settled (a cluster agrees on
    /// its slot map, the sentinels agree on the master).
    ///
    /// # Errors
    ///
    /// When `redis-server` (or, for a cluster, `redis-cli`) cannot be run, or the servers
    /// do not settle in time.
    pub(crate) async fn start(topology: Topology) -> anyhow::Result<Self> {
        // The test kit waits by polling the servers: off the async threads.
        tokio::task::spawn_blocking(move || match topology {
            Topology::Single => RedisServer::start()
                .map(Self::Single)
                .context("cannot start redis-server (install it or pass --url)"),
            Topology::Sentinel => SentinelGroup::builder()
                .master_name(SENTINEL_MASTER)
                .start()
                .map(Self::Sentinel)
                .context("cannot start a Redis Sentinel group (redis-server is needed)"),
            Topology::Cluster => RedisCluster::builder()
                .start()
                .map(Self::Cluster)
                .context("cannot start a Redis Cluster (redis-server and redis-cli are needed)"),
        })
        .await
        .context("starting Redis")?
    }

    /// The URL the instances are given.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Single(server) => server.url(),
            Self::Sentinel(group) => group.url(),
            Self::Cluster(cluster) => cluster.url(),
        }
    }
}
