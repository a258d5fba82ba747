//! Fault scenarios for ferrisson, with their evidence.
//!
//! - [`History`] and [`Recorder`]: what every client did and believed (acquire, belief
//!   samples of each guard's own validity, lost signals, releases, writes), on one
//!   monotonic clock.
//! - [`check`]: counts overlapping critical sections, double grants by belief, stale
//!   writes accepted and refused by fencing, token regressions, releases and renewals
//!   touching another owner's lock, renewals after loss, guards held past their
//!   deadline and keys left behind.
//! - [`Scenario`] and [`run`]: each fault injected against real server processes the
//!   test kit starts on free loopback ports (`redis-server` alone, a Sentinel group or a
//!   Cluster; private PostgreSQL and MariaDB servers; ZooKeeper standalone or a
//!   three-member ensemble; a three-member etcd cluster), through a
//!   [`ferrisson_testkit::FaultProxy`] where a link is cut, with its expected result
//!   checked; [`table`] and [`summary`] put the reports in words.
//!
//! # The stores
//!
//! Every scenario checks the same evidence, whatever the store; what differs is the
//! set-up and how the fault is made:
//!
//! - **Redis** (most scenarios): one server with a fault proxy per client, a Sentinel
//!   group, a Cluster; faults are a blackholed or cut link, `SIGSTOP` / `SIGKILL` of
//!   the holder's process or of a server, a failover, a clock step, a lagging replica.
//! - **PostgreSQL and MariaDB** (`scenarios/sql_faults.rs`): a private server of the
//!   test kit (never the machine's own), the lock table and the session lock; the
//!   holder's sessions ended by the server (`pg_terminate_backend`, `KILL`), its
//!   process frozen, its link blackholed, the database restarted.
//! - **ZooKeeper** (`scenarios/zookeeper_holder.rs`, `scenarios/zookeeper_ensemble.rs`):
//!   the holder's session frozen, blackholed, killed or replaced; the ensemble's leader
//!   killed, a minority or a majority cut off (members reach each other through fault
//!   proxies).
//! - **etcd** (`scenarios/etcd_holder_faults.rs`, `scenarios/etcd_member_faults.rs`, set-up
//!   in `harness/etcd_members.rs`): the holder frozen, blackholed, killed, its lease
//!   revoked out of band; the leader killed, a minority cut off (peer traffic through
//!   the test kit's relays). A stale holder's write is tried twice: at the chaos
//!   resource with its token, and in etcd with a write guarded by the lock key's
//!   revision.
//!
//! The holder run as a process of its own (`harness/holder_process.rs`) connects
//! through the `ferrisson` facade, so one holder program serves every store: it is
//! handed the store's URL.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use ferrisson_chaos::{Config, Scenario};
//!
//! let report = ferrisson_chaos::run(Scenario::HolderBlackholed, &Config::new(5)).await?;
//! assert!(report.passed, "{:?}", report.failures);
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! Imports point one way: the evidence (`history`, `resource`, `checker`) imports
//! nothing of the scenarios; the harness (`harness/`) imports the evidence; each
//! scenario module (`scenarios/*.rs`) imports the harness and the evidence, never
//! another scenario module; the registry (`scenarios/mod.rs`: [`Scenario`] and [`run`])
//! is the one module that imports every scenario module.
//!
//! - `harness/config.rs`: [`Config`], [`HolderCommand`].
//! - `harness/scenario.rs`: the `FaultScenario` trait a scenario module implements, the
//!   `Setup` it starts once per run, the `Iteration` it is handed (the lock name, the
//!   history, client A's and B's recorders), and the loop that runs, checks and sums the
//!   iterations.
//! - `harness/expectations.rs`: `Expectations`, what every scenario must show, which a
//!   scenario adds its own to.
//! - `harness/record.rs`: the recorded steps — `acquire` (any
//!   [`ferrisson::redis::DistributedLock`]), `acquire_with` (any acquire call), `try_acquire`,
//!   `granted`, `belief`, `watch`, `release`, `critical_section`, `act_on_stale_check`,
//!   `keys_left`.
//! - `harness/hold.rs`: `ObservedHold`, what the recorder reads of a hold: every
//!   [`ferrisson::redis::Guard`] as it is, and adapters for the three holds without a fencing
//!   token (`TokenlessRead`, `TokenlessPermit`, `TokenlessRedlock`), recorded with no
//!   token rather than an invented one.
//! - `harness/setups.rs`: what a Redis scenario module starts once per run — nothing,
//!   one server with a fault proxy per client (`SingleServer`), a
//!   [`RedisCluster`](ferrisson_testkit::RedisCluster) or a
//!   [`SentinelGroup`](ferrisson_testkit::SentinelGroup). The other stores' set-ups
//!   live beside their scenarios (`SqlSetup`, the ZooKeeper server and ensembles) or in
//!   `harness/etcd_members.rs` (three etcd members, shared by both etcd modules).
//! - `harness/contest.rs`: a held watchdog lock, clients waiting for it and a topology
//!   fault in between (the Sentinel and Cluster scenarios), counting waiters never
//!   granted and silent losses.
//! - `harness/clients.rs`, `harness/holder_process.rs`, `harness/poll.rs`: clients with
//!   the run's lease, the holder run as a process of its own, waiting for a server
//!   state.
//!
//! # Adding a scenario
//!
//! A scenario is one module in `src/scenarios/` and one entry in the registry. For one
//! that runs against a Redis Cluster or a Sentinel group of the test kit:
//!
//! 1. Create `src/scenarios/cluster_failover.rs` with a type implementing
//!    `harness::scenario::FaultScenario` (an enum when several scenarios share the
//!    set-up, a unit struct for one):
//!    - `type Setup = ferrisson_testkit::RedisCluster` (or `SentinelGroup`; both
//!      implement `harness::scenario::Setup` in `harness/setups.rs`; a set-up of another
//!      shape implements it in the module). It is started once per run and handed to
//!      every iteration as `&mut`, so an iteration can kill, pause, fail over or restart
//!      nodes (`nodes_mut()`, `failover`, `restart_node`); it must leave the topology
//!      whole for the next one (`wait_until_ok`);
//!    - `run_once`: connect with `harness::clients::connect(&cluster.url(), lease)` (the
//!      topology's URL), take the lock with `harness::record::acquire(&it.a, 0, &lock,
//!      wait)` (any [`ferrisson::redis::DistributedLock`]), and record every step through
//!      `harness::record` into `it.a` / `it.b` (client A, the holder the fault hits;
//!      client B, the contender) under the iteration's fresh lock name `it.name`; end
//!      with `harness::record::keys_left` once the fault is healed;
//!    - `is_documented_unsafe` when the scenario must show double grants, and `expect`
//!      for its own expected results, stated before the run (what every scenario must
//!      show is checked without it).
//! 2. Declare the module in `src/scenarios/mod.rs` (`mod cluster_failover;`) and add its
//!    entry to the `registry!` there:
//!
//!    ```text
//!    /// A cluster master killed while a lock on one of its slots is held and renewed.
//!    ClusterMasterFailover {
//!        name: "cluster-master-failover",
//!        fault: "cluster master of the lock's slot killed, its replica promoted",
//!        runs: cluster_failover::ClusterFailover::MasterKilled,
//!    },
//!    ```
//!
//!    [`Scenario::ALL`], [`Scenario::name`], the command line's list of scenarios and
//!    the dispatch in [`run`] follow from that entry.
//! 3. Add a test to `tests/faults.rs` (3 iterations), and the scenario's row and expected
//!    results to `docs/SAFETY.md`.

mod checker;
mod harness;
mod history;
mod report;
mod resource;
mod scenarios;

pub use checker::{Counters, check};
pub use harness::config::{Config, HolderCommand};
pub use harness::holder_process::{HOLDER_ENV, run_killable_holder};
pub use history::{Event, EventKind, History, Recorder, ReleaseOutcome};
pub use report::{summary, table};
pub use resource::Resource;
pub use scenarios::{Scenario, ScenarioReport, run};
