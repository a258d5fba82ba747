//! Test kit for ferrisson: starts real `redis-server` processes on free ports, each in a
//! private temporary directory, and kills them on drop: single servers, Redis Clusters
//! ([`RedisCluster`]) and Sentinel groups ([`SentinelGroup`]).
//!
//! etcd members run the same way ([`EtcdCluster`]: one member or a cluster, `etcd` from
//! `PATH` or `FERRISSON_ETCD`).
//!
//! Every integration test of the project starts its own server(s) through this crate;
//! none touches the system Redis on port 6379.
//!
//! It also starts private ZooKeeper servers ([`ZooKeeper`]: one standalone server or a
//! three-member ensemble, each member a JVM of its own on free loopback ports), and an
//! ensemble whose members reach each other through fault proxies, to cut members off
//! ([`PartitionableEnsemble`]).
//!
//! And private database servers: PostgreSQL ([`PostgresServer`]) and MariaDB
//! ([`MariaDbServer`]), each on a free loopback port with a data directory copied from a
//! template initialized once per machine; they can be stopped, killed, frozen and started
//! again on the same port and data. The machine's own database services are never used.
//!
//! Clusters and Sentinel groups can run protected, as production ones do: TLS only on
//! every port ([`ClusterBuilder::tls`], [`SentinelBuilder::tls`], with certificates made
//! for the test) and ACL users with the default user off ([`ClusterBuilder::acl_user`],
//! [`SentinelBuilder::acl_user`], [`SentinelBuilder::sentinel_acl_user`]); their URLs then
//! say `rediss+...://user:password@`, and the kit's own helpers log in as that user.
//!
//! The binary is `redis-server` from `PATH`, or the path in the `FERRISSON_REDIS_SERVER`
//! environment variable; clusters are created with `redis-cli` (`FERRISSON_REDIS_CLI`).
//! [`RedisServer::builder`] also starts Valkey servers (`FERRISSON_VALKEY_SERVER`, or
//! `valkey-server` / Debian's `valkey-check-rdb` from `PATH`; `.ci/require-valkey`
//! installs it), with an append-only file, as replicas of another server.
//!
//! ```no_run
//! let server = ferrisson_testkit::RedisServer::start().expect("redis-server");
//! println!("test against {}", server.url());
//! server.pause().expect("SIGSTOP"); // the server stops answering
//! server.resume().expect("SIGCONT");
//! ```

mod clock;
mod cluster;
mod cluster_view;
mod database_dir;
mod etcd;
mod etcd_partition;
mod mariadb;
mod memory;
mod postgres;
mod proxy;
mod resp;
mod secured;
mod sentinel;
mod server;
mod slot;
mod slot_migration;
mod tls;
mod wait;
mod zookeeper;
mod zookeeper_partition;

pub use clock::ClockShift;
pub use cluster::{ClusterBuilder, FailoverMode, RedisCluster, redis_cli_binary};
pub use etcd::{EtcdCluster, etcd_binary, etcdctl_binary};
pub use etcd_partition::PeerPartition;
pub use mariadb::{MariaDbServer, mariadbd_binary};
pub use memory::FullMemory;
pub use postgres::{PostgresServer, postgres_bin_dir};
pub use proxy::{Direction, FaultProxy, Faults, ProxyControl};
pub use resp::Reply;
pub use sentinel::{SentinelBuilder, SentinelGroup};
pub use server::{RedisServer, ServerBuilder, redis_server_binary, valkey_server_binary};
pub use slot::{CLUSTER_SLOTS, key_slot};
pub use slot_migration::SlotMigration;
pub use tls::{ClientAuth, TestCertificates, TlsRedisServer, unrelated_ca_pem};
pub use zookeeper::{ZooKeeper, four_letter_word, java_binary, zookeeper_jar};
pub use zookeeper_partition::PartitionableEnsemble;
