//! # seckill-lab
//!
//! The oversell lab and the flash-sale benchmark: the only part of the shop that starts
//! servers. It starts Redis (one server, a Sentinel group or a Redis Cluster: see
//! [`Topology`], through `ferrisson-testkit`) and several `seckill
//! serve` processes, fires a load at every variant of `POST /lab/deduct/{variant}` and at
//! the voucher order flows, checks the invariants in Redis and the database, and writes a
//! table, a JSON report and a chart.
//!
//! - [`run_direct`]: one variant the lab runs in its own process (the database's ways,
//!   the timestamp lock, ZooKeeper, etcd), in the same table.
//! - [`run`]: the lab (`seckill-lab`, or `./lab` at the repository root).
//! - [`bench`]: orders per second of the voucher flows (`seckill-bench`).
//! - [`Cluster`]: `seckill serve` processes on free ports, stopped with SIGTERM.
//! - [`fire`]: the load generator.

mod bench;
mod cluster;
mod expect;
mod in_process;
mod load;
mod machine;
mod options;
mod other_stores;
mod page;
mod paths;
mod report;
mod run;
mod scratch;
mod servers;
mod shop;
mod stores;
mod topology;

pub use bench::{BenchFlow, BenchOptions, BenchReport, BenchRow, bench};
pub use cluster::{Cluster, InstanceArgs, STOP_DEADLINE, new_admin_token};
pub use expect::{Verdict, expected, verdict, verdict_of};
pub use in_process::{DirectLoad, DirectVariant, LabVariant, Place, Store, run_direct};
pub use load::{LoadResult, MakeRequest, Sample, fire, http_client, instance};
pub use machine::Machine;
pub use options::LabOptions;
pub use page::render as render_page;
pub use paths::{default_out, seckill_binary};
pub use report::{LeftOut, LeftOutVariant, Report, VariantRow, VoucherRow};
pub use run::run;
pub use stores::{KNOWN_STORES, Latency, OtherStore, StoreRow, StoreServers, measure_stores};
pub use topology::Topology;
