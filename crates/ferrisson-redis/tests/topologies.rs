//! Every primitive on every topology: one server, a Sentinel group (1 master, 2 replicas,
//! 3 sentinels) and a Cluster (3 masters, 3 replicas), each started by the test kit.
//!
//! The cases are in `topology_cases`: one body each, run against each topology's URL;
//! `topologies_secured.rs` runs the same cases with TLS and ACL users.

mod topology_cases;

use ferrisson_redis::Client;
use ferrisson_testkit::{RedisCluster, RedisServer, SentinelGroup};
use topology_cases::every_case;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_on_one_server() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    every_case(&Client::builder(&server.url())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_behind_sentinel() -> anyhow::Result<()> {
    let group = tokio::task::spawn_blocking(SentinelGroup::start).await??;
    every_case(&Client::builder(&group.url())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_on_a_cluster() -> anyhow::Result<()> {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await??;
    every_case(&Client::builder(&cluster.url())).await
}
