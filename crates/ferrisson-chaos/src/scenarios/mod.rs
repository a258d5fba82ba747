//! The scenario registry: every fault scenario, listed once, and [`run`].
//!
//! Each module of this folder holds scenarios that share a set-up and implements
//! [`FaultScenario`] for them; the `registry!` below names each scenario once, with its
//! documentation, and is the only place that imports every scenario module. The crate
//! documentation says how to add one.

mod clock;
mod cluster_faults;
mod etcd_holder_faults;
mod etcd_member_faults;
mod holder_signals;
mod lagging_replica;
mod lock_calls;
mod memory;
mod primitive_blackholed;
mod redlock;
mod sentinel_failover;
mod sentinel_new_clients;
mod sql_faults;
mod stalled_holder;
mod zookeeper_ensemble;
mod zookeeper_holder;

use serde::Serialize;

use crate::checker::Counters;
use crate::harness::config::Config;
use crate::harness::scenario::{FaultScenario, run_iterations};

/// Declares [`Scenario`] from one table: a scenario a row, with its documentation, its
/// command-line name, its fault in a few words, and the value of its module's
/// [`FaultScenario`] type that runs it. The list, names, faults and dispatch follow.
macro_rules! registry {
    ($(
        $(#[doc = $doc:literal])+
        $variant:ident { name: $name:literal, fault: $fault:literal, runs: $runs:expr $(,)? },
    )+) => {
        /// A fault scenario. Serialized as its command-line [`name`](Scenario::name).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Scenario {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl Scenario {
            /// Every scenario, in report order.
            pub const ALL: [Scenario; [$($name),+].len()] = [$(Scenario::$variant),+];

            /// The command-line name, e.g. `holder-blackholed`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Scenario::$variant => $name,)+
                }
            }

            /// The fault, in a few words.
            pub fn fault(self) -> &'static str {
                match self {
                    $(Scenario::$variant => $fault,)+
                }
            }

            /// Whether the scenario is a documented unsafe case: it must show double
            /// grants.
            pub fn is_documented_unsafe(self) -> bool {
                match self {
                    $(Scenario::$variant => FaultScenario::is_documented_unsafe($runs),)+
                }
            }

            /// Runs every iteration: the summed counters and the expectations that did
            /// not hold.
            async fn run_iterations(
                self,
                config: &Config,
            ) -> anyhow::Result<(Counters, Vec<String>)> {
                match self {
                    $(Scenario::$variant => run_iterations($runs, $name, config).await,)+
                }
            }
        }
    };
}

registry! {
    /// Every call of both clients delayed by 30–60 % of the lease (each way).
    Latency {
        name: "latency",
        fault: "proxy latency 30-60% of the lease on every call, both clients",
        runs: lock_calls::LockCallFault::Latency,
    },
    /// The acquire's reply held back past the lease, then delivered.
    AcquireReplyDelayed {
        name: "acquire-reply-delayed",
        fault: "acquire reply held back for 1.5 leases",
        runs: lock_calls::LockCallFault::AcquireReplyDelayed,
    },
    /// The holder's link blackholed for two leases after it checked `is_held()`.
    HolderBlackholed {
        name: "holder-blackholed",
        fault: "holder's link blackholed for 2 leases",
        runs: stalled_holder::Stall::HolderBlackholed,
    },
    /// The connection reset after the server ran the acquire, before its reply.
    ResetDuringAcquire {
        name: "reset-during-acquire",
        fault: "TCP reset after the server ran the acquire",
        runs: lock_calls::LockCallFault::ResetDuringAcquire,
    },
    /// The connection reset after the server ran the release, before its reply.
    ResetDuringRelease {
        name: "reset-during-release",
        fault: "TCP reset after the server ran the release",
        runs: lock_calls::LockCallFault::ResetDuringRelease,
    },
    /// The Redis server frozen (SIGSTOP) for two leases while the lock is held.
    RedisPaused {
        name: "redis-paused",
        fault: "redis-server SIGSTOPped for 2 leases",
        runs: stalled_holder::Stall::RedisPaused,
    },
    /// `SCRIPT FLUSH` while the lock is held and renewed.
    ScriptFlush {
        name: "script-flush",
        fault: "SCRIPT FLUSH while held",
        runs: lock_calls::LockCallFault::ScriptFlush,
    },
    /// The holder's tokio executor blocked (a `std::thread::sleep` on a
    /// current-thread runtime) for two leases after it checked `is_held()`.
    ExecutorStarved {
        name: "executor-starved",
        fault: "holder's current-thread runtime blocked for 2 leases",
        runs: stalled_holder::Stall::ExecutorStarved,
    },
    /// A holder process killed with SIGKILL; the next acquire must come within the lease.
    HolderKilled {
        name: "holder-killed",
        fault: "holder process SIGKILLed",
        runs: holder_signals::HolderSignal::Killed,
    },
    /// A holder process frozen with SIGSTOP for two leases, then resumed: it must see
    /// the lock lost, and its write with the old token must be refused.
    HolderPaused {
        name: "holder-paused",
        fault: "holder process SIGSTOPped for 2 leases, then resumed",
        runs: holder_signals::HolderSignal::Paused,
    },
    /// `CLIENT PAUSE ... ALL` on the server for two leases while the lock is held.
    RedisClientPaused {
        name: "redis-client-paused",
        fault: "CLIENT PAUSE ALL for 2 leases",
        runs: stalled_holder::Stall::RedisClientPaused,
    },
    /// The master killed while its replica lags (replication blackholed), the replica
    /// promoted and clients pointed at it. A documented unsafe case.
    LaggingReplicaPromoted {
        name: "lagging-replica-promoted",
        fault: "replication blackholed, master killed, replica promoted",
        runs: lagging_replica::LaggingReplicaPromoted,
    },
    /// Redlock over five servers with one or two of them killed.
    RedlockMinorityKilled {
        name: "redlock-minority-killed",
        fault: "Redlock, 1 or 2 of 5 servers killed",
        runs: redlock::RedlockFault::MinorityKilled,
    },
    /// Redlock: a node of the holder's bare majority restarted empty at once. A
    /// documented unsafe case.
    RedlockRestartedAtOnce {
        name: "redlock-restarted-at-once",
        fault: "Redlock, holder has 3 of 5; one of them restarted empty at once",
        runs: redlock::RedlockFault::RestartedAtOnce,
    },
    /// Redlock: the same node kept down for longer than the TTL before restarting empty.
    RedlockRestartedAfterTtl {
        name: "redlock-restarted-after-ttl",
        fault: "Redlock, holder has 3 of 5; one of them down TTL + 200 ms, restarted empty",
        runs: redlock::RedlockFault::RestartedAfterTtl,
    },
    /// The server's wall clock stepped forward by an hour while the lock is held: Redis
    /// expires the key at once. A documented unsafe case.
    ServerClockJumped {
        name: "server-clock-jumped",
        fault: "redis-server's wall clock stepped +1 h while held",
        runs: clock::ClockJump::Server,
    },
    /// The holder process's wall clock stepped +1 h, then -2 h, across renewals: no
    /// effect, since every client-side deadline is monotonic.
    ClientClockJumped {
        name: "client-clock-jumped",
        fault: "holder process's wall clock stepped +1 h, then -2 h, while held",
        runs: clock::ClockJump::Client,
    },
    /// An evicting `maxmemory-policy` and memory pressure drop the held lock's key. A
    /// documented unsafe case (the client warns about the policy at connect).
    KeyEvicted {
        name: "key-evicted",
        fault: "allkeys-random eviction under memory pressure while held",
        runs: memory::MemoryPressure::KeyEvicted,
    },
    /// The same memory pressure under `noeviction`: writes are refused, the lock is kept.
    MemoryFull {
        name: "memory-full-noeviction",
        fault: "maxmemory reached under noeviction while held",
        runs: memory::MemoryPressure::MemoryFull,
    },
    /// A [`FairLock`](ferrisson::redis::FairLock) holder's link blackholed for two leases while
    /// a queued waiter takes over.
    FairLockHolderBlackholed {
        name: "fair-lock-holder-blackholed",
        fault: "FairLock holder's link blackholed for 2 leases, a waiter queued",
        runs: primitive_blackholed::PrimitiveBlackholed::FairLock,
    },
    /// A [`RwLock`](ferrisson::redis::RwLock) writer's link blackholed for two leases while a
    /// reader takes over.
    RwLockWriterBlackholed {
        name: "rwlock-writer-blackholed",
        fault: "RwLock writer's link blackholed for 2 leases, a reader waiting",
        runs: primitive_blackholed::PrimitiveBlackholed::RwLockWriter,
    },
    /// An [`ExpirableSemaphore`](ferrisson::redis::ExpirableSemaphore) (one permit) holder's
    /// link blackholed past its permit's lease while another client takes the permit.
    ExpirablePermitBlackholed {
        name: "expirable-permit-blackholed",
        fault: "1-permit ExpirableSemaphore holder blackholed past its permit lease",
        runs: primitive_blackholed::PrimitiveBlackholed::ExpirablePermit,
    },
    /// `SENTINEL FAILOVER` while a watchdog lock is held and two other clients wait for
    /// it; grants and renewals count once the master answered. A documented unsafe case.
    SentinelFailover {
        name: "sentinel-failover",
        fault: "SENTINEL FAILOVER while held, 2 clients waiting",
        runs: sentinel_failover::SentinelFailover::Unacknowledged,
    },
    /// The same failover with every grant and renewal acknowledged by both replicas
    /// (`ClientBuilder::replica_acks`).
    SentinelFailoverAcked {
        name: "sentinel-failover-acked",
        fault: "SENTINEL FAILOVER while held, 2 waiting, replica acks 2 of 2",
        runs: sentinel_failover::SentinelFailover::Acknowledged,
    },
    /// `SENTINEL FAILOVER` (down-after 1 s, failover-timeout 5 s); from the moment a
    /// sentinel names the new master until the group settled, fresh clients connect (each
    /// listing the sentinels in another order) and take the lock in turn: every one must
    /// reach the new master.
    SentinelFailoverNewClients {
        name: "sentinel-failover-new-clients",
        fault: "SENTINEL FAILOVER, clients connecting while it runs",
        runs: sentinel_new_clients::SentinelNewClients,
    },
    /// `CLUSTER FAILOVER` on the replica of the master serving the held lock's slot,
    /// two other clients waiting.
    ClusterMasterFailover {
        name: "cluster-master-failover",
        fault: "CLUSTER FAILOVER of the lock's master while held, 2 waiting",
        runs: cluster_faults::ClusterFault::MasterFailover,
    },
    /// The held, watchdog-renewed lock's slot migrated to another master: the renewals
    /// must follow `MOVED` / `ASK` and the holder keep its lock.
    SlotMigratedWhileHeld {
        name: "slot-migrated-while-held",
        fault: "the lock's slot migrated to another master while held, 2 waiting",
        runs: cluster_faults::ClusterFault::SlotMigrated,
    },
    /// The master serving the held lock's slot SIGSTOPped until the cluster fails it
    /// over, then resumed; lease ten times the run's, outliving the failover. A
    /// documented unsafe case whose double grants are rare (allowed, not required), each
    /// of them signalled to the holder.
    ClusterNodePartitioned {
        name: "cluster-node-partitioned",
        fault: "the lock's master SIGSTOPped until failed over, lease 10x, 2 waiting",
        runs: cluster_faults::ClusterFault::NodePartitioned,
    },
    /// PostgreSQL, lock table: every session of the holder ended by the server
    /// (`pg_terminate_backend`) while it holds the lock. The row lives in the table, not in a
    /// session: the watchdog renews it over a new connection, the holder keeps the lock
    /// (its lease 1 s, so that a renewal has 667 ms to reconnect), a contender's try is
    /// refused, and the contender is granted after the release.
    PostgresTableConnectionKilled {
        name: "postgres-table-connection-killed",
        fault: "holder's sessions ended by the server (pg_terminate_backend), lock table",
        runs: sql_faults::SqlFault::ConnectionKilled(sql_faults::Database::Postgres, sql_faults::LockForm::Table),
    },
    /// PostgreSQL, session lock: the holder's session ended by the server (`pg_terminate_backend`).
    /// The server frees the lock with the session and the waiting contender is granted;
    /// the holder's heartbeat finds the session gone and `lost()` fires. A documented
    /// unsafe case whose double grants are rare: a contender granted before the
    /// holder's next heartbeat overlaps its belief, and there is no token to fence it.
    PostgresSessionConnectionKilled {
        name: "postgres-session-connection-killed",
        fault: "holder's session ended by the server (pg_terminate_backend), session lock",
        runs: sql_faults::SqlFault::ConnectionKilled(sql_faults::Database::Postgres, sql_faults::LockForm::Session),
    },
    /// PostgreSQL, lock table: the holder process frozen (SIGSTOP) past its lease. Its row
    /// expires in the database's time and a contender takes it over with a greater
    /// token; the resumed holder's `lost()` has fired and its late write is refused.
    PostgresTableHolderPaused {
        name: "postgres-table-holder-paused",
        fault: "holder process SIGSTOPped for its lease and more, lock table",
        runs: sql_faults::SqlFault::HolderPaused(sql_faults::Database::Postgres),
    },
    /// PostgreSQL, lock table: the holder's link blackholed for two leases. Its `lost()`
    /// fires at its deadline, the contender takes the row over after its expiry, and the
    /// holder's write on its stale check is refused.
    PostgresTableHolderBlackholed {
        name: "postgres-table-holder-blackholed",
        fault: "holder's link blackholed for 2 leases, lock table",
        runs: sql_faults::SqlFault::HolderBlackholed(sql_faults::Database::Postgres, sql_faults::LockForm::Table),
    },
    /// PostgreSQL, session lock: the holder's link blackholed for five leases. Its
    /// heartbeat goes unanswered and `lost()` fires; the server hears nothing and keeps
    /// the lock until the link heals (measured), and only then grants the contender.
    PostgresSessionHolderBlackholed {
        name: "postgres-session-holder-blackholed",
        fault: "holder's link blackholed for 5 leases, session lock",
        runs: sql_faults::SqlFault::HolderBlackholed(sql_faults::Database::Postgres, sql_faults::LockForm::Session),
    },
    /// PostgreSQL, lock table: the database stopped and started again while the lock is
    /// held (lease 10x the run's, at least 3 s) and a contender waits. The row survives,
    /// the holder keeps the lock, the contender is granted after the release.
    PostgresTableRestarted {
        name: "postgres-table-restarted",
        fault: "database restarted while held, 1 waiting, lock table",
        runs: sql_faults::SqlFault::Restarted(sql_faults::Database::Postgres, sql_faults::LockForm::Table),
    },
    /// PostgreSQL, session lock: the database stopped and started again while the lock is
    /// held and a contender waits. The lock ends with the session, the holder's `lost()`
    /// fires while the database is down, the contender is granted once it serves again.
    PostgresSessionRestarted {
        name: "postgres-session-restarted",
        fault: "database restarted while held, 1 waiting, session lock",
        runs: sql_faults::SqlFault::Restarted(sql_faults::Database::Postgres, sql_faults::LockForm::Session),
    },
    /// MariaDB, lock table: every session of the holder ended by the server
    /// (`KILL`) while it holds the lock. The row lives in the table, not in a
    /// session: the watchdog renews it over a new connection, the holder keeps the lock
    /// (its lease 1 s, so that a renewal has 667 ms to reconnect), a contender's try is
    /// refused, and the contender is granted after the release.
    MariaDbTableConnectionKilled {
        name: "mariadb-table-connection-killed",
        fault: "holder's sessions ended by the server (KILL), lock table",
        runs: sql_faults::SqlFault::ConnectionKilled(sql_faults::Database::MariaDb, sql_faults::LockForm::Table),
    },
    /// MariaDB, session lock: the holder's session ended by the server (`KILL`).
    /// The server frees the lock with the session and the waiting contender is granted;
    /// the holder's heartbeat finds the session gone and `lost()` fires. A documented
    /// unsafe case whose double grants are rare: a contender granted before the
    /// holder's next heartbeat overlaps its belief, and there is no token to fence it.
    MariaDbSessionConnectionKilled {
        name: "mariadb-session-connection-killed",
        fault: "holder's session ended by the server (KILL), session lock",
        runs: sql_faults::SqlFault::ConnectionKilled(sql_faults::Database::MariaDb, sql_faults::LockForm::Session),
    },
    /// MariaDB, lock table: the holder process frozen (SIGSTOP) past its lease. Its row
    /// expires in the database's time and a contender takes it over with a greater
    /// token; the resumed holder's `lost()` has fired and its late write is refused.
    MariaDbTableHolderPaused {
        name: "mariadb-table-holder-paused",
        fault: "holder process SIGSTOPped for its lease and more, lock table",
        runs: sql_faults::SqlFault::HolderPaused(sql_faults::Database::MariaDb),
    },
    /// MariaDB, lock table: the holder's link blackholed for two leases. Its `lost()`
    /// fires at its deadline, the contender takes the row over after its expiry, and the
    /// holder's write on its stale check is refused.
    MariaDbTableHolderBlackholed {
        name: "mariadb-table-holder-blackholed",
        fault: "holder's link blackholed for 2 leases, lock table",
        runs: sql_faults::SqlFault::HolderBlackholed(sql_faults::Database::MariaDb, sql_faults::LockForm::Table),
    },
    /// MariaDB, session lock: the holder's link blackholed for five leases. Its
    /// heartbeat goes unanswered and `lost()` fires; the server hears nothing and keeps
    /// the lock until the link heals (measured), and only then grants the contender.
    MariaDbSessionHolderBlackholed {
        name: "mariadb-session-holder-blackholed",
        fault: "holder's link blackholed for 5 leases, session lock",
        runs: sql_faults::SqlFault::HolderBlackholed(sql_faults::Database::MariaDb, sql_faults::LockForm::Session),
    },
    /// MariaDB, lock table: the database stopped and started again while the lock is
    /// held (lease 10x the run's, at least 3 s) and a contender waits. The row survives,
    /// the holder keeps the lock, the contender is granted after the release.
    MariaDbTableRestarted {
        name: "mariadb-table-restarted",
        fault: "database restarted while held, 1 waiting, lock table",
        runs: sql_faults::SqlFault::Restarted(sql_faults::Database::MariaDb, sql_faults::LockForm::Table),
    },
    /// MariaDB, session lock: the database stopped and started again while the lock is
    /// held and a contender waits. The lock ends with the session, the holder's `lost()`
    /// fires while the database is down, the contender is granted once it serves again.
    MariaDbSessionRestarted {
        name: "mariadb-session-restarted",
        fault: "database restarted while held, 1 waiting, session lock",
        runs: sql_faults::SqlFault::Restarted(sql_faults::Database::MariaDb, sql_faults::LockForm::Session),
    },
    /// ZooKeeper: the holder process SIGSTOPped past its session timeout (sessions of 5
    /// leases). Expected: the server expires the session and grants the waiter; resumed,
    /// the holder's `lost()` fires and its late write with the old token is refused by
    /// the fence; no double grant.
    ZkHolderPaused {
        name: "zk-holder-paused",
        fault: "ZooKeeper holder process SIGSTOPped past its session timeout",
        runs: zookeeper_holder::ZkHolderFault::Paused,
    },
    /// ZooKeeper: the holder's link blackholed (fault proxy) until the waiter held and
    /// wrote. Expected: the holder's `lost()` fires before the waiter's grant (no double
    /// grant); its late write is refused by the fence.
    ZkHolderBlackholed {
        name: "zk-holder-blackholed",
        fault: "ZooKeeper holder's link blackholed past its session timeout",
        runs: zookeeper_holder::ZkHolderFault::Blackholed,
    },
    /// ZooKeeper: the holder process SIGKILLed. Expected: the waiter holds about one
    /// session timeout later (the server's only way to learn of the death), within two.
    ZkHolderKilled {
        name: "zk-holder-killed",
        fault: "ZooKeeper holder process SIGKILLed",
        runs: zookeeper_holder::ZkHolderFault::Killed,
    },
    /// ZooKeeper, the CURATOR-604 case: the holder cut off, its application connects
    /// again with a new session and asks for the lock while the old session's node still
    /// exists. Expected: the new session queues behind the old node and holds only once
    /// the server deleted it; the old session's late write is refused by the fence.
    ZkNewSessionOverOldNode {
        name: "zk-new-session-over-old-node",
        fault: "ZooKeeper holder reconnects with a new session while its old node lives",
        runs: zookeeper_holder::ZkHolderFault::NewSessionOverOldNode,
    },
    /// ZooKeeper ensemble of 3: the leader SIGKILLed while a lock is held and waited for.
    /// Expected: nothing lost (the holder's session and node outlive the election, the
    /// waiter's wait resumes and is granted), the pause until writes succeed measured;
    /// the holder's `lost()` fires on the disconnection (it cannot tell).
    ZkLeaderKilled {
        name: "zk-leader-killed",
        fault: "ZooKeeper ensemble leader SIGKILLed while held and waited for",
        runs: zookeeper_ensemble::LeaderKilled,
    },
    /// ZooKeeper ensemble of 3: one follower cut off the others (fault proxies on the
    /// quorum and election ports), clients on the other two. Expected: no effect (the
    /// holder keeps its hold, the waiter is granted on release).
    ZkMinorityCut {
        name: "zk-minority-cut",
        fault: "ZooKeeper follower cut off the ensemble (network cut)",
        runs: zookeeper_ensemble::MembersCut::Minority,
    },
    /// ZooKeeper ensemble of 3: two members cut off (no quorum anywhere) while a lock is
    /// held and waited for; the holder releases during the cut. Expected: no grant during
    /// the cut; healed, the release completes and the wait resumes and is granted.
    ZkMajorityCut {
        name: "zk-majority-cut",
        fault: "ZooKeeper two of three members cut off (network cut)",
        runs: zookeeper_ensemble::MembersCut::Majority,
    },
    /// etcd (three members): a holder process frozen (SIGSTOP) past its lease until
    /// another client holds the lock, then resumed. Expected: the waiter is granted once
    /// the lease expires; the resumed holder's `lost()` has fired, its write with the old
    /// token is refused by the resource and its `fenced_put` refused by etcd.
    EtcdHolderPaused {
        name: "etcd-holder-paused",
        fault: "etcd: holder process SIGSTOPped past its lease, then resumed",
        runs: etcd_holder_faults::EtcdHolderFault::Paused,
    },
    /// etcd: the holder's link to its member blackholed until another client holds the
    /// lock. Expected: the holder's `lost()` fires at the end of its last granted TTL,
    /// before the waiter is granted; healed, its writes (resource and `fenced_put`) are
    /// refused.
    EtcdHolderBlackholed {
        name: "etcd-holder-blackholed",
        fault: "etcd: holder's link to its member blackholed until a waiter holds",
        runs: etcd_holder_faults::EtcdHolderFault::Blackholed,
    },
    /// etcd: a holder process killed (SIGKILL). Expected: the next holder is granted
    /// within the lease's TTL plus etcd's expiry check (asserted: within 2 TTL + 1 s).
    EtcdHolderKilled {
        name: "etcd-holder-killed",
        fault: "etcd: holder process SIGKILLed",
        runs: etcd_holder_faults::EtcdHolderFault::Killed,
    },
    /// etcd: the holder's lease revoked out of band by another client. Expected: its
    /// `lost()` fires within milliseconds (its watch on its key), the waiter is granted,
    /// its writes are refused. A documented unsafe case whose double grants are rare:
    /// the revoke frees the lock for the waiter and the holder at the same moment, so
    /// the waiter's grant can outrun the holder's watch by a few milliseconds (measured).

    EtcdLeaseRevoked {
        name: "etcd-lease-revoked",
        fault: "etcd: holder's lease revoked by another client",
        runs: etcd_holder_faults::EtcdHolderFault::LeaseRevoked,
    },
    /// etcd: the leader member killed half a TTL after a holder process died holding a
    /// lock another client waits for, while a live holder keeps another lock with a
    /// waiter. Expected: no double grant; the dead holder's lock outlives the failover
    /// by about one TTL (etcd 3.4 resets every lease's TTL on a new leader; measured),
    /// bounded by two TTLs plus a second.
    EtcdLeaderKilled {
        name: "etcd-leader-killed",
        fault: "etcd: leader SIGKILLed while a dead holder's lock is waited for",
        runs: etcd_member_faults::EtcdMemberFault::LeaderKilled,
    },
    /// etcd: the member the holder's client talks to (the leader, then a follower, in
    /// turn) cut off from the two others (their peer traffic held both ways through
    /// relays; it keeps running, its clients reach it). Expected: the holder's `lost()`
    /// fires, a client of the majority is granted, the holder's writes after the heal are
    /// refused (resource and `fenced_put`).
    EtcdMinorityCut {
        name: "etcd-minority-cut",
        fault: "etcd: holder's member (leader or follower) cut off from the other two",
        runs: etcd_member_faults::EtcdMemberFault::MinorityCut,
    },
}

impl Scenario {
    /// The scenario named `name`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl Serialize for Scenario {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// One scenario's result: counters over every iteration and the expected-result check.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// The scenario.
    pub scenario: Scenario,
    /// The fault injected.
    pub fault: String,
    /// Iterations run.
    pub iterations: u32,
    /// The lease, in milliseconds.
    pub lease_ms: u64,
    /// Whether this is a documented unsafe case.
    pub documented_unsafe: bool,
    /// Summed counters.
    pub counters: Counters,
    /// Whether every expected result held.
    pub passed: bool,
    /// The expected results that did not hold.
    pub failures: Vec<String>,
}

/// Runs `scenario` for `config.iterations` iterations and checks the expected results.
///
/// # Errors
///
/// When a server, proxy or holder process cannot be set up.
pub async fn run(scenario: Scenario, config: &Config) -> anyhow::Result<ScenarioReport> {
    let (counters, failures) = scenario.run_iterations(config).await?;
    Ok(ScenarioReport {
        scenario,
        fault: scenario.fault().to_owned(),
        iterations: config.iterations,
        lease_ms: config.lease.as_millis() as u64,
        documented_unsafe: scenario.is_documented_unsafe(),
        passed: failures.is_empty(),
        counters,
        failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_is_named_the_same_on_the_command_line_and_in_json() {
        for scenario in Scenario::ALL {
            let json = serde_json::to_string(&scenario).expect("serializes");
            assert_eq!(json, format!("\"{}\"", scenario.name()));
            assert_eq!(Scenario::from_name(scenario.name()), Some(scenario));
        }
    }

    #[test]
    fn the_documented_unsafe_cases_are_those_of_docs_safety() {
        let unsafe_cases: Vec<&str> = Scenario::ALL
            .into_iter()
            .filter(|s| s.is_documented_unsafe())
            .map(Scenario::name)
            .collect();
        assert_eq!(
            unsafe_cases,
            [
                "lagging-replica-promoted",
                "redlock-restarted-at-once",
                "server-clock-jumped",
                "key-evicted",
                "sentinel-failover",
                "cluster-node-partitioned",
                "postgres-session-connection-killed",
                "mariadb-session-connection-killed",
                "etcd-lease-revoked"
            ]
        );
    }

    /// `run` can be spawned onto a multi-threaded runtime.
    #[test]
    fn a_run_is_send() {
        fn send<T: Send>(_: &T) {}
        let config = Config::new(0);
        send(&run(Scenario::Latency, &config));
    }
}
